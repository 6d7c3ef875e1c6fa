//! Repeating jobs through GraphQL: a series every N seconds or on a cron pattern in a time
//! zone (across daylight-saving changes), its limit and end, no overlap with a slow handler,
//! one catch-up run after downtime, and a series rebuilt from SQL.

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use chrono::{DateTime, Utc};
use engage::features::jobs::{handlers::Delivery, JobError, JobHandler};
use serde_json::{json, Value};

use crate::harness::{eventually, eventually_within, first_code, TestApp};

const SCHEDULE: &str = "mutation($input: ScheduleJobInput!) { scheduleJob(input: $input) {
    jobId status runs nextRunAt repeat { everySeconds cron timeZone limit endsAt } } }";

/// Counts runs, holds each `hold`, and remembers how many ran at once and when each started.
#[derive(Clone, Default)]
struct Runs {
    running: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    starts: Arc<Mutex<Vec<std::time::Instant>>>,
    hold: Duration,
    fail: bool,
}

impl Runs {
    fn count(&self) -> usize {
        self.starts.lock().unwrap().len()
    }
}

#[async_trait::async_trait]
impl JobHandler for Runs {
    async fn handle(&self, _: &Delivery) -> Result<(), JobError> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        self.starts.lock().unwrap().push(std::time::Instant::now());
        tokio::time::sleep(self.hold).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        if self.fail {
            return Err(JobError::Permanent("refused".into()));
        }
        Ok(())
    }
}

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}

async fn handled(topic: &str, runs: Runs) -> TestApp {
    let app = TestApp::spawn().await;
    app.jobs().registry.register(topic, Arc::new(runs), None);
    app
}

async fn schedule(app: &TestApp, input: Value) -> Value {
    app.data(
        Some(&app.admin_token()),
        SCHEDULE,
        json!({ "input": input }),
    )
    .await["scheduleJob"]
        .clone()
}

async fn job(app: &TestApp, topic: &str, id: &str) -> Value {
    app.job(
        topic,
        id,
        "status runs attempts nextRunAt createdAt history { state }",
    )
    .await
}

/// Waits until the job has ended `runs` runs, and answers it then.
async fn after_runs(app: &TestApp, topic: &str, id: &str, runs: i64) -> Value {
    eventually(async || job(app, topic, id).await["runs"] == runs).await;
    job(app, topic, id).await
}

fn repeating(id: &str, topic: &str, repeat: Value) -> Value {
    json!({ "id": id, "topic": topic, "data": {}, "delaySeconds": 0, "repeat": repeat })
}

#[tokio::test]
async fn a_series_every_n_seconds_keeps_its_id_and_ends_at_its_limit() {
    let runs = Runs::default();
    let app = handled("every", runs.clone()).await;
    let scheduled = schedule(
        &app,
        repeating("tick", "every", json!({ "everySeconds": 60, "limit": 3 })),
    )
    .await;
    assert_eq!(scheduled["status"], "DELAYED");
    assert_eq!(
        scheduled["repeat"],
        json!({ "everySeconds": 60, "cron": null, "timeZone": "UTC", "limit": 3, "endsAt": null })
    );
    let first = after_runs(&app, "every", "tick", 1).await;
    assert_eq!(first["status"], "DELAYED", "{first}");
    assert_eq!(first["attempts"], 0, "each run starts its attempts anew");
    let next = at(first["nextRunAt"].as_str().unwrap());
    assert!(next > app.now() + chrono::Duration::seconds(50), "{first}");

    app.set_clock(next);
    let second = after_runs(&app, "every", "tick", 2).await;
    assert_eq!(
        at(second["nextRunAt"].as_str().unwrap()),
        next + chrono::Duration::seconds(60)
    );
    app.advance_clock(chrono::Duration::seconds(60));
    let last = after_runs(&app, "every", "tick", 3).await;
    assert_eq!(last["status"], "DONE", "{last}");
    assert_eq!(last["nextRunAt"], Value::Null);
    let states: Vec<&str> = last["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["state"].as_str().unwrap())
        .collect();
    assert_eq!(
        states.iter().filter(|s| **s == "DONE").count(),
        3,
        "{states:?}"
    );
    assert_eq!(runs.count(), 3);
    // The SQL record of the series is gone with it.
    assert!(app.jobs().verify().await.unwrap().is_clean());
}

#[tokio::test]
async fn cron_series_follow_berlin_across_the_spring_and_autumn_changes() {
    let app = handled("cron", Runs::default()).await;
    app.set_clock(at("2026-03-28T23:30:00Z"));
    let berlin = |cron: &str| json!({ "cron": cron, "timeZone": "Europe/Berlin" });
    let hourly = schedule(&app, repeating("hourly", "cron", berlin("0 * * * *"))).await;
    assert_eq!(hourly["nextRunAt"], "2026-03-29T00:00:00.000Z");
    let nightly = schedule(&app, repeating("nightly", "cron", berlin("30 2 * * *"))).await;
    // 02:30 does not exist on 29 March in Berlin: the run is at 03:00 CEST, just after the gap.
    assert_eq!(nightly["nextRunAt"], "2026-03-29T01:00:00.000Z");

    // 01:00 CET, then 03:00 CEST: one run per real hour, none in the gap.
    app.set_clock(at("2026-03-29T00:00:00Z"));
    let ran = after_runs(&app, "cron", "hourly", 1).await;
    assert_eq!(ran["nextRunAt"], "2026-03-29T01:00:00.000Z");
    app.set_clock(at("2026-03-29T01:00:00Z"));
    let ran = after_runs(&app, "cron", "hourly", 2).await;
    assert_eq!(ran["nextRunAt"], "2026-03-29T02:00:00.000Z");
    let ran = after_runs(&app, "cron", "nightly", 1).await;
    assert_eq!(ran["nextRunAt"], "2026-03-30T00:30:00.000Z", "02:30 CEST");

    // Autumn: 02:30 happens twice on 25 October and the nightly run is at the first.
    app.set_clock(at("2026-10-24T12:00:00Z"));
    let autumn = schedule(&app, repeating("autumn", "cron", berlin("30 2 * * *"))).await;
    assert_eq!(autumn["nextRunAt"], "2026-10-25T00:30:00.000Z");
    let hours = schedule(&app, repeating("hours", "cron", berlin("0 * * * *"))).await;
    assert_eq!(hours["nextRunAt"], "2026-10-24T13:00:00.000Z");
    app.set_clock(at("2026-10-25T00:30:00Z"));
    let ran = after_runs(&app, "cron", "autumn", 1).await;
    assert_eq!(
        ran["nextRunAt"], "2026-10-26T01:30:00.000Z",
        "02:30 CET the next day"
    );
    // The hourly series ran once for the missed hours, then is back on its schedule: 02:00
    // CET comes after 02:00 CEST, both in real time.
    let ran = after_runs(&app, "cron", "hours", 1).await;
    assert_eq!(ran["nextRunAt"], "2026-10-25T01:00:00.000Z");
    app.set_clock(at("2026-10-25T01:00:00Z"));
    let ran = after_runs(&app, "cron", "hours", 2).await;
    assert_eq!(ran["nextRunAt"], "2026-10-25T02:00:00.000Z");
}

#[tokio::test]
async fn a_series_ends_at_its_end_time() {
    let runs = Runs::default();
    let app = handled("ending", runs.clone()).await;
    let ends = app.now() + chrono::Duration::seconds(90);
    let input = repeating(
        "until",
        "ending",
        json!({ "everySeconds": 60, "endsAt": ends.to_rfc3339() }),
    );
    schedule(&app, input).await;
    after_runs(&app, "ending", "until", 1).await;
    app.advance_clock(chrono::Duration::seconds(60));
    let last = after_runs(&app, "ending", "until", 2).await;
    assert_eq!(
        last["status"], "DONE",
        "the third run would be after endsAt: {last}"
    );
    app.advance_clock(chrono::Duration::seconds(120));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(runs.count(), 2);
}

#[tokio::test]
async fn a_slow_run_never_overlaps_the_next_and_is_followed_by_no_burst() {
    let runs = Runs {
        hold: Duration::from_millis(2500),
        ..Runs::default()
    };
    let app = handled("slow", runs.clone()).await;
    schedule(
        &app,
        repeating("slow", "slow", json!({ "everySeconds": 1, "limit": 3 })),
    )
    .await;
    eventually_within("three slow runs end", Duration::from_secs(20), async || {
        job(&app, "slow", "slow").await["status"] == "DONE"
    })
    .await;
    assert_eq!(runs.most.load(Ordering::SeqCst), 1, "runs overlapped");
    let starts = runs.starts.lock().unwrap().clone();
    assert_eq!(starts.len(), 3);
    for pair in starts.windows(2) {
        let gap = pair[1] - pair[0];
        // The next run waits for the end of this one, then for the next second on the grid:
        // never at once for each second the slow run missed.
        assert!(gap >= Duration::from_millis(2500), "{gap:?}");
        assert!(gap < Duration::from_millis(4000), "{gap:?}");
    }
}

#[tokio::test]
async fn after_downtime_a_series_runs_once_to_catch_up_then_keeps_its_schedule() {
    let runs = Runs::default();
    let app = handled("catchup", runs.clone()).await;
    schedule(
        &app,
        repeating("daily", "catchup", json!({ "everySeconds": 60 })),
    )
    .await;
    let first = after_runs(&app, "catchup", "daily", 1).await;
    let next = at(first["nextRunAt"].as_str().unwrap());
    // Ten missed runs: the queue sees the clock ten minutes on at once, as after a stop.
    app.advance_clock(chrono::Duration::seconds(600));
    let caught_up = after_runs(&app, "catchup", "daily", 2).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(runs.count(), 2, "one catch-up run, not a burst");
    let resumed = at(caught_up["nextRunAt"].as_str().unwrap());
    assert!(resumed > app.now(), "{caught_up}");
    assert_eq!(
        (resumed - next).num_seconds() % 60,
        0,
        "back on the minute grid"
    );
    assert_eq!(job(&app, "catchup", "daily").await["runs"], 2);
}

#[tokio::test]
async fn a_series_lost_with_redis_is_rebuilt_from_sql_with_its_runs_and_limit() {
    let runs = Runs::default();
    let app = handled("rebuilt", runs.clone()).await;
    schedule(
        &app,
        repeating("r", "rebuilt", json!({ "everySeconds": 60, "limit": 2 })),
    )
    .await;
    let first = after_runs(&app, "rebuilt", "r", 1).await;
    eventually(async || app.jobs().verify().await.unwrap().is_clean()).await;

    crate::jobs::lose_redis(&app).await;
    crate::jobs::rebuild_jobs(&app).await;
    let rebuilt = job(&app, "rebuilt", "r").await;
    assert_eq!(rebuilt["runs"], 1, "{rebuilt}");
    assert_eq!(rebuilt["nextRunAt"], first["nextRunAt"]);
    assert!(app.jobs().verify().await.unwrap().is_clean());

    // verify compares the count toward the limit too.
    let hash = app.keys().job("rebuilt", "r");
    let set_runs = async |n: i64| {
        let mut conn = app.redis_connection().await;
        let () = redis::cmd("HSET")
            .arg(&hash)
            .arg("runs")
            .arg(n)
            .query_async(&mut *conn)
            .await
            .unwrap();
    };
    set_runs(5).await;
    let drifted = app.jobs().verify().await.unwrap();
    assert!(
        drifted.examples.iter().any(|e| e.contains("counts 5 runs")),
        "{drifted:?}"
    );
    set_runs(1).await;
    assert!(app.jobs().verify().await.unwrap().is_clean());

    app.set_clock(at(first["nextRunAt"].as_str().unwrap()));
    let last = after_runs(&app, "rebuilt", "r", 2).await;
    assert_eq!(last["status"], "DONE", "the limit held across the rebuild");
    assert_eq!(runs.count(), 2);
}

#[tokio::test]
async fn a_run_that_dies_is_a_dead_job_and_its_series_goes_on() {
    let runs = Runs {
        fail: true,
        ..Runs::default()
    };
    let app = handled("failing", runs.clone()).await;
    let input = json!({ "id": "f", "topic": "failing", "data": {}, "delaySeconds": 0,
        "maxAttempts": 1, "repeat": { "everySeconds": 60 } });
    schedule(&app, input).await;
    let after = after_runs(&app, "failing", "f", 1).await;
    assert_eq!(after["status"], "DELAYED", "{after}");
    let dead = app
        .data(
            Some(&app.admin_token()),
            "query { jobs(topic: \"failing\", status: DEAD) { edges { node { jobId createdAt } } } }",
            json!({}),
        )
        .await;
    let edges = dead["jobs"]["edges"].as_array().unwrap();
    assert_eq!(edges.len(), 1, "{dead}");
    // A dead job keeps the time it was created, not the time it died.
    assert_eq!(edges[0]["node"]["createdAt"], after["createdAt"]);
}

#[tokio::test]
async fn a_dead_job_keeps_its_creation_time() {
    let runs = Runs {
        fail: true,
        ..Runs::default()
    };
    let app = handled("dies", runs).await;
    let input =
        json!({ "id": "d", "topic": "dies", "data": {}, "delaySeconds": 30, "maxAttempts": 1 });
    let scheduled = app
        .data(
            Some(&app.admin_token()),
            "mutation($input: ScheduleJobInput!) { scheduleJob(input: $input) { createdAt } }",
            json!({ "input": input }),
        )
        .await;
    let created = scheduled["scheduleJob"]["createdAt"].clone();
    app.advance_clock(chrono::Duration::seconds(45));
    eventually(async || job(&app, "dies", "d").await["status"] == "DEAD").await;
    let dead = app
        .data(
            Some(&app.admin_token()),
            "query { job(topic: \"dies\", id: \"d\") { createdAt finishedAt } }",
            json!({}),
        )
        .await;
    assert_eq!(dead["job"]["createdAt"], created, "{dead}");
    assert_ne!(dead["job"]["finishedAt"], created);
}

#[tokio::test]
async fn a_repeat_that_does_not_read_is_refused() {
    let app = handled("bad", Runs::default()).await;
    let admin = app.admin_token();
    let now = app.now().to_rfc3339();
    for repeat in [
        json!({}),
        json!({ "everySeconds": 5, "cron": "* * * * *" }),
        json!({ "everySeconds": 0 }),
        json!({ "cron": "* * * *" }),
        json!({ "cron": "0 0 0 * * * 2030" }),
        json!({ "cron": "61 * * * *" }),
        json!({ "cron": "0 * * * *", "timeZone": "Mars/Olympus" }),
        json!({ "everySeconds": 5, "limit": 0 }),
        json!({ "everySeconds": 5, "endsAt": now }),
    ] {
        let input = json!({ "input": repeating("x", "bad", repeat.clone()) });
        let answer = app.gql(Some(&admin), SCHEDULE, input).await;
        assert_eq!(first_code(&answer), "BAD_USER_INPUT", "{repeat}: {answer}");
    }
}

/// A callback that answers OK, except at its `hang_at`-th call, which it never answers
/// (the run is under way when its process dies); it says so on `hung`.
async fn callback(hang_at: usize) -> (u16, Arc<AtomicUsize>, tokio::sync::mpsc::Receiver<()>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let (hung, hung_seen) = tokio::sync::mpsc::channel(1);
    let counted = hits.clone();
    let router = axum::Router::new().route(
        "/run",
        axum::routing::post(move || {
            let (hits, hung) = (counted.clone(), hung.clone());
            async move {
                if hits.fetch_add(1, Ordering::SeqCst) + 1 == hang_at {
                    let _ = hung.send(()).await;
                    std::future::pending::<()>().await;
                }
                "{}"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, router).await });
    (port, hits, hung_seen)
}

async fn binary_gql(
    engage: &crate::binary::Engage,
    token: &str,
    query: &str,
    variables: Value,
) -> Value {
    let client = reqwest::Client::new();
    let answer: Value = client
        .post(format!("{}/graphql", engage.base))
        .bearer_auth(token)
        .json(&json!({ "query": query, "variables": variables }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(answer.get("errors").is_none(), "{answer}");
    answer["data"].clone()
}

#[tokio::test]
async fn a_series_survives_its_process_being_killed_mid_run_with_no_run_lost_or_doubled() {
    let (port, hits, mut hung) = callback(2).await;
    let hosts = format!("127.0.0.1:{port}");
    let mut engage = crate::binary::Engage::start(&[
        ("ENGAGE_CALLBACK_HOSTS", hosts.as_str()),
        ("ENGAGE_JOBS_VISIBILITY_SECONDS", "2"),
        ("ENGAGE_CALLBACK_TIMEOUT_SECONDS", "30"),
    ])
    .await;
    let token: Value = reqwest::Client::new()
        .post(format!("{}/dev/token", engage.base))
        .json(&json!({ "userId": 1, "role": "admin" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = token["token"].as_str().unwrap().to_string();
    let input = json!({ "id": "beat", "topic": "crashy", "data": {}, "delaySeconds": 0,
        "callbackUrl": format!("http://127.0.0.1:{port}/run"),
        "repeat": { "everySeconds": 1, "limit": 4 } });
    binary_gql(&engage, &token, SCHEDULE, json!({ "input": input })).await;

    // The second run is under way: the process dies with it.
    tokio::time::timeout(Duration::from_secs(15), hung.recv())
        .await
        .expect("the second run starts");
    engage.crash_and_restart().await;

    let job = "query { job(topic: \"crashy\", id: \"beat\") { status runs history { state } } }";
    let mut done = Value::Null;
    eventually_within(
        "the series ends after its restart",
        Duration::from_secs(30),
        async || {
            done = binary_gql(&engage, &token, job, json!({})).await["job"].clone();
            done["status"] == "DONE"
        },
    )
    .await;
    assert_eq!(done["runs"], 4, "{done}");
    let finished = done["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["state"] == "DONE")
        .count();
    assert_eq!(finished, 4, "{done}");
    // Four runs, one of them delivered twice: the one the killed process held, again after
    // its lease ran out.
    assert_eq!(hits.load(Ordering::SeqCst), 5);
    let stopped = engage.stop().await;
    assert!(stopped.status.success(), "{}", stopped.status);
}
