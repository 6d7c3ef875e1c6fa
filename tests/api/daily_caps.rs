//! Points' daily caps count each user's own day, in the user's time zone, with the same
//! effective day as sign-in while a zone change takes effect.

use chrono::{DateTime, TimeZone, Utc};
use engage::infra::auth::Role;
use serde_json::{json, Value};

use crate::harness::{scan, streams_settled, unlink, TestApp};

const AWARD: &str = "mutation($u: ID!, $t: PointsType!, $p: Int!, $k: String!) {
    awardPoints(userId: $u, type: $t, points: $p, idempotencyKey: $k) { awarded } }";
const TODAY: &str = "{ pointsToday { type points cap } }";
const SET_ZONE: &str = "mutation($z: String!) { setTimeZone(zone: $z) { timeZone } }";
const SIGN_IN: &str = "mutation { signIn { date } }";

fn at(year: i32, month: u32, day: u32, hour: u32, minute: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(year, month, day, hour, minute, 0)
        .unwrap()
}

/// ANSWER is capped at 20 a day: asks for the whole cap under a new key, answers what it paid.
async fn answer_cap(app: &TestApp, user: i64, key: &str) -> i64 {
    let service = app.token(900, Role::Service);
    let variables = json!({ "u": user.to_string(), "t": "ANSWER", "p": 20, "k": key });
    app.data(Some(&service), AWARD, variables).await["awardPoints"]["awarded"]
        .as_i64()
        .unwrap()
}

async fn answered_today(app: &TestApp, user: i64) -> Value {
    let today = app
        .data(Some(&app.user_token(user)), TODAY, json!({}))
        .await;
    today["pointsToday"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["type"] == "ANSWER")
        .unwrap()["points"]
        .clone()
}

async fn set_zone(app: &TestApp, user: i64, zone: &str) {
    let set = app
        .gql(Some(&app.user_token(user)), SET_ZONE, json!({ "z": zone }))
        .await;
    assert_eq!(set["data"]["setTimeZone"]["timeZone"], zone, "{set}");
}

#[tokio::test]
async fn users_in_zones_far_apart_reach_their_caps_on_their_own_days() {
    let app = TestApp::spawn().await;
    let (tokyo, los_angeles) = (5301, 5302);
    app.set_clock(at(2026, 3, 10, 12, 0));
    set_zone(&app, tokyo, "Asia/Tokyo").await;
    set_zone(&app, los_angeles, "America/Los_Angeles").await;
    // 21:00 on the 10th in Tokyo, 05:00 on the 10th in Los Angeles: both reach the cap.
    assert_eq!(answer_cap(&app, tokyo, "t1").await, 20);
    assert_eq!(answer_cap(&app, los_angeles, "l1").await, 20);
    assert_eq!(answer_cap(&app, tokyo, "t2").await, 0);
    assert_eq!(answer_cap(&app, los_angeles, "l2").await, 0);

    // 01:00 on the 11th in Tokyo: a new day there; still the 10th in Los Angeles.
    app.set_clock(at(2026, 3, 10, 16, 0));
    assert_eq!(answered_today(&app, tokyo).await, 0);
    assert_eq!(answered_today(&app, los_angeles).await, 20);
    assert_eq!(answer_cap(&app, tokyo, "t3").await, 20);
    assert_eq!(answer_cap(&app, los_angeles, "l3").await, 0);

    // 00:30 on the 11th in Los Angeles (17:30 in Tokyo, still the 11th there).
    app.set_clock(at(2026, 3, 11, 7, 30));
    assert_eq!(answer_cap(&app, los_angeles, "l4").await, 20);
    assert_eq!(answer_cap(&app, tokyo, "t4").await, 0);

    // SQL archives each award on its user's day, so a rebuild after a loss of Redis
    // brings each user's own today back.
    streams_settled(&app, &app.keys().points_streams(), "archive").await;
    let keys = scan(&app, &app.keys().all_pattern()).await;
    unlink(&app, &keys).await;
    app.rebuild_from_sql().await.unwrap();
    assert_eq!(answered_today(&app, tokyo).await, 20);
    assert_eq!(answered_today(&app, los_angeles).await, 20);
    assert_eq!(answer_cap(&app, tokyo, "t5").await, 0);
    assert_eq!(answer_cap(&app, los_angeles, "l5").await, 0);
    let drift: u64 = app
        .verify_all()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.feature == "daily caps")
        .map(|r| r.drifted)
        .sum();
    assert_eq!(drift, 0);
}

#[tokio::test]
async fn a_zone_change_westward_cannot_open_a_days_cap_twice() {
    let app = TestApp::spawn().await;
    let user = 5311;
    app.set_clock(at(2026, 3, 10, 12, 0));
    set_zone(&app, user, "Asia/Shanghai").await;
    // 00:30 on the 11th in Shanghai, 09:30 on the 10th in Los Angeles.
    app.set_clock(at(2026, 3, 10, 16, 30));
    let signed = app
        .data(Some(&app.user_token(user)), SIGN_IN, json!({}))
        .await;
    assert_eq!(signed["signIn"]["date"], "2026-03-11");
    assert_eq!(answer_cap(&app, user, "a1").await, 20);
    set_zone(&app, user, "America/Los_Angeles").await;
    // The 10th does not come back in Los Angeles: the 11th, capped, goes on.
    assert_eq!(answer_cap(&app, user, "a2").await, 0);
    assert_eq!(answered_today(&app, user).await, 20);
    // 23:30 on the 11th in Los Angeles: still the 11th.
    app.set_clock(at(2026, 3, 12, 6, 30));
    assert_eq!(answer_cap(&app, user, "a3").await, 0);
    // 00:30 on the 12th in Los Angeles: the next day's cap.
    app.set_clock(at(2026, 3, 12, 7, 30));
    assert_eq!(answer_cap(&app, user, "a4").await, 20);
}

#[tokio::test]
async fn a_zone_change_eastward_cannot_open_a_days_cap_twice() {
    let app = TestApp::spawn().await;
    let user = 5321;
    app.set_clock(at(2026, 3, 9, 12, 0));
    set_zone(&app, user, "America/Los_Angeles").await;
    // 10:00 on the 10th in Los Angeles, 01:00 on the 11th in Shanghai.
    app.set_clock(at(2026, 3, 10, 17, 0));
    app.data(Some(&app.user_token(user)), SIGN_IN, json!({}))
        .await;
    assert_eq!(answer_cap(&app, user, "b1").await, 20);
    set_zone(&app, user, "Asia/Shanghai").await;
    // The 11th has begun in Shanghai, but the 10th, capped, runs on.
    assert_eq!(answer_cap(&app, user, "b2").await, 0);
    // Midnight in Los Angeles: the 11th, once.
    app.set_clock(at(2026, 3, 11, 7, 0));
    assert_eq!(answer_cap(&app, user, "b3").await, 20);
    app.set_clock(at(2026, 3, 11, 15, 59));
    assert_eq!(answer_cap(&app, user, "b4").await, 0);
    // Midnight in Shanghai: the 12th.
    app.set_clock(at(2026, 3, 11, 16, 0));
    assert_eq!(answer_cap(&app, user, "b5").await, 20);
}

#[tokio::test]
async fn a_first_zone_after_points_today_cannot_open_a_days_cap_twice() {
    let app = TestApp::spawn().await;
    let user = 5331;
    // 23:00 on the 10th in ENGAGE_TIMEZONE (UTC), before any zone is recorded.
    app.set_clock(at(2026, 3, 10, 23, 0));
    assert_eq!(answer_cap(&app, user, "c1").await, 20);
    // 08:00 on the 11th in Tokyo: the 10th, capped, runs on.
    set_zone(&app, user, "Asia/Tokyo").await;
    assert_eq!(answer_cap(&app, user, "c2").await, 0);
    // Midnight in UTC: the 11th, once, until the 12th begins in Tokyo.
    app.set_clock(at(2026, 3, 11, 0, 30));
    assert_eq!(answer_cap(&app, user, "c3").await, 20);
    app.set_clock(at(2026, 3, 11, 14, 59));
    assert_eq!(answer_cap(&app, user, "c4").await, 0);
    app.set_clock(at(2026, 3, 11, 15, 0));
    assert_eq!(answer_cap(&app, user, "c5").await, 20);
}
