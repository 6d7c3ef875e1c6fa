//! `/metrics`: every family explained (HELP and TYPE), the process measured, the delay
//! queue's jobs per topic and state, each stream consumer's backlog, and a private address
//! of its own with `ENGAGE_METRICS_BIND`.

use std::{
    collections::BTreeSet,
    sync::Arc,
    time::{Duration, Instant},
};

use engage::{
    features::jobs::{handlers::Delivery, JobError, JobHandler},
    infra::redis::{Keys, RedisTarget},
};
use serde_json::json;
use tokio::sync::Semaphore;

use crate::harness::{base_config, eventually, TestApp};
use crate::jobs::job;

/// The value of the sample `name{labels}` (as written, labels in the exporter's order).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|value| value.trim().parse().expect("a number"))
}

/// The families of the samples of `text` whose names start with one of `prefixes`.
fn families<'a>(text: &'a str, prefixes: &[&str]) -> BTreeSet<&'a str> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| line.split(['{', ' ']).next().unwrap())
        .filter(|name| prefixes.iter().any(|prefix| name.starts_with(prefix)))
        .map(|name| {
            // A histogram's or summary's samples carry a suffix; its HELP names the family.
            let declared = |family: &str| text.contains(&format!("# TYPE {family} "));
            ["_bucket", "_sum", "_count"]
                .iter()
                .filter_map(|suffix| name.strip_suffix(suffix))
                .find(|family| declared(family))
                .unwrap_or(name)
        })
        .collect()
}

#[tokio::test]
async fn every_metric_has_help_and_type_and_the_process_is_measured() {
    let app = TestApp::spawn().await;
    // Some traffic: an operation, an error, a job.
    app.gql(None, "{ __typename }", json!({})).await;
    app.gql(None, "{ noSuchField }", json!({})).await;
    app.jobs()
        .schedule(job("described", "later", Duration::from_secs(3600)))
        .await
        .unwrap();

    let text = app.get_text("/metrics").await;
    let families = families(&text, &["engage_", "process_"]);
    for family in [
        "engage_graphql_requests_total",
        "engage_graphql_errors_total",
        "engage_jobs_scheduled_total",
        "engage_jobs_delayed",
        "engage_stream_consumer_lag",
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    ] {
        assert!(families.contains(family), "{family} missing from:\n{text}");
    }
    for family in &families {
        assert!(
            text.contains(&format!("# HELP {family} ")),
            "{family} has no HELP line"
        );
        assert!(
            text.contains(&format!("# TYPE {family} ")),
            "{family} has no TYPE line"
        );
    }
    assert!(sample(&text, "process_resident_memory_bytes").unwrap() > 1e6);
    assert!(sample(&text, "process_open_fds").unwrap() >= 1.0);
    assert!(
        sample(
            &text,
            "engage_graphql_errors_total{code=\"GRAPHQL_VALIDATION_FAILED\"}"
        )
        .is_some_and(|count| count >= 1.0),
        "{text}"
    );
}

/// A handler that holds each job until the gate is closed.
struct Gate(Arc<Semaphore>);

#[async_trait::async_trait]
impl JobHandler for Gate {
    async fn handle(&self, _: &Delivery) -> Result<(), JobError> {
        let _ = self.0.acquire().await;
        Ok(())
    }
}

#[tokio::test]
async fn jobs_are_counted_per_topic_and_state() {
    // The metrics are the process's, which other tests' apps share: a topic of its own.
    const TOPIC: &str = "metered";
    // One worker slot: the first due job runs and holds it, the other due ones stay ready.
    let app = TestApp::spawn_with(|config| config.jobs.jobs_concurrency = 1).await;
    let gate = Arc::new(Semaphore::new(0));
    let jobs = app.jobs();
    jobs.registry
        .register(TOPIC, Arc::new(Gate(gate.clone())), None);
    for id in ["a", "b"] {
        jobs.schedule(job(id, TOPIC, Duration::from_secs(3600)))
            .await
            .unwrap();
    }
    for id in ["c", "d", "e"] {
        jobs.schedule(job(id, TOPIC, Duration::ZERO)).await.unwrap();
    }

    let expected = [
        ("engage_jobs_delayed{topic=\"metered\"}", 2.0),
        ("engage_jobs_ready{topic=\"metered\"}", 2.0),
        ("engage_jobs_running{topic=\"metered\"}", 1.0),
    ];
    let mut last = String::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(10) {
        last = app.get_text("/metrics").await;
        if expected
            .iter()
            .all(|(series, value)| sample(&last, series) == Some(*value))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (series, value) in expected {
        assert_eq!(sample(&last, series), Some(value), "{series} in:\n{last}");
    }

    // Once every job ended, the topic leaves the index, and its gauges go with it.
    gate.close();
    jobs.cancel(TOPIC, "a").await.unwrap();
    jobs.cancel(TOPIC, "b").await.unwrap();
    eventually(async || {
        !app.get_text("/metrics")
            .await
            .contains("engage_jobs_ready{topic=\"metered\"}")
    })
    .await;
}

/// Whether `/metrics` shows `topic`'s gauges.
async fn gauged(app: &TestApp, topic: &str) -> bool {
    let text = app.get_text("/metrics").await;
    text.contains(&format!("engage_jobs_running{{topic=\"{topic}\"}}"))
}

#[tokio::test]
async fn a_topic_leaves_the_gauges_when_its_last_job_ends_or_is_cancelled() {
    let app = TestApp::spawn().await;
    let gate = Arc::new(Semaphore::new(0));
    let jobs = app.jobs();

    // A job running through a promotion visit: that visit, finding nothing waiting, sets the
    // next one at the job's visibility deadline, a minute away. Its end brings it forward.
    const ENDED: &str = "metered-ended";
    jobs.registry
        .register(ENDED, Arc::new(Gate(gate.clone())), None);
    jobs.schedule(job("only", ENDED, Duration::ZERO))
        .await
        .unwrap();
    eventually(async || {
        let text = app.get_text("/metrics").await;
        sample(&text, &format!("engage_jobs_running{{topic=\"{ENDED}\"}}")) == Some(1.0)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(gauged(&app, ENDED).await);
    gate.close();
    eventually(async || !gauged(&app, ENDED).await).await;

    // A job due in an hour, cancelled: the topic does not wait for that hour to leave.
    const CANCELLED: &str = "metered-cancelled";
    jobs.registry
        .register(CANCELLED, Arc::new(Gate(gate.clone())), None);
    jobs.schedule(job("later", CANCELLED, Duration::from_secs(3600)))
        .await
        .unwrap();
    eventually(async || gauged(&app, CANCELLED).await).await;
    assert!(jobs.cancel(CANCELLED, "later").await.unwrap());
    eventually(async || !gauged(&app, CANCELLED).await).await;
}

#[tokio::test]
async fn consumer_lag_counts_the_entries_its_group_has_not_read() {
    // Another instance holds the feed fan-out's stream for the next hour, so this app's
    // fan-out reads nothing: every new remark is lag, deterministically.
    let mut config = base_config();
    config.redis_prefix = format!("engage-test:{}:", uuid::Uuid::new_v4().simple());
    let target = RedisTarget::new(
        &config.redis_url,
        config.redis_mode,
        config.redis_ca_file.as_deref(),
    )
    .unwrap();
    let keys = Keys::new(config.redis_prefix.clone()).on_cluster(target.is_cluster());
    let until = chrono::Utc::now().timestamp_millis() + 3_600_000;
    let mut conn = engage::infra::redis::dedicated(&target).await.unwrap();
    let () = redis::cmd("ZADD")
        .arg(keys.lease_members("feed-fanout"))
        .arg(until)
        .arg("elsewhere")
        .query_async(&mut conn)
        .await
        .unwrap();
    let () = redis::cmd("HSET")
        .arg(keys.lease_holders("feed-fanout"))
        .arg(keys.remark_stream())
        .arg(format!("elsewhere {until}"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let prefix = config.redis_prefix.clone();
    let app = TestApp::spawn_with(|config| config.redis_prefix = prefix).await;

    let item = app.create_item().await;
    for author in 1..=3 {
        app.data(
            Some(&app.user_token(author)),
            "mutation($i: ID!) { createRemark(input: { itemId: $i, score: 4, content: \"nice\" }) { id } }",
            json!({ "i": item }),
        )
        .await;
    }

    let text = app.get_text("/metrics").await;
    assert_eq!(
        sample(
            &text,
            "engage_stream_consumer_lag{consumer=\"feed-fanout\"}"
        ),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "engage_stream_consumer_pending{consumer=\"feed-fanout\"}"
        ),
        Some(0.0)
    );
    // The remark points read the same stream in a group of their own, and keep up.
    eventually(async || {
        let text = app.get_text("/metrics").await;
        sample(
            &text,
            "engage_stream_consumer_lag{consumer=\"remark-points\"}",
        ) == Some(0.0)
            && sample(
                &text,
                "engage_stream_consumer_pending{consumer=\"remark-points\"}",
            ) == Some(0.0)
    })
    .await;
}

#[tokio::test]
async fn with_a_metrics_address_metrics_are_served_there_and_not_on_the_public_listener() {
    let address = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut app = TestApp::spawn_with(|config| config.metrics_bind = Some(address)).await;
    let private = format!("http://{address}/metrics");

    let served = app.http.get(&private).send().await.unwrap();
    assert_eq!(served.status(), 200);
    assert!(served
        .text()
        .await
        .unwrap()
        .contains("# TYPE process_open_fds gauge"));
    let public = app.http.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(public.status(), 404);
    // The rest of the public listener is as it was.
    let ready = app.http.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);

    // The metrics listener stops with the app.
    app.shutdown().await.unwrap();
    assert!(app.http.get(&private).send().await.is_err());
}

#[test]
fn the_metrics_address_must_not_be_the_public_one() {
    let mut config = base_config();
    config.jwt_secret = Some("a-secret-of-at-least-thirty-two-bytes".into());
    config.bind = "127.0.0.1:8123".parse().unwrap();
    config.metrics_bind = Some(config.bind);
    let error = config.check().unwrap_err().to_string();
    assert!(error.contains("ENGAGE_METRICS_BIND"), "{error}");
    config.metrics_bind = Some("127.0.0.1:9123".parse().unwrap());
    config.check().unwrap();
}

/// The name of every counter the code emits: each `counter!("…"` of `src/`.
fn counters_in_the_code() -> BTreeSet<String> {
    fn walk(dir: &std::path::Path, names: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, names);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for (at, _) in text.match_indices("counter!(") {
                    let rest = text[at + "counter!(".len()..].trim_start();
                    if let Some(name) = rest
                        .strip_prefix('"')
                        .and_then(|rest| rest.split('"').next())
                    {
                        names.insert(name.to_string());
                    }
                }
            }
        }
    }
    let mut names = BTreeSet::new();
    walk(std::path::Path::new("src"), &mut names);
    names
}

/// Every sample of `family` in `text`: `(series, value)`.
fn samples<'a>(text: &'a str, family: &str) -> Vec<(&'a str, f64)> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter(|line| {
            line.strip_prefix(family)
                .is_some_and(|rest| rest.starts_with(['{', ' ']))
        })
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            Some((series, value.parse().ok()?))
        })
        .collect()
}

#[tokio::test]
async fn every_counter_the_code_emits_is_described_and_exported_at_zero_from_start() {
    let counters = counters_in_the_code();
    // The list is read from the code, so make sure the reading found them.
    assert!(
        counters.contains("engage_stream_dead_letters_total") && counters.len() >= 20,
        "{counters:?}"
    );
    // A fresh process: the recorder of this test binary counts every other test's work.
    let engage = crate::binary::Engage::start(&[]).await;
    let text = engage.get_text("/metrics").await;
    engage.stop().await;
    for counter in &counters {
        assert!(
            text.contains(&format!("# HELP {counter} ")),
            "{counter} has no HELP line"
        );
        assert!(
            text.contains(&format!("# TYPE {counter} counter")),
            "{counter} is not typed as a counter"
        );
        let samples = samples(&text, counter);
        assert!(!samples.is_empty(), "{counter} is not exported:\n{text}");
        // Start-up's own commands to Redis are counted; nothing else has happened yet.
        if !counter.starts_with("engage_redis_round_trips")
            && !counter.starts_with("engage_redis_commands")
        {
            for (series, value) in samples {
                // Each instance schedules the next slot of notifications' evening job as it
                // starts (one job, whichever instance schedules it).
                if series.contains("notifications.streak-at-risk") {
                    continue;
                }
                assert_eq!(value, 0.0, "{series} at start");
            }
        }
    }
    // The alerts' label values are there before anything happened.
    for series in [
        "engage_graphql_errors_total{code=\"INTERNAL\"}",
        "engage_graphql_errors_total{code=\"UNAVAILABLE\"}",
        "engage_stream_dead_letters_total{consumer=\"vote-archive\"}",
        "engage_stream_consumer_stalls_total{consumer=\"points-archive\"}",
        "engage_jobs_dead_total{topic=\"order-expiry\"}",
        "engage_client_cap_refusals_total{cap=\"connections_per_ip\"}",
        "engage_client_cap_refusals_total{cap=\"websockets_per_user\"}",
        "engage_websockets_open",
        "engage_subscriptions_active{field=\"serverTime\"}",
    ] {
        assert_eq!(sample(&text, series), Some(0.0), "{series} in:\n{text}");
    }
    // Every code of the schema's `ErrorCode`, the ones added later included.
    for code in engage::infra::error::ErrorCode::all() {
        let series = format!("engage_graphql_errors_total{{code=\"{code}\"}}");
        assert_eq!(sample(&text, &series), Some(0.0), "{series} in:\n{text}");
    }
    let build = text
        .lines()
        .find(|line| line.starts_with("engage_build_info{"))
        .unwrap_or_else(|| panic!("no engage_build_info in:\n{text}"));
    assert!(
        build.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION"))),
        "{build}"
    );
    assert!(
        build.contains("commit=\"") && build.ends_with(" 1"),
        "{build}"
    );
}

#[tokio::test]
async fn cpu_seconds_are_counted_in_fractions_of_a_second() {
    let app = TestApp::spawn().await;
    // Whole seconds would read 0 for the first second of CPU, and then jump by ones.
    eventually(async || {
        let text = app.get_text("/metrics").await;
        let seconds = sample(&text, "process_cpu_seconds_total").expect("measured");
        seconds > 0.0 && seconds.fract() != 0.0
    })
    .await;
}

/// `engage_websockets_open`, and `engage_subscriptions_active` of `serverTime` and of
/// `likeCountChanged` (whose updates are written to the socket directly), now.
async fn open_now(app: &TestApp) -> (f64, f64, f64) {
    let text = app.get_text("/metrics").await;
    let active = |field: &str| {
        sample(
            &text,
            &format!("engage_subscriptions_active{{field=\"{field}\"}}"),
        )
        .expect("exported")
    };
    (
        sample(&text, "engage_websockets_open").expect("exported"),
        active("serverTime"),
        active("likeCountChanged"),
    )
}

#[tokio::test]
async fn open_websockets_and_active_subscriptions_are_counted_until_they_end_however_they_end() {
    use crate::via::{self, Via};

    let app = TestApp::spawn().await;
    assert_eq!(open_now(&app).await, (0.0, 0.0, 0.0));
    let item = app.create_item().await;
    let remark = app
        .data(
            Some(&app.user_token(1)),
            "mutation($i: ID!) { createRemark(input: { itemId: $i, score: 4, content: \"nice\" }) { id } }",
            json!({ "i": item }),
        )
        .await["createRemark"]["id"]
        .clone();

    let mut first = via::open(&app, Via::TransportWs, None).await;
    let mut second = via::open(&app, Via::LegacyWs, None).await;
    let subscription = json!({ "query": "subscription { serverTime(everySeconds: 60) }" });
    for (socket, via) in [(&mut first, Via::TransportWs), (&mut second, Via::LegacyWs)] {
        let answer = via::operation(socket, via, "1", subscription.clone()).await;
        assert!(answer["data"]["serverTime"].is_string(), "{answer}");
    }
    let counts = json!({
        "query": "subscription($r: [ID!]!) { likeCountChanged(remarkIds: $r) { remarkId likeCount } }",
        "variables": { "r": [remark] },
    });
    let answer = via::operation(&mut second, Via::LegacyWs, "3", counts).await;
    assert_eq!(
        answer["data"]["likeCountChanged"]["likeCount"], 0,
        "{answer}"
    );
    assert_eq!(open_now(&app).await, (2.0, 2.0, 1.0));

    // A subscription refused by its resolver is never counted.
    let refused = via::operation(
        &mut first,
        Via::TransportWs,
        "2",
        json!({ "query": "subscription { serverTime(everySeconds: 0) }" }),
    )
    .await;
    assert_eq!(via::code(&refused), "BAD_USER_INPUT", "{refused}");
    assert_eq!(open_now(&app).await, (2.0, 2.0, 1.0));

    // Stopped by the client: the socket stays, the subscription ends.
    via::write(&mut first, json!({ "id": "1", "type": "complete" })).await;
    eventually(async || open_now(&app).await == (2.0, 1.0, 1.0)).await;

    // A socket whose client vanishes (no close frame) takes its subscriptions with it.
    drop(second);
    eventually(async || open_now(&app).await == (1.0, 0.0, 0.0)).await;

    drop(first);
    eventually(async || open_now(&app).await == (0.0, 0.0, 0.0)).await;

    // Shutdown closes the sockets that are still open (1001), and counts them out.
    let mut last = via::open(&app, Via::TransportWs, None).await;
    let answer = via::operation(&mut last, Via::TransportWs, "1", subscription).await;
    assert!(answer["data"]["serverTime"].is_string(), "{answer}");
    assert_eq!(open_now(&app).await, (1.0, 1.0, 0.0));
    let mut app = app;
    app.shutdown().await.unwrap();
    let infra = app.infra();
    eventually(async || {
        let text = engage::infra::metrics::render(infra).await;
        sample(&text, "engage_websockets_open") == Some(0.0)
            && sample(&text, "engage_subscriptions_active{field=\"serverTime\"}") == Some(0.0)
    })
    .await;
    drop(last);
}
