//! The delay queue as a product, through GraphQL: who may use it, what is refused when
//! scheduled, topics with their counts, pause, and limits shared by every instance.

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use engage::{
    features::jobs::{handlers::Delivery, JobError, JobHandler},
    infra::auth::Role,
};
use serde_json::{json, Value};

use crate::harness::{eventually, eventually_within, first_code, global_id, TestApp};

const SCHEDULE: &str =
    "mutation($input: ScheduleJobInput!) { scheduleJob(input: $input) { jobId status } }";
const TOPIC: &str = "query($name: String!) { topic(name: $name) { id name paused perSecond concurrency counts { delayed ready running done dead paused } } }";

/// Starts each delivery's clock, holds it `hold`, and remembers how many ran at once.
#[derive(Clone, Default)]
struct Gauge {
    running: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    starts: Arc<Mutex<Vec<i64>>>,
    order: Arc<Mutex<Vec<String>>>,
    hold: Duration,
    fail: bool,
}

impl Gauge {
    fn holding(hold: Duration) -> Self {
        Self {
            hold,
            ..Self::default()
        }
    }

    fn started(&self) -> usize {
        self.starts.lock().unwrap().len()
    }
}

#[async_trait::async_trait]
impl JobHandler for Gauge {
    async fn handle(&self, delivery: &Delivery) -> Result<(), JobError> {
        self.order.lock().unwrap().push(delivery.id.clone());
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        self.starts
            .lock()
            .unwrap()
            .push(chrono::Utc::now().timestamp_millis());
        tokio::time::sleep(self.hold).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        if self.fail {
            return Err(JobError::Permanent("refused".into()));
        }
        Ok(())
    }
}

fn input(id: &str, topic: &str) -> Value {
    json!({ "input": { "id": id, "topic": topic, "data": {}, "delaySeconds": 0 } })
}

async fn schedule(app: &TestApp, token: &str, id: &str, topic: &str) {
    let data = app.data(Some(token), SCHEDULE, input(id, topic)).await;
    assert_eq!(data["scheduleJob"]["jobId"], id);
}

async fn topic(app: &TestApp, name: &str) -> Value {
    app.data(Some(&app.admin_token()), TOPIC, json!({ "name": name }))
        .await["topic"]
        .clone()
}

async fn mutate(app: &TestApp, token: &str, query: &str) -> Value {
    app.data(Some(token), query, json!({})).await
}

/// Registers a handler for `topic` that fails every job; answers it to count the calls.
fn fail_topic(app: &TestApp, topic: &str) -> Gauge {
    let failing = Gauge {
        fail: true,
        ..Gauge::default()
    };
    app.jobs()
        .registry
        .register(topic, Arc::new(failing.clone()), None);
    failing
}

#[tokio::test]
async fn a_service_may_use_the_queue_and_a_user_may_not() {
    let app = TestApp::spawn().await;
    app.jobs()
        .registry
        .register("svc", Arc::new(Gauge::default()), None);
    let service = app.token(7, Role::Service);
    schedule(&app, &service, "s1", "svc").await;
    let user = app.user_token(8);
    for query in [
        "query { topics { name } }",
        "query { topic(name: \"svc\") { name } }",
        "query { job(topic: \"svc\", id: \"s1\") { status } }",
        "mutation { pauseTopic(topic: \"svc\") { paused } }",
        "mutation { resumeTopic(topic: \"svc\") { paused } }",
        "mutation { setTopicLimits(topic: \"svc\", concurrency: 1) { concurrency } }",
        "mutation { cancelPendingJob(topic: \"svc\", id: \"s1\") { cancelled } }",
    ] {
        assert_eq!(
            first_code(&app.gql(Some(&user), query, json!({})).await),
            "FORBIDDEN",
            "{query}"
        );
        let answered = app.gql(Some(&service), query, json!({})).await;
        assert!(answered.get("errors").is_none(), "{query}: {answered}");
    }
    assert_eq!(
        first_code(&app.gql(Some(&user), SCHEDULE, input("u1", "svc")).await),
        "FORBIDDEN"
    );
}

#[tokio::test]
async fn a_job_nothing_could_deliver_is_refused_when_scheduled() {
    let app =
        TestApp::spawn_with(|config| config.jobs.callback_hosts = "hooks.example:443".into()).await;
    let admin = app.admin_token();
    assert_eq!(
        first_code(&app.gql(Some(&admin), SCHEDULE, input("n1", "nobody")).await),
        "NO_JOB_HANDLER"
    );
    let with_callback = |id: &str, url: &str| json!({ "input": { "id": id, "topic": "nobody", "data": {}, "delaySeconds": 60, "callbackUrl": url } });
    assert_eq!(
        first_code(
            &app.gql(
                Some(&admin),
                SCHEDULE,
                with_callback("n2", "https://evil.example/x")
            )
            .await
        ),
        "CALLBACK_HOST_NOT_ALLOWED"
    );
    assert_eq!(
        first_code(
            &app.gql(
                Some(&admin),
                SCHEDULE,
                with_callback("n3", "https://hooks.example:8443/x")
            )
            .await
        ),
        "CALLBACK_HOST_NOT_ALLOWED",
        "a host listed with its port is listed at that port only"
    );
    let listed = app
        .data(
            Some(&admin),
            SCHEDULE,
            with_callback("n4", "https://hooks.example/x"),
        )
        .await;
    assert_eq!(listed["scheduleJob"]["status"], "DELAYED");
    // Nothing refused was scheduled.
    let counts = &topic(&app, "nobody").await["counts"];
    assert_eq!(counts["delayed"], 1, "{counts}");
}

#[tokio::test]
async fn a_paused_topic_hands_out_nothing_and_holds_up_no_other() {
    let app = TestApp::spawn().await;
    let admin = app.admin_token();
    let (held, free) = (Gauge::default(), Gauge::default());
    app.jobs()
        .registry
        .register("held", Arc::new(held.clone()), None);
    app.jobs()
        .registry
        .register("free", Arc::new(free.clone()), None);
    let paused = mutate(
        &app,
        &admin,
        "mutation { pauseTopic(topic: \"held\") { name paused } }",
    )
    .await;
    assert_eq!(
        paused["pauseTopic"],
        json!({ "name": "held", "paused": true })
    );
    for n in 0..3 {
        schedule(&app, &admin, &format!("h{n}"), "held").await;
        schedule(&app, &admin, &format!("f{n}"), "free").await;
    }
    eventually(async || topic(&app, "free").await["counts"]["done"] == 3).await;
    eventually(async || topic(&app, "held").await["counts"]["paused"] == 3).await;
    let counts = topic(&app, "held").await["counts"].clone();
    assert_eq!(
        counts,
        json!({ "delayed": 0, "ready": 0, "running": 0, "done": 0, "dead": 0, "paused": 3 })
    );
    assert_eq!(held.started(), 0, "a paused topic hands out nothing");

    let resumed = mutate(
        &app,
        &admin,
        "mutation { resumeTopic(topic: \"held\") { paused } }",
    )
    .await;
    assert_eq!(resumed["resumeTopic"]["paused"], false);
    eventually(async || topic(&app, "held").await["counts"]["done"] == 3).await;
    assert_eq!(held.started(), 3);
}

#[tokio::test]
async fn a_running_job_of_a_topic_paused_meanwhile_finishes() {
    let app = TestApp::spawn().await;
    let admin = app.admin_token();
    let slow = Gauge::holding(Duration::from_millis(800));
    app.jobs()
        .registry
        .register("slow", Arc::new(slow.clone()), None);
    schedule(&app, &admin, "r1", "slow").await;
    eventually(async || slow.started() == 1).await;
    mutate(
        &app,
        &admin,
        "mutation { pauseTopic(topic: \"slow\") { paused } }",
    )
    .await;
    schedule(&app, &admin, "r2", "slow").await;
    eventually(async || topic(&app, "slow").await["counts"]["done"] == 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let counts = topic(&app, "slow").await["counts"].clone();
    assert_eq!(counts["paused"], 1, "{counts}");
    assert_eq!(slow.started(), 1);
}

#[tokio::test]
async fn two_instances_share_one_topics_concurrency_limit() {
    let app = TestApp::spawn().await;
    let sibling = app.spawn_sibling().await;
    let admin = app.admin_token();
    let gauge = Gauge::holding(Duration::from_millis(300));
    for instance in [&app, &sibling] {
        instance
            .jobs()
            .registry
            .register("narrow", Arc::new(gauge.clone()), None);
    }
    let limited = mutate(
        &app,
        &admin,
        "mutation { setTopicLimits(topic: \"narrow\", concurrency: 2) { perSecond concurrency } }",
    )
    .await;
    assert_eq!(
        limited["setTopicLimits"],
        json!({ "perSecond": null, "concurrency": 2 })
    );
    for n in 0..10 {
        schedule(&app, &admin, &format!("c{n}"), "narrow").await;
    }
    eventually(async || topic(&app, "narrow").await["counts"]["done"] == 10).await;
    assert_eq!(
        gauge.most.load(Ordering::SeqCst),
        2,
        "two at once, never more"
    );
}

#[tokio::test]
async fn two_instances_share_one_topics_rate_limit_and_a_limited_topic_holds_up_no_other() {
    let app = TestApp::spawn().await;
    let sibling = app.spawn_sibling().await;
    let admin = app.admin_token();
    let (gauge, other) = (Gauge::default(), Gauge::default());
    for instance in [&app, &sibling] {
        let registry = &instance.jobs().registry;
        registry.register("rated", Arc::new(gauge.clone()), None);
        registry.register("unrated", Arc::new(other.clone()), None);
    }
    mutate(
        &app,
        &admin,
        "mutation { setTopicLimits(topic: \"rated\", perSecond: 5) { perSecond } }",
    )
    .await;
    for n in 0..15 {
        schedule(&app, &admin, &format!("p{n}"), "rated").await;
    }
    for n in 0..20 {
        schedule(&app, &admin, &format!("o{n}"), "unrated").await;
    }
    eventually(async || topic(&app, "unrated").await["counts"]["done"] == 20).await;
    assert!(
        gauge.started() < 15,
        "the other topic finished while the limited one was still held back"
    );
    eventually(async || topic(&app, "rated").await["counts"]["done"] == 15).await;
    let mut starts = gauge.starts.lock().unwrap().clone();
    starts.sort_unstable();
    // Five a second, counted per clock second: any eleven starts span three seconds.
    for window in starts.windows(11) {
        assert!(
            window[10] - window[0] >= 900,
            "eleven jobs started within {} ms: {starts:?}",
            window[10] - window[0]
        );
    }
    // No limit again.
    let cleared = mutate(
        &app,
        &admin,
        "mutation { setTopicLimits(topic: \"rated\") { perSecond concurrency } }",
    )
    .await;
    assert_eq!(
        cleared["setTopicLimits"],
        json!({ "perSecond": null, "concurrency": null })
    );
    assert_eq!(
        first_code(
            &app.gql(
                Some(&admin),
                "mutation { setTopicLimits(topic: \"rated\", perSecond: 0) { perSecond } }",
                json!({})
            )
            .await
        ),
        "BAD_USER_INPUT"
    );
}

#[tokio::test]
async fn counts_follow_done_and_dead_jobs_and_a_requeue() {
    let app = TestApp::spawn().await;
    let admin = app.admin_token();
    fail_topic(&app, "counted");
    assert_eq!(topic(&app, "counted").await["counts"]["dead"], 0);
    for n in 0..2 {
        schedule(&app, &admin, &format!("d{n}"), "counted").await;
    }
    eventually(async || topic(&app, "counted").await["counts"]["dead"] == 2).await;
    let requeue = "mutation { requeueDeadJob(topic: \"counted\", id: \"d0\") { jobId } }";
    mutate(&app, &admin, requeue).await;
    // It dies again.
    eventually(async || topic(&app, "counted").await["counts"]["dead"] == 2).await;

    let listed = mutate(&app, &admin, "query { topics { name counts { dead } } }").await;
    assert!(
        listed["topics"]
            .as_array()
            .unwrap()
            .contains(&json!({ "name": "counted", "counts": { "dead": 2 } })),
        "{listed}"
    );
    assert_eq!(topic(&app, "never-used").await, Value::Null);
}

#[tokio::test]
async fn a_topic_is_a_node() {
    let app = TestApp::spawn().await;
    let admin = app.admin_token();
    mutate(
        &app,
        &admin,
        "mutation { pauseTopic(topic: \"nodes\") { id } }",
    )
    .await;
    let id = global_id("Topic", "nodes");
    assert_eq!(topic(&app, "nodes").await["id"], id);
    let node = app
        .data(
            Some(&admin),
            "query($id: ID!) { node(id: $id) { id ... on Topic { name paused } } }",
            json!({ "id": id }),
        )
        .await;
    assert_eq!(
        node["node"],
        json!({ "id": id, "name": "nodes", "paused": true })
    );
    let user = app
        .gql(
            Some(&app.user_token(3)),
            "query($id: ID!) { node(id: $id) { id } }",
            json!({ "id": id }),
        )
        .await;
    assert_eq!(first_code(&user), "FORBIDDEN");
}

#[tokio::test]
async fn pause_limits_and_dead_counts_lost_with_redis_are_rebuilt_from_sql() {
    let app = TestApp::spawn().await;
    let admin = app.admin_token();
    fail_topic(&app, "kept");
    schedule(&app, &admin, "k1", "kept").await;
    eventually(async || topic(&app, "kept").await["counts"]["dead"] == 1).await;
    let later =
        json!({ "id": "k2", "topic": "kept", "data": {}, "delaySeconds": 3600, "priority": 7 });
    schedule_with(&app, later).await;
    mutate(
        &app,
        &admin,
        "mutation { pauseTopic(topic: \"kept\") { paused } }",
    )
    .await;
    mutate(
        &app,
        &admin,
        "mutation { setTopicLimits(topic: \"kept\", perSecond: 3, concurrency: 4) { paused } }",
    )
    .await;
    let before = app.jobs().verify().await.unwrap();
    assert!(before.is_clean(), "{before:?}");

    crate::jobs::lose_redis(&app).await;
    let lost = app.jobs().verify().await.unwrap();
    assert_eq!(
        lost.drifted, 4,
        "settings, dead count, a job, and notifications' evening job: {lost:?}"
    );
    crate::jobs::rebuild_jobs(&app).await;
    let rebuilt = app.jobs().verify().await.unwrap();
    assert!(rebuilt.is_clean(), "{rebuilt:?}");
    let kept = topic(&app, "kept").await;
    assert_eq!(kept["paused"], true);
    assert_eq!(kept["perSecond"], 3);
    assert_eq!(kept["concurrency"], 4);
    assert_eq!(kept["counts"]["dead"], 1);
    let job = app.job("kept", "k2", "priority status").await;
    assert_eq!(job, json!({ "priority": 7, "status": "DELAYED" }));
    let listed = mutate(&app, &admin, "query { topics { name } }").await;
    assert!(
        listed["topics"]
            .as_array()
            .unwrap()
            .contains(&json!({ "name": "kept" })),
        "{listed}"
    );
}

async fn schedule_with(app: &TestApp, input: Value) -> Value {
    app.data(
        Some(&app.admin_token()),
        "mutation($input: ScheduleJobInput!) { scheduleJob(input: $input) { jobId priority } }",
        json!({ "input": input }),
    )
    .await["scheduleJob"]
        .clone()
}

#[tokio::test]
async fn due_jobs_run_by_priority_then_due_time_across_instances() {
    let app = TestApp::spawn().await;
    let sibling = app.spawn_sibling().await;
    let admin = app.admin_token();
    let gauge = Gauge::default();
    for instance in [&app, &sibling] {
        instance
            .jobs()
            .registry
            .register("ranked", Arc::new(gauge.clone()), None);
    }
    mutate(
        &app,
        &admin,
        "mutation { pauseTopic(topic: \"ranked\") { paused } }",
    )
    .await;
    mutate(
        &app,
        &admin,
        "mutation { setTopicLimits(topic: \"ranked\", concurrency: 1) { concurrency } }",
    )
    .await;
    for (id, priority) in [("low", 0), ("mid-1", 500), ("top", 1000), ("mid-2", 500)] {
        let input = json!({ "id": id, "topic": "ranked", "data": {}, "delaySeconds": 0, "priority": priority });
        assert_eq!(schedule_with(&app, input).await["priority"], priority);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    eventually(async || topic(&app, "ranked").await["counts"]["paused"] == 4).await;
    mutate(
        &app,
        &admin,
        "mutation { resumeTopic(topic: \"ranked\") { paused } }",
    )
    .await;
    eventually(async || topic(&app, "ranked").await["counts"]["done"] == 4).await;
    assert_eq!(
        *gauge.order.lock().unwrap(),
        ["top", "mid-1", "mid-2", "low"],
        "higher priority first, then the earlier due time"
    );
    for priority in [-1, 1001] {
        let input = json!({ "id": "bad", "topic": "ranked", "data": {}, "delaySeconds": 0, "priority": priority });
        assert_eq!(
            first_code(
                &app.gql(Some(&admin), SCHEDULE, json!({ "input": input }))
                    .await
            ),
            "BAD_USER_INPUT"
        );
    }
}

const SCHEDULE_MANY: &str =
    "mutation($inputs: [ScheduleJobInput!]!) { scheduleJobs(inputs: $inputs) { jobId topic status } }";

#[tokio::test]
async fn schedule_jobs_adds_a_batch_or_refuses_it_whole() {
    let app = TestApp::spawn().await;
    let admin = app.admin_token();
    app.handle_topic("bulk-a");
    app.handle_topic("bulk-b");
    let later = |id: &str, topic: &str| json!({ "id": id, "topic": topic, "data": {}, "delaySeconds": 3600 });
    let first = app
        .data(
            Some(&admin),
            SCHEDULE_MANY,
            json!({ "inputs": [later("a1", "bulk-a"), later("b1", "bulk-b"), later("a2", "bulk-a")] }),
        )
        .await;
    assert_eq!(
        first["scheduleJobs"],
        json!([
            { "jobId": "a1", "topic": "bulk-a", "status": "DELAYED" },
            { "jobId": "b1", "topic": "bulk-b", "status": "DELAYED" },
            { "jobId": "a2", "topic": "bulk-a", "status": "DELAYED" },
        ])
    );
    // One refused job refuses the batch: nothing of it is added.
    let refused = app
        .gql(
            Some(&admin),
            SCHEDULE_MANY,
            json!({ "inputs": [later("a3", "bulk-a"), later("x1", "nobody")] }),
        )
        .await;
    assert_eq!(first_code(&refused), "NO_JOB_HANDLER");
    assert!(
        refused["errors"][0]["message"]
            .as_str()
            .unwrap()
            .starts_with("inputs[1]:"),
        "{refused}"
    );
    assert_eq!(topic(&app, "bulk-a").await["counts"]["delayed"], 2);
    // A pending id answers the pending job.
    let again = app
        .data(
            Some(&admin),
            SCHEDULE_MANY,
            json!({ "inputs": [later("a1", "bulk-a"), later("a3", "bulk-a")] }),
        )
        .await;
    assert_eq!(again["scheduleJobs"][0]["jobId"], "a1");
    assert_eq!(topic(&app, "bulk-a").await["counts"]["delayed"], 3);

    let thousand: Vec<Value> = (0..1000)
        .map(|n| later(&format!("m{n}"), "bulk-b"))
        .collect();
    let big = app
        .data(
            Some(&admin),
            "mutation($inputs: [ScheduleJobInput!]!) { scheduleJobs(inputs: $inputs) { jobId } }",
            json!({ "inputs": thousand }),
        )
        .await;
    assert_eq!(big["scheduleJobs"].as_array().unwrap().len(), 1000);
    assert_eq!(topic(&app, "bulk-b").await["counts"]["delayed"], 1001);
    let too_many: Vec<Value> = (0..1001)
        .map(|n| later(&format!("t{n}"), "bulk-b"))
        .collect();
    let refused = app
        .gql(
            Some(&admin),
            "mutation($inputs: [ScheduleJobInput!]!) { scheduleJobs(inputs: $inputs) { jobId } }",
            json!({ "inputs": too_many }),
        )
        .await;
    assert_eq!(first_code(&refused), "BAD_USER_INPUT");
    let verified = app.jobs().verify().await.unwrap();
    assert!(verified.is_clean(), "{verified:?}");
}

#[tokio::test]
async fn a_delayed_job_is_promoted_or_delayed_again_and_others_are_refused() {
    let app = TestApp::spawn().await;
    let admin = app.admin_token();
    let gauge = Gauge::default();
    app.jobs()
        .registry
        .register("moved", Arc::new(gauge.clone()), None);
    for id in ["p1", "p2"] {
        let input = json!({ "id": id, "topic": "moved", "data": {}, "delaySeconds": 3600 });
        schedule_with(&app, input).await;
    }
    let changed = mutate(
        &app,
        &admin,
        "mutation { changeJobDelay(topic: \"moved\", id: \"p2\", delaySeconds: 7200) { status runAt } }",
    )
    .await;
    let run_at =
        chrono::DateTime::parse_from_rfc3339(changed["changeJobDelay"]["runAt"].as_str().unwrap())
            .unwrap();
    let from_now = run_at.timestamp_millis() - app.now_ms();
    assert!((7_190_000..=7_200_000).contains(&from_now), "{from_now}");
    let promoted = mutate(
        &app,
        &admin,
        "mutation { promoteJob(topic: \"moved\", id: \"p1\") { status } }",
    )
    .await;
    assert_eq!(promoted["promoteJob"]["status"], "DELAYED");
    eventually(async || topic(&app, "moved").await["counts"]["done"] == 1).await;
    assert_eq!(*gauge.order.lock().unwrap(), ["p1"]);
    let verified = app.jobs().verify().await.unwrap();
    assert!(verified.is_clean(), "{verified:?}");
    let pending: i64 = sqlx::query_scalar(
        "SELECT run_at_ms FROM pending_job WHERE topic = 'moved' AND job_id = 'p2'",
    )
    .fetch_one(app.sql())
    .await
    .unwrap();
    assert_eq!(
        pending,
        run_at.timestamp_millis(),
        "SQL follows the new due time"
    );

    let done = app
        .gql(
            Some(&admin),
            "mutation { promoteJob(topic: \"moved\", id: \"p1\") { status } }",
            json!({}),
        )
        .await;
    assert_eq!(first_code(&done), "CONFLICT");
    let unknown = app
        .gql(Some(&admin), "mutation { changeJobDelay(topic: \"moved\", id: \"nope\", delaySeconds: 5) { status } }", json!({}))
        .await;
    assert_eq!(first_code(&unknown), "NOT_FOUND");
}

#[tokio::test]
async fn finished_jobs_are_cleaned_and_dead_ones_requeued_in_bulk() {
    let app = TestApp::spawn().await;
    let admin = app.admin_token();
    let failing = fail_topic(&app, "failing");
    app.handle_topic("passing");
    for n in 0..3 {
        schedule(&app, &admin, &format!("f{n}"), "failing").await;
        schedule(&app, &admin, &format!("p{n}"), "passing").await;
    }
    eventually(async || topic(&app, "failing").await["counts"]["dead"] == 3).await;
    eventually(async || topic(&app, "passing").await["counts"]["done"] == 3).await;

    let clean = |topic: &str, state: &str, older: i64| {
        format!("mutation {{ cleanJobs(topic: \"{topic}\", state: {state}, olderThanSeconds: {older}) }}")
    };
    assert_eq!(
        mutate(&app, &admin, &clean("passing", "DONE", 3600)).await["cleanJobs"],
        0
    );
    assert_eq!(
        mutate(&app, &admin, &clean("passing", "DONE", 0)).await["cleanJobs"],
        3
    );
    let listed = mutate(
        &app,
        &admin,
        "query { jobs(topic: \"passing\", status: DONE) { edges { node { jobId } } } }",
    )
    .await;
    assert_eq!(listed["jobs"]["edges"], json!([]));
    assert_eq!(
        first_code(
            &app.gql(Some(&admin), &clean("passing", "DELAYED", 0), json!({}))
                .await
        ),
        "BAD_USER_INPUT"
    );

    let requeued = mutate(
        &app,
        &admin,
        "mutation { requeueDeadJobs(topic: \"failing\") }",
    )
    .await;
    assert_eq!(requeued["requeueDeadJobs"], 3);
    // They run again, and die again.
    eventually(async || failing.started() == 6).await;
    eventually(async || topic(&app, "failing").await["counts"]["dead"] == 3).await;
    assert_eq!(
        mutate(&app, &admin, &clean("failing", "DEAD", 0)).await["cleanJobs"],
        3
    );
    assert_eq!(topic(&app, "failing").await["counts"]["dead"], 0);
    let verified = app.jobs().verify().await.unwrap();
    assert!(verified.is_clean(), "{verified:?}");
}

/// Fails every delivery with a retry, remembering when each started.
#[derive(Clone, Default)]
struct Flaky {
    starts: Arc<Mutex<Vec<i64>>>,
}

#[async_trait::async_trait]
impl JobHandler for Flaky {
    async fn handle(&self, _: &Delivery) -> Result<(), JobError> {
        self.starts
            .lock()
            .unwrap()
            .push(chrono::Utc::now().timestamp_millis());
        Err(JobError::Retry("not yet".into()))
    }
}

#[tokio::test]
async fn a_jobs_own_fixed_backoff_replaces_the_ladder() {
    let app = TestApp::spawn().await;
    let flaky = Flaky::default();
    app.jobs()
        .registry
        .register("backoff", Arc::new(flaky.clone()), None);
    let input = json!({ "id": "b1", "topic": "backoff", "data": {}, "delaySeconds": 0, "maxAttempts": 3,
        "backoff": { "kind": "FIXED", "delaySeconds": 1 } });
    schedule_with(&app, input).await;
    eventually(async || topic(&app, "backoff").await["counts"]["dead"] == 1).await;
    let starts = flaky.starts.lock().unwrap().clone();
    assert_eq!(starts.len(), 3);
    for pair in starts.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            (900..5000).contains(&gap),
            "a second apart, not the ladder's 15 s: {starts:?}"
        );
    }
    let admin = app.admin_token();
    for bad in [
        json!({ "kind": "FIXED", "delaySeconds": 0 }),
        json!({ "kind": "EXPONENTIAL", "delaySeconds": 10, "maxDelaySeconds": 5 }),
        json!({ "kind": "LADDER", "delaySeconds": -1 }),
    ] {
        let input = json!({ "id": "b2", "topic": "backoff", "data": {}, "delaySeconds": 0, "backoff": bad });
        assert_eq!(
            first_code(
                &app.gql(Some(&admin), SCHEDULE, json!({ "input": input }))
                    .await
            ),
            "BAD_USER_INPUT",
            "{bad}"
        );
    }
}

/// What a receiver saw of each callback: headers and body.
type Seen = Arc<Mutex<Vec<(axum::http::HeaderMap, String)>>>;

/// A receiver that verifies signatures as docs/queue.md shows: the HMAC-SHA256 of
/// `<timestamp>.<body>` under the shared secret, a timestamp within five minutes, and no
/// signature seen before. It answers 503 with `Retry-After: 120` to the job `later`.
async fn verifying_receiver(secret: &'static str) -> (u16, Seen) {
    use hmac::{Hmac, Mac};
    let seen: Seen = Arc::default();
    let signatures: Arc<Mutex<std::collections::HashSet<String>>> = Arc::default();
    let log = seen.clone();
    let router = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: String| {
            let (log, signatures) = (log.clone(), signatures.clone());
            async move {
                log.lock().unwrap().push((headers.clone(), body.clone()));
                let header = |name: &str| {
                    headers
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string()
                };
                let (timestamp, signature) =
                    (header("x-engage-timestamp"), header("x-engage-signature"));
                let Ok(sent_at) = timestamp.parse::<i64>() else {
                    return (axum::http::StatusCode::UNAUTHORIZED, "no timestamp").into_response();
                };
                if (chrono::Utc::now().timestamp() - sent_at).abs() > 300 {
                    return (axum::http::StatusCode::UNAUTHORIZED, "too old").into_response();
                }
                let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
                mac.update(format!("{timestamp}.{body}").as_bytes());
                let given = signature
                    .strip_prefix("v1=")
                    .and_then(|h| hex::decode(h).ok());
                if given.is_none_or(|given| mac.verify_slice(&given).is_err()) {
                    return (axum::http::StatusCode::UNAUTHORIZED, "bad signature").into_response();
                }
                if !signatures.lock().unwrap().insert(signature) {
                    return (axum::http::StatusCode::CONFLICT, "replayed").into_response();
                }
                if header("x-engage-job-id") == "answered" {
                    return (
                        axum::http::StatusCode::OK,
                        [("content-type", "application/json")],
                        r#"{"receipt":"r-1"}"#,
                    )
                        .into_response();
                }
                if header("x-engage-job-id") == "later" {
                    return (
                        axum::http::StatusCode::SERVICE_UNAVAILABLE,
                        [("retry-after", "120")],
                        "busy",
                    )
                        .into_response();
                }
                (axum::http::StatusCode::OK, "ok").into_response()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, router).await });
    (port, seen)
}

use axum::response::IntoResponse;

async fn callback_job(app: &TestApp, id: &str, port: u16) {
    let input = json!({ "id": id, "topic": "signed", "data": { "order": 7 }, "delaySeconds": 0,
        "callbackUrl": format!("http://127.0.0.1:{port}/hook") });
    schedule_with(app, input).await;
}

async fn job_of(app: &TestApp, id: &str) -> Value {
    app.job("signed", id, "status attempts runAt lastError")
        .await
}

#[tokio::test]
async fn callbacks_are_signed_and_a_receiver_refuses_forgeries_and_replays() {
    let (port, seen) = verifying_receiver("s3cret").await;
    let app = TestApp::spawn_with(move |config| {
        config.jobs.callback_hosts = format!("127.0.0.1:{port}");
        config.jobs.callback_secret = Some("s3cret".into());
    })
    .await;
    callback_job(&app, "paid", port).await;
    eventually(async || job_of(&app, "paid").await["status"] == "DONE").await;

    // The request as sent, replayed, is refused; so is a body changed under its signature.
    let (headers, body) = seen.lock().unwrap()[0].clone();
    assert_eq!(body, r#"{"order":7}"#);
    let client = reqwest::Client::new();
    let send = |body: String| {
        let mut request = client.post(format!("http://127.0.0.1:{port}/hook"));
        for name in [
            "x-engage-timestamp",
            "x-engage-signature",
            "x-engage-job-id",
        ] {
            request = request.header(name, headers.get(name).unwrap().to_str().unwrap());
        }
        request.body(body).send()
    };
    assert_eq!(send(body.clone()).await.unwrap().status(), 409, "a replay");
    assert_eq!(
        send(r#"{"order":8}"#.into()).await.unwrap().status(),
        401,
        "a forged body"
    );

    // Signed with another secret: refused, and retried on the ladder.
    let other = TestApp::spawn_with(move |config| {
        config.jobs.callback_hosts = format!("127.0.0.1:{port}");
        config.jobs.callback_secret = Some("guess".into());
    })
    .await;
    let input = json!({ "id": "forged", "topic": "signed", "data": {}, "delaySeconds": 0,
        "callbackUrl": format!("http://127.0.0.1:{port}/hook") });
    schedule_with(&other, input).await;
    eventually(async || {
        other
            .data(
                Some(&other.admin_token()),
                "{ job(topic: \"signed\", id: \"forged\") { attempts } }",
                json!({}),
            )
            .await["job"]["attempts"]
            == 1
    })
    .await;
}

#[tokio::test]
async fn a_callbacks_retry_after_is_honoured_within_the_ladder() {
    let (port, _seen) = verifying_receiver("k").await;
    let app = TestApp::spawn_with(move |config| {
        config.jobs.callback_hosts = format!("127.0.0.1:{port}");
        config.jobs.callback_secret = Some("k".into());
    })
    .await;
    callback_job(&app, "later", port).await;
    // The take counts the attempt while the delivery runs; the refusal then delays it.
    eventually(async || {
        let job = job_of(&app, "later").await;
        job["attempts"] == 1 && job["status"] != "RUNNING"
    })
    .await;
    let job = job_of(&app, "later").await;
    assert_eq!(job["status"], "DELAYED", "{job}");
    let run_at = chrono::DateTime::parse_from_rfc3339(job["runAt"].as_str().unwrap()).unwrap();
    let wait = run_at.timestamp_millis() - app.now_ms();
    assert!(
        (110_000..=120_000).contains(&wait),
        "Retry-After: 120, not the ladder's 15 s: {wait}"
    );
}

const PROGRESS: &str = "mutation($id: ID!, $lease: String!, $progress: JSON!) { reportJobProgress(topic: \"progress\", id: $id, leaseToken: $lease, progress: $progress) { progress } }";

/// Reports progress through the API while it runs, with its own lease and with another.
struct Reporting {
    url: String,
    token: String,
    answers: Arc<Mutex<Vec<Value>>>,
}

#[async_trait::async_trait]
impl JobHandler for Reporting {
    async fn handle(&self, delivery: &Delivery) -> Result<(), JobError> {
        let client = reqwest::Client::new();
        for (lease, pct) in [(delivery.lease.as_str(), 50), ("someone-else:1", 99)] {
            let answer: Value = client
                .post(&self.url)
                .bearer_auth(&self.token)
                .json(&json!({ "query": PROGRESS, "variables": { "id": delivery.id, "lease": lease, "progress": { "pct": pct } } }))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            self.answers.lock().unwrap().push(answer);
        }
        Ok(())
    }
}

async fn details(app: &TestApp, topic: &str, id: &str) -> Value {
    app.job(
        topic,
        id,
        "status progress result runs nextRunAt createdAt startedAt finishedAt \
         history { state attempt error } last: history(first: 1) { state }",
    )
    .await
}

#[tokio::test]
async fn progress_is_fenced_by_the_lease_and_a_job_keeps_its_times_and_history() {
    let app = TestApp::spawn().await;
    let answers: Arc<Mutex<Vec<Value>>> = Arc::default();
    let reporting = Reporting {
        url: app.url("/graphql"),
        token: app.token(11, Role::Service),
        answers: answers.clone(),
    };
    app.jobs()
        .registry
        .register("progress", Arc::new(reporting), None);
    let admin = app.admin_token();
    schedule(&app, &admin, "g1", "progress").await;
    let details = async || details(&app, "progress", "g1").await;
    eventually(async || details().await["status"] == "DONE").await;
    let answers = answers.lock().unwrap().clone();
    assert_eq!(
        answers[0]["data"]["reportJobProgress"]["progress"],
        json!({ "pct": 50 }),
        "{answers:?}"
    );
    assert_eq!(
        first_code(&answers[1]),
        "CONFLICT",
        "another lease may not: {answers:?}"
    );

    let job = details().await;
    assert_eq!(job["progress"], json!({ "pct": 50 }));
    assert_eq!(job["runs"], 1);
    assert_eq!(job["nextRunAt"], Value::Null);
    for at in ["createdAt", "startedAt", "finishedAt"] {
        assert!(job[at].is_string(), "{at}: {job}");
    }
    assert_eq!(
        job["history"],
        json!([
            { "state": "DELAYED", "attempt": 0, "error": null },
            { "state": "RUNNING", "attempt": 1, "error": null },
            { "state": "DONE", "attempt": 1, "error": null },
        ])
    );
    assert_eq!(job["last"], json!([{ "state": "DONE" }]));
    // The delivery ended: its lease fences nothing any more, and no token (an ended
    // delivery's lease is stored empty) passes for it.
    for lease in ["x", ""] {
        let late = app
            .gql(
                Some(&admin),
                PROGRESS,
                json!({ "id": "g1", "lease": lease, "progress": 1 }),
            )
            .await;
        assert_eq!(first_code(&late), "CONFLICT", "lease {lease:?}: {late}");
    }
}

#[tokio::test]
async fn a_callbacks_json_answer_is_the_jobs_result() {
    let (port, _seen) = verifying_receiver("r").await;
    let app = TestApp::spawn_with(move |config| {
        config.jobs.callback_hosts = format!("127.0.0.1:{port}");
        config.jobs.callback_secret = Some("r".into());
    })
    .await;
    callback_job(&app, "answered", port).await;
    eventually(async || job_of(&app, "answered").await["status"] == "DONE").await;
    let job = details(&app, "signed", "answered").await;
    assert_eq!(job["result"], json!({ "receipt": "r-1" }), "{job}");
}

#[tokio::test]
async fn retention_keeps_as_many_done_and_dead_jobs_as_the_job_says() {
    let app = TestApp::spawn().await;
    let admin = app.admin_token();
    app.handle_topic("kept-done");
    fail_topic(&app, "kept-dead");
    for n in 0..3 {
        let done = json!({ "id": format!("d{n}"), "topic": "kept-done", "data": {}, "delaySeconds": 0, "removeOnComplete": 1 });
        schedule_with(&app, done).await;
        let dead = json!({ "id": format!("x{n}"), "topic": "kept-dead", "data": {}, "delaySeconds": 0, "removeOnFail": 1 });
        schedule_with(&app, dead).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    eventually(async || topic(&app, "kept-done").await["counts"]["done"] == 3).await;
    let listed = async |topic: &str, status: &str| {
        app.data(
            Some(&admin),
            "query($t: String!, $s: JobStatus!) { jobs(topic: $t, status: $s) { edges { node { jobId } } } }",
            json!({ "t": topic, "s": status }),
        )
        .await["jobs"]["edges"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(listed("kept-done", "DONE").await, 1);
    eventually(async || topic(&app, "kept-dead").await["counts"]["dead"] == 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(listed("kept-dead", "DEAD").await, 1);
    assert_eq!(topic(&app, "kept-dead").await["counts"]["dead"], 1);
    let verified = app.jobs().verify().await.unwrap();
    assert!(verified.is_clean(), "{verified:?}");
}

#[tokio::test]
async fn job_changed_pushes_each_transition_of_a_job() {
    let app = TestApp::spawn().await;
    app.handle_topic("live");
    let admin = app.admin_token();
    let mut socket = crate::harness::subscribe(
        &app,
        Some(&admin),
        "subscription { jobChanged(topic: \"live\", id: \"l1\") { jobId status attempts } }",
    )
    .await;
    let mut other = crate::harness::subscribe(
        &app,
        Some(&app.token(4, Role::Service)),
        "subscription { jobChanged(topic: \"live\") { jobId } }",
    )
    .await;
    // Subscribed once the first change is seen: schedule a job the filtered one ignores.
    schedule(&app, &admin, "l0", "live").await;
    let first = crate::harness::next_data(&mut other).await;
    assert_eq!(first["jobChanged"]["jobId"], "l0", "{first}");

    let input = json!({ "id": "l1", "topic": "live", "data": {}, "delaySeconds": 1 });
    schedule_with(&app, input).await;
    let mut seen = Vec::new();
    loop {
        let data = crate::harness::next_data(&mut socket).await;
        assert_eq!(data["jobChanged"]["jobId"], "l1", "{data}");
        let status = data["jobChanged"]["status"].as_str().unwrap().to_string();
        seen.push(status.clone());
        if status == "DONE" {
            break;
        }
    }
    assert_eq!(
        seen.first().map(String::as_str),
        Some("DELAYED"),
        "{seen:?}"
    );
    assert!(seen.len() >= 2, "{seen:?}");
}

#[tokio::test]
async fn a_user_may_not_watch_jobs() {
    let app = TestApp::spawn().await;
    let mut socket = crate::harness::subscribe(
        &app,
        Some(&app.user_token(9)),
        "subscription { jobChanged(topic: \"live\") { jobId } }",
    )
    .await;
    let message = crate::harness::next_message(&mut socket).await;
    assert_eq!(message["type"], "error", "{message}");
    assert_eq!(
        message["payload"][0]["extensions"]["code"], "FORBIDDEN",
        "{message}"
    );
}

#[tokio::test]
async fn a_dead_job_keeps_its_priority_when_requeued() {
    let app = TestApp::spawn().await;
    let admin = app.admin_token();
    fail_topic(&app, "urgent");
    let input =
        json!({ "id": "u1", "topic": "urgent", "data": {}, "delaySeconds": 0, "priority": 900 });
    schedule_with(&app, input).await;
    eventually(async || topic(&app, "urgent").await["counts"]["dead"] == 1).await;
    let requeued = mutate(
        &app,
        &admin,
        "mutation { requeueDeadJob(topic: \"urgent\", id: \"u1\") { priority } }",
    )
    .await;
    assert_eq!(requeued["requeueDeadJob"]["priority"], 900);
}

/// Fails its first `failures` deliveries with a retry whose error is `error`, then succeeds.
#[derive(Clone)]
struct FailsFirst {
    failures: Arc<AtomicUsize>,
    error: &'static str,
}

#[async_trait::async_trait]
impl JobHandler for FailsFirst {
    async fn handle(&self, _: &Delivery) -> Result<(), JobError> {
        let failing = self
            .failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                left.checked_sub(1)
            });
        match failing {
            Ok(_) => Err(JobError::Retry(self.error.into())),
            Err(_) => Ok(()),
        }
    }
}

/// An error text with the characters that could pass for a history's own separators.
const TRICKY_ERROR: &str = r#"bad input [1],["two"] \ ]"#;

async fn history(app: &TestApp, topic: &str, id: &str) -> Vec<Value> {
    details(app, topic, id).await["history"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test]
async fn a_history_keeps_its_newest_twenty_events_and_errors_as_they_were() {
    let app = TestApp::spawn().await;
    let failing = FailsFirst {
        failures: Arc::new(AtomicUsize::new(11)),
        error: TRICKY_ERROR,
    };
    app.jobs()
        .registry
        .register("long", Arc::new(failing), None);
    let input = json!({ "id": "h1", "topic": "long", "data": {}, "delaySeconds": 0, "maxAttempts": 12,
        "backoff": { "kind": "FIXED", "delaySeconds": 1 } });
    schedule_with(&app, input).await;
    eventually_within("twelve attempts", Duration::from_secs(60), async || {
        details(&app, "long", "h1").await["status"] == "DONE"
    })
    .await;
    // 25 events: scheduled, eleven runs each retried, the twelfth run and its end. The
    // five oldest are forgotten.
    let events = history(&app, "long", "h1").await;
    assert_eq!(events.len(), 20, "{events:?}");
    assert_eq!(
        events[0],
        json!({ "state": "RUNNING", "attempt": 3, "error": null })
    );
    for pair in events[..18].chunks(2) {
        assert_eq!(pair[0]["state"], "RUNNING", "{events:?}");
        assert_eq!(pair[1]["state"], "DELAYED", "{events:?}");
        assert_eq!(pair[1]["error"], TRICKY_ERROR, "{events:?}");
    }
    assert_eq!(
        events[18..],
        [
            json!({ "state": "RUNNING", "attempt": 12, "error": null }),
            json!({ "state": "DONE", "attempt": 12, "error": null }),
        ]
    );
}

#[tokio::test]
async fn a_history_stored_by_an_earlier_version_reads_and_is_trimmed_as_it_grows() {
    let app = TestApp::spawn().await;
    let admin = app.admin_token();
    app.handle_topic("older");
    let input = json!({ "id": "o1", "topic": "older", "data": {}, "delaySeconds": 3600 });
    schedule_with(&app, input).await;
    // A full history as the earlier version wrote it: an error's "]" unescaped.
    let error = serde_json::to_string(TRICKY_ERROR).unwrap();
    let earlier: Vec<String> = (1..=20)
        .map(|n| format!(r#"[{},"DELAYED",{n},{error}]"#, 1_700_000_000_000_i64 + n))
        .collect();
    let mut conn = app.redis_connection().await;
    let () = redis::cmd("HSET")
        .arg(app.keys().job("older", "o1"))
        .arg("history")
        .arg(format!("[{}]", earlier.join(",")))
        .query_async(&mut *conn)
        .await
        .unwrap();
    assert_eq!(history(&app, "older", "o1").await.len(), 20);

    let cancelled = mutate(
        &app,
        &admin,
        "mutation { cancelJob(topic: \"older\", id: \"o1\") }",
    );
    assert_eq!(cancelled.await["cancelJob"], true);
    let events = history(&app, "older", "o1").await;
    assert_eq!(events.len(), 20, "{events:?}");
    assert_eq!(
        events[0],
        json!({ "state": "DELAYED", "attempt": 2, "error": TRICKY_ERROR })
    );
    assert_eq!(events[18]["attempt"], 20);
    assert_eq!(events[19]["state"], "CANCELLED");
}

#[tokio::test]
async fn a_running_jobs_history_ends_with_its_delivery_and_keeps_it_when_cancelled() {
    let app = TestApp::spawn().await;
    let admin = app.admin_token();
    let slow = Gauge::holding(Duration::from_secs(10));
    app.jobs()
        .registry
        .register("held", Arc::new(slow.clone()), None);
    schedule(&app, &admin, "w1", "held").await;
    eventually(async || slow.started() == 1).await;
    let job = details(&app, "held", "w1").await;
    assert_eq!(job["status"], "RUNNING", "{job}");
    assert_eq!(
        job["history"],
        json!([
            { "state": "DELAYED", "attempt": 0, "error": null },
            { "state": "RUNNING", "attempt": 1, "error": null },
        ])
    );
    // More events than a job keeps, or fewer than none, is bad input.
    for first in [21, -1] {
        let query = format!(
            "{{ job(topic: \"held\", id: \"w1\") {{ history(first: {first}) {{ state }} }} }}"
        );
        let answer = app.gql(Some(&admin), &query, json!({})).await;
        assert_eq!(first_code(&answer), "BAD_USER_INPUT", "{first}: {answer}");
    }
    let cancel = "mutation { cancelJob(topic: \"held\", id: \"w1\") }";
    assert_eq!(mutate(&app, &admin, cancel).await["cancelJob"], true);
    let states: Vec<Value> = history(&app, "held", "w1")
        .await
        .iter()
        .map(|event| event["state"].clone())
        .collect();
    assert_eq!(states, ["DELAYED", "RUNNING", "CANCELLED"]);
}

#[tokio::test]
async fn a_delivery_an_earlier_version_recorded_when_it_began_is_in_the_history_once() {
    let app = TestApp::spawn().await;
    let admin = app.admin_token();
    let slow = Gauge::holding(Duration::from_millis(1500));
    app.jobs()
        .registry
        .register("handed", Arc::new(slow.clone()), None);
    schedule(&app, &admin, "e1", "handed").await;
    eventually(async || slow.started() == 1).await;
    // An earlier version's take stored the delivery's event as it handed the job out.
    let key = app.keys().job("handed", "e1");
    let mut conn = app.redis_connection().await;
    let (started, stored): (String, String) = redis::cmd("HMGET")
        .arg(&key)
        .arg(&["started", "history"])
        .query_async(&mut *conn)
        .await
        .unwrap();
    let earlier = format!(
        " {},[{started},\"RUNNING\",1,\"\"]]",
        stored.strip_suffix(']').unwrap()
    );
    let () = redis::cmd("HSET")
        .arg(&key)
        .arg("history")
        .arg(earlier)
        .query_async(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    let running = ["DELAYED", "RUNNING"];
    let states = async || -> Vec<Value> {
        let events = history(&app, "handed", "e1").await;
        events.iter().map(|event| event["state"].clone()).collect()
    };
    assert_eq!(states().await, running);
    eventually(async || details(&app, "handed", "e1").await["status"] == "DONE").await;
    assert_eq!(states().await, ["DELAYED", "RUNNING", "DONE"]);
}
