//! The background work of an instance. Every instance runs all of it: coordination between
//! instances goes through Redis (consumer groups, locks), never through local state.
//! A feature with a worker adds one line here, handing the worker its own context.

use crate::{
    api::http::rate_limit,
    app::Services,
    features::{boards, jobs, leaderboard, notifications, vouchers},
    infra::{live, outbox},
};

pub(crate) fn spawn_all(services: &Services) {
    let (infra, features) = (&services.infra, &services.features);
    // Registrations first: consumers schedule jobs with their topics' policies.
    features.vouchers.register_expiry();
    features.notifications.register_jobs();
    infra.instance.spawn(
        "rate-limit-sweeper",
        rate_limit::sweep(services.gateway.clone()),
    );
    infra.instance.spawn("live-hub", live::run(infra.clone()));
    // What requests could not tell Redis: one retrier per outbox.
    outbox::spawn_retrier(features.remarks.announcements());
    outbox::spawn_retrier(features.feed.follow_changes());
    outbox::spawn_retrier(features.items.placements());
    outbox::spawn_retrier(features.vouchers.preloads());
    features.remarks.spawn_archive();
    features
        .points
        .spawn_archive(features.remarks.vote_streams(), infra.keys.remark_stream());
    infra.instance.spawn(
        "season-watch",
        leaderboard::live::watch_seasons(features.leaderboard.clone()),
    );
    infra.instance.spawn(
        "season-rollover",
        leaderboard::rollover::run_periodically(features.leaderboard.clone()),
    );
    infra.instance.spawn(
        "board-close",
        boards::close::run_periodically(features.boards.clone()),
    );
    features.vouchers.spawn_archive();
    features.feed.spawn_fan_out();
    features
        .notifications
        .spawn_consumers(notifications::SourceStreams {
            votes: features.remarks.vote_streams(),
            awards: infra.keys.points_streams(),
            orders: features.vouchers.order_streams(),
            follows: infra.keys.follow_events(),
        });
    infra.instance.spawn(
        "order-expiry-sweep",
        vouchers::sweep::run(features.vouchers.clone()),
    );
    infra
        .instance
        .spawn("delay-queue", jobs::worker::run(features.jobs.clone()));
    infra.instance.scraped.add(features.jobs.queue_depths());
}
