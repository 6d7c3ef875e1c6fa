//! The background work of an instance. Every instance runs all of it: coordination between
//! instances goes through Redis (consumer groups, locks), never through local state.
//! A feature with a worker adds one line here.

use crate::app::AppState;

pub fn spawn_all(state: &AppState) {
    // Registrations first: consumers schedule jobs with their topics' policies.
    crate::vouchers::orders::register_expiry(state);
    state.spawn_background("rate-limit-sweeper", crate::http::rate_limit::sweep);
    state.spawn_background("live-hub", crate::live::run);
    crate::remarks::archive::spawn(state);
    crate::points::archive::spawn(state);
    state.spawn_background("season-watch", crate::leaderboard::live::watch_seasons);
    state.spawn_background(
        "season-rollover",
        crate::leaderboard::rollover::run_periodically,
    );
    crate::vouchers::archive::spawn(state);
    crate::feed::spawn(state);
    state.spawn_background("order-expiry-sweep", crate::vouchers::sweep::run);
    state.spawn_background("delay-queue", crate::jobs::worker::run);
}
