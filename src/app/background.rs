//! The background work of an instance. Every instance runs all of it: coordination between
//! instances goes through Redis (consumer groups, locks), never through local state.
//! A feature with a worker adds one line here.

use crate::app::AppState;

pub fn spawn_all(state: &AppState) {
    // Registrations first: consumers schedule jobs with their topics' policies.
    crate::features::vouchers::orders::register_expiry(state);
    state.spawn_background("rate-limit-sweeper", crate::api::http::rate_limit::sweep);
    state.spawn_background("live-hub", crate::infra::live::run);
    crate::features::remarks::archive::spawn(state);
    crate::features::points::archive::spawn(state);
    state.spawn_background(
        "season-watch",
        crate::features::leaderboard::live::watch_seasons,
    );
    state.spawn_background(
        "season-rollover",
        crate::features::leaderboard::rollover::run_periodically,
    );
    crate::features::vouchers::archive::spawn(state);
    crate::features::feed::spawn(state);
    state.spawn_background("order-expiry-sweep", crate::features::vouchers::sweep::run);
    state.spawn_background("delay-queue", crate::features::jobs::worker::run);
}
