//! Streaks: each user's time zone, freezes, repairs across months and years, milestones,
//! the longest streak, month and year calendars, and their rebuild from SQL.

use chrono::{DateTime, Duration, NaiveDate, TimeZone, Utc};
use serde_json::{json, Value};

use crate::harness::{first_code, scan, streams_settled, unlimited, unlink, TestApp};

const SIGN_IN: &str = "mutation { signIn { date streak pointsAwarded alreadySigned } }";
const STREAK: &str = "{ streak { current longest freezesHeld freezesMax signedToday atRisk \
    today timeZone nextMilestone makeUpsLeft makeUpWindowDays } }";
const CALENDAR: &str = "query($m: String) { calendar(month: $m) { month days signedDays } }";
const YEAR: &str = "query($y: Int!) { calendarYear(year: $y) { month days signedDays } }";
const SET_ZONE: &str = "mutation($z: String!) { setTimeZone(zone: $z) { timeZone } }";
const REPAIR: &str = "mutation($d: Date!) { repairDay(date: $d) { current longest makeUpsLeft } }";

fn at(year: i32, month: u32, day: u32, hour: u32, minute: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(year, month, day, hour, minute, 0)
        .unwrap()
}

fn date(year: i32, month: u32, day: u32) -> NaiveDate {
    NaiveDate::from_ymd_opt(year, month, day).unwrap()
}

/// A user token whose `zoneinfo` claim names a zone.
fn token_in(app: &TestApp, user: i64, zone: &str) -> String {
    let now = Utc::now().timestamp();
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({ "sub": user.to_string(), "role": "user", "exp": now + 3600, "iat": now,
                 "zoneinfo": zone }),
        &jsonwebtoken::EncodingKey::from_secret(app.jwt_secret().as_bytes()),
    )
    .unwrap()
}

async fn sign(app: &TestApp, token: &str) -> Value {
    app.data(Some(token), SIGN_IN, json!({})).await["signIn"].clone()
}

async fn streak(app: &TestApp, token: &str) -> Value {
    app.data(Some(token), STREAK, json!({})).await["streak"].clone()
}

async fn month(app: &TestApp, token: &str, month: &str) -> Value {
    app.data(Some(token), CALENDAR, json!({ "m": month })).await["calendar"].clone()
}

/// Signs in at 12:00 UTC on each of `days` days from `first`.
async fn sign_days(app: &TestApp, token: &str, first: NaiveDate, days: i64) -> Vec<Value> {
    let mut answers = Vec::new();
    for offset in 0..days {
        let day = first + Duration::days(offset);
        app.set_clock(day.and_hms_opt(12, 0, 0).unwrap().and_utc());
        answers.push(sign(app, token).await);
    }
    answers
}

fn states(calendar: &Value) -> Vec<String> {
    calendar["days"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_sign_in_answers_the_month_and_the_streak_it_changed() {
    let app = TestApp::spawn().await;
    app.set_clock(at(2026, 11, 27, 12, 0));
    let token = app.user_token(4951);
    let answer = app
        .data(
            Some(&token),
            "mutation { signIn { month { month days signedDays } status { current signedToday } } }",
            json!({}),
        )
        .await;
    let month = &answer["signIn"]["month"];
    assert_eq!(month, &self::month(&app, &token, "2026-11").await);
    assert_eq!(month["signedDays"], 1);
    assert_eq!(month["days"][26], "SIGNED");
    assert_eq!(answer["signIn"]["status"]["current"], 1);
    assert_eq!(answer["signIn"]["status"]["signedToday"], true);
}

#[tokio::test]
async fn users_in_los_angeles_and_shanghai_sign_different_days_at_the_same_instant() {
    let app = TestApp::spawn().await;
    let la = token_in(&app, 4801, "America/Los_Angeles");
    let shanghai = token_in(&app, 4802, "Asia/Shanghai");
    // 13:00 on 10 March in Los Angeles (PDT), 04:00 on 11 March in Shanghai.
    app.set_clock(at(2026, 3, 10, 20, 0));
    assert_eq!(sign(&app, &la).await["date"], "2026-03-10");
    assert_eq!(sign(&app, &shanghai).await["date"], "2026-03-11");
    let la_streak = streak(&app, &la).await;
    assert_eq!(la_streak["today"], "2026-03-10");
    assert_eq!(la_streak["timeZone"], "America/Los_Angeles");
    assert_eq!(la_streak["signedToday"], true);
    let viewer = app
        .data(Some(&shanghai), "{ viewer { timeZone } }", json!({}))
        .await;
    assert_eq!(viewer["viewer"]["timeZone"], "Asia/Shanghai");
    // Recorded at the first sign-in: a later token's claim no longer moves the days.
    let other_claim = token_in(&app, 4802, "Europe/London");
    assert_eq!(
        streak(&app, &other_claim).await["timeZone"],
        "Asia/Shanghai"
    );
    // A user without the claim follows ENGAGE_TIMEZONE (UTC here).
    let plain = app.user_token(4803);
    assert_eq!(sign(&app, &plain).await["date"], "2026-03-10");
    // Not a zone.
    let bad = app
        .gql(Some(&la), SET_ZONE, json!({ "z": "Mars/Olympus_Mons" }))
        .await;
    assert_eq!(first_code(&bad), "BAD_USER_INPUT", "{bad}");
}

#[tokio::test]
async fn a_zone_change_westward_near_midnight_holds_the_day_until_the_new_zone_reaches_the_next() {
    let app = TestApp::spawn().await;
    let token = app.user_token(4811);
    // The first zone, before any sign-in, applies at once.
    app.set_clock(at(2026, 3, 10, 12, 0));
    let set = app
        .data(Some(&token), SET_ZONE, json!({ "z": "Asia/Shanghai" }))
        .await;
    assert_eq!(set["setTimeZone"]["timeZone"], "Asia/Shanghai");
    // 00:30 on 11 March in Shanghai; 09:30 on 10 March in Los Angeles.
    app.set_clock(at(2026, 3, 10, 16, 30));
    assert_eq!(sign(&app, &token).await["date"], "2026-03-11");
    let moved = app
        .gql(
            Some(&token),
            SET_ZONE,
            json!({ "z": "America/Los_Angeles" }),
        )
        .await;
    assert_eq!(
        moved["data"]["setTimeZone"]["timeZone"], "America/Los_Angeles",
        "{moved}"
    );
    // The 10th does not come back: the 11th goes on, signed once.
    let again = sign(&app, &token).await;
    assert_eq!(
        (again["date"].clone(), again["alreadySigned"].clone()),
        (json!("2026-03-11"), json!(true))
    );
    let twice = app
        .gql(Some(&token), SET_ZONE, json!({ "z": "Europe/Paris" }))
        .await;
    assert_eq!(first_code(&twice), "CONFLICT", "once a day: {twice}");
    // 23:30 on 11 March in Los Angeles: still the 11th.
    app.set_clock(at(2026, 3, 12, 6, 30));
    assert_eq!(sign(&app, &token).await["alreadySigned"], true);
    // 00:30 on 12 March in Los Angeles: the 12th, the streak goes on.
    app.set_clock(at(2026, 3, 12, 7, 30));
    let next = sign(&app, &token).await;
    assert_eq!(
        (next["date"].clone(), next["streak"].clone()),
        (json!("2026-03-12"), json!(2))
    );
    let calendar = month(&app, &token, "2026-03").await;
    let days = states(&calendar);
    assert_eq!(&days[9..12], ["BEFORE_JOINING", "SIGNED", "SIGNED"]);
    assert_eq!(calendar["signedDays"], 2);
}

#[tokio::test]
async fn a_zone_change_eastward_near_midnight_shortens_the_day_begun_in_both() {
    let app = TestApp::spawn().await;
    let token = token_in(&app, 4812, "America/Los_Angeles");
    // 23:30 on 10 March in Los Angeles; 14:30 on 11 March in Shanghai.
    app.set_clock(at(2026, 3, 11, 6, 30));
    assert_eq!(sign(&app, &token).await["date"], "2026-03-10");
    let moved = app
        .data(Some(&token), SET_ZONE, json!({ "z": "Asia/Shanghai" }))
        .await;
    assert_eq!(moved["setTimeZone"]["timeZone"], "Asia/Shanghai");
    // Still the 10th, signed: no second day within the hour.
    assert_eq!(sign(&app, &token).await["alreadySigned"], true);
    assert_eq!(streak(&app, &token).await["today"], "2026-03-10");
    // 00:30 on 11 March in Los Angeles: the 11th (it has begun in both zones).
    app.set_clock(at(2026, 3, 11, 7, 30));
    let eleventh = sign(&app, &token).await;
    assert_eq!(
        (eleventh["date"].clone(), eleventh["streak"].clone()),
        (json!("2026-03-11"), json!(2))
    );
    // The 12th begins in Shanghai at 16:00 UTC on the 11th.
    app.set_clock(at(2026, 3, 11, 15, 59));
    assert_eq!(sign(&app, &token).await["alreadySigned"], true);
    app.set_clock(at(2026, 3, 11, 16, 0));
    let twelfth = sign(&app, &token).await;
    assert_eq!(
        (twelfth["date"].clone(), twelfth["streak"].clone()),
        (json!("2026-03-12"), json!(3))
    );
    assert_eq!(streak(&app, &token).await["timeZone"], "Asia/Shanghai");
}

#[tokio::test]
async fn a_daylight_saving_change_keeps_the_streak() {
    let app = TestApp::spawn().await;
    let token = token_in(&app, 4813, "America/Los_Angeles");
    // 23:30 on 7 March (PST, UTC-8); clocks go forward at 02:00 on 8 March.
    app.set_clock(at(2026, 3, 8, 7, 30));
    assert_eq!(sign(&app, &token).await["date"], "2026-03-07");
    // 00:30 on 8 March, PST.
    app.set_clock(at(2026, 3, 8, 8, 30));
    assert_eq!(sign(&app, &token).await["streak"], 2);
    // 23:30 on 8 March, PDT (UTC-7): a 23-hour day, still the 8th.
    app.set_clock(at(2026, 3, 9, 6, 30));
    assert_eq!(sign(&app, &token).await["alreadySigned"], true);
    // 00:30 on 9 March, PDT.
    app.set_clock(at(2026, 3, 9, 7, 30));
    let ninth = sign(&app, &token).await;
    assert_eq!(
        (ninth["date"].clone(), ninth["streak"].clone()),
        (json!("2026-03-09"), json!(3))
    );
}

#[tokio::test]
async fn a_freeze_earned_by_a_week_covers_a_missed_day_once_with_two_instances_racing() {
    let app = TestApp::spawn().await;
    let sibling = app.spawn_sibling().await;
    let token = app.user_token(4821);
    sign_days(&app, &token, date(2026, 4, 1), 7).await;
    let week = streak(&app, &token).await;
    assert_eq!(
        (week["current"].clone(), week["freezesHeld"].clone()),
        (json!(7), json!(1))
    );
    assert_eq!(week["freezesMax"], 2);
    // 8 April missed; on the 9th two instances sign the user in at once.
    app.set_clock(at(2026, 4, 9, 12, 0));
    sibling.set_clock(at(2026, 4, 9, 12, 0));
    let (one, two) = tokio::join!(sign(&app, &token), sign(&sibling, &token));
    let firsts = [&one, &two]
        .iter()
        .filter(|answer| answer["alreadySigned"] == false)
        .count();
    assert_eq!(firsts, 1, "{one} {two}");
    assert_eq!(one["streak"], 9);
    assert_eq!(two["streak"], 9);
    let after = streak(&app, &token).await;
    assert_eq!(
        (
            after["current"].clone(),
            after["freezesHeld"].clone(),
            after["longest"].clone()
        ),
        (json!(9), json!(0), json!(9))
    );
    let days = states(&month(&app, &token, "2026-04").await);
    assert_eq!(&days[6..10], ["SIGNED", "FROZEN", "SIGNED", "FUTURE"]);
    // A second gap with no freeze left breaks the streak.
    app.set_clock(at(2026, 4, 11, 12, 0));
    assert_eq!(sign(&app, &token).await["streak"], 1);
    let broken = streak(&app, &token).await;
    assert_eq!(
        (broken["current"].clone(), broken["longest"].clone()),
        (json!(1), json!(9))
    );
    // SQL records the frozen day and the freeze earned and used.
    streams_settled(&app, &app.keys().points_streams(), "archive").await;
    let frozen: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM sign_ins WHERE user_id = 4821 AND frozen = 1 AND day = 20260408",
    )
    .fetch_one(app.sql())
    .await
    .unwrap();
    assert_eq!(frozen, 1);
    let held: i64 = sqlx::query_scalar(
        "SELECT CAST(SUM(delta) AS BIGINT) FROM streak_freezes WHERE user_id = 4821",
    )
    .fetch_one(app.sql())
    .await
    .unwrap();
    assert_eq!(held, 0);
}

#[tokio::test]
async fn a_repair_reaches_across_new_year_and_counts_in_the_month_made() {
    let app = TestApp::spawn().await;
    let token = app.user_token(4831);
    sign_days(&app, &token, date(2025, 12, 29), 2).await;
    // 31 December missed.
    let new_year = sign_days(&app, &token, date(2026, 1, 1), 1).await;
    assert_eq!(new_year[0]["streak"], 1);
    let repaired = app
        .data(Some(&token), REPAIR, json!({ "d": "2025-12-31" }))
        .await["repairDay"]
        .clone();
    assert_eq!(
        repaired,
        json!({ "current": 4, "longest": 4, "makeUpsLeft": 1 })
    );
    let december = states(&month(&app, &token, "2025-12").await);
    assert_eq!(
        &december[27..31],
        ["BEFORE_JOINING", "SIGNED", "SIGNED", "MADE_UP"]
    );
    // Signed already; before the window; today; before the first sign-in.
    let signed = app
        .gql(Some(&token), REPAIR, json!({ "d": "2025-12-30" }))
        .await;
    assert_eq!(signed["data"]["repairDay"]["current"], 4, "{signed}");
    for day in ["2025-12-24", "2026-01-01", "2026-01-02"] {
        let body = app.gql(Some(&token), REPAIR, json!({ "d": day })).await;
        assert_eq!(first_code(&body), "BAD_USER_INPUT", "{day}: {body}");
    }
    let before = app
        .gql(Some(&token), REPAIR, json!({ "d": "2025-12-28" }))
        .await;
    assert_eq!(
        first_code(&before),
        "BAD_USER_INPUT",
        "before joining: {before}"
    );
    // Two repairs a month.
    sign_days(&app, &token, date(2026, 1, 5), 1).await;
    let second = app
        .data(Some(&token), REPAIR, json!({ "d": "2026-01-03" }))
        .await["repairDay"]
        .clone();
    assert_eq!(second["makeUpsLeft"], 0);
    let third = app
        .gql(Some(&token), REPAIR, json!({ "d": "2026-01-04" }))
        .await;
    assert_eq!(first_code(&third), "MAKEUP_LIMIT", "{third}");
}

#[tokio::test]
async fn milestones_go_past_28_and_a_repair_pays_a_milestone_once() {
    let app = TestApp::spawn().await;
    let token = app.user_token(4841);
    let answers = sign_days(&app, &token, date(2026, 5, 1), 31).await;
    let paid: Vec<(usize, i64)> = answers
        .iter()
        .enumerate()
        .map(|(i, a)| (i + 1, a["pointsAwarded"].as_i64().unwrap()))
        .filter(|(_, points)| *points > 1)
        .collect();
    assert_eq!(paid, [(7, 11), (14, 21), (30, 41)]);
    assert_eq!(streak(&app, &token).await["nextMilestone"], 50);

    // Days 1 to 6 signed, the 7th missed, the 8th signed: repairing the 7th makes the
    // streak 8, past the first milestone, which is paid then and not again.
    let other = app.user_token(4842);
    sign_days(&app, &other, date(2026, 7, 1), 6).await;
    sign_days(&app, &other, date(2026, 7, 8), 1).await;
    let repaired = app
        .data(Some(&other), REPAIR, json!({ "d": "2026-07-07" }))
        .await;
    assert_eq!(repaired["repairDay"]["current"], 8);
    let ninth = sign_days(&app, &other, date(2026, 7, 9), 1).await;
    assert_eq!(
        ninth[0]["pointsAwarded"], 1,
        "the 7-day milestone is paid once"
    );
    streams_settled(&app, &app.keys().points_streams(), "archive").await;
    let repair_points: i64 = sqlx::query_scalar(
        "SELECT points FROM points_record WHERE user_id = 4842 AND idempotency_key = 'makeup:4842:2026-07-07'",
    )
    .fetch_one(app.sql())
    .await
    .unwrap();
    assert_eq!(repair_points, 11, "the repair paid the milestone");
}

#[tokio::test]
async fn the_longest_streak_stays_after_a_break() {
    let app = TestApp::spawn().await;
    let token = app.user_token(4851);
    sign_days(&app, &token, date(2026, 6, 1), 5).await;
    sign_days(&app, &token, date(2026, 6, 9), 2).await;
    let status = streak(&app, &token).await;
    assert_eq!(
        (
            status["current"].clone(),
            status["longest"].clone(),
            status["atRisk"].clone()
        ),
        (json!(2), json!(5), json!(false))
    );
    app.set_clock(at(2026, 6, 11, 12, 0));
    let tomorrow = streak(&app, &token).await;
    assert_eq!(
        (tomorrow["current"].clone(), tomorrow["atRisk"].clone()),
        (json!(2), json!(true))
    );
}

#[tokio::test]
async fn a_year_view_and_past_months_carry_no_today() {
    let app = TestApp::spawn().await;
    let token = app.user_token(4861);
    sign_days(&app, &token, date(2026, 2, 27), 3).await;
    app.set_clock(at(2026, 3, 3, 12, 0));
    let before = app.redis_round_trips();
    let year = app.data(Some(&token), YEAR, json!({ "y": 2026 })).await["calendarYear"].clone();
    let trips = app.redis_round_trips() - before;
    // The user's zone, then the months in one pipeline; the rest is room for background
    // work in the window. A read per month would be twelve.
    assert!(trips <= 5, "{trips} round trips for a year");
    let months = year.as_array().unwrap();
    assert_eq!(months.len(), 12);
    assert_eq!(months[0]["month"], "2026-01");
    assert_eq!(months[1]["days"].as_array().unwrap().len(), 28);
    assert_eq!(months[1]["signedDays"], 2);
    let march = states(&months[2]);
    assert_eq!(&march[..4], ["SIGNED", "MISSED", "FUTURE", "FUTURE"]);
    assert!(states(&months[0]).iter().all(|d| d == "BEFORE_JOINING"));
    assert!(states(&months[11]).iter().all(|d| d == "FUTURE"));
    // A past month says nothing of today: its type has no such field.
    let february = month(&app, &token, "2026-02").await;
    assert_eq!(february.as_object().unwrap().len(), 3);
    let fields = app
        .data(
            None,
            "{ __type(name: \"MonthCalendar\") { fields { name } } }",
            json!({}),
        )
        .await;
    let names: Vec<&str> = fields["__type"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["month", "days", "signedDays"]);
    // A year long gone is read from SQL; a year to come is refused.
    let old = app.data(Some(&token), YEAR, json!({ "y": 2020 })).await["calendarYear"].clone();
    assert!(states(&old[5]).iter().all(|d| d == "BEFORE_JOINING"));
    let future = app.gql(Some(&token), YEAR, json!({ "y": 2027 })).await;
    assert_eq!(first_code(&future), "BAD_USER_INPUT");
}

#[tokio::test]
async fn a_rebuild_after_redis_loss_brings_back_freezes_longest_and_zones() {
    let app = TestApp::spawn().await;
    let token = token_in(&app, 4871, "Asia/Shanghai");
    // 15 days from 1 March (two freezes), a break, four days, one missed day frozen.
    sign_days(&app, &token, date(2026, 3, 1), 15).await;
    sign_days(&app, &token, date(2026, 3, 20), 4).await;
    sign_days(&app, &token, date(2026, 3, 25), 1).await;
    app.data(Some(&token), REPAIR, json!({ "d": "2026-03-18" }))
        .await;
    let before = (
        streak(&app, &token).await,
        month(&app, &token, "2026-03").await,
        app.data(Some(&token), "{ viewer { timeZone } }", json!({}))
            .await,
    );
    assert_eq!(before.0["longest"], 15);
    assert_eq!(before.0["current"], 6);
    assert_eq!(before.0["freezesHeld"], 1);
    streams_settled(&app, &app.keys().points_streams(), "archive").await;
    assert_eq!(reports_drift(&app).await, 0);

    let keys = scan(&app, &app.keys().all_pattern()).await;
    unlink(&app, &keys).await;
    let lost = reports_drift(&app).await;
    assert!(lost > 0, "the loss is seen");
    app.rebuild_from_sql().await.unwrap();
    let after = (
        streak(&app, &token).await,
        month(&app, &token, "2026-03").await,
        app.data(Some(&token), "{ viewer { timeZone } }", json!({}))
            .await,
    );
    assert_eq!(after, before);
    assert_eq!(reports_drift(&app).await, 0);
}

async fn reports_drift(app: &TestApp) -> usize {
    app.verify_all()
        .await
        .unwrap()
        .iter()
        .find(|r| r.feature == "sign-in calendars")
        .map_or(0, |r| r.drifted as usize)
}

#[tokio::test]
async fn the_playgrounds_sign_in_examples_run() {
    let app = TestApp::spawn().await;
    let token = app.user_token(4881);
    let examples = std::fs::read_to_string("playground/operations/10_sign_in.graphql").unwrap();
    sign_days(&app, &token, date(2026, 11, 1), 1).await;
    app.set_clock(at(2026, 11, 5, 12, 0));
    for name in [
        "SignIn",
        "Streak",
        "Calendar",
        "CalendarYear",
        "RepairDay",
        "SetTimeZone",
    ] {
        let body = app
            .http
            .post(app.url("/graphql"))
            .bearer_auth(&token)
            .json(&json!({ "query": examples, "operationName": name }))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap();
        assert!(body.get("errors").is_none(), "{name}: {body}");
    }
    let november = states(&month(&app, &token, "2026-11").await);
    assert_eq!(
        &november[..5],
        ["SIGNED", "MADE_UP", "MISSED", "MISSED", "SIGNED"]
    );
}

#[tokio::test]
async fn a_frozen_day_that_carries_a_streak_past_a_milestone_pays_it_once_and_freezes_stop_at_the_most(
) {
    let app = TestApp::spawn().await;
    let token = app.user_token(4891);
    sign_days(&app, &token, date(2026, 8, 1), 13).await;
    assert_eq!(streak(&app, &token).await["freezesHeld"], 1);
    // The 14th missed: the sign-in on the 15th freezes it and passes 14 days.
    let fifteenth = sign_days(&app, &token, date(2026, 8, 15), 1).await;
    assert_eq!(fifteenth[0]["streak"], 15);
    assert_eq!(fifteenth[0]["pointsAwarded"], 21, "1 + the 14-day bonus");
    let held = streak(&app, &token).await;
    assert_eq!(
        held["freezesHeld"], 1,
        "one used, one earned by the second week"
    );
    let more = sign_days(&app, &token, date(2026, 8, 16), 13).await;
    assert!(more.iter().all(|a| a["pointsAwarded"] != 21), "paid once");
    let month_end = streak(&app, &token).await;
    assert_eq!(month_end["current"], 28);
    assert_eq!(month_end["freezesHeld"], 2, "at most ENGAGE_FREEZES_MAX");
}

#[tokio::test]
async fn first_sign_ins_racing_in_two_zones_record_one_zone_and_sign_one_day_in_it() {
    let app = TestApp::spawn().await;
    // 20:00 UTC: the 1st in Los Angeles, already the 2nd in Tokyo.
    app.set_clock(at(2026, 9, 1, 20, 0));
    for user in 4901..4911 {
        let (la, tokyo) = (
            token_in(&app, user, "America/Los_Angeles"),
            token_in(&app, user, "Asia/Tokyo"),
        );
        let (a, b) = tokio::join!(sign(&app, &la), sign(&app, &tokyo));
        assert_eq!(
            a["date"], b["date"],
            "one day, in the zone recorded: {a} {b}"
        );
        let signed = [&a, &b]
            .iter()
            .filter(|answer| answer["alreadySigned"] == false)
            .count();
        assert_eq!(signed, 1, "{a} {b}");
        let zone = streak(&app, &la).await["timeZone"].clone();
        let expected = if a["date"] == "2026-09-01" {
            "America/Los_Angeles"
        } else {
            "Asia/Tokyo"
        };
        assert_eq!(zone, expected, "{a} {b}");
    }
    // SQL has each user's zone from the award's event: one first row each.
    streams_settled(&app, &app.keys().points_streams(), "archive").await;
    let rows = sqlx::query(
        "SELECT user_id, zone FROM sign_in_zones WHERE user_id BETWEEN 4901 AND 4910 \
         AND changed_on IS NULL ORDER BY user_id",
    )
    .fetch_all(app.sql())
    .await
    .unwrap();
    assert_eq!(rows.len(), 10);
    for row in rows {
        use sqlx::Row;
        let user: i64 = row.try_get("user_id").unwrap();
        let zone: String = row.try_get("zone").unwrap();
        let token = app.user_token(user);
        assert_eq!(streak(&app, &token).await["timeZone"], zone.as_str());
    }
}

#[tokio::test]
async fn a_zone_redis_lost_is_read_from_sql_and_a_claim_that_is_no_zone_is_ignored() {
    let app = TestApp::spawn().await;
    let token = app.user_token(4895);
    app.set_clock(at(2026, 9, 1, 12, 0));
    app.data(Some(&token), SET_ZONE, json!({ "z": "Asia/Kolkata" }))
        .await;
    unlink(&app, &[app.keys().sign_zone(4895)]).await;
    assert_eq!(streak(&app, &token).await["timeZone"], "Asia/Kolkata");
    let nowhere = token_in(&app, 4896, "Nowhere/Land");
    assert_eq!(streak(&app, &nowhere).await["timeZone"], "UTC");
}

/// Zone lookups Redis cannot answer are gathered into shared SQL queries: a burst of first
/// sign-ins, some by users whose zone only SQL still holds, signs each user's own day.
#[tokio::test]
async fn concurrent_first_sign_ins_each_sign_the_day_of_their_own_zone() {
    let app = TestApp::spawn_with(unlimited).await;
    // 23:30 UTC on 1 September: 2 September in Tokyo, 1 September in New York.
    app.set_clock(at(2026, 9, 1, 23, 30));
    let lost: Vec<i64> = (4960..4965).collect();
    for &user in &lost {
        let token = app.user_token(user);
        app.data(Some(&token), SET_ZONE, json!({ "z": "Asia/Tokyo" }))
            .await;
    }
    let zone_keys: Vec<String> = lost.iter().map(|&u| app.keys().sign_zone(u)).collect();
    unlink(&app, &zone_keys).await;
    let fresh: Vec<i64> = (4965..5065).collect();

    let tokens: Vec<(i64, String)> = lost
        .iter()
        .map(|&u| (u, app.user_token(u)))
        .chain(
            fresh
                .iter()
                .map(|&u| (u, token_in(&app, u, "America/New_York"))),
        )
        .collect();
    let answers =
        futures::future::join_all(tokens.iter().map(|(_, token)| sign(&app, token))).await;
    for ((user, token), answer) in tokens.iter().zip(&answers) {
        let (day, zone) = match lost.contains(user) {
            true => ("2026-09-02", "Asia/Tokyo"),
            false => ("2026-09-01", "America/New_York"),
        };
        assert_eq!(answer["date"], day, "user {user}: {answer}");
        assert_eq!(answer["streak"], 1, "user {user}: {answer}");
        assert_eq!(streak(&app, token).await["timeZone"], zone, "user {user}");
    }
}

const BUY: &str = "mutation($k: String!) { buyStreakFreeze(idempotencyKey: $k) { freezesHeld } }";
const BALANCE: &str = "{ viewer { pointsBalance { spent balance } } }";

#[tokio::test]
async fn freezes_bought_with_points_never_pass_the_most_held_nor_spend_twice_and_come_back_after_a_rebuild(
) {
    let app = TestApp::spawn_with(unlimited).await;
    let token = app.user_token(4901);
    let service = app.token(900, engage::infra::auth::Role::Service);
    let award = "mutation($u: ID!) {
        awardPoints(userId: $u, type: SIGN_IN, points: 120, idempotencyKey: \"gift\") { awarded } }";
    app.data(Some(&service), award, json!({ "u": "4901" }))
        .await;

    // 50 purchases at once under 50 keys: the balance (120) pays for two, and two is the most
    // a user may hold; each refusal is coded, and none spends.
    let attempts = futures::future::join_all((0..50).map(|i| {
        let (app, token) = (&app, &token);
        async move {
            app.gql(Some(token), BUY, json!({ "k": format!("k{i}") }))
                .await
        }
    }))
    .await;
    let bought = attempts.iter().filter(|a| a["errors"].is_null()).count();
    assert_eq!(bought, 2, "{attempts:?}");
    for refused in attempts.iter().filter(|a| !a["errors"].is_null()) {
        assert!(
            ["CONFLICT", "INSUFFICIENT_POINTS"].contains(&first_code(refused)),
            "{refused}"
        );
    }
    let balance = app.data(Some(&token), BALANCE, json!({})).await;
    assert_eq!(balance["viewer"]["pointsBalance"]["spent"], 100);
    assert_eq!(balance["viewer"]["pointsBalance"]["balance"], 20);
    assert_eq!(streak(&app, &token).await["freezesHeld"], 2);

    // A replay of a key that bought changes nothing, even at the most held.
    let first_key = attempts.iter().position(|a| a["errors"].is_null()).unwrap();
    let replay = app
        .data(Some(&token), BUY, json!({ "k": format!("k{first_key}") }))
        .await;
    assert_eq!(replay["buyStreakFreeze"]["freezesHeld"], 2);
    streams_settled(&app, &app.keys().points_streams(), "archive").await;
    let history = app
        .data(
            Some(&token),
            "{ pointsHistory(first: 5) { edges { node { points reason source } } } }",
            json!({}),
        )
        .await;
    let spends: Vec<&Value> = history["pointsHistory"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["node"]["source"] == "freeze")
        .collect();
    assert_eq!(spends.len(), 2, "{history}");
    assert_eq!(spends[0]["node"]["points"], -50);
    assert_eq!(spends[0]["node"]["reason"], "streak freeze");

    // A user with no points buys none.
    let shanghai = token_in(&app, 4902, "Asia/Shanghai");
    let none = app.gql(Some(&shanghai), BUY, json!({ "k": "a" })).await;
    assert_eq!(first_code(&none), "INSUFFICIENT_POINTS");

    assert_eq!(reports_drift(&app).await, 0);
    let keys = scan(&app, &app.keys().all_pattern()).await;
    unlink(&app, &keys).await;
    app.rebuild_from_sql().await.unwrap();
    assert_eq!(streak(&app, &token).await["freezesHeld"], 2);
    let balance = app.data(Some(&token), BALANCE, json!({})).await;
    assert_eq!(balance["viewer"]["pointsBalance"]["balance"], 20);
    assert_eq!(reports_drift(&app).await, 0);
}
