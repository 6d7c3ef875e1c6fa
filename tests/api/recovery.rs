//! SQL is the system of record: `verify` finds every feature's drift (a Redis that lost
//! everything included), and `rebuild` brings back every answer the API gave before.

use chrono::{NaiveDate, TimeZone, Utc};
use serde_json::{json, Value};

use crate::harness::{self, first_code, local_id, scan, streams_settled, TestApp};

const CALENDAR: &str =
    "{ signCalendar { month days signedToday streak signedDays makeUpsLeft madeUpDays } pointsToday { type points } }";
const BOARD: &str =
    "{ leaderboard(first: 50) { total entries { rank points user { id } } me { rank points } } }";
const VIEWER: &str =
    "{ viewer { id followerCount followingCount } feed(first: 50) { edges { node { id } } } }";
const NEARBY: &str =
    "{ nearbyItems(lat: 31.23, lng: 121.47, radiusKm: 50, first: 50) { edges { node { distanceKm item { id } } } } }";
const REMARKS: &str =
    "query($item: ID!) { remarks(itemId: $item, first: 50) { edges { node { id likeCount likedByMe } } } }";
const MY_ORDERS: &str = "{ myOrders(first: 10) { edges { node { id status } } } }";

async fn unlimited() -> TestApp {
    in_buckets(None).await
}

/// An app whose points keys go into `buckets` user buckets (the mode's default for `None`).
async fn in_buckets(buckets: Option<u32>) -> TestApp {
    TestApp::spawn_with(|config| {
        harness::unlimited(config);
        config.consumer_max_backoff_ms = 200;
        if buckets.is_some() {
            config.points.points_buckets = buckets;
        }
    })
    .await
}

/// Every consumer of every stream has handled everything: SQL holds all that Redis does.
async fn settled(app: &TestApp) {
    let keys = &app.keys();
    let votes: Vec<String> = (0..app.remark_shards())
        .map(|s| keys.vote_stream(s))
        .collect();
    let orders: Vec<String> = (0..app.sale_shards())
        .map(|s| keys.order_stream(s))
        .collect();
    streams_settled(app, &votes, "archive").await;
    streams_settled(app, &votes, "points").await;
    streams_settled(app, &orders, "archive").await;
    streams_settled(app, &[keys.remark_stream()], "fanout").await;
    streams_settled(app, &[keys.points_intake_stream()], "intake").await;
    streams_settled(app, &keys.points_streams(), "archive").await;
}

/// Redis loses every key of this app; how many there were.
async fn lose_everything(app: &TestApp) -> usize {
    let keys = scan(app, &app.keys().all_pattern()).await;
    crate::harness::unlink(app, &keys).await;
    keys.len()
}

/// Features `verify` finds drift in.
async fn drifted(app: &TestApp) -> Vec<String> {
    app.verify_all()
        .await
        .expect("verify runs")
        .into_iter()
        .filter(|report| !report.is_clean())
        .map(|report| format!("{}: {:?}", report.feature, report.examples))
        .collect()
}

fn day(n: u32) -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 11, n).unwrap()
}

/// Sets the clock to 10:00 of a November day in the service's zone (Asia/Shanghai).
fn at_day(app: &TestApp, n: u32) {
    app.set_clock(Utc.with_ymd_and_hms(2026, 11, n, 2, 0, 0).unwrap());
}

struct Seeded {
    items: Vec<String>,
    orders: Vec<(i64, String)>,
    remarks: Vec<String>,
    voucher: String,
}

/// Every feature with some state: sign-ins with a make-up, awards, likes, follows, placed
/// items, a sold voucher with a paid and an unpaid order.
async fn seed(app: &TestApp) -> Seeded {
    let admin = app.admin_token();
    for n in 10..=20 {
        at_day(app, n);
        for user in 1..=6 {
            if user == 1 && n == 15 {
                continue;
            }
            app.data(
                Some(&app.user_token(user)),
                "mutation { signIn { date } }",
                json!({}),
            )
            .await;
        }
    }
    let made_up = app
        .data(
            Some(&app.user_token(1)),
            "mutation($d: Date!) { makeUpSignIn(date: $d) { pointsAwarded } }",
            json!({ "d": day(15).to_string() }),
        )
        .await;
    assert_eq!(made_up["makeUpSignIn"]["pointsAwarded"], 1);
    let service = app.token(900, engage::infra::auth::Role::Service);
    for user in 1..=6 {
        app.data(
            Some(&service),
            "mutation($u: ID!, $p: Int!) { awardPoints(userId: $u, type: LEARNING, points: $p, idempotencyKey: \"lesson\") { awarded } }",
            json!({ "u": user.to_string(), "p": user * 3 }),
        )
        .await;
    }
    let mut items = Vec::new();
    for (lat, lng) in [(31.23, 121.47), (31.25, 121.50), (31.30, 121.40)] {
        let item = app
            .data(
                Some(&admin),
                "mutation($lat: Float!, $lng: Float!) { createItem(input: { name: \"shop\", lat: $lat, lng: $lng }) { id } }",
                json!({ "lat": lat, "lng": lng }),
            )
            .await["createItem"]["id"]
            .as_str()
            .unwrap()
            .to_string();
        items.push(item);
    }
    let mut remarks = Vec::new();
    for author in 1..=3 {
        let remark = app
            .data(
                Some(&app.user_token(author)),
                "mutation($i: ID!) { createRemark(input: { itemId: $i, score: 4, content: \"good\" }) { id } }",
                json!({ "i": items[0] }),
            )
            .await["createRemark"]["id"]
            .as_str()
            .unwrap()
            .to_string();
        remarks.push(remark);
    }
    for (voter, remark) in [(4, 0), (5, 0), (6, 0), (4, 1), (5, 2)] {
        app.data(
            Some(&app.user_token(voter)),
            "mutation($r: ID!) { likeRemark(remarkId: $r) { changed } }",
            json!({ "r": remarks[remark] }),
        )
        .await;
    }
    app.data(
        Some(&app.user_token(6)),
        "mutation($r: ID!) { unlikeRemark(remarkId: $r) { changed } }",
        json!({ "r": remarks[0] }),
    )
    .await;
    for (follower, followee) in [(4, 1), (5, 1), (5, 2), (6, 3)] {
        app.data(
            Some(&app.user_token(follower)),
            "mutation($u: ID!) { follow(userId: $u) }",
            json!({ "u": followee.to_string() }),
        )
        .await;
    }
    let voucher = app.create_voucher(10, 3600).await;
    let mut orders = Vec::new();
    for buyer in [4, 5] {
        let order = app.seckill(&app.user_token(buyer), &voucher).await;
        orders.push((buyer, order));
    }
    app.data(
        Some(&app.user_token(5)),
        "mutation($o: ID!) { payOrder(orderId: $o) { status } }",
        json!({ "o": orders[1].1 }),
    )
    .await;
    Seeded {
        items,
        orders,
        remarks,
        voucher,
    }
}

/// What the API answers about everything seeded, per user.
async fn answers(app: &TestApp, seeded: &Seeded) -> Vec<Value> {
    let mut answers = Vec::new();
    for user in 1..=6 {
        let token = app.user_token(user);
        for query in [CALENDAR, BOARD, VIEWER, NEARBY, MY_ORDERS] {
            answers.push(app.data(Some(&token), query, json!({})).await);
        }
        answers.push(
            app.data(Some(&token), REMARKS, json!({ "item": seeded.items[0] }))
                .await,
        );
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_redis_loses_everything_rebuild_brings_every_answer_back() {
    let app = unlimited().await;
    let seeded = seed(&app).await;
    settled(&app).await;
    assert_eq!(drifted(&app).await, Vec::<String>::new(), "before the loss");
    let before = answers(&app, &seeded).await;
    assert_eq!(
        before[0]["signCalendar"]["madeUpDays"],
        json!([15]),
        "{}",
        before[0]
    );
    assert_eq!(before[0]["signCalendar"]["signedDays"], 11);

    // Redis loses everything of this service.
    let lost = lose_everything(&app).await;
    assert!(lost > 50, "{lost} keys");

    let lost = drifted(&app).await;
    for feature in [
        "delayed jobs",
        "likes",
        "sign-in calendars",
        "season boards",
        "daily caps",
        "points balances",
        "follows",
        "feeds",
        "items near me",
        "vouchers and orders",
    ] {
        assert!(
            lost.iter().any(|d| d.starts_with(feature)),
            "{feature} not found drifted: {lost:?}"
        );
    }

    app.rebuild_from_sql().await.expect("rebuild");
    assert_eq!(
        drifted(&app).await,
        Vec::<String>::new(),
        "after the rebuild"
    );
    assert_eq!(answers(&app, &seeded).await, before);

    // A second rebuild changes nothing.
    app.rebuild_from_sql().await.expect("rebuild again");
    assert_eq!(answers(&app, &seeded).await, before);

    // Repeats are still repeats.
    let again = app
        .data(
            Some(&app.user_token(1)),
            "mutation { signIn { alreadySigned } }",
            json!({}),
        )
        .await;
    assert_eq!(again["signIn"]["alreadySigned"], true);
    let again = app
        .data(
            Some(&app.user_token(4)),
            "mutation($r: ID!) { likeRemark(remarkId: $r) { changed likeCount } }",
            json!({ "r": seeded.remarks[0] }),
        )
        .await;
    assert_eq!(again["likeRemark"]["changed"], false);
    let again = app
        .gql(
            Some(&app.user_token(4)),
            "mutation($v: ID!) { seckillVoucher(voucherId: $v) { id } }",
            json!({ "v": seeded.voucher }),
        )
        .await;
    assert_eq!(first_code(&again), "ALREADY_ORDERED", "{again}");
    let again = app
        .gql(
            Some(&app.user_token(6)),
            "mutation($d: Date!) { makeUpSignIn(date: $d) { alreadySigned } }",
            json!({ "d": day(15).to_string() }),
        )
        .await;
    assert_eq!(
        again["data"]["makeUpSignIn"]["alreadySigned"], true,
        "{again}"
    );

    // The unpaid order's expiry job is back on the delay queue, and the order payable.
    // The expiry job's id is the order's number.
    let order = local_id(&seeded.orders[0].1).to_string();
    let job = app.job("order-expiry", &order, "status").await;
    assert_eq!(job["status"], "DELAYED", "{job}");
    let paid = app
        .data(
            Some(&app.user_token(4)),
            "mutation($o: ID!) { payOrder(orderId: $o) { status } }",
            json!({ "o": seeded.orders[0].1 }),
        )
        .await;
    assert_eq!(paid["payOrder"]["status"], "PAID");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpaid_order_redis_lost_stays_payable_without_a_rebuild() {
    let app = unlimited().await;
    let seeded = seed(&app).await;
    settled(&app).await;
    lose_everything(&app).await;

    let (buyer, order) = &seeded.orders[0];
    let cancelled = app
        .data(
            Some(&app.user_token(*buyer)),
            "mutation($o: ID!) { cancelOrder(orderId: $o) { status } }",
            json!({ "o": order }),
        )
        .await;
    assert_eq!(cancelled["cancelOrder"]["status"], "CANCELLED");
    // The stock came back once, on top of SQL's: 10 - 2 sold + 1 cancelled.
    let voucher = app
        .data(
            None,
            "query($v: ID!) { voucher(id: $v) { remaining } }",
            json!({ "v": seeded.voucher }),
        )
        .await;
    assert_eq!(voucher["voucher"]["remaining"], 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_finds_a_lost_follower_count_and_a_live_order_sql_lacks_and_rebuild_mends_the_count()
{
    let app = unlimited().await;
    let seeded = seed(&app).await;
    settled(&app).await;
    assert_eq!(drifted(&app).await, Vec::<String>::new());

    // Redis failed after SQL committed a follow: the count never moved.
    let mut conn = app.redis_connection().await;
    let _: i64 = redis::cmd("HINCRBY")
        .arg(app.keys().follower_counts())
        .arg(1)
        .arg(-1)
        .query_async(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    let found = drifted(&app).await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("follows"), "{found:?}");
    app.rebuild_from_sql().await.unwrap();
    assert_eq!(drifted(&app).await, Vec::<String>::new());
    let viewer = app.data(Some(&app.user_token(1)), VIEWER, json!({})).await;
    assert_eq!(viewer["viewer"]["followerCount"], 2);

    // An order Redis sold that never reached SQL.
    sqlx::query("DELETE FROM orders WHERE id = $1")
        .bind(local_id(&seeded.orders[0].1))
        .execute(app.sql())
        .await
        .unwrap();
    let found = drifted(&app).await;
    assert!(
        found.iter().any(|d| d.starts_with("vouchers and orders")
            && d.contains("has a live order in Redis that SQL lacks")),
        "{found:?}"
    );
}

/// A remark's likers are checked in several Redis round trips when they are many (one
/// pipeline of every liker of a chunk of remarks, over a million after `bench/run`'s likes,
/// ran into the response timeout): each of them is still checked against its own relation,
/// and a relation lost in a later round trip is the one named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_checks_every_liker_of_a_remark_liked_more_often_than_one_round_trip_reads() {
    use sqlx::Row;
    const LIKERS: i64 = 25_000;
    let app = unlimited().await;
    let seeded = seed(&app).await;
    settled(&app).await;
    let remark: i64 = local_id(&seeded.remarks[1]);
    let pool = app.sql();
    // The one archived like of the remark: its day has a partition wherever SQL needs one.
    let like = sqlx::query(
        "SELECT CAST(vote_date AS BIGINT) AS day, event_order FROM vote_log WHERE remark_id = $1",
    )
    .bind(remark)
    .fetch_one(pool)
    .await
    .unwrap();
    let (day, order): (i64, i64) = (like.get("day"), like.get("event_order"));
    let voters: Vec<i64> = (0..LIKERS).map(|n| 2_000_000 + n).collect();
    for (c, chunk) in voters.chunks(500).enumerate() {
        let sql = format!(
            "INSERT INTO vote_log (event_id, remark_id, voter_id, voting, like_count, \
             voted_at_ms, vote_date, event_order) VALUES {}",
            engage::infra::db::values_placeholders(app.sql_backend(), chunk.len(), 8)
        );
        let mut insert = sqlx::query(&sql);
        for (n, voter) in chunk.iter().enumerate() {
            let n = (c * 500 + n) as i64;
            insert = insert
                .bind(format!("bulk-{n}"))
                .bind(remark)
                .bind(*voter)
                .bind(1_i32)
                .bind(2 + n)
                .bind(0_i64)
                .bind(day as i32)
                .bind(order + 1 + n);
        }
        insert.execute(pool).await.unwrap();
    }
    sqlx::query("UPDATE remarks SET like_count = $1 WHERE id = $2")
        .bind(1 + LIKERS)
        .bind(remark)
        .execute(pool)
        .await
        .unwrap();
    let keys = &app.keys();
    let shards = app.remark_shards();
    let lost = voters[17_000];
    let mut conn = app.redis_connection().await;
    let _: () = redis::cmd("HSET")
        .arg(keys.remark_info(remark, shards))
        .arg("likes")
        .arg(1 + LIKERS)
        .query_async(&mut *conn)
        .await
        .unwrap();
    for chunk in voters.chunks(5_000) {
        let mut pipe = redis::pipe();
        for &voter in chunk.iter().filter(|&&voter| voter != lost) {
            pipe.cmd("SET")
                .arg(keys.like_relation(remark, voter, shards))
                .arg("1")
                .ignore();
        }
        let _: () = pipe.query_async(&mut *conn).await.unwrap();
    }
    drop(conn);

    let reports = app.verify_all().await.expect("verify runs");
    let likes = reports.iter().find(|r| r.feature == "likes").unwrap();
    assert!(likes.checked > LIKERS as u64, "{}", likes.checked);
    assert_eq!(likes.drifted, 1, "{:?}", likes.examples);
    assert!(
        likes.examples[0].contains(&format!("voter {lost} likes it in SQL, Redis says None")),
        "{:?}",
        likes.examples
    );
    let others: Vec<&str> = reports
        .iter()
        .filter(|r| r.feature != "likes" && !r.is_clean())
        .map(|r| r.feature)
        .collect();
    assert!(others.is_empty(), "{others:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_rebuild_goes_on_from_where_it_stopped_and_a_finished_one_starts_over() {
    let app = unlimited().await;
    seed(&app).await;
    settled(&app).await;
    lose_everything(&app).await;
    let signed = async |user: i64| {
        app.data(Some(&app.user_token(user)), CALENDAR, json!({}))
            .await["signCalendar"]["signedDays"]
            .clone()
    };

    // A run that stopped after the calendars of users 1 to 3.
    let mut conn = app.redis_connection().await;
    let _: i64 = redis::cmd("HSET")
        .arg(app.keys().recovery_cursors())
        .arg("sign-in calendars/")
        .arg(3)
        .query_async(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    app.rebuild_from_sql().await.unwrap();
    assert_eq!(signed(2).await, 0, "not redone");
    assert_eq!(signed(5).await, 11, "done by the run that went on");

    // The run finished: the next one starts over.
    app.rebuild_from_sql().await.unwrap();
    assert_eq!(signed(2).await, 11);
    assert_eq!(drifted(&app).await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn awards_made_while_a_rebuild_runs_are_all_on_the_rebuilt_board() {
    awards_during_a_rebuild(None).await;
}

/// The same with the points keys in seven buckets: every bucket is held back, caught up
/// and swapped in, and awards in different buckets (whose stream entries may share an id)
/// are all archived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn awards_made_while_a_rebuild_runs_in_seven_buckets_are_all_on_the_rebuilt_board() {
    awards_during_a_rebuild(Some(7)).await;
}

async fn awards_during_a_rebuild(buckets: Option<u32>) {
    let app = std::sync::Arc::new(in_buckets(buckets).await);
    seed(&app).await;
    settled(&app).await;
    lose_everything(&app).await;

    // Awards keep coming from four clients before, during and after the rebuild (some are
    // held back while it catches up).
    let service = app.token(900, engage::infra::auth::Role::Service);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|client| {
            let (app, service, stop) = (app.clone(), service.clone(), stop.clone());
            tokio::spawn(async move {
                let mut awarded = 0;
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    n += 1;
                    awarded += app
                        .data(
                            Some(&service),
                            "mutation($u: ID!, $k: String!) { awardPoints(userId: $u, type: NOTE, points: 1, idempotencyKey: $k) { awarded } }",
                            json!({ "u": (1000 + client * 100_000 + n).to_string(), "k": "race" }),
                        )
                        .await["awardPoints"]["awarded"]
                        .as_i64()
                        .unwrap();
                }
                awarded
            })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    app.rebuild_from_sql().await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut awarded = 0;
    for client in clients {
        awarded += client.await.unwrap();
    }
    assert!(awarded > 0);
    settled(&app).await;
    assert_eq!(
        drifted(&app).await,
        Vec::<String>::new(),
        "{awarded} awarded meanwhile"
    );
}
