//! The delay queue: due times, exactly-once delivery to healthy workers, redelivery after a
//! worker dies, the retry ladder, cancellation anywhere, callbacks behind an allow-list.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use engage::features::jobs::{self, handlers::Delivery, JobError, JobHandler, NewJob, TopicPolicy};
use serde_json::{json, Value};
use sqlx::Row;
use tokio::sync::Notify;

use crate::harness::{eventually, first_code, TestApp};

/// (attempt, epoch ms) of each delivery of a job.
type Deliveries = Vec<(u32, i64)>;

/// Records every delivery, by job id.
#[derive(Default, Clone)]
struct Recorder {
    deliveries: Arc<Mutex<HashMap<String, Deliveries>>>,
}

impl Recorder {
    fn count(&self, id: &str) -> usize {
        self.deliveries.lock().unwrap().get(id).map_or(0, Vec::len)
    }

    fn total(&self) -> usize {
        self.deliveries.lock().unwrap().values().map(Vec::len).sum()
    }
}

#[async_trait::async_trait]
impl JobHandler for Recorder {
    async fn handle(&self, delivery: &Delivery) -> Result<(), JobError> {
        let now = chrono::Utc::now().timestamp_millis();
        self.deliveries
            .lock()
            .unwrap()
            .entry(delivery.id.clone())
            .or_default()
            .push((delivery.attempt, now));
        Ok(())
    }
}

/// A job with an empty body, no callback and the default attempts.
pub fn job(id: &str, topic: &str, delay: Duration) -> NewJob {
    NewJob::new(id, topic, "{}".into(), delay)
}

fn policy(ladder: &[u64], visibility_ms: u64) -> Option<TopicPolicy> {
    Some(TopicPolicy::new(
        ladder.iter().map(|s| Duration::from_secs(*s)).collect(),
        Duration::from_millis(visibility_ms),
    ))
}

async fn until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < timeout,
            "{what}: not within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn due_times_are_honoured_within_a_second() {
    let app = TestApp::spawn().await;
    let recorder = Recorder::default();
    app.jobs()
        .registry
        .register("due", Arc::new(recorder.clone()), None);
    let mut due = HashMap::new();
    for i in 0..20 {
        let delay = Duration::from_millis(500 + 100 * i);
        let view = app
            .jobs()
            .schedule(job(&format!("j{i}"), "due", delay))
            .await
            .unwrap();
        due.insert(view.id, view.run_at_ms);
    }
    until("all delivered", Duration::from_secs(10), || {
        recorder.total() == 20
    })
    .await;
    for (id, deliveries) in recorder.deliveries.lock().unwrap().iter() {
        let late = deliveries[0].1 - due[id];
        assert!(
            (0..1000).contains(&late),
            "{id} ran {late} ms after its due time"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_jobs_due_together_are_delivered_once_by_two_instances() {
    let first = TestApp::spawn().await;
    let second = first.spawn_sibling().await;
    let recorder = Recorder::default();
    first
        .jobs()
        .registry
        .register("burst", Arc::new(recorder.clone()), None);
    second
        .jobs()
        .registry
        .register("burst", Arc::new(recorder.clone()), None);

    let jobs = first.jobs().clone();
    let scheduling: Vec<_> = (0..10)
        .map(|worker| {
            let jobs = jobs.clone();
            tokio::spawn(async move {
                for i in 0..1000 {
                    let id = format!("b{worker}-{i}");
                    jobs.schedule(job(&id, "burst", Duration::from_secs(2)))
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for task in scheduling {
        task.await.unwrap();
    }
    until("10,000 delivered", Duration::from_secs(60), || {
        recorder.total() >= 10_000
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let deliveries = recorder.deliveries.lock().unwrap();
    assert_eq!(deliveries.len(), 10_000);
    assert!(
        deliveries.values().all(|d| d.len() == 1),
        "no job was delivered twice"
    );
}

struct DiesOnFirstDelivery(Recorder, std::sync::atomic::AtomicBool);

#[async_trait::async_trait]
impl JobHandler for DiesOnFirstDelivery {
    async fn handle(&self, delivery: &Delivery) -> Result<(), JobError> {
        if !self.1.swap(true, std::sync::atomic::Ordering::SeqCst) {
            // The worker's task ends mid-job without a word, as a crash would end it.
            panic!("worker killed mid-job");
        }
        self.0.handle(delivery).await
    }
}

#[tokio::test]
async fn a_job_whose_worker_died_is_delivered_again_after_its_visibility_deadline() {
    let app = TestApp::spawn().await;
    let recorder = Recorder::default();
    app.jobs().registry.register(
        "fragile",
        Arc::new(DiesOnFirstDelivery(recorder.clone(), Default::default())),
        policy(&[60], 1000),
    );
    let started = Instant::now();
    app.jobs()
        .schedule(job("f1", "fragile", Duration::ZERO))
        .await
        .unwrap();
    until("redelivered", Duration::from_secs(10), || {
        recorder.count("f1") == 1
    })
    .await;
    assert!(
        started.elapsed() >= Duration::from_millis(1000),
        "not before the deadline"
    );
    assert_eq!(
        recorder.deliveries.lock().unwrap()["f1"][0].0,
        1,
        "a delivery that stalled used no attempt"
    );
}

struct AlwaysFails;

#[async_trait::async_trait]
impl JobHandler for AlwaysFails {
    async fn handle(&self, _: &Delivery) -> Result<(), JobError> {
        Err(JobError::Retry("the partner API answered 503".into()))
    }
}

async fn job_status(app: &TestApp, topic: &str, id: &str) -> Value {
    app.job(topic, id, "id status attempts maxAttempts runAt lastError")
        .await
}

#[tokio::test]
async fn a_failing_job_climbs_the_ladder_dies_and_can_be_requeued() {
    let app = TestApp::spawn().await;
    app.jobs()
        .registry
        .register("flaky", Arc::new(AlwaysFails), policy(&[15, 180], 5000));
    let mut new = job("x1", "flaky", Duration::ZERO);
    new.max_attempts = Some(3);
    app.jobs().schedule(new).await.unwrap();

    let admin = app.admin_token();
    let mut seen = Vec::new();
    for (attempt, wait) in [(1, 0), (2, 16), (3, 181)] {
        app.advance_clock(chrono::Duration::seconds(wait));
        let mut status = Value::Null;
        for _ in 0..200 {
            status = job_status(&app, "flaky", "x1").await;
            if status["attempts"] == attempt
                && status["status"] != "RUNNING"
                && status["status"] != "READY"
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        seen.push(status["status"].as_str().unwrap_or("?").to_string());
        assert_eq!(status["attempts"], attempt, "{status}");
    }
    assert_eq!(seen, ["DELAYED", "DELAYED", "DEAD"]);
    let dead = job_status(&app, "flaky", "x1").await;
    assert_eq!(dead["lastError"], "the partner API answered 503");

    let listed = app
        .data(
            Some(&admin),
            "{ jobs(topic: \"flaky\", status: DEAD) { edges { node { jobId status } } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        listed["jobs"]["edges"],
        json!([{ "node": { "jobId": "x1", "status": "DEAD" } }])
    );

    let requeued = app
        .data(
            Some(&admin),
            "mutation { requeueDeadJob(topic: \"flaky\", id: \"x1\") { status attempts } }",
            json!({}),
        )
        .await;
    assert_eq!(
        requeued["requeueDeadJob"],
        json!({ "status": "DELAYED", "attempts": 0 })
    );
    let listed = app
        .data(
            Some(&admin),
            "{ jobs(topic: \"flaky\", status: DEAD) { edges { node { jobId } } } }",
            json!({}),
        )
        .await;
    assert_eq!(listed["jobs"]["edges"], json!([]));
}

/// Blocks each delivery until released; counts deliveries.
#[derive(Clone, Default)]
struct Gate {
    recorder: Recorder,
    release: Arc<Notify>,
}

#[async_trait::async_trait]
impl JobHandler for Gate {
    async fn handle(&self, delivery: &Delivery) -> Result<(), JobError> {
        self.recorder.handle(delivery).await?;
        self.release.notified().await;
        Ok(())
    }
}

#[tokio::test]
async fn a_cancelled_job_never_runs_after_cancel_returned_true() {
    let app = TestApp::spawn_with(|config| config.jobs.jobs_concurrency = 1).await;
    let gate = Gate::default();
    app.jobs()
        .registry
        .register("gated", Arc::new(gate.clone()), policy(&[1], 30_000));

    // Before promotion: still delayed.
    app.jobs()
        .schedule(job("early", "gated", Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(app.jobs().cancel("gated", "early").await.unwrap());
    assert_eq!(
        job_status(&app, "gated", "early").await["status"],
        "CANCELLED"
    );

    // During: the job is running when it is cancelled; its completion changes nothing.
    app.jobs()
        .schedule(job("during", "gated", Duration::ZERO))
        .await
        .unwrap();
    until("running", Duration::from_secs(5), || {
        gate.recorder.count("during") == 1
    })
    .await;
    assert_eq!(
        job_status(&app, "gated", "during").await["status"],
        "RUNNING"
    );
    // After promotion: ready, waiting for the single worker slot that "during" holds.
    app.jobs()
        .schedule(job("after", "gated", Duration::ZERO))
        .await
        .unwrap();
    let mut ready = Value::Null;
    for _ in 0..100 {
        ready = job_status(&app, "gated", "after").await;
        if ready["status"] == "READY" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(ready["status"], "READY");
    assert!(app.jobs().cancel("gated", "after").await.unwrap());
    assert!(app.jobs().cancel("gated", "during").await.unwrap());
    assert!(
        !app.jobs().cancel("gated", "during").await.unwrap(),
        "a second cancel finds nothing"
    );
    gate.release.notify_waiters();

    app.advance_clock(chrono::Duration::seconds(120));
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(gate.recorder.count("early"), 0);
    assert_eq!(gate.recorder.count("after"), 0);
    assert_eq!(gate.recorder.count("during"), 1, "not run again");
    assert_eq!(
        job_status(&app, "gated", "during").await["status"],
        "CANCELLED"
    );
}

/// A local HTTP endpoint that counts the callbacks it receives.
async fn callback_target() -> (u16, Arc<Mutex<usize>>) {
    let hits = Arc::new(Mutex::new(0));
    let counter = hits.clone();
    let router = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            let counter = counter.clone();
            async move {
                *counter.lock().unwrap() += 1;
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, router).await });
    (port, hits)
}

const SCHEDULE: &str =
    "mutation($input: ScheduleJobInput!) { scheduleJob(input: $input) { id status runAt } }";

async fn schedule_callback(app: &TestApp, id: &str, url: &str) {
    let input = json!({ "id": id, "topic": "hooks", "body": "{\"order\":1}", "delaySeconds": 0, "callbackUrl": url });
    app.data(
        Some(&app.admin_token()),
        SCHEDULE,
        json!({ "input": input }),
    )
    .await;
}

async fn settled(app: &TestApp, id: &str) -> Value {
    for _ in 0..200 {
        let status = job_status(app, "hooks", id).await;
        if status["status"] == "DONE" || status["status"] == "DEAD" {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("job {id} did not settle");
}

#[tokio::test]
async fn callbacks_reach_only_listed_hosts_and_never_unlisted_internal_addresses() {
    let (port, hits) = callback_target().await;
    let app = TestApp::spawn_with(move |config| {
        config.jobs.callback_hosts = format!("localhost:{port},127.0.0.1:{}", port)
    })
    .await;
    let unlisted = TestApp::spawn().await;

    let input = json!({ "id": "refused", "topic": "hooks", "body": "{}", "delaySeconds": 0,
        "callbackUrl": format!("http://127.0.0.1:{port}/hook") });
    let refused = unlisted
        .gql(
            Some(&unlisted.admin_token()),
            SCHEDULE,
            json!({ "input": input }),
        )
        .await;
    assert_eq!(
        first_code(&refused),
        "CALLBACK_HOST_NOT_ALLOWED",
        "{refused}"
    );
    assert!(
        refused["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("not on ENGAGE_CALLBACK_HOSTS"),
        "{refused}"
    );
    assert_eq!(job_status(&unlisted, "hooks", "refused").await, Value::Null);
    assert_eq!(*hits.lock().unwrap(), 0, "no request was made");

    schedule_callback(&app, "delivered", &format!("http://127.0.0.1:{port}/hook")).await;
    assert_eq!(settled(&app, "delivered").await["status"], "DONE");
    assert_eq!(*hits.lock().unwrap(), 1);

    // A listed name that resolves to loopback is refused: only the address itself may be listed.
    let named =
        TestApp::spawn_with(move |config| config.jobs.callback_hosts = format!("localhost:{port}"))
            .await;
    schedule_callback(&named, "rebound", &format!("http://localhost:{port}/hook")).await;
    let rebound = settled(&named, "rebound").await;
    assert_eq!(rebound["status"], "DEAD");
    assert!(
        rebound["lastError"]
            .as_str()
            .unwrap()
            .contains("internal address"),
        "{rebound}"
    );
    assert_eq!(*hits.lock().unwrap(), 1);
}

#[tokio::test]
async fn scheduling_checks_ids_input_and_roles() {
    let app = TestApp::spawn().await;
    app.handle_topic("mail");
    let admin = app.admin_token();
    let input = |id: &str, body: &str, delay: i64| json!({ "input": { "id": id, "topic": "mail", "body": body, "delaySeconds": delay } });
    let created = app
        .data(Some(&admin), SCHEDULE, input("m1", "{}", 60))
        .await;
    assert_eq!(created["scheduleJob"]["status"], "DELAYED");
    assert_eq!(
        first_code(&app.gql(Some(&admin), SCHEDULE, input("m1", "{}", 60)).await),
        "JOB_EXISTS"
    );
    for bad in [
        input("m2", "not json", 1),
        input("m 3", "{}", 1),
        input("m4", "{}", -1),
    ] {
        assert_eq!(
            first_code(&app.gql(Some(&admin), SCHEDULE, bad.clone()).await),
            "BAD_USER_INPUT",
            "{bad}"
        );
    }
    let callback = json!({ "input": { "id": "m5", "topic": "mail", "body": "{}", "delaySeconds": 1, "callbackUrl": "ftp://x/y" } });
    assert_eq!(
        first_code(&app.gql(Some(&admin), SCHEDULE, callback).await),
        "BAD_USER_INPUT"
    );
    assert_eq!(
        first_code(
            &app.gql(Some(&app.user_token(5)), SCHEDULE, input("m6", "{}", 1))
                .await
        ),
        "FORBIDDEN"
    );
    let cancel = "mutation { cancelJob(topic: \"mail\", id: \"m1\") }";
    assert_eq!(
        app.data(Some(&admin), cancel, json!({})).await["cancelJob"],
        true
    );
    assert_eq!(
        app.data(Some(&admin), cancel, json!({})).await["cancelJob"],
        false
    );
}

#[tokio::test]
async fn job_ids_and_topics_with_colons_are_scheduled_run_and_cancelled_like_any_other() {
    let app = TestApp::spawn().await;
    let recorder = Recorder::default();
    let topic = "billing:eu";
    app.jobs()
        .registry
        .register(topic, Arc::new(recorder.clone()), None);
    // Ids that look like the pool's bookkeeping of the job "invoice".
    let ids = [
        "invoice:attempts",
        "invoice",
        "invoice:lease",
        "invoice:status",
        "invoice:error",
    ];
    for id in ids {
        app.jobs()
            .schedule(job(id, topic, Duration::ZERO))
            .await
            .unwrap();
    }
    until("every job ran", Duration::from_secs(10), || {
        ids.iter().all(|id| recorder.count(id) == 1)
    })
    .await;
    for id in ids {
        let mut status = Value::Null;
        for _ in 0..100 {
            status = job_status(&app, topic, id).await;
            if status["status"] == "DONE" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(status["status"], "DONE", "{id}: {status}");
        assert_eq!(status["attempts"], 1, "{id}: {status}");
    }

    let admin = app.admin_token();
    let later = json!({ "input": { "id": "invoice:2024:07", "topic": topic, "body": "{}", "delaySeconds": 60 } });
    app.data(Some(&admin), SCHEDULE, later).await;
    let cancel = "mutation($t: String!) { cancelJob(topic: $t, id: \"invoice:2024:07\") }";
    assert_eq!(
        app.data(Some(&admin), cancel, json!({ "t": topic })).await["cancelJob"],
        true
    );
    assert_eq!(
        job_status(&app, topic, "invoice:2024:07").await["status"],
        "CANCELLED"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(recorder.total(), ids.len(), "nothing ran twice");

    // A string outside the documented characters names no job, even where it spells a
    // job's own field.
    assert_eq!(
        job_status(&app, topic, "invoice/attempts").await,
        Value::Null
    );
    let cancel_field = "mutation($t: String!) { cancelJob(topic: $t, id: \"invoice/status\") }";
    assert_eq!(
        app.data(Some(&admin), cancel_field, json!({ "t": topic }))
            .await["cancelJob"],
        false
    );
}

#[tokio::test]
async fn a_job_stored_unreadably_goes_to_dead_jobs_without_holding_up_the_others() {
    let app = TestApp::spawn().await;
    let recorder = Recorder::default();
    app.jobs()
        .registry
        .register("mixed", Arc::new(recorder.clone()), None);
    // A job hash whose JSON is not a job's (left by an older layout, say), ready to take.
    let keys = &app.keys();
    let mut conn = app.redis_connection().await;
    let () = redis::pipe()
        .cmd("HSET")
        .arg(keys.job("mixed", "garbled"))
        .arg("job")
        .arg("3")
        .ignore()
        .cmd("RPUSH")
        .arg(keys.jobs_ready("mixed"))
        .arg("garbled")
        .ignore()
        .query_async(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    app.jobs()
        .schedule(job("sound", "mixed", Duration::ZERO))
        .await
        .unwrap();
    until("the sound job ran", Duration::from_secs(10), || {
        recorder.count("sound") == 1
    })
    .await;
    for _ in 0..100 {
        // Until it is buried, its pool entry cannot be shown.
        let found = app.jobs().find("mixed", "garbled").await;
        if found.is_ok_and(|job| job.is_some_and(|job| job.status == jobs::JobStatus::Dead)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let dead = job_status(&app, "mixed", "garbled").await;
    assert_eq!(dead["status"], "DEAD", "{dead}");
    assert!(
        dead["lastError"]
            .as_str()
            .unwrap()
            .contains("does not read as a job"),
        "{dead}"
    );
    assert_eq!(recorder.count("garbled"), 0);
}

#[tokio::test]
async fn jobs_an_earlier_version_kept_in_one_pool_hash_per_topic_move_to_a_hash_each_and_run() {
    let app = TestApp::spawn().await;
    let recorder = Recorder::default();
    app.jobs()
        .registry
        .register("lifted", Arc::new(recorder.clone()), None);
    let mut prioritised = job("soon", "lifted", Duration::from_secs(3));
    prioritised.priority = 7;
    app.jobs().schedule(prioritised).await.unwrap();
    app.jobs()
        .schedule(job("later", "lifted", Duration::from_secs(3600)))
        .await
        .unwrap();
    // The earlier layout: `<id>` holds the JSON and `<id>/<part>` the rest, in one hash.
    let keys = &app.keys();
    let pool = keys.jobs_legacy_pool("lifted");
    let mut conn = app.redis_connection().await;
    let mut written = HashMap::new();
    for id in ["soon", "later"] {
        let hash: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(keys.job("lifted", id))
            .query_async(&mut *conn)
            .await
            .unwrap();
        let mut pipe = redis::pipe();
        pipe.cmd("DEL").arg(keys.job("lifted", id)).ignore();
        for (field, value) in &hash {
            let field = if field == "job" {
                id.to_string()
            } else {
                format!("{id}/{field}")
            };
            pipe.cmd("HSET").arg(&pool).arg(field).arg(value).ignore();
        }
        let () = pipe.query_async(&mut *conn).await.unwrap();
        written.insert(id, hash);
    }
    // A field of no job (its JSON gone) is dropped.
    let () = redis::cmd("HSET")
        .arg(&pool)
        .arg("gone/lease")
        .arg("x")
        .query_async(&mut *conn)
        .await
        .unwrap();

    app.jobs().lift_pools().await.unwrap();

    let left: bool = redis::cmd("EXISTS")
        .arg(&pool)
        .query_async(&mut *conn)
        .await
        .unwrap();
    assert!(!left, "the pool is gone");
    for (id, before) in &written {
        let after: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(keys.job("lifted", id))
            .query_async(&mut *conn)
            .await
            .unwrap();
        assert_eq!(&after, before, "job {id} has every field it had");
    }
    drop(conn);
    until("the moved job ran", Duration::from_secs(10), || {
        recorder.count("soon") == 1
    })
    .await;
    let later = app.jobs().find("lifted", "later").await.unwrap().unwrap();
    assert_eq!(later.status, jobs::JobStatus::Delayed);
    assert_eq!(recorder.count("later"), 0);
}

/// Polls a job (without GraphQL, so no rate limit) until `done` holds for it; its view then.
async fn job_when(
    app: &TestApp,
    topic: &str,
    id: &str,
    timeout: Duration,
    done: impl Fn(&jobs::JobView) -> bool,
) -> jobs::JobView {
    let started = Instant::now();
    loop {
        let view = app.jobs().find(topic, id).await.unwrap();
        match view {
            Some(view) if done(&view) => return view,
            view => assert!(
                started.elapsed() < timeout,
                "{topic}/{id} not as expected within {timeout:?}: {view:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Ends its process mid-job on every delivery, as a handler that crashes it would.
struct CrashesItsProcess(Recorder);

#[async_trait::async_trait]
impl JobHandler for CrashesItsProcess {
    async fn handle(&self, delivery: &Delivery) -> Result<(), JobError> {
        self.0.handle(delivery).await?;
        panic!("the process running this job died");
    }
}

#[tokio::test]
async fn a_job_whose_handler_crashes_its_process_is_dead_lettered_after_max_stalled_deliveries() {
    let app = TestApp::spawn().await;
    let recorder = Recorder::default();
    let mut crashing = policy(&[1], 300).unwrap();
    crashing.max_stalls = 2;
    app.jobs().registry.register(
        "crashing",
        Arc::new(CrashesItsProcess(recorder.clone())),
        Some(crashing),
    );
    app.jobs()
        .schedule(job("c1", "crashing", Duration::ZERO))
        .await
        .unwrap();
    let dead = job_when(&app, "crashing", "c1", Duration::from_secs(10), |job| {
        job.status == jobs::JobStatus::Dead
    })
    .await;
    assert!(
        dead.last_error.as_deref().unwrap().contains("stalled"),
        "{dead:?}"
    );
    assert_eq!(dead.attempts, 1, "stalls use no attempt: {dead:?}");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let deliveries = recorder.deliveries.lock().unwrap()["c1"].clone();
    assert_eq!(
        deliveries.iter().map(|d| d.0).collect::<Vec<_>>(),
        [1, 1, 1],
        "the first delivery and two after a stall, each the first attempt; none after"
    );
}

/// Ends its process mid-job on its first delivery only; runs to the end on the next.
struct CrashesOnce(Recorder);

#[async_trait::async_trait]
impl JobHandler for CrashesOnce {
    async fn handle(&self, delivery: &Delivery) -> Result<(), JobError> {
        self.0.handle(delivery).await?;
        if self.0.count(&delivery.id) == 1 {
            panic!("the process running this job died");
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_stalled_delivery_stays_in_the_jobs_history() {
    let app = TestApp::spawn().await;
    let recorder = Recorder::default();
    app.jobs().registry.register(
        "stalling",
        Arc::new(CrashesOnce(recorder.clone())),
        policy(&[1], 300),
    );
    app.jobs()
        .schedule(job("s1", "stalling", Duration::ZERO))
        .await
        .unwrap();
    let done = job_when(&app, "stalling", "s1", Duration::from_secs(10), |job| {
        job.status == jobs::JobStatus::Done
    })
    .await;
    let events: Vec<_> = done
        .details
        .history
        .iter()
        .map(|event| (event.status, event.attempt))
        .collect();
    use jobs::JobStatus::{Delayed, Done, Running};
    assert_eq!(
        events,
        [(Delayed, 0), (Running, 1), (Running, 1), (Done, 1)],
        "the stalled delivery, then the one that ran: {done:?}"
    );
    let started = done.details.history[1..3].iter().map(|event| event.at_ms);
    let deliveries = recorder.deliveries.lock().unwrap()["s1"].clone();
    for (at, (_, delivered)) in started.zip(deliveries) {
        assert!(at <= delivered, "each delivery's own start: {done:?}");
    }
}

/// Takes longer than its topic's visibility timeout.
struct Slow(Recorder, Duration);

#[async_trait::async_trait]
impl JobHandler for Slow {
    async fn handle(&self, delivery: &Delivery) -> Result<(), JobError> {
        self.0.handle(delivery).await?;
        tokio::time::sleep(self.1).await;
        Ok(())
    }
}

#[tokio::test]
async fn a_handler_that_runs_longer_than_the_visibility_timeout_is_delivered_once() {
    let app = TestApp::spawn().await;
    let recorder = Recorder::default();
    app.jobs().registry.register(
        "slow",
        Arc::new(Slow(recorder.clone(), Duration::from_millis(2500))),
        policy(&[1], 600),
    );
    app.jobs()
        .schedule(job("s1", "slow", Duration::ZERO))
        .await
        .unwrap();
    let done = job_when(&app, "slow", "s1", Duration::from_secs(6), |job| {
        job.status == jobs::JobStatus::Done
    })
    .await;
    assert_eq!(done.attempts, 1, "{done:?}");
    assert_eq!(recorder.count("s1"), 1, "delivered once");
}

#[tokio::test]
async fn a_finished_or_cancelled_job_id_can_be_scheduled_again_but_a_pending_one_cannot() {
    let app = TestApp::spawn().await;
    let recorder = Recorder::default();
    app.jobs()
        .registry
        .register("again", Arc::new(recorder.clone()), None);
    app.jobs()
        .schedule(job("done", "again", Duration::ZERO))
        .await
        .unwrap();
    until("ran", Duration::from_secs(5), || {
        recorder.count("done") == 1
    })
    .await;
    job_when(&app, "again", "done", Duration::from_secs(5), |job| {
        job.status == jobs::JobStatus::Done
    })
    .await;
    app.jobs()
        .schedule(job("cancelled", "again", Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(app.jobs().cancel("again", "cancelled").await.unwrap());

    for id in ["done", "cancelled"] {
        let view = app
            .jobs()
            .schedule(job(id, "again", Duration::ZERO))
            .await
            .unwrap_or_else(|e| panic!("{id} scheduled again: {e}"));
        assert_eq!((view.status, view.attempts), (jobs::JobStatus::Delayed, 0));
    }
    until("each ran again", Duration::from_secs(5), || {
        recorder.count("done") == 2 && recorder.count("cancelled") == 1
    })
    .await;
    assert_eq!(
        recorder.deliveries.lock().unwrap()["done"][1].0,
        1,
        "attempts start over"
    );

    app.jobs()
        .schedule(job("waiting", "again", Duration::from_secs(60)))
        .await
        .unwrap();
    let twice = app
        .jobs()
        .schedule(job("waiting", "again", Duration::ZERO))
        .await;
    assert_eq!(
        twice.map(|_| ()).unwrap_err().code(),
        engage::infra::error::ErrorCode::JobExists
    );
}

/// Whether any key of the jobs' shared slot still names `topic` (a set or zset member, a hash field).
async fn topic_kept(app: &TestApp, topic: &str) -> bool {
    let mut conn = crate::harness::redis(app).await;
    let pattern = format!("{}{{jobs}}:*", app.keys().prefix());
    // The set of topics that had a job names it for `topics`; no tick walks that set.
    let known = format!("{}{{jobs}}:known", app.keys().prefix());
    for key in crate::harness::scan(app, &pattern).await {
        if key == known {
            continue;
        }
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        let kept: bool = match kind.as_str() {
            "set" => redis::cmd("SISMEMBER")
                .arg(&key)
                .arg(topic)
                .query_async(&mut conn)
                .await
                .unwrap(),
            "zset" => redis::cmd("ZSCORE")
                .arg(&key)
                .arg(topic)
                .query_async::<Option<f64>>(&mut conn)
                .await
                .unwrap()
                .is_some(),
            "hash" => redis::cmd("HEXISTS")
                .arg(&key)
                .arg(topic)
                .query_async(&mut conn)
                .await
                .unwrap(),
            _ => false,
        };
        if kept {
            return true;
        }
    }
    false
}

#[tokio::test]
async fn a_topic_whose_jobs_all_ended_is_no_longer_kept_or_walked() {
    let app = TestApp::spawn().await;
    let recorder = Recorder::default();
    app.jobs()
        .registry
        .register("once", Arc::new(recorder.clone()), None);
    app.jobs()
        .schedule(job("o1", "once", Duration::ZERO))
        .await
        .unwrap();
    app.jobs()
        .schedule(job("o2", "later", Duration::from_secs(3600)))
        .await
        .unwrap();
    until("ran", Duration::from_secs(5), || recorder.count("o1") == 1).await;
    for _ in 0..100 {
        if !topic_kept(&app, "once").await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !topic_kept(&app, "once").await,
        "a topic with no pending job is dropped"
    );
    assert!(
        topic_kept(&app, "later").await,
        "a topic with a pending job is kept"
    );
}

/// A topic's rows of `pending_job`: (id, run at, attempts, seq), by id.
async fn pending_rows(app: &TestApp, topic: &str) -> Vec<(String, i64, i64, i64)> {
    sqlx::query(
        "SELECT job_id, run_at_ms, attempts, seq FROM pending_job WHERE topic = $1 ORDER BY job_id",
    )
    .bind(topic)
    .fetch_all(app.sql())
    .await
    .unwrap()
    .iter()
    .map(|row| {
        (
            row.get("job_id"),
            row.get("run_at_ms"),
            row.get("attempts"),
            row.get("seq"),
        )
    })
    .collect()
}

/// Fails the job "retried", succeeds the others.
struct FailsOne(Recorder);

#[async_trait::async_trait]
impl JobHandler for FailsOne {
    async fn handle(&self, delivery: &Delivery) -> Result<(), JobError> {
        self.0.handle(delivery).await?;
        match delivery.id.as_str() {
            "retried" => Err(JobError::Retry("try later".into())),
            "dies" => Err(JobError::Permanent("cannot ever work".into())),
            _ => Ok(()),
        }
    }
}

#[tokio::test]
async fn a_job_is_recorded_in_sql_from_its_scheduling_until_it_ends() {
    let app = TestApp::spawn().await;
    let recorder = Recorder::default();
    app.jobs().registry.register(
        "kept",
        Arc::new(FailsOne(recorder.clone())),
        policy(&[600], 30_000),
    );
    let now = app.now_ms();
    // Paused while its rows are read: a due job may otherwise run and end first.
    app.jobs().pause("kept", true).await.unwrap();
    for (id, delay) in [
        ("runs", 0),
        ("retried", 0),
        ("dies", 0),
        ("cancelled", 60),
        ("waits", 60),
    ] {
        app.jobs()
            .schedule(job(id, "kept", Duration::from_secs(delay)))
            .await
            .unwrap();
    }
    let rows = pending_rows(&app, "kept").await;
    let ids: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(ids, ["cancelled", "dies", "retried", "runs", "waits"]);
    assert!(rows.iter().all(|r| r.1 >= now && r.2 == 0), "{rows:?}");
    let first_seq = rows[3].3;
    app.jobs().pause("kept", false).await.unwrap();

    assert!(app.jobs().cancel("kept", "cancelled").await.unwrap());
    until("each due job ran", Duration::from_secs(5), || {
        ["runs", "retried", "dies"]
            .iter()
            .all(|id| recorder.count(id) == 1)
    })
    .await;
    let mut rows = Vec::new();
    for _ in 0..100 {
        rows = pending_rows(&app, "kept").await;
        if rows.len() == 2 && rows[0].2 == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ids: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(
        ids,
        ["retried", "waits"],
        "done, dead and cancelled jobs left"
    );
    let retried = &rows[0];
    assert_eq!(retried.2, 1, "a retry records its attempts");
    assert!(retried.1 >= now + 600_000, "and its due time: {retried:?}");

    // The id of a job that ended is scheduled again with a row of its own.
    app.jobs()
        .schedule(job("runs", "kept", Duration::from_secs(60)))
        .await
        .unwrap();
    let again = pending_rows(&app, "kept").await;
    let runs = again.iter().find(|r| r.0 == "runs").unwrap();
    assert!(runs.3 != first_seq && runs.2 == 0, "{again:?}");
}

#[tokio::test]
async fn with_sql_down_scheduling_answers_unavailable_and_schedules_nothing() {
    let app = TestApp::spawn().await;
    app.sql().close().await;
    let refused = app
        .jobs()
        .schedule(job("j1", "nosql", Duration::ZERO))
        .await;
    assert_eq!(
        refused.map(|_| ()).unwrap_err().code(),
        engage::infra::error::ErrorCode::Unavailable
    );
    let mut conn = app.redis_connection().await;
    let pooled: bool = redis::cmd("EXISTS")
        .arg(app.keys().job("nosql", "j1"))
        .query_async(&mut *conn)
        .await
        .unwrap();
    assert!(!pooled, "Redis holds no job that SQL does not");
}

/// Deletes every key of this app's prefix, as a Redis that lost its data would have none.
pub(crate) async fn lose_redis(app: &TestApp) {
    let mut conn = crate::harness::redis(app).await;
    let pattern = format!("{}*", app.keys().prefix());
    for key in crate::harness::scan(app, &pattern).await {
        let () = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
}

pub(crate) async fn rebuild_jobs(app: &TestApp) {
    let run = engage::infra::recovery::Rebuild::hidden(app.infra(), "delayed jobs");
    app.jobs().rebuild(&run).await.unwrap();
}

#[tokio::test]
async fn pending_jobs_lost_with_redis_are_rebuilt_from_sql_and_still_run_on_time() {
    let app = TestApp::spawn().await;
    let recorder = Recorder::default();
    for topic in ["rebuilt-a", "rebuilt-b"] {
        app.jobs()
            .registry
            .register(topic, Arc::new(recorder.clone()), None);
    }
    app.jobs()
        .schedule(job("ran", "rebuilt-a", Duration::ZERO))
        .await
        .unwrap();
    until("ran", Duration::from_secs(5), || recorder.count("ran") == 1).await;
    for (id, topic, delay) in [
        ("a1", "rebuilt-a", 30),
        ("a2", "rebuilt-a", 30),
        ("b1", "rebuilt-b", 90),
        ("gone", "rebuilt-b", 30),
    ] {
        app.jobs()
            .schedule(job(id, topic, Duration::from_secs(delay)))
            .await
            .unwrap();
    }
    assert!(app.jobs().cancel("rebuilt-b", "gone").await.unwrap());
    let before = app.jobs().verify().await.unwrap();
    assert!(before.is_clean(), "{before:?}");

    lose_redis(&app).await;
    let lost = app.jobs().verify().await.unwrap();
    // Besides the evening job of notifications, pending from the start.
    assert_eq!(lost.drifted, 4, "{lost:?}");
    assert!(
        lost.examples
            .iter()
            .any(|e| e.contains("notifications.streak-at-risk")),
        "{lost:?}"
    );
    assert!(
        lost.examples
            .iter()
            .any(|e| e.contains("a1") && e.contains("not in Redis")),
        "{lost:?}"
    );

    rebuild_jobs(&app).await;
    let rebuilt = app.jobs().verify().await.unwrap();
    assert!(rebuilt.is_clean(), "{rebuilt:?}");
    assert_eq!(
        rebuilt.checked, 10,
        "three jobs, two topics and their dead counts, and notifications' evening job with \
         its topic and dead count: {rebuilt:?}"
    );
    // Starting over (no cursor) leaves the pending jobs alone.
    let mut conn = app.redis_connection().await;
    let () = redis::cmd("DEL")
        .arg(app.keys().recovery_cursors())
        .query_async(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    rebuild_jobs(&app).await;
    assert!(app.jobs().verify().await.unwrap().is_clean());

    app.advance_clock(chrono::Duration::seconds(31));
    until("a1 and a2 ran", Duration::from_secs(5), || {
        recorder.count("a1") == 1 && recorder.count("a2") == 1
    })
    .await;
    assert_eq!(recorder.count("b1"), 0, "not before its time");
    app.advance_clock(chrono::Duration::seconds(60));
    until("b1 ran", Duration::from_secs(5), || {
        recorder.count("b1") == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        (
            recorder.count("ran"),
            recorder.count("gone"),
            recorder.total()
        ),
        (1, 0, 4),
        "each job ran once; the ended ones not again"
    );
}

#[tokio::test]
async fn a_rebuild_removes_the_record_of_a_job_that_ended_instead_of_running_it_again() {
    let app = TestApp::spawn().await;
    let recorder = Recorder::default();
    app.jobs()
        .registry
        .register("ended", Arc::new(recorder.clone()), None);
    app.jobs()
        .schedule(job("e1", "ended", Duration::ZERO))
        .await
        .unwrap();
    let rows = pending_rows(&app, "ended").await;
    job_when(&app, "ended", "e1", Duration::from_secs(5), |job| {
        job.status == jobs::JobStatus::Done
    })
    .await;
    // The ending removes the row a moment after the job is marked done.
    eventually(async || pending_rows(&app, "ended").await.is_empty()).await;
    // The row comes back, as when the ending's SQL write failed.
    sqlx::query(
        "INSERT INTO pending_job (topic, job_id, seq, body, run_at_ms, attempts, max_attempts, \
         created_at_ms) VALUES ('ended', 'e1', $1, '{}', $2, 0, 10, $2)",
    )
    .bind(rows[0].3)
    .bind(rows[0].1)
    .execute(app.sql())
    .await
    .unwrap();
    let stale = app.jobs().verify().await.unwrap();
    assert_eq!(stale.drifted, 1, "{stale:?}");

    rebuild_jobs(&app).await;
    assert!(app.jobs().verify().await.unwrap().is_clean());
    assert!(pending_rows(&app, "ended").await.is_empty());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(recorder.count("e1"), 1, "not run again");
}
