//! The background work of an instance. Every instance runs all of it: coordination between
//! instances goes through Redis (consumer groups, locks), never through local state.
//! A feature with a worker adds one line here, handing the worker its own context.

use crate::{
    api::http::rate_limit,
    app::Services,
    features::{feed, jobs, leaderboard, points, remarks, vouchers},
    infra::live,
};

pub fn spawn_all(services: &Services) {
    let (infra, features) = (&services.infra, &services.features);
    // Registrations first: consumers schedule jobs with their topics' policies.
    vouchers::orders::register_expiry(&features.vouchers);
    infra.instance.spawn(
        "rate-limit-sweeper",
        rate_limit::sweep(services.gateway.clone()),
    );
    infra.instance.spawn("live-hub", live::run(infra.clone()));
    remarks::archive::spawn(&features.remarks);
    points::archive::spawn(
        &features.points,
        features.remarks.vote_streams(),
        infra.keys.remark_stream(),
    );
    infra.instance.spawn(
        "season-watch",
        leaderboard::live::watch_seasons(features.leaderboard.clone()),
    );
    infra.instance.spawn(
        "season-rollover",
        leaderboard::rollover::run_periodically(features.leaderboard.clone()),
    );
    vouchers::archive::spawn(&features.vouchers);
    feed::spawn(&features.feed);
    infra.instance.spawn(
        "order-expiry-sweep",
        vouchers::sweep::run(features.vouchers.clone()),
    );
    infra
        .instance
        .spawn("delay-queue", jobs::worker::run(features.jobs.clone()));
}
