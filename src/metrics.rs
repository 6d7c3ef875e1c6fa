//! Prometheus metrics: one recorder per process, rendered at `/metrics`.
//!
//! Names in one place, so that dashboards and code agree:
//! - `engage_graphql_requests_total{operation}` and
//!   `engage_graphql_request_duration_seconds{operation}`
//! - `engage_graphql_errors_total{code}`
//! - `engage_redis_round_trips_total`
//! - `engage_redis_pool_connections{state}`, `engage_sql_pool_connections{state}`
//! - stream consumers: `engage_stream_entries_archived_total{consumer}`,
//!   `engage_stream_dead_letters_total{consumer}`, `engage_stream_consumer_stalls_total{consumer}`
//! - delay queue, per topic: `engage_jobs_{scheduled,promoted,succeeded,retried,dead,reclaimed}_total`,
//!   `engage_jobs_ready` (ready-list depth), `engage_jobs_promotion_lag_seconds`

use std::{sync::OnceLock, time::Duration};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::app::AppState;

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process-wide recorder (once; later calls reuse it).
pub fn install() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(
                Matcher::Suffix("duration_seconds".into()),
                &[
                    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                ],
            )
            .expect("bucket list is not empty")
            .build_recorder();
        let handle = recorder.handle();
        // A second install (another app in the same test process) keeps the first recorder.
        let _ = metrics::set_global_recorder(recorder);
        handle
    })
}

/// The text exposition, with pool gauges read at scrape time.
pub fn render(state: &AppState) -> String {
    let (redis_open, redis_idle) = crate::redis::pool_state(&state.redis);
    metrics::gauge!("engage_redis_pool_connections", "state" => "open").set(redis_open as f64);
    metrics::gauge!("engage_redis_pool_connections", "state" => "idle").set(redis_idle as f64);
    metrics::counter!("engage_redis_round_trips_total").absolute(
        state
            .redis_round_trips
            .load(std::sync::atomic::Ordering::Relaxed),
    );
    let (sql_open, sql_idle) = state.db.pool_state();
    metrics::gauge!("engage_sql_pool_connections", "state" => "open").set(sql_open as f64);
    metrics::gauge!("engage_sql_pool_connections", "state" => "idle").set(sql_idle as f64);
    install().render()
}

/// Operation names come from clients; anything that is not a plain identifier of sensible
/// length is counted as `other`, so that a client cannot grow the label set without bound.
pub fn operation_label(name: Option<&str>) -> String {
    match name {
        None => "anonymous".into(),
        Some(name)
            if !name.is_empty()
                && name.len() <= 64
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
        {
            name.to_string()
        }
        Some(_) => "other".into(),
    }
}

pub fn record_request(operation: &str, elapsed: Duration) {
    metrics::counter!("engage_graphql_requests_total", "operation" => operation.to_string())
        .increment(1);
    metrics::histogram!(
        "engage_graphql_request_duration_seconds",
        "operation" => operation.to_string()
    )
    .record(elapsed.as_secs_f64());
}

pub fn record_error(code: &str) {
    metrics::counter!("engage_graphql_errors_total", "code" => code.to_string()).increment(1);
}
