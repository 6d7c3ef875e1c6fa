//! Remarks and likes: atomic votes, the archive, merged like info, recommended lists and
//! live counts.

use std::{collections::HashSet, sync::atomic::Ordering, time::Duration};

use engage::infra::auth::Role;
use rand::seq::SliceRandom;
use serde_json::{json, Value};
use sqlx::Row;

use crate::harness::{
    first_code, global_id, local_id, next_data, subscribe, subscribe_as, unlimited, TestApp,
};

const CREATE_REMARK: &str =
    "mutation($input: CreateRemarkInput!) { createRemark(input: $input) { id score content images author { id } likeCount likedByMe } }";
const LIKE: &str =
    "mutation($id: ID!) { likeRemark(remarkId: $id) { remarkId likeCount liked changed } }";
const UNLIKE: &str =
    "mutation($id: ID!) { unlikeRemark(remarkId: $id) { remarkId likeCount liked changed } }";

/// An app without the per-IP and per-user limits, for tests that fire many requests.
async fn busy_app() -> TestApp {
    TestApp::spawn_with(|config| {
        // A thousand users behind one test client: no per-address limit of any kind.
        unlimited(config);
        config.consumer_max_backoff_ms = 300;
    })
    .await
}

async fn create_item(app: &TestApp) -> String {
    app.create_item().await
}

async fn vote_log_rows(app: &TestApp) -> i64 {
    sqlx::query("SELECT COUNT(*) AS n FROM vote_log")
        .fetch_one(app.sql())
        .await
        .unwrap()
        .get("n")
}

/// Waits until every vote stream's archive group has nothing pending or undelivered.
async fn archive_settled(app: &TestApp) {
    let streams: Vec<String> = (0..app.remark_shards())
        .map(|s| app.keys().vote_stream(s))
        .collect();
    crate::harness::streams_settled(app, &streams, "archive").await;
}

#[tokio::test]
async fn a_remark_is_created_once_per_user_per_item_with_checked_input() {
    let app = TestApp::spawn().await;
    let item = create_item(&app).await;
    let token = app.user_token(21);
    let input = json!({ "input": { "itemId": item, "score": 4, "content": "Good tea", "images": ["https://img.example/1.jpg"] } });
    let data = app.data(Some(&token), CREATE_REMARK, input.clone()).await;
    assert_eq!(data["createRemark"]["score"], 4);
    assert_eq!(
        data["createRemark"]["images"],
        json!(["https://img.example/1.jpg"])
    );
    assert_eq!(data["createRemark"]["author"]["id"], global_id("User", 21));
    assert_eq!(data["createRemark"]["likeCount"], 0);

    assert_eq!(
        first_code(&app.gql(Some(&token), CREATE_REMARK, input).await),
        "CONFLICT"
    );
    for bad in [
        json!({ "itemId": item, "score": 6, "content": "x" }),
        json!({ "itemId": item, "score": 3, "content": "   " }),
        json!({ "itemId": item, "score": 3, "content": "x".repeat(2001) }),
        json!({ "itemId": item, "score": 3, "content": "x", "images": ["ftp://nope"] }),
        json!({ "itemId": item, "score": 3, "content": "x", "images": vec!["https://a/b.png"; 10] }),
    ] {
        let body = app
            .gql(
                Some(&app.user_token(22)),
                CREATE_REMARK,
                json!({ "input": bad }),
            )
            .await;
        assert_eq!(first_code(&body), "BAD_USER_INPUT", "{body}");
    }
    let body = app
        .gql(
            Some(&token),
            CREATE_REMARK,
            json!({ "input": { "itemId": "999", "score": 3, "content": "x" } }),
        )
        .await;
    assert_eq!(first_code(&body), "NOT_FOUND");
    let body = app
        .gql(
            None,
            CREATE_REMARK,
            json!({ "input": { "itemId": item, "score": 3, "content": "x" } }),
        )
        .await;
    assert_eq!(first_code(&body), "UNAUTHENTICATED");
}

#[tokio::test]
async fn remarks_page_newest_first_with_merged_like_info() {
    let app = busy_app().await;
    let item = create_item(&app).await;
    let mut ids = Vec::new();
    for author in 1..=25 {
        ids.push(app.create_remark_on(author, &item).await);
    }
    app.vote(100, &ids[24], true).await;
    app.vote(101, &ids[24], true).await;

    let query =
        "query($item: ID!, $after: String) { remarks(itemId: $item, first: 20, after: $after) {
        edges { cursor node { id likeCount likedByMe } } pageInfo { hasNextPage endCursor } } }";
    let viewer = app.user_token(100);
    let page = app
        .data(Some(&viewer), query, json!({ "item": item }))
        .await["remarks"]
        .clone();
    let edges = page["edges"].as_array().unwrap();
    assert_eq!(edges.len(), 20);
    assert_eq!(
        edges[0]["node"],
        json!({ "id": ids[24], "likeCount": 2, "likedByMe": true })
    );
    assert_eq!(edges[1]["node"]["likedByMe"], false);
    assert_eq!(page["pageInfo"]["hasNextPage"], true);

    let rest = app
        .data(
            None,
            query,
            json!({ "item": item, "after": page["pageInfo"]["endCursor"] }),
        )
        .await["remarks"]
        .clone();
    let rest_ids: Vec<&str> = rest["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        rest_ids,
        ids[..5]
            .iter()
            .rev()
            .map(String::as_str)
            .collect::<Vec<_>>()
    );
    assert_eq!(rest["pageInfo"]["hasNextPage"], false);

    let anonymous = app.data(None, query, json!({ "item": item })).await;
    assert_eq!(
        anonymous["remarks"]["edges"][0]["node"],
        json!({ "id": ids[24], "likeCount": 2, "likedByMe": false })
    );
}

#[tokio::test]
async fn a_page_of_twenty_remarks_with_a_viewer_costs_one_redis_round_trip() {
    // Periodic background work (delay-queue ticks, the season check) shares the pool: slow
    // it down so that only the page is counted.
    let app = TestApp::spawn_with(|config| {
        config.jobs.jobs_tick_ms = 600_000;
        config.leaderboard.rollover_check_seconds = 3600;
    })
    .await;
    let item = create_item(&app).await;
    for author in 1..=20 {
        app.create_remark_on(author, &item).await;
    }
    let viewer = app.user_token(7);
    let query = "query($item: ID!) { remarks(itemId: $item, first: 20) { edges { node { id likeCount likedByMe author { name } } } } }";
    // The authors are remembered once their first sights are written, and the first page
    // reads their names; it is the viewer's first sight. Background work of the instance
    // (the feed fan-out of the new remarks, the first sights) uses the same pool: let it
    // finish so that only the page is counted.
    let users = app.users();
    crate::harness::eventually(async || users.first_sights_queued() == 0).await;
    app.data(Some(&viewer), query, json!({ "item": item }))
        .await;
    crate::harness::streams_settled(&app, &[app.keys().remark_stream()], "fanout").await;
    crate::harness::eventually(async || users.first_sights_queued() == 0).await;
    let before = app.redis_round_trips();
    let page = app
        .data(Some(&viewer), query, json!({ "item": item }))
        .await;
    let after = app.redis_round_trips();
    assert_eq!(page["remarks"]["edges"].as_array().unwrap().len(), 20);
    assert_eq!(after - before, 1, "one pipeline for the whole page");
}

#[tokio::test]
async fn a_page_costs_one_sql_query_and_none_while_cached_until_a_new_remark() {
    let app = TestApp::spawn_with(|config| config.remarks.remark_page_cache_ms = 60_000).await;
    let item = create_item(&app).await;
    let first = app.create_remark_on(11, &item).await;
    let second = app.create_remark_on(12, &item).await;
    app.vote(13, &first, true).await;
    let reads = || app.remarks().caches.page_reads.load(Ordering::SeqCst);
    let viewer = app.user_token(13);
    async fn page(app: &TestApp, viewer: &str, item: &str) -> Value {
        let query = "query($item: ID!) { remarks(itemId: $item) { edges { node { id likeCount likedByMe author { id } } } } }";
        app.data(Some(viewer), query, json!({ "item": item })).await["remarks"]["edges"].clone()
    }

    let before = reads();
    let edges = page(&app, &viewer, &item).await;
    assert_eq!(reads() - before, 1, "remarks and authors in one query");
    assert_eq!(
        edges,
        json!([
            { "node": { "id": second, "likeCount": 0, "likedByMe": false, "author": { "id": global_id("User", 12) } } },
            { "node": { "id": first, "likeCount": 1, "likedByMe": true, "author": { "id": global_id("User", 11) } } },
        ])
    );
    app.vote(13, &second, true).await;
    let edges = page(&app, &viewer, &item).await;
    assert_eq!(reads() - before, 1, "served from the page cache");
    assert_eq!(
        edges[0]["node"]["likeCount"], 1,
        "counts are live, not cached"
    );

    let third = app.create_remark_on(14, &item).await;
    let edges = page(&app, &viewer, &item).await;
    assert_eq!(reads() - before, 2, "a new remark makes the page stale");
    assert_eq!(edges[0]["node"]["id"], json!(third));
}

#[tokio::test]
async fn likes_are_idempotent_and_unknown_remarks_are_not_found() {
    let app = busy_app().await;
    let item = create_item(&app).await;
    let remark = app.create_remark_on(1, &item).await;
    assert_eq!(
        app.vote(2, &remark, true).await,
        json!({ "remarkId": remark, "likeCount": 1, "liked": true, "changed": true })
    );
    assert_eq!(
        app.vote(2, &remark, true).await,
        json!({ "remarkId": remark, "likeCount": 1, "liked": true, "changed": false })
    );
    assert_eq!(app.vote(3, &remark, true).await["likeCount"], 2);
    assert_eq!(
        app.vote(2, &remark, false).await,
        json!({ "remarkId": remark, "likeCount": 1, "liked": false, "changed": true })
    );
    assert_eq!(app.vote(2, &remark, false).await["changed"], false);
    let body = app
        .gql(Some(&app.user_token(2)), LIKE, json!({ "id": "424242" }))
        .await;
    assert_eq!(first_code(&body), "NOT_FOUND");
    let body = app.gql(None, LIKE, json!({ "id": remark })).await;
    assert_eq!(first_code(&body), "UNAUTHENTICATED");

    let likers = app
        .data(None, "query($item: ID!) { remarks(itemId: $item) { edges { node { likers(first: 5) { id } } } } }", json!({ "item": item }))
        .await;
    assert_eq!(
        likers["remarks"]["edges"][0]["node"]["likers"],
        json!([{ "id": global_id("User", 3) }])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_votes_keep_counts_relations_and_archive_exact() {
    let app = busy_app().await;
    let item = create_item(&app).await;
    let mut remarks = Vec::new();
    for author in 1..=10 {
        remarks.push(app.create_remark_on(1000 + author, &item).await);
    }
    let mut votes: Vec<(i64, String, bool)> = Vec::new();
    let mut rng = rand::rng();
    for user in 1..=100 {
        for remark in &remarks {
            votes.push((user, remark.clone(), rand::Rng::random_bool(&mut rng, 0.7)));
        }
    }
    votes.shuffle(&mut rng);
    let app = std::sync::Arc::new(app);
    let tasks: Vec<_> = votes
        .into_iter()
        .map(|(user, remark, like)| {
            let app = app.clone();
            tokio::spawn(async move { app.vote(user, &remark, like).await })
        })
        .collect();
    let mut changed = 0;
    for task in tasks {
        if task.await.unwrap()["changed"] == true {
            changed += 1;
        }
    }

    // Every count equals the relations that say "liked".
    let mut conn = app.redis_connection().await;
    for remark in &remarks {
        let id: i64 = local_id(remark);
        let count: i64 = redis::cmd("HGET")
            .arg(app.keys().remark_info(id, app.remark_shards()))
            .arg("likes")
            .query_async(&mut *conn)
            .await
            .unwrap();
        let mut liked = 0;
        for user in 1..=100 {
            let relation: Option<String> = redis::cmd("GET")
                .arg(app.keys().like_relation(id, user, app.remark_shards()))
                .query_async(&mut *conn)
                .await
                .unwrap();
            if relation.as_deref() == Some("1") {
                liked += 1;
            }
        }
        assert_eq!(count, liked, "remark {remark}");
    }
    drop(conn);

    // The archive holds exactly one row per changed vote, and its roll-up matches.
    archive_settled(&app).await;
    assert_eq!(vote_log_rows(&app).await, changed);

    // Replaying the streams from the start inserts nothing twice.
    let mut conn = app.redis_connection().await;
    for shard in 0..app.remark_shards() {
        let _: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("SETID")
            .arg(app.keys().vote_stream(shard))
            .arg("archive")
            .arg("0")
            .query_async(&mut *conn)
            .await;
    }
    drop(conn);
    archive_settled(&app).await;
    assert_eq!(vote_log_rows(&app).await, changed);
}

#[tokio::test]
async fn a_like_counts_once_even_after_its_relation_key_expired() {
    let app = busy_app().await;
    let item = create_item(&app).await;
    let remark = app.create_remark_on(1, &item).await;
    let id: i64 = local_id(&remark);
    assert_eq!(app.vote(2, &remark, true).await["likeCount"], 1);
    archive_settled(&app).await;

    // Time passes beyond the relation TTL, and Redis lets the key go.
    app.advance_clock(chrono::Duration::days(11));
    let mut conn = app.redis_connection().await;
    let () = redis::cmd("DEL")
        .arg(app.keys().like_relation(id, 2, app.remark_shards()))
        .query_async(&mut *conn)
        .await
        .unwrap();
    drop(conn);

    let again = app.vote(2, &remark, true).await;
    assert_eq!(
        again,
        json!({ "remarkId": remark, "likeCount": 1, "liked": true, "changed": false })
    );
    // The key is restored: the archive is asked only once.
    let mut conn = app.redis_connection().await;
    let relation: Option<String> = redis::cmd("GET")
        .arg(app.keys().like_relation(id, 2, app.remark_shards()))
        .query_async(&mut *conn)
        .await
        .unwrap();
    assert_eq!(relation.as_deref(), Some("1"));
    drop(conn);
    assert_eq!(app.vote(2, &remark, false).await["likeCount"], 0);
}

#[tokio::test]
async fn likes_keep_succeeding_while_sql_fails_and_are_archived_once_after() {
    let app = busy_app().await;
    let item = create_item(&app).await;
    let remark = app.create_remark_on(1, &item).await;
    app.vote(2, &remark, true).await;
    archive_settled(&app).await;

    sqlx::query("ALTER TABLE vote_log RENAME TO vote_log_away")
        .execute(app.sql())
        .await
        .unwrap();
    for voter in 3..=12 {
        assert_eq!(app.vote(voter, &remark, true).await["changed"], true);
    }
    app.vote(3, &remark, false).await;
    tokio::time::sleep(Duration::from_millis(1500)).await; // the consumer fails and backs off
    sqlx::query("ALTER TABLE vote_log_away RENAME TO vote_log")
        .execute(app.sql())
        .await
        .unwrap();

    archive_settled(&app).await;
    assert_eq!(vote_log_rows(&app).await, 12);
    let dead: i64 = sqlx::query("SELECT COUNT(*) AS n FROM dead_letters")
        .fetch_one(app.sql())
        .await
        .unwrap()
        .get("n");
    assert_eq!(dead, 0, "an outage is not poison");
    let rolled: i64 = sqlx::query("SELECT like_count FROM remarks WHERE id = $1")
        .bind(local_id(&remark))
        .fetch_one(app.sql())
        .await
        .unwrap()
        .get("like_count");
    assert_eq!(rolled, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_subscribers_share_one_pubsub_connection_and_all_see_a_change() {
    let app = busy_app().await;
    let item = create_item(&app).await;
    let remark = app.create_remark_on(1, &item).await;
    app.vote(2, &remark, true).await;

    let query = format!(
        "subscription {{ likeCountChanged(remarkIds: [\"{remark}\"]) {{ remarkId likeCount }} }}"
    );
    let mut sockets = Vec::new();
    for _ in 0..200 {
        let mut socket = subscribe(&app, None, &query).await;
        let first = next_data(&mut socket).await;
        assert_eq!(
            first["likeCountChanged"]["likeCount"], 1,
            "current count first"
        );
        sockets.push(socket);
    }
    let channel = app
        .keys()
        .like_count_channel(local_id(&remark), app.remark_shards());
    assert_eq!(
        crate::harness::listeners(&app, &channel).await,
        1,
        "one Redis subscription for 200 GraphQL subscribers"
    );
    assert_eq!(
        app.listeners_here(&channel),
        1,
        "one follower of the count in the instance, writing to all 200"
    );
    assert_eq!(app.remarks().like_counts.followed().await, 1);

    app.vote(3, &remark, true).await;
    for socket in &mut sockets {
        // A subscriber may be sent the count it has once more first: once the hub's Redis
        // subscription is in place it re-reads the count, so that a change between a
        // subscriber's first read and the subscription is not missed.
        loop {
            let change = next_data(socket).await;
            if change["likeCountChanged"]["likeCount"] == 1 {
                continue;
            }
            assert_eq!(
                change["likeCountChanged"],
                json!({ "remarkId": remark, "likeCount": 2 })
            );
            break;
        }
    }

    // The last subscriber gone, the count is no longer followed, here or in Redis.
    drop(sockets);
    crate::harness::eventually(async || {
        app.remarks().like_counts.followed().await == 0
            && app.listeners_here(&channel) == 0
            && crate::harness::listeners(&app, &channel).await == 0
    })
    .await;
}

/// A plain selection's updates are written straight to JSON; the same selection through a
/// fragment is executed by async-graphql. Both must send the same bytes, key order included.
#[tokio::test]
async fn a_plain_like_count_selection_is_written_as_async_graphql_writes_it() {
    let app = busy_app().await;
    let item = create_item(&app).await;
    let remark = app.create_remark_on(1, &item).await;
    let cases = [
        (
            "remarkId likeCount",
            "...F",
            "fragment F on LikeCount { remarkId likeCount }",
        ),
        (
            "n: likeCount __typename id: remarkId likeCount n: likeCount",
            "... on LikeCount { n: likeCount __typename id: remarkId likeCount n: likeCount }",
            "",
        ),
    ];
    for (voter, (plain, executed, fragment)) in (10..).zip(cases) {
        let query = |selection: &str, fragment: &str| {
            format!(
                "subscription {{ counts: likeCountChanged(remarkIds: [\"{remark}\"]) {{ {selection} }} }} {fragment}"
            )
        };
        let mut direct = subscribe(&app, None, &query(plain, "")).await;
        let mut executed = subscribe(&app, None, &query(executed, fragment)).await;
        let first = raw_next(&mut direct).await;
        assert_eq!(first, raw_next(&mut executed).await);
        app.vote(voter, &remark, true).await;
        let from_direct = raw_other_than(&mut direct, &first).await;
        assert_eq!(from_direct, raw_other_than(&mut executed, &first).await);
        let parsed: Value = serde_json::from_str(&from_direct).unwrap();
        assert_eq!(parsed["type"], "next", "{from_direct}");
    }
}

/// Subscribers of one count whose selections are equal share its rendering: each is still
/// sent its own operation id in its own protocol, and a different selection its own fields.
#[tokio::test]
async fn subscribers_sharing_a_count_are_each_sent_their_own_id_protocol_and_fields() {
    let app = busy_app().await;
    let item = create_item(&app).await;
    let remark = app.create_remark_on(1, &item).await;
    let subscribers = [
        ("graphql-transport-ws", "1", "remarkId likeCount"),
        ("graphql-transport-ws", "1", "remarkId likeCount"),
        ("graphql-transport-ws", "counts-7", "remarkId likeCount"),
        ("graphql-ws", "1", "remarkId likeCount"),
        ("graphql-transport-ws", "1", "likeCount"),
    ];
    let mut sockets = Vec::new();
    for (protocol, id, selection) in subscribers {
        let query = format!(
            "subscription {{ likeCountChanged(remarkIds: [\"{remark}\"]) {{ {selection} }} }}"
        );
        let mut socket = subscribe_as(&app, protocol, id, None, &query).await;
        let first = update_other_than(&mut socket, &Value::Null).await;
        sockets.push((socket, first));
    }
    app.vote(10, &remark, true).await;
    for ((socket, first), (protocol, id, selection)) in sockets.iter_mut().zip(subscribers) {
        let mut fields = json!({ "likeCount": 1 });
        if selection.starts_with("remarkId") {
            fields["remarkId"] = json!(remark);
        }
        let kind = if protocol == "graphql-ws" {
            "data"
        } else {
            "next"
        };
        assert_eq!(
            update_other_than(socket, first).await,
            json!({ "type": kind, "id": id, "payload": { "data": { "likeCountChanged": fields } } }),
            "{protocol} {id} {selection}"
        );
    }
}

/// The next update other than `seen` as JSON, past the legacy protocol's keep-alives.
async fn update_other_than(socket: &mut crate::harness::Socket, seen: &Value) -> Value {
    loop {
        let message: Value = serde_json::from_str(&raw_next(socket).await).unwrap();
        if message["type"] != "ka" && message != *seen {
            return message;
        }
    }
}

/// The next text message other than `seen`: a subscriber may be sent the count it has once
/// more first (see the test above).
async fn raw_other_than(socket: &mut crate::harness::Socket, seen: &str) -> String {
    loop {
        let message = raw_next(socket).await;
        if message != seen {
            return message;
        }
    }
}

/// The next text message as it was written.
async fn raw_next(socket: &mut crate::harness::Socket) -> String {
    use futures::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    loop {
        let message = tokio::time::timeout(std::time::Duration::from_secs(10), socket.next())
            .await
            .expect("a message within 10s")
            .expect("the socket is open")
            .expect("a readable message");
        if let Message::Text(text) = message {
            return text.to_string();
        }
    }
}

#[tokio::test]
async fn like_count_changed_on_a_missing_remark_is_not_found_and_holds_no_channel() {
    let app = busy_app().await;
    let item = create_item(&app).await;
    let remark = app.create_remark_on(1, &item).await;
    let missing = global_id("Remark", local_id(&remark) + 1000);
    for ids in [vec![missing.clone()], vec![remark.clone(), missing.clone()]] {
        let query = format!(
            "subscription {{ likeCountChanged(remarkIds: {}) {{ remarkId likeCount }} }}",
            json!(ids)
        );
        let mut socket = subscribe(&app, None, &query).await;
        // The resolver fails before its first item: the protocol's `error`.
        let message = crate::harness::next_message(&mut socket).await;
        assert_eq!(message["type"], "error", "{message}");
        let errors = &message["payload"];
        assert_eq!(errors[0]["extensions"]["code"], "NOT_FOUND", "{message}");
        assert!(
            errors[0]["message"]
                .as_str()
                .unwrap()
                .contains(&local_id(&missing).to_string()),
            "{message}"
        );
        // Nothing is held, neither in this instance's hub nor in Redis, while the
        // connection stays open.
        for id in &ids {
            let channel = app
                .keys()
                .like_count_channel(local_id(id), app.remark_shards());
            assert_eq!(app.listeners_here(&channel), 0, "{id}");
            assert_eq!(crate::harness::listeners(&app, &channel).await, 0, "{id}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recommended_remarks_refresh_once_and_readers_never_see_an_empty_list() {
    let app = busy_app().await;
    let item = create_item(&app).await;
    let mut remarks = Vec::new();
    for author in 1..=5 {
        remarks.push(app.create_remark_on(author, &item).await);
    }
    for voter in 10..13 {
        app.vote(voter, &remarks[3], true).await;
    }
    app.vote(10, &remarks[1], true).await;
    archive_settled(&app).await;

    let query =
        "query($item: ID!) { recommendedRemarks(itemId: $item, first: 3) { id likeCount } }";
    // Cold start: the first reader refreshes the list and reads it.
    app.data(None, query, json!({ "item": item })).await;
    let mut warm = Value::Null;
    for _ in 0..100 {
        warm = app.data(None, query, json!({ "item": item })).await["recommendedRemarks"].clone();
        if warm.as_array().is_some_and(|list| !list.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(warm[0], json!({ "id": remarks[3], "likeCount": 3 }));
    assert_eq!(warm[1], json!({ "id": remarks[1], "likeCount": 1 }));

    // The refresh interval passes: many readers at once, one refresh, nobody sees a gap.
    let refreshes = app
        .remarks()
        .caches
        .recommended_refreshes
        .load(Ordering::SeqCst);
    let mut conn = app.redis_connection().await;
    let () = redis::cmd("DEL")
        .arg(app.keys().recommended_proxy(local_id(&item)))
        .query_async(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    let app = std::sync::Arc::new(app);
    let readers: Vec<_> = (0..50)
        .map(|_| {
            let (app, item) = (app.clone(), item.clone());
            tokio::spawn(async move {
                app.data(None, query, json!({ "item": item })).await["recommendedRemarks"].clone()
            })
        })
        .collect();
    let mut seen = HashSet::new();
    for reader in readers {
        let list = reader.await.unwrap();
        assert!(
            !list.as_array().unwrap().is_empty(),
            "a reader saw an empty list during a refresh"
        );
        seen.insert(list[0]["id"].as_str().unwrap().to_string());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        app.remarks()
            .caches
            .recommended_refreshes
            .load(Ordering::SeqCst),
        refreshes + 1
    );
    assert_eq!(seen, HashSet::from([remarks[3].clone()]));
}

#[tokio::test]
async fn only_signed_in_users_vote_and_roles_do_not_matter() {
    let app = busy_app().await;
    let item = create_item(&app).await;
    let remark = app.create_remark_on(1, &item).await;
    let admin = app.token(9, Role::Admin);
    let data = app.data(Some(&admin), LIKE, json!({ "id": remark })).await;
    assert_eq!(data["likeRemark"]["likeCount"], 1);
}

#[tokio::test]
async fn a_malformed_vote_event_goes_to_dead_letters_and_the_rest_is_archived() {
    let app = busy_app().await;
    let item = create_item(&app).await;
    let remark = app.create_remark_on(1, &item).await;
    let stream = app
        .keys()
        .vote_stream_of(local_id(&remark), app.remark_shards());
    let mut conn = app.redis_connection().await;
    let poison: String = redis::cmd("XADD")
        .arg(&stream)
        .arg("*")
        .arg("remark")
        .arg("not-a-number")
        .query_async(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    app.vote(2, &remark, true).await;

    archive_settled(&app).await;
    assert_eq!(vote_log_rows(&app).await, 1, "the good vote is archived");
    let row = sqlx::query("SELECT entry_id, error, attempts FROM dead_letters")
        .fetch_one(app.sql())
        .await
        .unwrap();
    assert_eq!(row.get::<String, _>("entry_id"), poison);
    assert_eq!(row.get::<i64, _>("attempts"), 5);
    assert!(
        row.get::<String, _>("error")
            .contains("remark is not a number"),
        "the error is kept"
    );
}

#[tokio::test]
async fn entries_left_pending_by_a_dead_consumer_are_taken_over() {
    let app = TestApp::spawn_with(|config| {
        config.rate_limit_per_user = 0;
        config.consumer_claim_idle_ms = 300;
    })
    .await;
    let item = create_item(&app).await;
    let remark = app.create_remark_on(1, &item).await;
    let stream = app
        .keys()
        .vote_stream_of(local_id(&remark), app.remark_shards());
    archive_settled(&app).await;

    // A consumer reads three votes and dies before acknowledging them. MULTI makes the
    // read happen before the live worker can see the entries.
    let mut conn = crate::harness::redis(&app).await;
    let now = chrono::Utc::now().timestamp_millis();
    let mut pipe = redis::pipe();
    pipe.atomic();
    for voter in 2..=4 {
        pipe.cmd("XADD")
            .arg(&stream)
            .arg("*")
            .arg("remark")
            .arg(local_id(&remark))
            .arg("voter")
            .arg(voter)
            .arg("author")
            .arg(1)
            .arg("voting")
            .arg(1)
            .arg("count")
            .arg(voter - 1)
            .arg("at")
            .arg(now)
            .ignore();
    }
    pipe.cmd("XREADGROUP")
        .arg("GROUP")
        .arg("archive")
        .arg("dead-instance")
        .arg("COUNT")
        .arg(100)
        .arg("STREAMS")
        .arg(&stream)
        .arg(">");
    let (stolen,): (redis::streams::StreamReadReply,) = pipe.query_async(&mut conn).await.unwrap();
    assert_eq!(stolen.keys[0].ids.len(), 3, "the dead consumer holds them");

    archive_settled(&app).await;
    assert_eq!(
        vote_log_rows(&app).await,
        3,
        "the live instance took them over"
    );
    let pending: redis::streams::StreamPendingReply = redis::cmd("XPENDING")
        .arg(&stream)
        .arg("archive")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(pending.count(), 0);
}

#[tokio::test]
async fn votes_wait_for_a_partition_that_cannot_be_used_instead_of_being_dead_lettered() {
    let app = busy_app().await;
    if app.sql_backend() != engage::infra::db::Backend::Postgres {
        return; // SQLite has no partitions: vote_log is one table there.
    }
    let item = create_item(&app).await;
    let remark = app.create_remark_on(2_001, &item).await;
    // A table of this month's name that is not attached as a partition: creating the
    // partition is then a no-op, and the insert finds no partition for the row (23514).
    let month = app.current_month().id();
    let blocker = format!("vote_log_{month}");
    sqlx::query(&format!("CREATE TABLE {blocker} (LIKE vote_log)"))
        .execute(app.sql())
        .await
        .unwrap();
    app.vote(2_002, &remark, true).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let dead: i64 = sqlx::query("SELECT COUNT(*) AS n FROM dead_letters")
        .fetch_one(app.sql())
        .await
        .unwrap()
        .get("n");
    assert_eq!(dead, 0, "the vote was blamed for the database's state");
    assert_eq!(vote_log_rows(&app).await, 0);

    // Once the table is out of the way, the waiting vote is archived.
    sqlx::query(&format!("DROP TABLE {blocker}"))
        .execute(app.sql())
        .await
        .unwrap();
    archive_settled(&app).await;
    assert_eq!(vote_log_rows(&app).await, 1);
}

#[tokio::test]
async fn an_unliked_early_liker_is_replaced_by_the_next_earliest_not_the_newest() {
    let app = busy_app().await;
    let item = create_item(&app).await;
    let remark = app.create_remark_on(3_000, &item).await;
    for voter in 3_001..=3_025 {
        app.vote(voter, &remark, true).await;
    }
    archive_settled(&app).await;
    app.vote(3_003, &remark, false).await; // one of the earliest twenty goes
    app.vote(3_026, &remark, true).await; // and a newcomer arrives
    let likers = app
        .data(None, "query($item: ID!) { remarks(itemId: $item) { edges { node { likers(first: 20) { id } } } } }", json!({ "item": item }))
        .await;
    let ids: Vec<i64> = likers["remarks"]["edges"][0]["node"]["likers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| local_id(u["id"].as_str().unwrap()))
        .collect();
    let expected: Vec<i64> = (3_001..=3_021).filter(|v| *v != 3_003).collect();
    assert_eq!(ids, expected);
}

const EDIT: &str = "mutation($id: ID!, $content: String!, $score: Int) {
    editRemark(id: $id, content: $content, score: $score) { id content score editedAt likeCount } }";
const DELETE: &str = "mutation($id: ID!) { deleteRemark(id: $id) }";
const HIDE: &str =
    "mutation($id: ID!, $reason: String!) { hideRemark(id: $id, reason: $reason) { id likeCount } }";
const ITEM_PAGE: &str =
    "query($item: ID!) { remarks(itemId: $item, first: 50) { edges { node { id } } } }";

/// The ids of an item's remarks page, newest first.
async fn listed(app: &TestApp, item: &str) -> Vec<String> {
    app.data(None, ITEM_PAGE, json!({ "item": item })).await["remarks"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|edge| edge["node"]["id"].as_str().unwrap().to_string())
        .collect()
}

/// The ids of a user's profile remarks, as `viewer` sees them.
async fn profile_remarks(app: &TestApp, viewer: Option<&str>, author: i64) -> Vec<String> {
    let query = "query($u: ID!) { user(id: $u) { remarkCount remarks { edges { node { id } } } } }";
    app.data(viewer, query, json!({ "u": author.to_string() }))
        .await["user"]["remarks"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|edge| edge["node"]["id"].as_str().unwrap().to_string())
        .collect()
}

/// Remark ids in a reader's feed.
async fn feed_of(app: &TestApp, reader: i64) -> Vec<String> {
    let query = "{ feed(first: 50) { edges { node { id } } } }";
    app.data(Some(&app.user_token(reader)), query, json!({}))
        .await["feed"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|edge| edge["node"]["id"].as_str().unwrap().to_string())
        .collect()
}

/// `follower` follows `followee` (seen first, so that they can be followed).
async fn follow_user(app: &TestApp, follower: i64, followee: i64) {
    app.data(
        Some(&app.user_token(followee)),
        "{ viewer { id } }",
        json!({}),
    )
    .await;
    app.data(
        Some(&app.user_token(follower)),
        "mutation($u: ID!) { followUser(userId: $u) { changed } }",
        json!({ "u": followee.to_string() }),
    )
    .await;
}

#[tokio::test]
async fn an_edited_remark_keeps_its_likes_and_only_its_author_may_edit_it() {
    let app = busy_app().await;
    let item = create_item(&app).await;
    let remark = app.create_remark_on(1, &item).await;
    for voter in [2, 3] {
        app.vote(voter, &remark, true).await;
    }
    let edited = app
        .data(
            Some(&app.user_token(1)),
            EDIT,
            json!({ "id": remark, "content": "  better now ", "score": 3 }),
        )
        .await;
    assert_eq!(edited["editRemark"]["content"], "better now");
    assert_eq!(edited["editRemark"]["score"], 3);
    assert_eq!(edited["editRemark"]["likeCount"], 2, "likes stay");
    assert!(edited["editRemark"]["editedAt"].is_string());
    // The score is kept when not given.
    let kept = app
        .data(
            Some(&app.user_token(1)),
            EDIT,
            json!({ "id": remark, "content": "again" }),
        )
        .await;
    assert_eq!(kept["editRemark"]["score"], 3);
    assert_eq!(app.vote(4, &remark, true).await["likeCount"], 3);

    let other = app
        .gql(
            Some(&app.user_token(2)),
            EDIT,
            json!({ "id": remark, "content": "mine" }),
        )
        .await;
    assert_eq!(first_code(&other), "FORBIDDEN");
    let empty = app
        .gql(
            Some(&app.user_token(1)),
            EDIT,
            json!({ "id": remark, "content": " " }),
        )
        .await;
    assert_eq!(first_code(&empty), "BAD_USER_INPUT");
    let score = app
        .gql(
            Some(&app.user_token(1)),
            EDIT,
            json!({ "id": remark, "content": "x", "score": 6 }),
        )
        .await;
    assert_eq!(first_code(&score), "BAD_USER_INPUT");
}

#[tokio::test]
async fn a_deleted_remark_leaves_lists_feeds_and_likes_and_keeps_its_vote_archive() {
    let app = busy_app().await;
    let item = create_item(&app).await;
    follow_user(&app, 9, 1).await;
    let remark = app.create_remark_on(1, &item).await;
    let other = app.create_remark_on(2, &item).await;
    crate::harness::streams_settled(&app, &[app.keys().remark_stream()], "fanout").await;
    assert_eq!(feed_of(&app, 9).await, [remark.as_str()]);
    for voter in [3, 4, 5] {
        app.vote(voter, &remark, true).await;
    }
    archive_settled(&app).await;
    let archived = vote_log_rows(&app).await;

    let refused = app
        .gql(Some(&app.user_token(2)), DELETE, json!({ "id": remark }))
        .await;
    assert_eq!(
        first_code(&refused),
        "FORBIDDEN",
        "only the author or an admin"
    );
    let deleted = app
        .data(Some(&app.user_token(1)), DELETE, json!({ "id": remark }))
        .await;
    assert_eq!(deleted["deleteRemark"], true);

    assert_eq!(listed(&app, &item).await, [other.as_str()]);
    assert!(
        feed_of(&app, 9).await.is_empty(),
        "gone from the follower's feed"
    );
    assert!(profile_remarks(&app, Some(&app.user_token(1)), 1)
        .await
        .is_empty());
    let node = app
        .data(
            None,
            "query($id: ID!) { node(id: $id) { id } }",
            json!({ "id": remark }),
        )
        .await;
    assert_eq!(node["node"], Value::Null);
    for voter in [3, 6] {
        let like = app
            .gql(Some(&app.user_token(voter)), LIKE, json!({ "id": remark }))
            .await;
        assert_eq!(first_code(&like), "NOT_FOUND", "{like}");
        let unlike = app
            .gql(
                Some(&app.user_token(voter)),
                UNLIKE,
                json!({ "id": remark }),
            )
            .await;
        assert_eq!(first_code(&unlike), "NOT_FOUND");
    }
    let again = app
        .gql(Some(&app.user_token(1)), DELETE, json!({ "id": remark }))
        .await;
    assert_eq!(first_code(&again), "NOT_FOUND");

    // Redis holds neither the counter nor the relations; SQL keeps the remark and its votes.
    let shards = app.remark_shards();
    let id = local_id(&remark);
    let mut conn = app.redis_connection().await;
    let (likes, relation): (Option<i64>, Option<String>) = redis::pipe()
        .cmd("HGET")
        .arg(app.keys().remark_info(id, shards))
        .arg("likes")
        .cmd("GET")
        .arg(app.keys().like_relation(id, 3, shards))
        .query_async(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    assert_eq!((likes, relation), (None, None));
    assert_eq!(vote_log_rows(&app).await, archived);
    let marked: Option<i64> = sqlx::query("SELECT deleted_at_ms FROM remarks WHERE id = $1")
        .bind(id)
        .fetch_one(app.sql())
        .await
        .unwrap()
        .get("deleted_at_ms");
    assert!(marked.is_some());

    // Redis lost: the rebuild leaves the remark withdrawn, and verify agrees.
    let mut conn = app.redis_connection().await;
    let () = redis::cmd("DEL")
        .arg(app.keys().remark_info(id, shards))
        .query_async(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    app.rebuild_from_sql().await.unwrap();
    let like = app
        .gql(Some(&app.user_token(7)), LIKE, json!({ "id": remark }))
        .await;
    assert_eq!(first_code(&like), "NOT_FOUND");
    let drift: Vec<String> = app
        .verify_all()
        .await
        .unwrap()
        .into_iter()
        .filter(|report| ["likes", "feeds"].contains(&report.feature) && !report.is_clean())
        .map(|report| format!("{}: {:?}", report.feature, report.examples))
        .collect();
    assert!(drift.is_empty(), "{drift:?}");
}

#[tokio::test]
async fn a_hidden_remark_is_folded_for_everyone_but_its_author_and_admins() {
    let app = busy_app().await;
    let item = create_item(&app).await;
    follow_user(&app, 9, 1).await;
    let remark = app.create_remark_on(1, &item).await;
    crate::harness::streams_settled(&app, &[app.keys().remark_stream()], "fanout").await;
    app.vote(2, &remark, true).await;

    let by_user = app
        .gql(
            Some(&app.user_token(2)),
            HIDE,
            json!({ "id": remark, "reason": "spam" }),
        )
        .await;
    assert_eq!(first_code(&by_user), "FORBIDDEN");
    let no_reason = app
        .gql(
            Some(&app.admin_token()),
            HIDE,
            json!({ "id": remark, "reason": " " }),
        )
        .await;
    assert_eq!(first_code(&no_reason), "BAD_USER_INPUT");
    let hidden = app
        .data(
            Some(&app.admin_token()),
            HIDE,
            json!({ "id": remark, "reason": "spam" }),
        )
        .await;
    assert_eq!(
        hidden["hideRemark"]["likeCount"], 1,
        "kept for its author and admins"
    );

    assert!(listed(&app, &item).await.is_empty());
    assert!(feed_of(&app, 9).await.is_empty());
    assert!(profile_remarks(&app, None, 1).await.is_empty());
    assert!(profile_remarks(&app, Some(&app.user_token(3)), 1)
        .await
        .is_empty());
    assert_eq!(
        profile_remarks(&app, Some(&app.user_token(1)), 1).await,
        [remark.as_str()]
    );
    assert_eq!(
        profile_remarks(&app, Some(&app.admin_token()), 1).await,
        [remark.as_str()]
    );
    let node = "query($id: ID!) { node(id: $id) { id } }";
    assert_eq!(
        app.data(None, node, json!({ "id": remark })).await["node"],
        Value::Null
    );
    assert_eq!(
        app.data(Some(&app.user_token(1)), node, json!({ "id": remark }))
            .await["node"]["id"],
        remark
    );
    let like = app
        .gql(Some(&app.user_token(3)), LIKE, json!({ "id": remark }))
        .await;
    assert_eq!(first_code(&like), "NOT_FOUND");
    let recommended = "query($item: ID!) { recommendedRemarks(itemId: $item) { id } }";
    for _ in 0..20 {
        let list = app.data(None, recommended, json!({ "item": item })).await;
        assert_eq!(list["recommendedRemarks"], json!([]), "never recommended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const MY_LIKES: &str =
    "query($after: String, $first: Int) { myLikes(first: $first, after: $after) {
    edges { cursor node { id likedByMe } } pageInfo { hasNextPage endCursor } } }";

/// Every remark of the voter's `myLikes`, page after page of `page`.
async fn my_likes(app: &TestApp, voter: i64, page: i64) -> Vec<String> {
    let token = app.user_token(voter);
    let (mut ids, mut after) = (Vec::new(), Value::Null);
    loop {
        let body = app
            .data(
                Some(&token),
                MY_LIKES,
                json!({ "after": after, "first": page }),
            )
            .await;
        for edge in body["myLikes"]["edges"].as_array().unwrap() {
            assert_eq!(edge["node"]["likedByMe"], true);
            ids.push(edge["node"]["id"].as_str().unwrap().to_string());
        }
        if body["myLikes"]["pageInfo"]["hasNextPage"] != true {
            return ids;
        }
        after = body["myLikes"]["pageInfo"]["endCursor"].clone();
    }
}

#[tokio::test]
async fn my_likes_are_newest_first_and_outlive_the_relation_keys() {
    let app = busy_app().await;
    let mut remarks = Vec::new();
    for author in 1..=5 {
        let item = create_item(&app).await;
        remarks.push(app.create_remark_on(author, &item).await);
    }
    for remark in &remarks {
        app.vote(9, remark, true).await;
    }
    app.vote(9, &remarks[1], false).await;
    archive_settled(&app).await;
    let expected: Vec<String> = [4, 3, 2, 0].iter().map(|i| remarks[*i].clone()).collect();
    assert_eq!(my_likes(&app, 9, 2).await, expected);

    // Past the relation TTL: Redis has let every relation go; the archive still knows.
    app.advance_clock(chrono::Duration::days(11));
    let mut conn = app.redis_connection().await;
    for remark in &remarks {
        let () = redis::cmd("DEL")
            .arg(
                app.keys()
                    .like_relation(local_id(remark), 9, app.remark_shards()),
            )
            .query_async(&mut *conn)
            .await
            .unwrap();
    }
    drop(conn);
    assert_eq!(my_likes(&app, 9, 3).await, expected);

    // An unlike shows at once, before the archive has it; a deleted remark leaves the list.
    app.vote(9, &remarks[3], false).await;
    app.data(
        Some(&app.user_token(5)),
        "mutation($id: ID!) { deleteRemark(id: $id) }",
        json!({ "id": remarks[4] }),
    )
    .await;
    assert_eq!(
        my_likes(&app, 9, 10).await,
        [remarks[2].clone(), remarks[0].clone()]
    );
    assert!(my_likes(&app, 8, 10).await.is_empty());
    assert_eq!(
        first_code(&app.gql(None, MY_LIKES, json!({})).await),
        "UNAUTHENTICATED"
    );
}

#[tokio::test]
async fn recommended_remarks_are_ordered_by_the_counts_they_show_from_the_first_read() {
    let app = busy_app().await;
    let item = create_item(&app).await;
    let mut remarks = Vec::new();
    for author in 1..=4 {
        remarks.push(app.create_remark_on(author, &item).await);
    }
    // Likes, read at once: the archive (and so SQL's counts) may not have them yet.
    for (remark, likes) in [(0, 1), (1, 3), (3, 2)] {
        for voter in 0..likes {
            app.vote(100 + voter, &remarks[remark], true).await;
        }
    }
    let query =
        "query($item: ID!) { recommendedRemarks(itemId: $item, first: 3) { id likeCount } }";
    let first = app.data(None, query, json!({ "item": item })).await;
    assert_eq!(
        first["recommendedRemarks"],
        json!([
            { "id": remarks[1], "likeCount": 3 },
            { "id": remarks[3], "likeCount": 2 },
            { "id": remarks[0], "likeCount": 1 }
        ]),
        "the first read is not empty, and most liked first"
    );

    // New likes reorder the list at once, before any refresh.
    archive_settled(&app).await;
    for voter in 200..204 {
        app.vote(voter, &remarks[2], true).await;
    }
    for _ in 0..3 {
        let body = app.data(None, query, json!({ "item": item })).await;
        let counts: Vec<i64> = body["recommendedRemarks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|remark| remark["likeCount"].as_i64().unwrap())
            .collect();
        let mut sorted = counts.clone();
        sorted.sort_by(|a, b| b.cmp(a));
        assert_eq!(counts, sorted, "ordered by the counts shown: {body}");
        assert_eq!(counts.len(), 3);
    }
}

#[tokio::test]
async fn recommended_remarks_show_a_remark_written_after_an_empty_refresh() {
    let app = busy_app().await;
    let item = create_item(&app).await;
    let query = "query($item: ID!) { recommendedRemarks(itemId: $item) { id } }";
    assert_eq!(
        app.data(None, query, json!({ "item": item })).await["recommendedRemarks"],
        json!([])
    );
    let remark = app.create_remark_on(1, &item).await;
    assert_eq!(
        app.data(None, query, json!({ "item": item })).await["recommendedRemarks"],
        json!([{ "id": remark }])
    );
}
