//! Prometheus metrics: one recorder per process, rendered at `/metrics`.
//!
//! Names in one place, so that dashboards and code agree:
//! - `engage_graphql_requests_total{operation}` and
//!   `engage_graphql_request_duration_seconds{operation}`, by the operation's first root
//!   field (`likeRemark`), `introspection`, `other` or `unread`
//! - `engage_graphql_errors_total{code}`
//! - `engage_redis_round_trips_total`
//! - `engage_persisted_queries_evicted_total` (to keep within `ENGAGE_APQ_MAX_BYTES`)
//! - `engage_redis_pool_connections{state}`, `engage_sql_pool_connections{state}`
//! - stream consumers: `engage_stream_entries_archived_total{consumer}`,
//!   `engage_stream_dead_letters_total{consumer}`, `engage_stream_consumer_stalls_total{consumer}`
//! - delay queue, per topic: `engage_jobs_{scheduled,promoted,succeeded,retried,dead,reclaimed}_total`,
//!   `engage_jobs_ready` (ready-list depth), `engage_jobs_promotion_lag_seconds`

use std::{sync::OnceLock, time::Duration};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::infra::Infra;

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
pub fn render(infra: &Infra) -> String {
    let (redis_open, redis_idle) = crate::infra::redis::pool_state(&infra.redis);
    metrics::gauge!("engage_redis_pool_connections", "state" => "open").set(redis_open as f64);
    metrics::gauge!("engage_redis_pool_connections", "state" => "idle").set(redis_idle as f64);
    metrics::counter!("engage_redis_round_trips_total").absolute(
        infra
            .redis_round_trips
            .load(std::sync::atomic::Ordering::Relaxed),
    );
    let (sql_open, sql_idle) = infra.db.pool_state();
    metrics::gauge!("engage_sql_pool_connections", "state" => "open").set(sql_open as f64);
    metrics::gauge!("engage_sql_pool_connections", "state" => "idle").set(sql_idle as f64);
    install().render()
}

/// `operation` is a name of the schema or one of a few fixed words (see
/// `http::admission`), never a name a client made up: the label set stays bounded.
pub fn record_request(operation: &'static str, elapsed: Duration) {
    metrics::counter!("engage_graphql_requests_total", "operation" => operation).increment(1);
    metrics::histogram!(
        "engage_graphql_request_duration_seconds",
        "operation" => operation
    )
    .record(elapsed.as_secs_f64());
}

pub fn record_error(code: &str) {
    // Codes come from the fixed table of `ErrorCode`.
    metrics::counter!("engage_graphql_errors_total", "code" => code.to_string()).increment(1);
}
