//! Writes that reach SQL and then Redis, with Redis refusing in between: whatever was
//! acknowledged reaches Redis once Redis is back, exactly once, with or without the
//! client's retry.
//!
//! - a follow or an unfollow moves the follower count once, and a retried follow neither
//!   skips nor doubles it;
//! - a follow change delivered twice is counted once, and a rebuild run while changes wait
//!   counts each once;
//! - an item exists once and is placed on the map;
//! - a voucher exists once and has its stock to sell.
//!
//! Redis is unplugged through the TCP proxy of `examples/support/plug.rs`.

use std::time::{Duration, Instant};

use engage::{features::feed::changes::FollowChange, infra::outbox};
use serde_json::{json, Value};
use sqlx::Row;

use crate::{
    faults,
    harness::{local_id, TestApp},
    plug::Plug,
};

const FOLLOW: &str = "mutation($u: ID!) { follow(userId: $u) }";
const UNFOLLOW: &str = "mutation($u: ID!) { unfollow(userId: $u) }";
const COUNTS: &str = "{ viewer { followerCount followingCount } }";
const CREATE_ITEM: &str = "mutation($n: String!, $lat: Float, $lng: Float) { createItem(input: { name: $n, lat: $lat, lng: $lng }) { id } }";
const NEARBY: &str = "query($lat: Float!, $lng: Float!) { nearbyItems(lat: $lat, lng: $lng, radiusKm: 5.0, first: 20) { edges { node { item { id } } } } }";
const CREATE_VOUCHER: &str =
    "mutation($input: CreateVoucherInput!) { createVoucher(input: $input) { id } }";
const SECKILL: &str = "mutation($v: ID!) { seckillVoucher(voucherId: $v) { id } }";

/// An app whose Redis goes through a plug. Its first item is created before the test pulls
/// the plug, so the instance holds a block of ids for the writes that follow.
async fn unpluggable() -> (Plug, TestApp) {
    let (plug, app) = faults::unpluggable_app().await;
    app.create_item().await;
    (plug, app)
}

/// A number from SQL (`SELECT COUNT(*) AS n …`).
async fn count(app: &TestApp, sql: &str, bind: Option<i64>) -> i64 {
    let mut query = sqlx::query(sql);
    if let Some(value) = bind {
        query = query.bind(value);
    }
    query.fetch_one(app.sql()).await.unwrap().get("n")
}

/// Waits up to 30 s for `check` (the retrier takes rows after 5 s, then every second).
async fn within_30s(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < Duration::from_secs(30), "{what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn meet(app: &TestApp, users: &[i64]) {
    for user in users {
        app.data(Some(&app.user_token(*user)), COUNTS, json!({}))
            .await;
    }
}

async fn send(app: &TestApp, user: i64, mutation: &str, other: i64) -> Value {
    app.gql(
        Some(&app.user_token(user)),
        mutation,
        json!({ "u": other.to_string() }),
    )
    .await
}

/// `(followers, following)` as the API serves them (from Redis).
async fn counts_of(app: &TestApp, user: i64) -> (i64, i64) {
    let body = app
        .gql(Some(&app.user_token(user)), COUNTS, json!({}))
        .await;
    let viewer = &body["data"]["viewer"];
    (
        viewer["followerCount"].as_i64().unwrap_or(-1),
        viewer["followingCount"].as_i64().unwrap_or(-1),
    )
}

async fn followers_in_sql(app: &TestApp, user: i64) -> i64 {
    count(
        app,
        "SELECT COUNT(*) AS n FROM follows WHERE followee_id = $1",
        Some(user),
    )
    .await
}

async fn pending_follow_changes(app: &TestApp) -> i64 {
    count(app, "SELECT COUNT(*) AS n FROM follow_changes", None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_acknowledged_while_redis_refused_them_count_once_with_or_without_a_retry() {
    let (plug, app) = unpluggable().await;
    let (star, early, quiet, retrying, leaving) = (41, 42, 43, 44, 45);
    meet(&app, &[star, early, quiet, retrying, leaving]).await;
    for fan in [early, leaving] {
        assert_eq!(send(&app, fan, FOLLOW, star).await["data"]["follow"], true);
    }
    assert_eq!(counts_of(&app, star).await.0, 2);

    plug.unplug();
    // `quiet` follows and never asks again; `retrying` asks again once Redis is back;
    // `leaving` unfollows.
    for (fan, mutation, field) in [
        (quiet, FOLLOW, "follow"),
        (retrying, FOLLOW, "follow"),
        (leaving, UNFOLLOW, "unfollow"),
    ] {
        let answer = send(&app, fan, mutation, star).await;
        assert_eq!(answer["data"][field], true, "acknowledged: {answer}");
    }
    assert_eq!(followers_in_sql(&app, star).await, 3);
    assert_eq!(pending_follow_changes(&app).await, 3, "kept for later");

    tokio::time::sleep(Duration::from_secs(1)).await;
    plug.plug_in();
    // The retry is told the follow exists; it moves the count no further than the follow.
    let mut again = Value::Null;
    within_30s("the retried follow is answered", async || {
        again = send(&app, retrying, FOLLOW, star).await;
        again.get("errors").is_none()
    })
    .await;
    assert_eq!(again["data"]["follow"], false, "{again}");
    within_30s("the changes left behind are delivered", async || {
        pending_follow_changes(&app).await == 0
    })
    .await;
    assert_eq!(counts_of(&app, star).await, (3, 0));
    for (fan, following) in [(early, 1), (quiet, 1), (retrying, 1), (leaving, 0)] {
        assert_eq!(counts_of(&app, fan).await.1, following, "user {fan}");
    }
    // A round of the retrier later, nothing was counted twice.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        counts_of(&app, star).await.0,
        followers_in_sql(&app, star).await
    );
    let report = app.feed().verify_follows().await.unwrap();
    assert!(report.is_clean(), "{report:?}");
}

#[tokio::test]
async fn a_follow_change_delivered_twice_is_counted_once() {
    let app = TestApp::spawn_with(|config| config.rate_limit_per_user = 0).await;
    let (star, fan) = (51, 52);
    meet(&app, &[star, fan]).await;
    // A follow as it stands once SQL committed it and Redis was told nothing yet.
    let change = FollowChange {
        id: app.next_id().await,
        follower: fan,
        followee: star,
        delta: 1,
    };
    sqlx::query("INSERT INTO follows (follower_id, followee_id, created_at_ms) VALUES ($1, $2, 0)")
        .bind(fan)
        .bind(star)
        .execute(app.sql())
        .await
        .unwrap();
    let changes = app.feed().follow_changes();
    // Delivered, then delivered again: a reply lost, a row whose delete failed, a request and
    // the retrier at once.
    for _ in 0..3 {
        outbox::deliver(&changes, &[change]).await.unwrap();
    }
    assert_eq!(counts_of(&app, star).await.0, 1);
    assert_eq!(counts_of(&app, fan).await.1, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_run_while_follow_changes_wait_counts_each_once() {
    let (plug, app) = unpluggable().await;
    let (star, early, late) = (61, 62, 63);
    meet(&app, &[star, early, late]).await;
    send(&app, early, FOLLOW, star).await;
    plug.unplug();
    let answer = send(&app, late, FOLLOW, star).await;
    assert_eq!(answer["data"]["follow"], true, "{answer}");
    assert_eq!(pending_follow_changes(&app).await, 1);
    plug.plug_in();
    // The rebuild an operator runs after an outage, before the retrier's round.
    within_30s("the rebuild runs once Redis is back", async || {
        app.rebuild_from_sql().await.is_ok()
    })
    .await;
    assert_eq!(pending_follow_changes(&app).await, 0, "delivered first");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(counts_of(&app, star).await.0, 2);
    let report = app.feed().verify_follows().await.unwrap();
    assert!(report.is_clean(), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_created_while_redis_refused_its_place_exists_once_and_is_placed_once_redis_is_back(
) {
    let (plug, app) = unpluggable().await;
    let admin = app.admin_token();
    let (lat, lng) = (48.8584, 2.2945);
    plug.unplug();
    let answer = app
        .gql(
            Some(&admin),
            CREATE_ITEM,
            json!({ "n": "Riverside Cafe", "lat": lat, "lng": lng }),
        )
        .await;
    let id = answer["data"]["createItem"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("acknowledged: {answer}"))
        .to_string();
    let named = "SELECT COUNT(*) AS n FROM items WHERE name = 'Riverside Cafe'";
    assert_eq!(count(&app, named, None).await, 1);
    let pending = "SELECT COUNT(*) AS n FROM item_placements";
    assert_eq!(count(&app, pending, None).await, 1, "kept for later");

    plug.plug_in();
    within_30s("the item is placed", async || {
        let page = app
            .gql(None, NEARBY, json!({ "lat": lat, "lng": lng }))
            .await;
        page["data"]["nearbyItems"]["edges"]
            .as_array()
            .is_some_and(|edges| edges.iter().any(|e| e["node"]["item"]["id"] == id))
    })
    .await;
    within_30s("the placement is forgotten", async || {
        count(&app, pending, None).await == 0
    })
    .await;
    assert_eq!(count(&app, named, None).await, 1);
    let report = app.nearby().verify().await.unwrap();
    assert!(report.is_clean(), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voucher_created_while_redis_refused_its_stock_exists_once_and_sells_once_redis_is_back()
{
    let (plug, app) = unpluggable().await;
    let admin = app.admin_token();
    let item = app.create_item().await;
    let buyer = app.user_token(71);
    meet(&app, &[71]).await;
    let now = app.now();
    let input = json!({
        "itemId": item, "title": "Two for one", "stock": 5,
        "beginsAt": (now - chrono::Duration::minutes(1)).to_rfc3339(),
        "endsAt": (now + chrono::Duration::hours(1)).to_rfc3339(),
        "payWithinSeconds": 600,
    });
    plug.unplug();
    let answer = app
        .gql(Some(&admin), CREATE_VOUCHER, json!({ "input": input }))
        .await;
    let id: i64 = local_id(
        answer["data"]["createVoucher"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("acknowledged: {answer}")),
    );
    let of_item = "SELECT COUNT(*) AS n FROM vouchers WHERE item_id = $1";
    let item_id: i64 = local_id(&item);
    assert_eq!(count(&app, of_item, Some(item_id)).await, 1);
    let pending = "SELECT COUNT(*) AS n FROM voucher_preloads";
    assert_eq!(count(&app, pending, None).await, 1, "kept for later");

    plug.plug_in();
    // The retrier preloads it, before any sale asks for it.
    let stock_key = app.keys().voucher(id, app.sale_shards());
    within_30s("the stock is preloaded", async || {
        let Some(mut conn) = app.try_redis_connection().await else {
            return false;
        };
        let stock: Option<i64> = redis::cmd("HGET")
            .arg(&stock_key)
            .arg("stock")
            .query_async(&mut *conn)
            .await
            .unwrap_or(None);
        stock == Some(5)
    })
    .await;
    within_30s("the preload is forgotten", async || {
        count(&app, pending, None).await == 0
    })
    .await;
    assert_eq!(count(&app, of_item, Some(item_id)).await, 1);
    let order = app
        .gql(Some(&buyer), SECKILL, json!({ "v": id.to_string() }))
        .await;
    assert!(order["data"]["seckillVoucher"]["id"].is_string(), "{order}");
    let remaining = app.vouchers().remaining(&[id]).await.unwrap();
    assert_eq!(remaining[&id], 4);
}
