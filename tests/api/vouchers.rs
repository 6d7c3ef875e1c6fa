//! Flash-sale vouchers: never oversold, one order per person, windows, expiry, pay races,
//! replay safety, live stock.

use std::{sync::Arc, time::Duration};

use chrono::{TimeZone, Utc};
use serde_json::{json, Value};
use sqlx::Row;

use crate::harness::{first_code, global_id, local_id, unlimited, TestApp};

const CREATE: &str = "mutation($input: CreateVoucherInput!) { createVoucher(input: $input) { id title stock remaining beginsAt endsAt } }";
const SECKILL: &str =
    "mutation($v: ID!) { seckillVoucher(voucherId: $v) { id status payBy voucher { id } } }";
const PAY: &str = "mutation($o: ID!) { payOrder(orderId: $o) { id status } }";
const CANCEL: &str = "mutation($o: ID!) { cancelOrder(orderId: $o) { id status } }";

async fn busy_app() -> TestApp {
    TestApp::spawn_with(|config| {
        // A thousand users behind one test client: no per-address limit of any kind.
        unlimited(config);
        config.jobs.jobs_concurrency = 64;
    })
    .await
}

/// The stock checks once the order consumer has caught up; they must all agree.
async fn consistent(app: &TestApp) -> Vec<engage::features::vouchers::StockCheck> {
    let streams: Vec<String> = (0..app.sale_shards())
        .map(|s| app.keys().order_stream(s))
        .collect();
    crate::harness::streams_settled(app, &streams, "archive").await;
    for _ in 0..300 {
        let checks = app.vouchers().stock_checks().await.unwrap();
        if checks.iter().all(|c| c.consistent()) {
            return checks;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "Redis and SQL never agreed: {:?}",
        app.vouchers().stock_checks().await.unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_attempts_by_a_thousand_users_never_oversell_stock_of_100() {
    let app = Arc::new(busy_app().await);
    let voucher = app.create_voucher(100, 600).await;
    let attempts: Vec<_> = (0..2000)
        .map(|n| {
            let (app, voucher) = (app.clone(), voucher.clone());
            tokio::spawn(async move {
                let buyer = 10_000 + (n % 1000);
                app.gql(
                    Some(&app.user_token(buyer)),
                    SECKILL,
                    json!({ "v": voucher }),
                )
                .await
            })
        })
        .collect();
    let (mut ordered, mut refused) = (0, std::collections::HashMap::<String, usize>::new());
    for attempt in attempts {
        let body = attempt.await.unwrap();
        match body["errors"][0]["extensions"]["code"].as_str() {
            None => ordered += 1,
            Some(code) => *refused.entry(code.to_string()).or_default() += 1,
        }
    }
    assert_eq!(ordered, 100, "exactly the stock was sold: {refused:?}");
    assert!(
        refused
            .keys()
            .all(|code| code == "SOLD_OUT" || code == "ALREADY_ORDERED"),
        "{refused:?}"
    );

    let checks = consistent(&app).await;
    let check = checks
        .iter()
        .find(|c| c.voucher_id == local_id(&voucher))
        .unwrap();
    assert_eq!(
        (check.redis_stock, check.sql_stock, check.sql_live_orders),
        (0, 0, 100)
    );
    let rows = sqlx::query("SELECT COUNT(*) AS n, COUNT(DISTINCT buyer_id) AS buyers FROM orders WHERE voucher_id = $1")
        .bind(local_id(&voucher))
        .fetch_one(app.sql())
        .await
        .unwrap();
    assert_eq!(rows.get::<i64, _>("n"), 100);
    assert_eq!(rows.get::<i64, _>("buyers"), 100, "no user twice");
    let remaining = app
        .data(
            None,
            "query($v: ID!) { voucher(id: $v) { remaining stock } }",
            json!({ "v": voucher }),
        )
        .await;
    assert_eq!(
        remaining["voucher"],
        json!({ "remaining": 0, "stock": 100 })
    );
}

#[tokio::test]
async fn the_window_is_checked_against_the_servers_clock() {
    let app = busy_app().await;
    let voucher = app.create_voucher(5, 600).await;
    let token = app.user_token(20);
    app.advance_clock(chrono::Duration::minutes(-5));
    assert_eq!(
        first_code(
            &app.gql(Some(&token), SECKILL, json!({ "v": voucher }))
                .await
        ),
        "NOT_STARTED"
    );
    app.advance_clock(chrono::Duration::hours(2));
    assert_eq!(
        first_code(
            &app.gql(Some(&token), SECKILL, json!({ "v": voucher }))
                .await
        ),
        "ENDED"
    );
    assert_eq!(
        first_code(&app.gql(Some(&token), SECKILL, json!({ "v": "123" })).await),
        "NOT_FOUND"
    );
    assert_eq!(
        first_code(&app.gql(None, SECKILL, json!({ "v": voucher })).await),
        "UNAUTHENTICATED"
    );
}

#[tokio::test]
async fn paying_past_pay_by_answers_pay_window_over_and_a_settled_order_still_conflicts() {
    let app = busy_app().await;
    let voucher = app.create_voucher(3, 60).await;
    let late_buyer = app.user_token(40);
    let order = app
        .data(Some(&late_buyer), SECKILL, json!({ "v": voucher }))
        .await["seckillVoucher"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    // Paid at once past pay-by: whether the expiry job or the payment ends the order, the
    // buyer is told the window is over, not that the sale ended.
    app.advance_clock(chrono::Duration::seconds(61));
    let late = app.gql(Some(&late_buyer), PAY, json!({ "o": order })).await;
    assert_eq!(first_code(&late), "PAY_WINDOW_OVER", "{late}");
    let again = app.gql(Some(&late_buyer), PAY, json!({ "o": order })).await;
    assert_eq!(first_code(&again), "PAY_WINDOW_OVER", "{again}");
    let cancel = app
        .gql(Some(&late_buyer), CANCEL, json!({ "o": order }))
        .await;
    assert_eq!(
        first_code(&cancel),
        "CONFLICT",
        "cancelling an expired order: {cancel}"
    );

    // Within the window, a settled order keeps CONFLICT for anything else.
    let buyer = app.user_token(41);
    let paid = app
        .data(Some(&buyer), SECKILL, json!({ "v": voucher }))
        .await["seckillVoucher"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        app.data(Some(&buyer), PAY, json!({ "o": paid })).await["payOrder"]["status"],
        "PAID"
    );
    let cancel = app.gql(Some(&buyer), CANCEL, json!({ "o": paid })).await;
    assert_eq!(first_code(&cancel), "CONFLICT", "{cancel}");
    let cancelled = app
        .data(Some(&app.user_token(42)), SECKILL, json!({ "v": voucher }))
        .await["seckillVoucher"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    app.data(Some(&app.user_token(42)), CANCEL, json!({ "o": cancelled }))
        .await;
    let pay = app
        .gql(Some(&app.user_token(42)), PAY, json!({ "o": cancelled }))
        .await;
    assert_eq!(
        first_code(&pay),
        "CONFLICT",
        "paying a cancelled order: {pay}"
    );
    consistent(&app).await;
}

#[tokio::test]
async fn an_unpaid_order_expires_at_pay_by_and_the_buyer_may_buy_again() {
    let app = busy_app().await;
    let voucher = app.create_voucher(1, 60).await;
    let token = app.user_token(30);
    let order = app
        .data(Some(&token), SECKILL, json!({ "v": voucher }))
        .await["seckillVoucher"]
        .clone();
    assert_eq!(order["status"], "UNPAID");
    let order_id = order["id"].as_str().unwrap().to_string();
    assert_eq!(
        first_code(
            &app.gql(Some(&app.user_token(31)), SECKILL, json!({ "v": voucher }))
                .await
        ),
        "SOLD_OUT"
    );
    assert_eq!(
        first_code(
            &app.gql(Some(&token), SECKILL, json!({ "v": voucher }))
                .await
        ),
        "ALREADY_ORDERED"
    );

    app.advance_clock(chrono::Duration::seconds(61));
    let mut status = Value::Null;
    for _ in 0..200 {
        let orders = app
            .data(
                Some(&token),
                "{ myOrders { edges { node { id status } } } }",
                json!({}),
            )
            .await;
        status = orders["myOrders"]["edges"][0]["node"]["status"].clone();
        if status == "EXPIRED" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(status, "EXPIRED");
    let late = app.gql(Some(&token), PAY, json!({ "o": order_id })).await;
    assert_eq!(
        first_code(&late),
        "PAY_WINDOW_OVER",
        "too late to pay: {late}"
    );
    consistent(&app).await;
    let again = app
        .data(Some(&token), SECKILL, json!({ "v": voucher }))
        .await;
    assert_eq!(
        again["seckillVoucher"]["status"], "UNPAID",
        "the stock came back and the buyer may buy again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paying_and_expiring_race_and_exactly_one_wins() {
    let app = Arc::new(busy_app().await);
    for round in 0..20 {
        let voucher = app.create_voucher(1, 5).await;
        let token = app.user_token(100 + round);
        let order = app.seckill(&token, &voucher).await;
        // Right at pay-by: the expiry job and the payment go at the same moment.
        app.advance_clock(chrono::Duration::milliseconds(5000));
        let (pay, cancel) = tokio::join!(
            app.gql(Some(&token), PAY, json!({ "o": order })),
            app.gql(Some(&token), CANCEL, json!({ "o": order })),
        );
        let winners = [&pay, &cancel]
            .iter()
            .filter(|b| b.get("errors").is_none())
            .count();
        assert!(winners <= 1, "pay and cancel both won: {pay} {cancel}");
    }
    let checks = consistent(&app).await;
    assert!(checks.iter().all(|c| c.consistent()));
}

#[tokio::test]
async fn pay_and_cancel_are_idempotent_and_only_for_the_buyer() {
    let app = busy_app().await;
    let voucher = app.create_voucher(3, 600).await;
    let token = app.user_token(40);
    let order = app
        .data(Some(&token), SECKILL, json!({ "v": voucher }))
        .await["seckillVoucher"]["id"]
        .clone();
    assert_eq!(
        first_code(
            &app.gql(Some(&app.user_token(41)), PAY, json!({ "o": order }))
                .await
        ),
        "NOT_FOUND"
    );
    assert_eq!(
        app.data(Some(&token), PAY, json!({ "o": order })).await["payOrder"]["status"],
        "PAID"
    );
    assert_eq!(
        app.data(Some(&token), PAY, json!({ "o": order })).await["payOrder"]["status"],
        "PAID"
    );
    assert_eq!(
        first_code(&app.gql(Some(&token), CANCEL, json!({ "o": order })).await),
        "CONFLICT"
    );

    let second = app
        .data(Some(&app.user_token(42)), SECKILL, json!({ "v": voucher }))
        .await["seckillVoucher"]["id"]
        .clone();
    let buyer = app.user_token(42);
    assert_eq!(
        app.data(Some(&buyer), CANCEL, json!({ "o": second })).await["cancelOrder"]["status"],
        "CANCELLED"
    );
    assert_eq!(
        app.data(Some(&buyer), CANCEL, json!({ "o": second })).await["cancelOrder"]["status"],
        "CANCELLED"
    );
    let checks = consistent(&app).await;
    let check = checks
        .iter()
        .find(|c| c.voucher_id == local_id(&voucher))
        .unwrap();
    assert_eq!(
        (check.redis_stock, check.sql_stock),
        (2, 2),
        "one paid, one cancelled and returned"
    );
}

#[tokio::test]
async fn replaying_the_order_stream_inserts_nothing_twice() {
    let app = busy_app().await;
    let voucher = app.create_voucher(10, 600).await;
    for buyer in 0..5 {
        let order = app
            .data(
                Some(&app.user_token(50 + buyer)),
                SECKILL,
                json!({ "v": voucher }),
            )
            .await;
        if buyer == 0 {
            let id = order["seckillVoucher"]["id"].clone();
            app.data(Some(&app.user_token(50)), CANCEL, json!({ "o": id }))
                .await;
        }
    }
    consistent(&app).await;
    let mut conn = app.redis_connection().await;
    for shard in 0..app.sale_shards() {
        let _: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("SETID")
            .arg(app.keys().order_stream(shard))
            .arg("archive")
            .arg("0")
            .query_async(&mut *conn)
            .await;
    }
    drop(conn);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let checks = consistent(&app).await;
    let check = checks
        .iter()
        .find(|c| c.voucher_id == local_id(&voucher))
        .unwrap();
    assert_eq!((check.sql_stock, check.sql_live_orders), (6, 4));
    let orders: i64 = sqlx::query("SELECT COUNT(*) AS n FROM orders")
        .fetch_one(app.sql())
        .await
        .unwrap()
        .get("n");
    assert_eq!(orders, 5);
}

#[tokio::test]
async fn only_admins_create_vouchers_with_checked_input() {
    let app = busy_app().await;
    let admin = app.admin_token();
    let item = app.create_item().await;
    let at = |h: i64| {
        (Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap() + chrono::Duration::hours(h))
            .to_rfc3339()
    };
    let input = |stock: i64, begins: String, ends: String, pay: i64| json!({ "input": { "itemId": item, "title": "Deal", "stock": stock, "beginsAt": begins, "endsAt": ends, "payWithinSeconds": pay } });
    assert_eq!(
        app.data(Some(&admin), CREATE, input(5, at(0), at(1), 60))
            .await["createVoucher"]["remaining"],
        5
    );
    for bad in [
        input(0, at(0), at(1), 60),
        input(5, at(1), at(0), 60),
        input(5, "soon".into(), at(1), 60),
        input(5, at(0), at(1), 0),
    ] {
        assert_eq!(
            first_code(&app.gql(Some(&admin), CREATE, bad.clone()).await),
            "BAD_USER_INPUT",
            "{bad}"
        );
    }
    assert_eq!(
        first_code(
            &app.gql(Some(&app.user_token(3)), CREATE, input(5, at(0), at(1), 60))
                .await
        ),
        "FORBIDDEN"
    );
}

#[tokio::test]
async fn someone_elses_order_and_a_missing_one_are_both_not_found() {
    let app = busy_app().await;
    let voucher = app.create_voucher(3, 600).await;
    let order = app.seckill(&app.user_token(50), &voucher).await;
    let missing = global_id("Order", local_id(&order) + 1000);
    let stranger = app.user_token(51);
    for mutation in [PAY, CANCEL] {
        let theirs = app
            .gql(Some(&stranger), mutation, json!({ "o": order }))
            .await;
        let nobodys = app
            .gql(Some(&stranger), mutation, json!({ "o": missing }))
            .await;
        assert_eq!(first_code(&theirs), "NOT_FOUND", "{theirs}");
        assert_eq!(first_code(&nobodys), "NOT_FOUND", "{nobodys}");
        // The same words, but for the id: nothing tells the two apart.
        assert_eq!(
            theirs["errors"][0]["message"]
                .as_str()
                .unwrap()
                .replace(&local_id(&order).to_string(), "ID"),
            nobodys["errors"][0]["message"]
                .as_str()
                .unwrap()
                .replace(&local_id(&missing).to_string(), "ID"),
        );
    }
    // The order is untouched and still its buyer's to pay.
    assert_eq!(
        app.data(Some(&app.user_token(50)), PAY, json!({ "o": order }))
            .await["payOrder"]["status"],
        "PAID"
    );
}

/// Where the delay queue holds an order's expiry job: `None` when nowhere pending.
async fn pending_expiry(app: &TestApp, order: &str) -> Option<&'static str> {
    // The expiry job's id is the order's number.
    let order = local_id(order);
    let topic = engage::features::vouchers::EXPIRY_TOPIC;
    let keys = &app.keys();
    let mut conn = app.redis_connection().await;
    let (delayed, running, ready): (Option<f64>, Option<f64>, Option<i64>) = redis::pipe()
        .cmd("ZSCORE")
        .arg(keys.jobs_delayed(topic))
        .arg(order)
        .cmd("ZSCORE")
        .arg(keys.jobs_running(topic))
        .arg(order)
        .cmd("ZRANK")
        .arg(keys.jobs_waiting(topic))
        .arg(order)
        .query_async(&mut *conn)
        .await
        .unwrap();
    match (delayed, running, ready) {
        (Some(_), _, _) => Some("delayed"),
        (_, Some(_), _) => Some("running"),
        (_, _, Some(_)) => Some("ready"),
        _ => None,
    }
}

#[tokio::test]
async fn a_cancelled_or_paid_order_leaves_no_expiry_job_behind() {
    let app = busy_app().await;
    // A day to pay: a job left behind would wait that long.
    let voucher = app.create_voucher(5, 86_400).await;
    for (buyer, settle, field) in [(60, CANCEL, "cancelOrder"), (61, PAY, "payOrder")] {
        let token = app.user_token(buyer);
        let order = app.seckill(&token, &voucher).await;
        assert_eq!(pending_expiry(&app, &order).await, Some("delayed"));
        let settled = app.data(Some(&token), settle, json!({ "o": order })).await;
        assert!(settled[field]["status"].is_string(), "{settled}");
        // The order consumer may be scheduling the job of the order it archives while the
        // order is settled; it then finds the order settled and takes the job off again.
        crate::harness::eventually(async || pending_expiry(&app, &order).await.is_none()).await;
        // Once it has caught up, it does not bring the job back.
        consistent(&app).await;
        assert_eq!(
            pending_expiry(&app, &order).await,
            None,
            "{field}, archived"
        );

        // A consumer far behind handles the order's creation only now, after the queue
        // forgot the cancelled job (it keeps the last 1,000 finished jobs per topic).
        forget_job(&app, &order).await;
        let late = engage::features::vouchers::NewOrder {
            order_id: local_id(&order),
            voucher_id: local_id(&voucher),
            created_at_ms: app.now_ms(),
            pay_by_ms: app.now_ms() + 86_400_000,
        };
        let mut sql = app.sql().acquire().await.unwrap();
        app.vouchers()
            .ensure_expiries(&mut sql, &[late])
            .await
            .unwrap();
        assert_eq!(pending_expiry(&app, &order).await, None, "{field}, late");
    }
}

/// Removes every trace of `order`'s expiry job (its job id is the order's number) from the
/// delay queue, as when it ages out of the finished jobs kept.
async fn forget_job(app: &TestApp, order: &str) {
    let id = local_id(order);
    let topic = engage::features::vouchers::EXPIRY_TOPIC;
    let keys = &app.keys();
    let mut conn = app.redis_connection().await;
    let () = redis::pipe()
        .cmd("DEL")
        .arg(keys.job(topic, &id.to_string()))
        .ignore()
        .cmd("ZREM")
        .arg(keys.jobs_finished(topic))
        .arg(id)
        .ignore()
        .query_async(&mut *conn)
        .await
        .unwrap();
}

/// A fresh app whose consumers retry quickly.
async fn quick_app() -> TestApp {
    TestApp::spawn_with(|config| {
        unlimited(config);
        config.consumer_max_backoff_ms = 200;
        config.consumer_claim_idle_ms = 300;
    })
    .await
}

/// An archived order's voucher, created and pay-by times.
async fn archived_order(app: &TestApp, order: i64) -> (i64, i64, i64, String) {
    let row = sqlx::query(
        "SELECT voucher_id, created_at_ms, pay_by_ms, status FROM orders WHERE id = $1",
    )
    .bind(order)
    .fetch_one(app.sql())
    .await
    .unwrap();
    (
        row.get("voucher_id"),
        row.get("created_at_ms"),
        row.get("pay_by_ms"),
        row.get("status"),
    )
}

/// XADDs order events to a voucher's stream in one transaction, so that one batch reads
/// them all.
async fn order_events(app: &TestApp, voucher: i64, events: &[Vec<(&str, String)>]) {
    let mut pipe = redis::pipe();
    pipe.atomic();
    let stream = app.keys().order_stream_of(voucher, app.sale_shards());
    for fields in events {
        let add = pipe.cmd("XADD").arg(&stream).arg("*");
        for (name, value) in fields {
            add.arg(*name).arg(value);
        }
        add.ignore();
    }
    let mut conn = app.redis_connection().await;
    let () = pipe.query_async(&mut *conn).await.unwrap();
}

/// Buyer 40's order A (archived UNPAID), A's `settled` (cancelled) event and the `created`
/// event of their next order B.
async fn rebought(
    app: &TestApp,
) -> (
    i64,
    Vec<(&'static str, String)>,
    i64,
    Vec<(&'static str, String)>,
) {
    let voucher = app.create_voucher(5, 600).await;
    let a: i64 = local_id(&app.seckill(&app.user_token(40), &voucher).await);
    consistent(app).await;
    let (voucher, created, pay_by, status) = archived_order(app, a).await;
    assert_eq!(status, "UNPAID");
    let now = app.now_ms();
    let settled = vec![
        ("type", "settled".to_string()),
        ("order", a.to_string()),
        ("voucher", voucher.to_string()),
        ("buyer", "40".to_string()),
        ("status", "CANCELLED".to_string()),
        ("at", now.to_string()),
        ("created", created.to_string()),
        ("pay_by", pay_by.to_string()),
    ];
    let b = app.next_id().await;
    let bought = vec![
        ("type", "created".to_string()),
        ("order", b.to_string()),
        ("voucher", voucher.to_string()),
        ("buyer", "40".to_string()),
        ("created", now.to_string()),
        ("pay_by", (now + 600_000).to_string()),
    ];
    (voucher, settled, b, bought)
}

async fn orders_settled(app: &TestApp) {
    let streams: Vec<String> = (0..app.sale_shards())
        .map(|s| app.keys().order_stream(s))
        .collect();
    crate::harness::streams_settled(app, &streams, "archive").await;
}

#[tokio::test]
async fn a_rebought_order_whose_predecessor_settles_in_the_same_batch_reaches_sql() {
    let app = quick_app().await;
    let (voucher, settled, b, bought) = rebought(&app).await;
    order_events(&app, voucher, &[settled, bought]).await;
    orders_settled(&app).await;
    let (_, _, _, status) = archived_order(&app, b).await;
    assert_eq!(status, "UNPAID");
    let remaining: i64 = sqlx::query("SELECT remaining FROM vouchers WHERE id = $1")
        .bind(voucher)
        .fetch_one(app.sql())
        .await
        .unwrap()
        .get("remaining");
    assert_eq!(remaining, 4, "A's stock came back, B took one");
}

#[tokio::test]
async fn a_rebought_order_archived_before_its_predecessor_settles_waits_for_it() {
    let app = quick_app().await;
    let (voucher, settled, b, bought) = rebought(&app).await;
    // A's settlement is taken by another instance, which dies before it commits; B comes
    // to this one, and is archived first.
    let stream = app.keys().order_stream_of(voucher, app.sale_shards());
    let mut pipe = redis::pipe();
    pipe.atomic();
    let add = pipe.cmd("XADD").arg(&stream).arg("*");
    for (name, value) in &settled {
        add.arg(*name).arg(value);
    }
    add.ignore();
    pipe.cmd("XREADGROUP")
        .arg("GROUP")
        .arg("archive")
        .arg("an-instance-that-dies")
        .arg("COUNT")
        .arg(10)
        .arg("STREAMS")
        .arg(&stream)
        .arg(">")
        .ignore();
    let mut conn = app.redis_connection().await;
    let () = pipe.query_async(&mut *conn).await.unwrap();
    drop(conn);
    order_events(&app, voucher, &[bought]).await;
    orders_settled(&app).await;
    let (_, _, _, status) = archived_order(&app, b).await;
    assert_eq!(status, "UNPAID");
    let a: i64 = settled[1].1.parse().unwrap();
    let (_, _, _, a) = archived_order(&app, a).await;
    assert_eq!(a, "CANCELLED");
}

#[tokio::test]
async fn an_order_expiry_job_keeps_trying_for_hours_before_it_gives_up() {
    let app = busy_app().await;
    let voucher = app.create_voucher(1, 600).await;
    let order = app.seckill(&app.user_token(80), &voucher).await;
    let topic = engage::features::vouchers::EXPIRY_TOPIC;
    let job = app
        .jobs()
        .find(topic, &local_id(&order).to_string())
        .await
        .unwrap()
        .expect("the order's expiry job");
    let policy = app.jobs().registry.policy(topic);
    let retrying: Duration = (1..job.max_attempts)
        .map(|attempt| policy.retry_delay(attempt))
        .sum();
    assert!(
        retrying >= Duration::from_secs(3 * 3600),
        "{} attempts over {retrying:?}",
        job.max_attempts
    );
}

async fn sql_status(app: &TestApp, order: &str) -> String {
    sqlx::query("SELECT status FROM orders WHERE id = $1")
        .bind(local_id(order))
        .fetch_one(app.sql())
        .await
        .unwrap()
        .get("status")
}

#[tokio::test]
async fn an_unpaid_order_whose_expiry_job_was_lost_is_expired_by_the_sweep_after_pay_by() {
    let app = TestApp::spawn_with(|config| {
        unlimited(config);
        config.vouchers.order_sweep_seconds = 1;
    })
    .await;
    let voucher = app.create_voucher(1, 60).await;
    let token = app.user_token(90);
    let order = app.seckill(&token, &voucher).await;
    consistent(&app).await;
    assert_eq!(pending_expiry(&app, &order).await, Some("delayed"));
    // Redis loses the job (and nothing rebuilds it).
    let mut conn = app.redis_connection().await;
    let () = redis::cmd("ZREM")
        .arg(
            app.keys()
                .jobs_delayed(engage::features::vouchers::EXPIRY_TOPIC),
        )
        .arg(local_id(&order))
        .query_async(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    forget_job(&app, &order).await;
    assert_eq!(pending_expiry(&app, &order).await, None);

    // Just past pay-by the order is left to its job a little longer.
    app.advance_clock(chrono::Duration::seconds(61));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(sql_status(&app, &order).await, "UNPAID");

    app.advance_clock(chrono::Duration::seconds(60));
    crate::harness::eventually(async || sql_status(&app, &order).await == "EXPIRED").await;
    consistent(&app).await;
    assert_eq!(
        app.data(Some(&token), SECKILL, json!({ "v": voucher }))
            .await["seckillVoucher"]["status"],
        "UNPAID",
        "the stock came back and the buyer may buy again"
    );
}

#[tokio::test]
async fn an_orders_expiry_job_is_recorded_in_sql_with_the_order() {
    let app = busy_app().await;
    let voucher = app.create_voucher(5, 600).await;
    let mut orders = Vec::new();
    for buyer in 0..3 {
        let order = app
            .data(
                Some(&app.user_token(95 + buyer)),
                SECKILL,
                json!({ "v": voucher }),
            )
            .await["seckillVoucher"]["id"]
            .as_str()
            .unwrap()
            .to_string();
        // The expiry job's id is the order's number.
        orders.push(local_id(&order).to_string());
    }
    consistent(&app).await;
    let rows: Vec<String> = sqlx::query("SELECT job_id FROM pending_job WHERE topic = $1")
        .bind(engage::features::vouchers::EXPIRY_TOPIC)
        .fetch_all(app.sql())
        .await
        .unwrap()
        .iter()
        .map(|row| row.get("job_id"))
        .collect();
    orders.sort();
    let mut rows = rows;
    rows.sort();
    assert_eq!(rows, orders, "each unpaid order's expiry job has its row");
    let report = app.jobs().verify().await.unwrap();
    assert!(report.is_clean(), "{report:?}");
}

#[tokio::test]
async fn with_replicas_required_an_order_is_acknowledged_only_once_they_hold_it() {
    use engage::infra::redis::{durability::DurableWrite, RedisMode};
    // More replicas than any master has: the order is taken on the master, but the request
    // cannot be acknowledged as safe from a failover, so it answers UNAVAILABLE; the retry
    // finds the order.
    let app = TestApp::spawn_with(|config| {
        config.redis_wait_replicas = 5;
        config.redis_wait_timeout_ms = 100;
        config.redis_wait_writes = vec![DurableWrite::Orders];
        if config.redis_mode == RedisMode::Pool {
            config.redis_mode = RedisMode::Shared;
        }
    })
    .await;
    let first = app.create_voucher(10, 60).await;
    let token = app.user_token(7);
    let response = app.gql(Some(&token), SECKILL, json!({ "v": first })).await;
    assert_eq!(first_code(&response), "UNAVAILABLE", "{response}");
    let retried = app.gql(Some(&token), SECKILL, json!({ "v": first })).await;
    assert_eq!(first_code(&retried), "ALREADY_ORDERED", "{retried}");

    // Concurrent orders share their WAITs: one in flight per master, the others join the
    // next, so a replica that never answers costs each order about one timeout rather than
    // one per order queued ahead of it; each order is still taken exactly once.
    let crowd = app.create_voucher(100, 60).await;
    let rounds_before = metric(&app, "engage_redis_wait_rounds_total").await;
    let orders = (100..140).map(|buyer| {
        let token = app.user_token(buyer);
        let crowd = crowd.clone();
        let app = &app;
        async move { app.gql(Some(&token), SECKILL, json!({ "v": crowd })).await }
    });
    for response in futures::future::join_all(orders).await {
        assert_eq!(first_code(&response), "UNAVAILABLE", "{response}");
    }
    let rounds = metric(&app, "engage_redis_wait_rounds_total").await - rounds_before;
    assert!(rounds < 40.0, "40 orders sent {rounds} WAITs");
    for buyer in 100..140 {
        let retried = app
            .gql(Some(&app.user_token(buyer)), SECKILL, json!({ "v": crowd }))
            .await;
        assert_eq!(first_code(&retried), "ALREADY_ORDERED", "{retried}");
    }

    // On the cluster every master has one replica: WAIT 1 is met and the order answers.
    if app.on_cluster() {
        let app = TestApp::spawn_with(|config| config.redis_wait_replicas = 1).await;
        let second = app.create_voucher(10, 60).await;
        app.seckill(&app.user_token(7), &second).await;
    }

    // A pool cannot wait: WAIT would ask about another connection's writes.
    let mut config = crate::harness::base_config();
    config.redis_mode = RedisMode::Pool;
    config.redis_wait_replicas = 1;
    assert!(config.check().is_err());
}

/// The value of a counter of `/metrics` (0 before it is first counted).
async fn metric(app: &TestApp, name: &str) -> f64 {
    let metrics = app.get_text("/metrics").await;
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .map_or(0.0, |value| value.trim().parse().expect("a number"))
}

const MY_ORDERS: &str =
    "query($first: Int, $after: String) { myOrders(first: $first, after: $after) {
    edges { node { id status } } pageInfo { hasNextPage endCursor } } }";
const ORDER: &str = "query($id: ID!) { order(id: $id) { id status } }";

/// `(id, status)` of every order of the buyer's `myOrders`, page after page of `page`.
async fn my_orders(app: &TestApp, token: &str, page: i64) -> Vec<(String, String)> {
    let (mut orders, mut after) = (Vec::new(), Value::Null);
    loop {
        let body = app
            .data(
                Some(token),
                MY_ORDERS,
                json!({ "first": page, "after": after }),
            )
            .await;
        for edge in body["myOrders"]["edges"].as_array().unwrap() {
            orders.push((
                edge["node"]["id"].as_str().unwrap().to_string(),
                edge["node"]["status"].as_str().unwrap().to_string(),
            ));
        }
        if body["myOrders"]["pageInfo"]["hasNextPage"] != true {
            return orders;
        }
        after = body["myOrders"]["pageInfo"]["endCursor"].clone();
    }
}

#[tokio::test]
async fn orders_read_back_at_once_after_buying_paying_and_cancelling() {
    // The archive lingers a minute: after the first order of a batch, SQL lags every write
    // by far more than this test takes.
    let app = TestApp::spawn_with(|config| {
        unlimited(config);
        config.archive_linger_ms = 60_000;
    })
    .await;
    let token = app.user_token(5);
    let mut orders = Vec::new();
    for _ in 0..3 {
        let voucher = app.create_voucher(10, 600).await;
        orders.push(app.seckill(&token, &voucher).await);
    }
    let unpaid = |id: &String| (id.clone(), "UNPAID".to_string());
    let archived: i64 = sqlx::query("SELECT COUNT(*) AS n FROM orders WHERE buyer_id = 5")
        .fetch_one(app.sql())
        .await
        .unwrap()
        .get("n");
    assert!(archived < 3, "SQL lags: it has {archived} of them yet");
    assert_eq!(
        my_orders(&app, &token, 2).await,
        [unpaid(&orders[2]), unpaid(&orders[1]), unpaid(&orders[0])],
        "just bought: newest first, across pages, each once"
    );
    app.data(Some(&token), PAY, json!({ "o": orders[0] })).await;
    app.data(Some(&token), CANCEL, json!({ "o": orders[1] }))
        .await;
    assert_eq!(
        my_orders(&app, &token, 20).await,
        [
            unpaid(&orders[2]),
            (orders[1].clone(), "CANCELLED".into()),
            (orders[0].clone(), "PAID".into())
        ]
    );
    let one = app
        .data(Some(&token), ORDER, json!({ "id": orders[0] }))
        .await;
    assert_eq!(one["order"], json!({ "id": orders[0], "status": "PAID" }));
    let stranger = app
        .data(Some(&app.user_token(6)), ORDER, json!({ "id": orders[0] }))
        .await;
    assert_eq!(
        stranger["order"],
        Value::Null,
        "another buyer's order is null"
    );
    assert!(my_orders(&app, &app.user_token(6), 20).await.is_empty());
}

#[tokio::test]
async fn my_orders_merge_redis_and_sql_without_duplicates_once_archived() {
    let app = busy_app().await;
    let token = app.user_token(7);
    let mut orders = Vec::new();
    for _ in 0..4 {
        let voucher = app.create_voucher(10, 600).await;
        orders.push(app.seckill(&token, &voucher).await);
    }
    app.data(Some(&token), PAY, json!({ "o": orders[3] })).await;
    // Once archived, each order is in SQL and still noted in Redis: listed once.
    crate::harness::eventually(async || {
        let archived: i64 = sqlx::query("SELECT COUNT(*) AS n FROM orders WHERE buyer_id = 7")
            .fetch_one(app.sql())
            .await
            .unwrap()
            .get("n");
        archived == 4
    })
    .await;
    let listed = my_orders(&app, &token, 3).await;
    let ids: Vec<&String> = listed.iter().map(|(id, _)| id).collect();
    assert_eq!(ids, [&orders[3], &orders[2], &orders[1], &orders[0]]);
    assert_eq!(listed[0].1, "PAID");
}
