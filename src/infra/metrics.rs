//! Prometheus metrics: one recorder per process, rendered at `/metrics` (on the public
//! listener, or alone on `ENGAGE_METRICS_BIND`).
//!
//! Every metric is named and explained once, in [`describe`], which gives each its `# HELP`
//! and `# TYPE` lines: a metric missing there is the one without a HELP line, and the
//! metrics test fails on it. Every counter is exported from start-up, at 0, with the label
//! values known then ([`from_start`], next to it: every error code, cap, consumer and
//! handled job topic), so that `increase(…)` sees the first event after a restart. Values
//! come four ways:
//! - **counted where they happen**, into the process's recorder: requests and their
//!   durations, errors, Redis round trips and WAITs, refused connections, evicted persisted
//!   queries, what stream consumers archive, dead-letter or stall on, and what the delay
//!   queue schedules, promotes, runs, retries, buries and reclaims;
//! - **held by guards** ([`Open`]): the WebSockets open and the subscriptions running, by
//!   field, each counted out when its guard drops, however it ended;
//! - **read from this process when scraped**: the Redis and SQL pool connections, and the
//!   `process_*` family (memory, CPU in fractions of a second, file descriptors, start
//!   time; `metrics-process` reads `/proc/self` on Linux); and `engage_build_info`, 1 with
//!   the version and the commit built (`build.rs`);
//! - **read from Redis when scraped** ([`ScrapedGauges`]): the delay queue's jobs per topic
//!   and state, and each stream consumer's lag and pending entries. They describe the shared
//!   Redis, so every instance reports the same values: aggregate them with `max`, not `sum`.
//!   One reading serves every scrape of the next [`SCRAPED_FOR`] ([`Scraped`]), so that
//!   however many scrapes come, an instance asks Redis for them at most once a second.
//!
//! Label values are bounded: `operation` is a schema field or a fixed word
//! ([`record_request`]), `code` an [`ErrorCode`] ([`record_error`]), `consumer` a name in the
//! code, `state` a fixed word, `field` a subscription field of the schema, and `topic`,
//! which an admin chooses freely, is a topic's name for at most [`BoundedLabel`]'s first
//! few topics of an instance and `other` beyond.

use std::{
    collections::{BTreeMap, HashSet},
    sync::{
        atomic::{AtomicI64, Ordering},
        Arc, LazyLock, Mutex, OnceLock,
    },
    time::{Duration, Instant},
};

use metrics::{describe_counter, describe_gauge, describe_histogram, Label, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::infra::{
    error::{AppResult, ErrorCode},
    Infra,
};

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Reads `/proc/self` for the `process_*` family.
static PROCESS: LazyLock<metrics_process::Collector> =
    LazyLock::new(metrics_process::Collector::default);

/// Installs the process-wide recorder (once; later calls reuse it).
pub(crate) fn install() -> &'static PrometheusHandle {
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
        metrics::with_local_recorder(&recorder, || {
            describe();
            from_start();
        });
        let handle = recorder.handle();
        // A second install (another app in the same test process) keeps the first recorder.
        let _ = metrics::set_global_recorder(recorder);
        handle
    })
}

/// The HELP and TYPE of every metric engage emits, in one place.
fn describe() {
    describe_counter!(
        "engage_graphql_requests_total",
        "GraphQL operations answered, by operation: its first root field, introspection, \
         other (a field of no operation) or unread (the document could not be read)"
    );
    describe_histogram!(
        "engage_graphql_request_duration_seconds",
        Unit::Seconds,
        "Time from admission to the response of a GraphQL operation, by operation"
    );
    describe_counter!(
        "engage_graphql_errors_total",
        "Errors in GraphQL responses, by their extensions.code"
    );
    describe_counter!(
        "engage_http_connections_refused_total",
        "Client connections closed at once because ENGAGE_MAX_CONNECTIONS were open"
    );
    describe_counter!(
        "engage_client_cap_refusals_total",
        "Clients refused at their cap, by cap: connections_per_ip (ENGAGE_MAX_CONNECTIONS_PER_IP, \
         answered 429) or websockets_per_user (ENGAGE_WS_MAX_PER_USER, closed with 4429)"
    );
    describe_counter!(
        "engage_ws_deferred_updates_total",
        "Subscription updates a WebSocket could not take when they came (its client reads \
         slower than they come); the socket is sent each counter's latest value once it drained"
    );
    describe_counter!(
        "engage_persisted_queries_not_stored_total",
        "Persisted queries run but not stored: their address had registered its budget of \
         ENGAGE_APQ_REGISTER_BYTES_PER_IP_PER_MINUTE"
    );
    describe_counter!(
        "engage_persisted_queries_evicted_total",
        "Persisted queries removed to keep within ENGAGE_APQ_MAX_BYTES"
    );
    describe_counter!(
        "engage_redis_round_trips_total",
        "Commands and pipelines sent to Redis through the instance's pool (the stream \
         consumers' and the live hub's own connections excluded)"
    );
    describe_counter!(
        "engage_redis_commands_total",
        "Commands sent in those round trips (a script call counts one)"
    );
    describe_gauge!(
        "engage_redis_pool_connections",
        "Connections to Redis, by state: open, and idle among them"
    );
    describe_gauge!(
        "engage_sql_pool_connections",
        "Connections of the SQL pool, by state: open, and idle among them"
    );
    describe_counter!(
        "engage_redis_waits_total",
        "Writes that waited for ENGAGE_REDIS_WAIT_REPLICAS replicas"
    );
    describe_counter!(
        "engage_redis_waits_short_total",
        "Writes answered UNAVAILABLE because too few replicas acknowledged them in time"
    );
    describe_counter!(
        "engage_redis_wait_rounds_total",
        "WAIT commands sent: concurrent writes to one master share a round"
    );
    describe_counter!(
        "engage_stream_entries_archived_total",
        "Stream entries a consumer handled and acknowledged, by consumer"
    );
    describe_counter!(
        "engage_stream_dead_letters_total",
        "Stream entries moved to the dead_letters table after failing on their own, by consumer"
    );
    describe_counter!(
        "engage_stream_consumer_stalls_total",
        "Times a consumer backed off because SQL or Redis failed, by consumer"
    );
    describe_gauge!(
        "engage_stream_consumer_lag",
        "Entries of a consumer's streams not yet delivered to its group, by consumer \
         (read from Redis at scrape time: the same in every instance)"
    );
    describe_gauge!(
        "engage_stream_consumer_pending",
        "Entries delivered to a consumer's group and not yet acknowledged, by consumer \
         (read from Redis at scrape time: the same in every instance)"
    );
    describe_counter!(
        "engage_jobs_scheduled_total",
        "Jobs added to the delay queue, by topic"
    );
    describe_counter!(
        "engage_jobs_promoted_total",
        "Jobs moved from delayed to ready when due, by topic"
    );
    describe_histogram!(
        "engage_jobs_promotion_lag_seconds",
        Unit::Seconds,
        "How late jobs were made ready after their due time, by topic"
    );
    describe_counter!(
        "engage_jobs_succeeded_total",
        "Job deliveries whose handler succeeded, by topic"
    );
    describe_counter!(
        "engage_jobs_retried_total",
        "Job deliveries that failed and were put back on the retry ladder, by topic"
    );
    describe_counter!(
        "engage_jobs_dead_total",
        "Jobs moved to dead_job (attempts or stalls used up, or unreadable), by topic"
    );
    describe_counter!(
        "engage_jobs_reclaimed_total",
        "Jobs made ready again because their worker's lease ran out, by topic"
    );
    describe_gauge!(
        "engage_jobs_delayed",
        "Jobs waiting for their due time, by topic (read from Redis at scrape time)"
    );
    describe_gauge!(
        "engage_jobs_ready",
        "Jobs due and waiting for a worker, by topic (read from Redis at scrape time)"
    );
    describe_gauge!(
        "engage_jobs_running",
        "Jobs handed to a worker and not yet finished, by topic (read from Redis at scrape \
         time)"
    );
    describe_gauge!(
        "engage_websockets_open",
        "WebSockets open on this instance (from the upgrade until the socket closes)"
    );
    describe_gauge!(
        "engage_subscriptions_active",
        "Subscriptions running on this instance, by field"
    );
    describe_gauge!(
        "engage_build_info",
        "1, labelled with the version of the build and the commit it was built from"
    );
    PROCESS.describe();
}

/// The counters without labels: each is exported from start-up, at 0 until it counts.
const UNLABELLED: [&str; 9] = [
    "engage_http_connections_refused_total",
    "engage_ws_deferred_updates_total",
    "engage_persisted_queries_not_stored_total",
    "engage_persisted_queries_evicted_total",
    "engage_redis_round_trips_total",
    "engage_redis_commands_total",
    "engage_redis_waits_total",
    "engage_redis_waits_short_total",
    "engage_redis_wait_rounds_total",
];

/// The `operation` values known before any request: the fixed words of
/// `http::admission` (the schema's fields appear as they are first asked for).
const FIXED_OPERATIONS: [&str; 3] = ["introspection", "other", "unread"];

/// The `cap` values of `engage_client_cap_refusals_total` (the labels the `Caps` of
/// `http::server` and of the wiring are made with).
const CAPS: [&str; 2] = ["connections_per_ip", "websockets_per_user"];

/// The counters of each stream consumer, by `consumer` ([`consumer_counted`]).
const PER_CONSUMER: [&str; 3] = [
    "engage_stream_entries_archived_total",
    "engage_stream_dead_letters_total",
    "engage_stream_consumer_stalls_total",
];

/// The counters of each job topic, by `topic` ([`topic_counted`]).
const PER_TOPIC: [&str; 6] = [
    "engage_jobs_scheduled_total",
    "engage_jobs_promoted_total",
    "engage_jobs_succeeded_total",
    "engage_jobs_retried_total",
    "engage_jobs_dead_total",
    "engage_jobs_reclaimed_total",
];

/// Every counter with the label values known at start-up, at 0: a series that appears only
/// with its first increment has no earlier sample, so `increase(…) > 0` (the alerts of
/// docs/operating.md) would miss the first dead letter after a restart. The consumers' and topics'
/// counters start with them ([`consumer_counted`], [`topic_counted`]). Also `build_info`.
fn from_start() {
    for name in UNLABELLED {
        metrics::counter!(name).increment(0);
    }
    for operation in FIXED_OPERATIONS {
        metrics::counter!("engage_graphql_requests_total", "operation" => operation).increment(0);
    }
    for code in ErrorCode::all() {
        metrics::counter!("engage_graphql_errors_total", "code" => code.as_str()).increment(0);
    }
    for cap in CAPS {
        metrics::counter!("engage_client_cap_refusals_total", "cap" => cap).increment(0);
    }
    metrics::gauge!(
        "engage_build_info",
        "version" => env!("CARGO_PKG_VERSION"),
        "commit" => env!("ENGAGE_COMMIT")
    )
    .set(1.0);
}

/// Exports the counters of the stream consumer `name` at 0, as it starts.
pub(crate) fn consumer_counted(name: &'static str) {
    install();
    for counter in PER_CONSUMER {
        metrics::counter!(counter, "consumer" => name).increment(0);
    }
}

/// Exports the counters of a job topic (its label, see [`BoundedLabel`]) at 0: those of
/// the topics the code handles, as their handler is registered.
pub(crate) fn topic_counted(label: String) {
    install();
    for counter in PER_TOPIC {
        metrics::counter!(counter, "topic" => label.clone()).increment(0);
    }
}

/// The text exposition: the recorder's metrics, with the pool and process gauges read now,
/// followed by the gauges read from Redis.
pub async fn render(infra: &Infra) -> String {
    let scraped = read_scraped(infra).await;
    let (redis_open, redis_idle) = crate::infra::redis::pool_state(&infra.redis);
    metrics::gauge!("engage_redis_pool_connections", "state" => "open").set(redis_open as f64);
    metrics::gauge!("engage_redis_pool_connections", "state" => "idle").set(redis_idle as f64);
    metrics::counter!("engage_redis_round_trips_total").absolute(
        infra
            .redis_round_trips
            .load(std::sync::atomic::Ordering::Relaxed),
    );
    metrics::counter!("engage_redis_commands_total").absolute(
        infra
            .redis_commands
            .load(std::sync::atomic::Ordering::Relaxed),
    );
    let (sql_open, sql_idle) = infra.db.pool_state();
    metrics::gauge!("engage_sql_pool_connections", "state" => "open").set(sql_open as f64);
    metrics::gauge!("engage_sql_pool_connections", "state" => "idle").set(sql_idle as f64);
    PROCESS.collect();
    let mut text = install().render();
    let mut readings = scraped.to_vec();
    readings.extend(infra.instance.open.readings());
    text.push_str(&render_scraped(&readings));
    text
}

/// `operation` is a name of the schema or one of a few fixed words (see
/// `http::admission`), never a name a client made up: the label set stays bounded.
pub(crate) fn record_request(operation: &'static str, elapsed: Duration) {
    metrics::counter!("engage_graphql_requests_total", "operation" => operation).increment(1);
    metrics::histogram!(
        "engage_graphql_request_duration_seconds",
        "operation" => operation
    )
    .record(elapsed.as_secs_f64());
}

/// An error answered; the label is one of the fixed table of [`ErrorCode`].
pub(crate) fn record_error(code: ErrorCode) {
    metrics::counter!("engage_graphql_errors_total", "code" => code.as_str()).increment(1);
}

/// How long the gauges read from Redis serve later scrapes: Prometheus scrapes every 15 s
/// or so, so a second old is as current as it can tell, and a flood of scrapes costs Redis
/// one reading a second.
pub(crate) const SCRAPED_FOR: Duration = Duration::from_secs(1);

/// A gauge's value read for one scrape.
#[derive(Clone)]
pub(crate) struct Reading {
    pub(crate) name: &'static str,
    pub(crate) labels: Vec<(&'static str, String)>,
    pub(crate) value: f64,
}

/// Gauges whose values live in Redis (a queue's depth, a consumer's lag), read when
/// `/metrics` is scraped. Keeping them current instead would cost every write a counter
/// update, and a counter that drifts (a crash between the write and its count) stays wrong.
#[async_trait::async_trait]
pub(crate) trait ScrapedGauges: Send + Sync + 'static {
    /// This scrape's values. `infra` is handed in rather than held, so that a source kept by
    /// the instance does not keep the instance alive.
    async fn read(&self, infra: &Infra) -> AppResult<Vec<Reading>>;
}

/// A reading of the [`ScrapedGauges`] and when it was taken.
type Taken = (Instant, Arc<[Reading]>);

/// The [`ScrapedGauges`] of one instance (the stream consumers add theirs as they start,
/// the wiring adds the delay queue's), and their last reading.
#[derive(Clone, Default)]
pub(crate) struct Scraped {
    sources: Arc<Mutex<Vec<Arc<dyn ScrapedGauges>>>>,
    /// The last reading and when it was taken. An async lock, held while Redis is read: the
    /// scrapes that come meanwhile wait for that reading instead of each starting one.
    last: Arc<tokio::sync::Mutex<Option<Taken>>>,
}

impl Scraped {
    pub(crate) fn add(&self, gauges: impl ScrapedGauges) {
        self.sources
            .lock()
            .expect("poisoned")
            .push(Arc::new(gauges));
    }
}

/// The gauges read from Redis: the last reading while it is younger than [`SCRAPED_FOR`],
/// else a new one.
async fn read_scraped(infra: &Infra) -> Arc<[Reading]> {
    let mut last = infra.instance.scraped.last.lock().await;
    if let Some((at, readings)) = last.as_ref() {
        if at.elapsed() < SCRAPED_FOR {
            return readings.clone();
        }
    }
    let readings: Arc<[Reading]> = read_sources(infra).await.into();
    *last = Some((Instant::now(), readings.clone()));
    readings
}

/// Reads every source at once (on the shared connection their commands leave together). A
/// source that fails is left out of this reading, so that Redis being down does not take
/// the process and pool metrics with it (nor is it asked again before the reading is old).
async fn read_sources(infra: &Infra) -> Vec<Reading> {
    let sources = infra
        .instance
        .scraped
        .sources
        .lock()
        .expect("poisoned")
        .clone();
    let reads = futures::future::join_all(sources.iter().map(|source| source.read(infra))).await;
    reads
        .into_iter()
        .filter_map(|read| {
            read.inspect_err(|error| tracing::debug!(%error, "gauges not read for /metrics"))
                .ok()
        })
        .flatten()
        .collect()
}

/// The scrape's gauges, written by a recorder made for this scrape rather than the
/// process's: a topic that has no job left leaves no series behind, and two instances in
/// one process (as in the tests) do not overwrite each other's values.
fn render_scraped(readings: &[Reading]) -> String {
    let recorder = PrometheusBuilder::new().build_recorder();
    metrics::with_local_recorder(&recorder, || {
        describe();
        for reading in readings {
            let labels: Vec<Label> = reading
                .labels
                .iter()
                .map(|(key, value)| Label::new(*key, value.clone()))
                .collect();
            metrics::gauge!(reading.name, labels).set(reading.value);
        }
    });
    recorder.handle().render()
}

/// What this instance holds open: its WebSockets and their subscriptions by field, exported
/// as `engage_websockets_open` and `engage_subscriptions_active`. Each is counted by a guard
/// ([`Held`]) that the socket or the subscription owns, so that however it ends (the client
/// leaves, an error, shutdown) dropping it counts it out: the gauges stay exact without
/// every path out having to remember them. They are written per scrape from these counts
/// (like the gauges read from Redis), not into the process's recorder, so that two
/// instances in one process (the tests) each report their own.
#[derive(Clone, Default)]
pub(crate) struct Open(Arc<OpenCounts>);

#[derive(Default)]
struct OpenCounts {
    websockets: AtomicI64,
    /// By field; a field stays (at 0) once known, so that its series does not come and go.
    subscriptions: Mutex<BTreeMap<String, i64>>,
}

impl Open {
    /// The subscription fields of the schema, exported at 0 before any is run.
    pub(crate) fn known_fields(&self, fields: impl IntoIterator<Item = String>) {
        let mut subscriptions = self.0.subscriptions.lock().expect("poisoned");
        for field in fields {
            subscriptions.entry(field).or_insert(0);
        }
    }

    /// Counts a WebSocket open until the guard is dropped.
    pub(crate) fn websocket(&self) -> Held {
        self.0.websockets.fetch_add(1, Ordering::Relaxed);
        Held {
            open: self.clone(),
            field: None,
        }
    }

    /// Counts a subscription of `field` active until the guard is dropped.
    pub(crate) fn subscription(&self, field: &str) -> Held {
        *self
            .0
            .subscriptions
            .lock()
            .expect("poisoned")
            .entry(field.to_string())
            .or_insert(0) += 1;
        Held {
            open: self.clone(),
            field: Some(field.to_string()),
        }
    }

    fn readings(&self) -> Vec<Reading> {
        let mut readings = vec![Reading {
            name: "engage_websockets_open",
            labels: Vec::new(),
            value: self.0.websockets.load(Ordering::Relaxed) as f64,
        }];
        let subscriptions = self.0.subscriptions.lock().expect("poisoned");
        readings.extend(subscriptions.iter().map(|(field, active)| Reading {
            name: "engage_subscriptions_active",
            labels: vec![("field", field.clone())],
            value: *active as f64,
        }));
        readings
    }
}

/// One WebSocket or subscription counted by [`Open`]; dropping it counts it out.
pub(crate) struct Held {
    open: Open,
    field: Option<String>,
}

impl Drop for Held {
    fn drop(&mut self) {
        match &self.field {
            None => {
                self.open.0.websockets.fetch_sub(1, Ordering::Relaxed);
            }
            Some(field) => {
                if let Some(active) = self
                    .open
                    .0
                    .subscriptions
                    .lock()
                    .expect("poisoned")
                    .get_mut(field)
                {
                    *active -= 1;
                }
            }
        }
    }
}

/// The label value of any value past the first few of a [`BoundedLabel`].
pub(crate) const OTHER: &str = "other";

/// A label whose values are not fixed in the code (job topics, which an admin names): the
/// first `max` values an instance meets are named as themselves, any later one is `other`.
/// Each value is a series in every metric that carries it, kept for the life of the
/// process; without a bound, a script that made up topics would grow the scrape without
/// end. (Ranking by size instead, the largest topics named, would move a topic in and out
/// of `other` between scrapes, and break its counters' rates each time.)
pub(crate) struct BoundedLabel {
    max: usize,
    named: Mutex<HashSet<String>>,
}

impl BoundedLabel {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            max,
            named: Mutex::new(HashSet::new()),
        }
    }

    /// The label value for `value`.
    pub(crate) fn of(&self, value: &str) -> String {
        let mut named = self.named.lock().expect("poisoned");
        if named.contains(value) {
            return value.to_string();
        }
        if named.len() < self.max {
            named.insert(value.to_string());
            return value.to_string();
        }
        OTHER.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bounded_label_names_its_first_values_and_calls_the_rest_other() {
        let topics = BoundedLabel::new(2);
        assert_eq!(topics.of("expiry"), "expiry");
        assert_eq!(topics.of("mail"), "mail");
        assert_eq!(topics.of("made-up-1"), OTHER);
        assert_eq!(topics.of("made-up-2"), OTHER);
        // A value named once keeps its name.
        assert_eq!(topics.of("expiry"), "expiry");
    }

    #[test]
    fn gauges_of_a_scrape_carry_help_and_type_and_only_this_scrape_values() {
        let text = render_scraped(&[Reading {
            name: "engage_jobs_ready",
            labels: vec![("topic", "mail".into())],
            value: 3.0,
        }]);
        assert!(text.contains("# HELP engage_jobs_ready "), "{text}");
        assert!(text.contains("# TYPE engage_jobs_ready gauge"), "{text}");
        assert!(
            text.contains("engage_jobs_ready{topic=\"mail\"} 3"),
            "{text}"
        );
        assert!(!render_scraped(&[]).contains("engage_jobs_ready"));
    }
}
