//! Faults: Redis and SQL going away under the running app, two instances side by side, and a
//! WebSocket client that never reads. What must hold: requests fail fast with `UNAVAILABLE`
//! (never a hang, a 5xx or a panic), the app recovers by itself, and every acknowledged write
//! reaches SQL exactly once.
//!
//! Outages are made with [`Plug`], a TCP proxy in front of the shared Redis or PostgreSQL
//! that the test can pull out: its connections drop and new ones are closed at once, as when
//! the server is stopped. The shared servers themselves are never touched.

use std::time::{Duration, Instant};

use engage::infra::redis::RedisMode;
use serde_json::{json, Value};
use sqlx::Row;

use crate::{
    harness::{
        eventually_within, first_code, local_id, next_data, streams_settled, subscribe, unlimited,
        Socket, TestApp,
    },
    plug::Plug,
};

const LIKE: &str = "mutation($id: ID!) { likeRemark(remarkId: $id) { likeCount changed } }";
const SIGN_IN: &str = "mutation { signIn { alreadySigned } }";

/// Where a `redis://` or `postgres://` URL points (`host:port`), and the URL with that part
/// replaced by `replacement`.
fn split_authority(url: &str) -> (String, impl Fn(&str) -> String + '_) {
    let start = url.find("://").map_or(0, |i| i + 3);
    let end = url[start..]
        .find(['/', '?'])
        .map_or(url.len(), |i| start + i);
    let host_start = url[start..end].rfind('@').map_or(start, |i| start + i + 1);
    let host_port = url[host_start..end].to_string();
    (host_port, move |replacement: &str| {
        format!("{}{replacement}{}", &url[..host_start], &url[end..])
    })
}

/// A plug in front of the server a URL names, and the URL that goes through it.
pub(crate) async fn plugged(url: &str) -> (Plug, String) {
    let (upstream, replace) = split_authority(url);
    let plug = Plug::to(&upstream).await.unwrap();
    let through = replace(&plug.addr.to_string());
    (plug, through)
}

/// An app without per-client limits whose Redis (one node) goes through a plug, and the plug.
pub(crate) async fn unpluggable_app() -> (Plug, TestApp) {
    let (plug, redis_url) = plugged(&crate::harness::node_redis_url()).await;
    let app = TestApp::spawn_with(|config| {
        unlimited_retrying_soon(config);
        config.redis_url = redis_url;
        config.redis_mode = engage::infra::redis::RedisMode::Shared;
    })
    .await;
    (plug, app)
}

/// No limits, and consumers that retry within half a second of a fault.
fn unlimited_retrying_soon(config: &mut engage::app::settings::Settings) {
    unlimited(config);
    config.consumer_max_backoff_ms = 500;
}

/// POSTs a request and returns the HTTP status with the body.
async fn post(app: &TestApp, token: &str, query: &str, variables: Value) -> (u16, Value) {
    let response = app
        .http
        .post(app.url("/graphql"))
        .bearer_auth(token)
        .json(&json!({ "query": query, "variables": variables }))
        .send()
        .await
        .expect("the server answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON body"))
}

async fn readyz(app: &TestApp) -> (u16, Value) {
    let response = app.http.get(app.url("/readyz")).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

/// Vote rows per event id: (rows, distinct event ids).
async fn vote_log_counts(app: &TestApp) -> (i64, i64) {
    let row = sqlx::query(
        "SELECT COUNT(*) AS n, COUNT(DISTINCT event_id) AS distinct_events FROM vote_log",
    )
    .fetch_one(app.sql())
    .await
    .unwrap();
    (row.get("n"), row.get("distinct_events"))
}

async fn archive_settled(app: &TestApp) {
    let streams: Vec<String> = (0..app.remark_shards())
        .map(|s| app.keys().vote_stream(s))
        .collect();
    streams_settled(app, &streams, "archive").await;
}

/// The next `likeCountChanged` count on a socket.
async fn next_count(socket: &mut Socket) -> i64 {
    next_data(socket).await["likeCountChanged"]["likeCount"]
        .as_i64()
        .expect("a count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_a_redis_outage_writes_fail_fast_with_unavailable_and_everything_recovers_alone() {
    let (plug, redis_url) = plugged(&crate::harness::node_redis_url()).await;
    let app = TestApp::spawn_with(|config| {
        unlimited_retrying_soon(config);
        config.redis_url = redis_url;
        config.redis_mode = RedisMode::Shared;
    })
    .await;
    let remark = app.create_remark(1).await;
    let token = app.user_token(2);
    let (_, liked) = post(&app, &token, LIKE, json!({ "id": remark })).await;
    assert_eq!(liked["data"]["likeRemark"]["likeCount"], 1);
    let query = format!(
        "subscription {{ likeCountChanged(remarkIds: [\"{remark}\"]) {{ remarkId likeCount }} }}"
    );
    let mut socket = subscribe(&app, None, &query).await;
    assert_eq!(next_count(&mut socket).await, 1, "current count first");

    plug.unplug();
    for (query, variables) in [(LIKE, json!({ "id": remark })), (SIGN_IN, json!({}))] {
        let mut request = app
            .http
            .post(app.url("/graphql"))
            .bearer_auth(app.user_token(3))
            .json(&json!({ "query": query, "variables": variables }))
            .build()
            .unwrap();
        // The answer must come long before this; a hang would fail here.
        *request.timeout_mut() = Some(Duration::from_secs(15));
        let response = app.http.execute(request).await.expect("an answer, no hang");
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap();
        assert!(status < 500, "no 5xx during the outage: {status} {body}");
        assert_eq!(first_code(&body), "UNAVAILABLE", "{body}");
    }
    let (status, ready) = readyz(&app).await;
    assert_eq!((status, ready["redis"].as_str()), (503, Some("down")));

    plug.plug_in();
    // The pool replaces its dead connections; the next request succeeds.
    eventually_within(
        "a like after Redis came back",
        Duration::from_secs(10),
        || async {
            let (_, body) = post(&app, &app.user_token(3), LIKE, json!({ "id": remark })).await;
            body["data"]["likeRemark"]["likeCount"] == 2
        },
    )
    .await;
    // The hub resubscribed by itself: the subscriber resumes with the current count, then
    // sees the next change.
    let mut seen = next_count(&mut socket).await;
    let (_, body) = post(&app, &app.user_token(4), LIKE, json!({ "id": remark })).await;
    assert_eq!(body["data"]["likeRemark"]["likeCount"], 3, "{body}");
    while seen != 3 {
        seen = next_count(&mut socket).await;
    }
    archive_settled(&app).await;
    assert_eq!(
        vote_log_counts(&app).await,
        (3, 3),
        "each acknowledged like archived once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_long_redis_outage_the_pubsub_hub_resubscribes_within_two_seconds_and_subscribers_resume(
) {
    let shared = crate::harness::node_redis_url();
    let (plug, redis_url) = plugged(&shared).await;
    let app = TestApp::spawn_with(|config| {
        unlimited_retrying_soon(config);
        config.redis_url = redis_url;
        config.redis_mode = RedisMode::Shared;
    })
    .await;
    let remark = app.create_remark(1).await;
    let query = format!(
        "subscription {{ likeCountChanged(remarkIds: [\"{remark}\"]) {{ remarkId likeCount }} }}"
    );
    let mut socket = subscribe(&app, None, &query).await;
    assert_eq!(next_count(&mut socket).await, 0);

    // A long outage: the hub's back-off has grown by the time Redis returns.
    plug.unplug();
    tokio::time::sleep(Duration::from_secs(8)).await;
    plug.plug_in();
    let channel = app
        .keys()
        .like_count_channel(local_id(&remark), app.remark_shards());
    let client = redis::Client::open(shared.as_str()).unwrap();
    eventually_within("the hub subscribed again", Duration::from_secs(2), || {
        let (client, channel) = (client.clone(), channel.clone());
        async move {
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            let (_, listeners): (String, i64) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(&channel)
                .query_async(&mut conn)
                .await
                .unwrap();
            listeners == 1
        }
    })
    .await;
    // The subscriber resumes: it is sent the current count again, then the next change.
    assert_eq!(next_count(&mut socket).await, 0);
    let (_, body) = post(&app, &app.user_token(2), LIKE, json!({ "id": remark })).await;
    assert_eq!(body["data"]["likeRemark"]["likeCount"], 1, "{body}");
    let mut seen = 0;
    while seen != 1 {
        seen = next_count(&mut socket).await;
    }
}

/// The database behind a plug (PostgreSQL), or held by an exclusive lock (SQLite, which has
/// no server to lose).
enum SqlOutage {
    Plug(Plug),
    Sqlite(String),
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_an_sql_outage_likes_keep_answering_and_the_archive_catches_up_exactly_once() {
    let postgres = std::env::var("TEST_DATABASE_URL")
        .ok()
        .filter(|u| u.starts_with("postgres"));
    let plug = match &postgres {
        Some(url) => Some(Plug::to(&split_authority(url).0).await.unwrap()),
        None => None,
    };
    let plug_addr = plug.as_ref().map(|p| p.addr.to_string());
    let app = TestApp::spawn_with(|config| {
        unlimited_retrying_soon(config);
        if let Some(addr) = plug_addr {
            let through = split_authority(&config.database_url).1(&addr);
            config.database_url = through;
        }
    })
    .await;
    let outage = match plug {
        Some(plug) => SqlOutage::Plug(plug),
        None => SqlOutage::Sqlite(app.config().database_url.clone()),
    };
    let remark = app.create_remark(1).await;
    let voters: Vec<i64> = (100..140).collect();
    // These voters are known before the outage ...
    for &voter in &voters {
        app.data(Some(&app.user_token(voter)), "{ viewer { id } }", json!({}))
            .await;
    }

    let mut sqlite_lock = None;
    match &outage {
        SqlOutage::Plug(plug) => plug.unplug(),
        SqlOutage::Sqlite(url) => {
            use sqlx::Connection;
            let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
            sqlx::query("BEGIN EXCLUSIVE")
                .execute(&mut conn)
                .await
                .unwrap();
            sqlite_lock = Some(conn);
        }
    }
    let mut acknowledged = 0;
    // ... and so is a user this instance meets for the first time during the outage.
    for &voter in voters.iter().chain([&999]) {
        let (status, body) =
            post(&app, &app.user_token(voter), LIKE, json!({ "id": remark })).await;
        assert!(status < 500, "{status} {body}");
        assert!(body.get("errors").is_none(), "likes keep answering: {body}");
        acknowledged += 1;
        assert_eq!(body["data"]["likeRemark"]["likeCount"], acknowledged);
    }
    if let SqlOutage::Plug(_) = &outage {
        // Still in rotation: the writes above are served without SQL.
        let (status, ready) = readyz(&app).await;
        assert_eq!(
            (status, ready["sql"].as_str()),
            (200, Some("down")),
            "{ready}"
        );
        assert_eq!(
            (ready["redis"].as_str(), ready["status"].as_str()),
            (Some("ok"), Some("degraded"))
        );
    }
    match &outage {
        SqlOutage::Plug(plug) => plug.plug_in(),
        SqlOutage::Sqlite(_) => {
            let mut conn = sqlite_lock.take().unwrap();
            sqlx::query("ROLLBACK").execute(&mut conn).await.unwrap();
        }
    }
    archive_settled(&app).await;
    assert_eq!(
        vote_log_counts(&app).await,
        (acknowledged, acknowledged),
        "each acknowledged like archived exactly once"
    );
    let (status, _) = readyz(&app).await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_archive_each_like_once_and_each_sees_the_others_events() {
    let first = TestApp::spawn_with(unlimited_retrying_soon).await;
    let second = first.spawn_sibling().await;
    let remark = first.create_remark(1).await;
    let query = format!(
        "subscription {{ likeCountChanged(remarkIds: [\"{remark}\"]) {{ remarkId likeCount }} }}"
    );
    let mut on_first = subscribe(&first, None, &query).await;
    let mut on_second = subscribe(&second, None, &query).await;
    assert_eq!(next_count(&mut on_first).await, 0);
    assert_eq!(next_count(&mut on_second).await, 0);

    let likes = 200;
    let mut handles = Vec::new();
    for voter in 0..likes {
        let app = if voter % 2 == 0 { &first } else { &second };
        let (http, url, token) = (
            app.http.clone(),
            app.url("/graphql"),
            app.user_token(1000 + voter),
        );
        let remark = remark.clone();
        handles.push(tokio::spawn(async move {
            let body: Value = http
                .post(url)
                .bearer_auth(token)
                .json(&json!({ "query": LIKE, "variables": { "id": remark } }))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            body["data"]["likeRemark"]["changed"] == true
        }));
    }
    for handle in handles {
        assert!(handle.await.unwrap(), "every like acknowledged");
    }
    // Each subscriber ends on the total, whichever instance took each like.
    for socket in [&mut on_first, &mut on_second] {
        let mut seen = 0;
        while seen != likes {
            seen = next_count(socket).await;
        }
    }
    archive_settled(&first).await;
    assert_eq!(vote_log_counts(&first).await, (likes, likes));
    let delivered_to: i64 = sqlx::query("SELECT like_count FROM remarks WHERE id = $1")
        .bind(local_id(&remark))
        .fetch_one(first.sql())
        .await
        .unwrap()
        .get("like_count");
    assert_eq!(
        delivered_to, likes,
        "the rolled-up count saw each event once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_never_reads_gets_the_latest_value_not_a_backlog() {
    let app = TestApp::spawn_with(unlimited_retrying_soon).await;
    let remark = app.create_remark(1).await;
    let remark_id: i64 = local_id(&remark);
    let query = format!(
        "subscription {{ likeCountChanged(remarkIds: [\"{remark}\"]) {{ remarkId likeCount }} }}"
    );
    let mut socket = subscribe(&app, None, &query).await;
    assert_eq!(next_count(&mut socket).await, 0);

    // Ten thousand changes published while the client reads nothing, as the scripts publish
    // (made-up values; the pub/sub connection may be cut by Redis's output-buffer limit
    // meanwhile, then the hub resyncs from the real count) ...
    let channel = app
        .keys()
        .like_count_channel(remark_id, app.remark_shards());
    let mut conn = crate::harness::redis(&app).await;
    let published: Vec<i64> = (1_000..11_000).collect();
    for chunk in published.chunks(1_000) {
        let mut pipe = redis::pipe();
        for value in chunk {
            pipe.cmd(app.keys().publish_command())
                .arg(&channel)
                .arg(value)
                .ignore();
        }
        let () = pipe.query_async(&mut conn).await.unwrap();
    }
    // ... then one real like, whose count (1) is the latest value either way.
    let (_, body) = post(&app, &app.user_token(2), LIKE, json!({ "id": remark })).await;
    assert_eq!(body["data"]["likeRemark"]["likeCount"], 1, "{body}");
    // The subscriber, reading at last, gets a handful of coalesced updates ending on the
    // latest value, not one message per change.
    let mut received = 0;
    let mut seen = 0;
    while seen != 1 {
        seen = next_count(&mut socket).await;
        received += 1;
    }
    assert!(
        received < 1_000,
        "{received} messages queued for one slow subscriber"
    );
}

/// A client that stops reading while its subscriptions are sent thousands of changes: the
/// server stops writing to its socket instead of queueing for it (the updates it could not
/// send are counted), and once the client reads again every subscription ends on the latest
/// count of every remark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_that_stops_reading_is_sent_the_latest_counts_once_it_drains() {
    use futures::{SinkExt, StreamExt};
    use std::collections::HashMap;
    use tokio_tungstenite::tungstenite::{client::IntoClientRequest, Message};

    const SUBSCRIPTIONS: usize = 20;
    let app = TestApp::spawn_with(|config| {
        unlimited_retrying_soon(config);
        config.max_subscriptions_per_connection = SUBSCRIPTIONS;
    })
    .await;
    let mut remarks = Vec::new();
    for author in 1..=100 {
        remarks.push(app.create_remark(author).await);
    }
    let deferred = || async {
        let text = app.get_text("/metrics").await;
        text.lines()
            .find_map(|line| line.strip_prefix("engage_ws_deferred_updates_total "))
            .map_or(0.0, |n| n.trim().parse::<f64>().unwrap())
    };
    let deferred_before = deferred().await;

    // A socket with a small receive buffer, so that the kernel holds little for it.
    let request = app.ws_url().into_client_request().unwrap();
    let authority = request.uri().authority().unwrap().to_string();
    let tcp = tokio::net::TcpSocket::new_v4().unwrap();
    tcp.set_recv_buffer_size(4096).unwrap();
    let stream = tcp.connect(authority.parse().unwrap()).await.unwrap();
    let mut request = request;
    request.headers_mut().insert(
        "sec-websocket-protocol",
        "graphql-transport-ws".parse().unwrap(),
    );
    let (mut socket, _) = tokio_tungstenite::client_async(request, stream)
        .await
        .unwrap();
    let send = |value: Value| Message::text(value.to_string());
    socket
        .send(send(json!({ "type": "connection_init" })))
        .await
        .unwrap();
    let query =
        "subscription($ids: [ID!]!) { likeCountChanged(remarkIds: $ids) { remarkId likeCount } }";
    for id in 0..SUBSCRIPTIONS {
        let payload = json!({ "query": query, "variables": { "ids": remarks } });
        let message = json!({ "id": id.to_string(), "type": "subscribe", "payload": payload });
        socket.send(send(message)).await.unwrap();
    }
    let mut last: HashMap<(String, String), i64> = HashMap::new();
    let read = |message: Value, last: &mut HashMap<(String, String), i64>| {
        if message["type"] == "next" {
            let change = &message["payload"]["data"]["likeCountChanged"];
            let key = (
                message["id"].as_str().unwrap().to_string(),
                change["remarkId"].as_str().unwrap().to_string(),
            );
            last.insert(key, change["likeCount"].as_i64().unwrap());
        }
    };
    tokio::time::timeout(Duration::from_secs(30), async {
        while last.len() < SUBSCRIPTIONS * remarks.len() {
            if let Message::Text(text) = socket.next().await.unwrap().unwrap() {
                read(serde_json::from_str(&text).unwrap(), &mut last);
            }
        }
    })
    .await
    .expect("every subscription's first counts");

    // Five seconds of changes on every remark while the client reads nothing.
    let channels: Vec<String> = remarks
        .iter()
        .map(|remark| {
            app.keys()
                .like_count_channel(local_id(remark), app.remark_shards())
        })
        .collect();
    let conn = crate::harness::redis(&app).await;
    // One command a channel: on a cluster the channels live in different slots.
    let publish = |value: i64| {
        futures::future::join_all(channels.iter().map(|channel| {
            let mut conn = conn.clone();
            let mut command = redis::cmd(app.keys().publish_command());
            command.arg(channel).arg(value);
            async move { command.query_async::<i64>(&mut conn).await.unwrap() }
        }))
    };
    let flooding = Instant::now();
    let mut round = 0;
    while flooding.elapsed() < Duration::from_secs(5) {
        round += 1;
        publish(1_000 + round).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Then one real like on each remark (made-up values may be re-read as the real ones).
    tokio::time::sleep(Duration::from_millis(200)).await;
    for remark in &remarks {
        let (_, body) = post(&app, &app.user_token(2), LIKE, json!({ "id": remark })).await;
        assert_eq!(body["data"]["likeRemark"]["likeCount"], 1, "{body}");
    }
    assert!(
        deferred().await > deferred_before,
        "the server went on writing to a socket that was not read"
    );

    // Reading again, the client ends on the latest count of every remark, everywhere.
    let mut received = 0;
    tokio::time::timeout(Duration::from_secs(60), async {
        while !last.values().all(|count| *count == 1) {
            if let Message::Text(text) = socket.next().await.unwrap().unwrap() {
                read(serde_json::from_str(&text).unwrap(), &mut last);
                received += 1;
            }
        }
    })
    .await
    .expect("every subscription ends on the latest counts");
    // Left to the kernel's buffers, the five seconds would have been about 100,000
    // updates (every coalescing window's count, times 100 remarks and 20 subscriptions).
    assert!(received < 60_000, "{received} messages after the flood");
}

/// Two instances divide the vote streams between them by leases; when one stops, the other
/// takes its streams over, and every like of the whole run is archived exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_divide_the_streams_by_lease_and_one_takes_over_when_the_other_stops() {
    use engage::infra::streams::leases;
    let first = TestApp::spawn_with(|config| {
        unlimited(config);
        config.remarks.like_shards = Some(4);
    })
    .await;
    let mut second = first.spawn_sibling().await;
    let holders = || async {
        leases::holders(first.infra(), "vote-archive")
            .await
            .unwrap()
    };
    let ids = (first.instance_id(), second.instance_id());
    // Within two rounds of balancing, each holds two of the four streams.
    let mut divided = false;
    for _ in 0..100 {
        let held = holders().await;
        let by = |id: &str| held.values().filter(|holder| *holder == id).count();
        if held.len() == 4 && by(&ids.0) == 2 && by(&ids.1) == 2 {
            divided = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(divided, "not divided: {:?}", holders().await);

    // Likes on remarks of every shard, through both instances, before and after one stops.
    let mut remarks = Vec::new();
    for author in 0..8 {
        remarks.push(first.create_remark(500 + author).await);
    }
    let like_all = |app: &TestApp, voters: std::ops::Range<i64>| {
        let requests: Vec<_> = voters
            .flat_map(|voter| remarks.iter().map(move |remark| (voter, remark.clone())))
            .map(|(voter, remark)| {
                let (http, url, token) =
                    (app.http.clone(), app.url("/graphql"), app.user_token(voter));
                async move {
                    let body: Value = http
                        .post(url)
                        .bearer_auth(token)
                        .json(&json!({ "query": LIKE, "variables": { "id": remark } }))
                        .send()
                        .await
                        .unwrap()
                        .json()
                        .await
                        .unwrap();
                    assert!(body.get("errors").is_none(), "{body}");
                }
            })
            .collect();
        futures::future::join_all(requests)
    };
    like_all(&first, 1000..1010).await;
    like_all(&second, 2000..2010).await;
    second.shutdown().await.unwrap();
    like_all(&first, 3000..3010).await;

    // The stopped instance gave its leases back: the first holds all four at once.
    let mut taken = false;
    for _ in 0..100 {
        let held = holders().await;
        if held.len() == 4 && held.values().all(|holder| *holder == ids.0) {
            taken = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(taken, "not taken over: {:?}", holders().await);
    let expected = 30 * remarks.len() as i64;
    let pool = first.sql().clone();
    crate::harness::eventually(async || {
        let row = sqlx::query("SELECT COUNT(*) AS n, COUNT(DISTINCT event_id) AS d FROM vote_log")
            .fetch_one(&pool)
            .await
            .unwrap();
        let (n, d): (i64, i64) = (row.get("n"), row.get("d"));
        assert_eq!(n, d, "a vote archived twice");
        n == expected
    })
    .await;
}

/// A backlog spread over many streams reaches the archive as one read of up to a batch per
/// stream; it is written in transactions of at most a batch, so no statement binds more
/// parameters than SQLite takes (16 streams × 1,000 votes × 8 columns would be 128,000).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_in_sixteen_streams_is_archived_in_batches_sql_accepts() {
    use engage::{features::remarks::events::VoteEvent, infra::streams::Event};
    let app = TestApp::spawn_with(|config| {
        config.remarks.like_shards = Some(16);
    })
    .await;
    let keys = &app.keys();
    let votes: i64 = 6_000;
    let mut pipe = redis::pipe();
    for voter in 0..votes {
        let remark = 1_000 + voter % 32;
        let event = VoteEvent {
            remark_id: remark,
            voter_id: voter,
            author_id: 1,
            liked: true,
            like_count: voter / 32 + 1,
            at_ms: app.now_ms(),
            first_vote: true,
        };
        let add = pipe
            .cmd("XADD")
            .arg(keys.vote_stream_of(remark, 16))
            .arg("*");
        for (field, value) in event.to_fields() {
            add.arg(field).arg(value);
        }
        add.ignore();
    }
    let mut conn = crate::harness::redis(&app).await;
    let () = pipe.query_async(&mut conn).await.unwrap();
    let pool = app.sql().clone();
    crate::harness::eventually(async || {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM vote_log")
            .fetch_one(&pool)
            .await
            .unwrap();
        row.get::<i64, _>("n") == votes
    })
    .await;
}
