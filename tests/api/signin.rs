//! Sign-in: streaks, bonuses, month boundaries, make-ups, time zones.

use chrono::{DateTime, Duration, NaiveDate, TimeZone, Utc};
use serde_json::{json, Value};

use crate::harness::{first_code, TestApp};

const SIGN_IN: &str = "mutation { signIn { date streak pointsAwarded alreadySigned } }";
const MAKE_UP: &str =
    "mutation($d: Date!) { makeUpSignIn(date: $d) { date streak pointsAwarded alreadySigned } }";
const CALENDAR: &str =
    "query($m: String) { signCalendar(month: $m) { month days today { date signed streak } signedDays makeUpsLeft } }";

fn at(year: i32, month: u32, day: u32, hour: u32, minute: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(year, month, day, hour, minute, 0)
        .unwrap()
}

async fn sign_in_on(app: &TestApp, token: &str, day: NaiveDate) -> Value {
    app.set_clock(day.and_hms_opt(10, 0, 0).unwrap().and_utc());
    app.data(Some(token), SIGN_IN, json!({})).await["signIn"].clone()
}

#[tokio::test]
async fn streak_bonuses_at_7_14_and_30_days_and_a_gap_resets() {
    let app = TestApp::spawn().await;
    let token = app.user_token(31);
    let start = NaiveDate::from_ymd_opt(2026, 3, 1).unwrap();
    let mut awarded = Vec::new();
    for offset in 0..30 {
        let result = sign_in_on(&app, &token, start + Duration::days(offset)).await;
        assert_eq!(result["streak"], offset + 1);
        awarded.push(result["pointsAwarded"].as_i64().unwrap());
    }
    assert_eq!(awarded[6], 11, "day 7: 1 + 10");
    assert_eq!(awarded[13], 21, "day 14: 1 + 20");
    // The milestone of 30 days pays the bonus of the rules' longest length up to it (28).
    assert_eq!(awarded[29], 41, "day 30: 1 + 40");
    assert_eq!(awarded.iter().filter(|p| **p == 1).count(), 27);

    let again = app.data(Some(&token), SIGN_IN, json!({})).await["signIn"].clone();
    assert_eq!(
        again,
        json!({ "date": "2026-03-30", "streak": 30, "pointsAwarded": 0, "alreadySigned": true })
    );

    // Skip three days, one more than the two freezes the streak earned would cover: the
    // streak starts over.
    let after_gap = sign_in_on(&app, &token, NaiveDate::from_ymd_opt(2026, 4, 3).unwrap()).await;
    assert_eq!(after_gap["streak"], 1);
    assert_eq!(after_gap["pointsAwarded"], 1);
}

#[tokio::test]
async fn a_streak_goes_on_across_month_boundaries() {
    let app = TestApp::spawn().await;
    let token = app.user_token(32);
    // 30 and 31 January, all of February, 1 and 2 March: 32 days in a row.
    let start = NaiveDate::from_ymd_opt(2026, 1, 30).unwrap();
    let mut last = Value::Null;
    for offset in 0..32 {
        last = sign_in_on(&app, &token, start + Duration::days(offset)).await;
        assert_eq!(last["streak"], offset + 1, "day {offset}");
    }
    assert_eq!(last["date"], "2026-03-02");
    let calendar = app.data(Some(&token), CALENDAR, json!({})).await["signCalendar"].clone();
    assert_eq!(calendar["today"]["streak"], 32);
    assert_eq!(calendar["days"], json!([true, true]));
    let february = app
        .data(Some(&token), CALENDAR, json!({ "m": "2026-02" }))
        .await["signCalendar"]
        .clone();
    assert_eq!(february["days"].as_array().unwrap().len(), 28);
    assert_eq!(february["signedDays"], 28);
    assert_eq!(february["makeUpsLeft"], 0);
    assert_eq!(february["today"], Value::Null, "a past month has no today");
}

#[tokio::test]
async fn a_make_up_past_the_months_allowance_answers_makeup_limit_and_next_month_allows_again() {
    let app = TestApp::spawn_with(|config| config.signin.make_ups_per_month = 1).await;
    let token = app.user_token(34);
    sign_in_on(&app, &token, NaiveDate::from_ymd_opt(2026, 3, 10).unwrap()).await;
    let first = app
        .data(Some(&token), MAKE_UP, json!({ "d": "2026-03-05" }))
        .await["makeUpSignIn"]
        .clone();
    assert_eq!(first["pointsAwarded"], 1);
    let over = app
        .gql(Some(&token), MAKE_UP, json!({ "d": "2026-03-06" }))
        .await;
    assert_eq!(first_code(&over), "MAKEUP_LIMIT", "{over}");
    assert!(
        over["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("at most 1"),
        "{over}"
    );
    // A day outside the month is still an input error, whatever the allowance.
    let outside = app
        .gql(Some(&token), MAKE_UP, json!({ "d": "2026-02-27" }))
        .await;
    assert_eq!(first_code(&outside), "BAD_USER_INPUT", "{outside}");

    sign_in_on(&app, &token, NaiveDate::from_ymd_opt(2026, 4, 10).unwrap()).await;
    let april = app
        .data(Some(&token), MAKE_UP, json!({ "d": "2026-04-06" }))
        .await["makeUpSignIn"]
        .clone();
    assert_eq!(
        april["alreadySigned"], false,
        "a new month, a new allowance"
    );
}

#[tokio::test]
async fn make_ups_fill_missed_days_of_this_month_up_to_the_limit() {
    let app = TestApp::spawn().await;
    let token = app.user_token(33);
    sign_in_on(&app, &token, NaiveDate::from_ymd_opt(2026, 3, 8).unwrap()).await;
    sign_in_on(&app, &token, NaiveDate::from_ymd_opt(2026, 3, 9).unwrap()).await;
    let today = sign_in_on(&app, &token, NaiveDate::from_ymd_opt(2026, 3, 10).unwrap()).await;
    assert_eq!(today["streak"], 3);

    let first = app
        .data(Some(&token), MAKE_UP, json!({ "d": "2026-03-07" }))
        .await["makeUpSignIn"]
        .clone();
    assert_eq!(
        first,
        json!({ "date": "2026-03-07", "streak": 4, "pointsAwarded": 1, "alreadySigned": false })
    );
    let signed = app
        .data(Some(&token), MAKE_UP, json!({ "d": "2026-03-09" }))
        .await["makeUpSignIn"]
        .clone();
    assert_eq!(
        signed["alreadySigned"], true,
        "a signed day needs no make-up"
    );
    let second = app
        .data(Some(&token), MAKE_UP, json!({ "d": "2026-03-02" }))
        .await["makeUpSignIn"]
        .clone();
    assert_eq!(second["pointsAwarded"], 1, "the base point only");
    let third = app
        .gql(Some(&token), MAKE_UP, json!({ "d": "2026-03-03" }))
        .await;
    assert_eq!(first_code(&third), "MAKEUP_LIMIT", "at most two a month");

    // Today, the future, another month, not a day, not written YYYY-MM-DD.
    for date in [
        "2026-03-10",
        "2026-03-11",
        "2026-02-27",
        "yesterday",
        "2026-3-1",
    ] {
        let body = app.gql(Some(&token), MAKE_UP, json!({ "d": date })).await;
        assert_eq!(first_code(&body), "BAD_USER_INPUT", "{date}");
    }
    let calendar = app
        .data(Some(&token), CALENDAR, json!({ "m": "2026-03" }))
        .await["signCalendar"]
        .clone();
    assert_eq!(calendar["signedDays"], 5);
    assert_eq!(calendar["makeUpsLeft"], 0);
    assert_eq!(calendar["today"]["signed"], true);
    assert_eq!(calendar["days"].as_array().unwrap().len(), 10);
    assert_eq!(calendar["days"][1], true);
    assert_eq!(calendar["days"][2], false);
    let future = app
        .gql(Some(&token), CALENDAR, json!({ "m": "2026-04" }))
        .await;
    assert_eq!(first_code(&future), "BAD_USER_INPUT");
}

#[tokio::test]
async fn a_sign_in_at_2330_utc_counts_for_the_next_day_in_shanghai() {
    let app = TestApp::spawn_with(|config| config.timezone = chrono_tz::Asia::Shanghai).await;
    let token = app.user_token(34);
    app.set_clock(at(2026, 3, 10, 23, 30));
    let result = app.data(Some(&token), SIGN_IN, json!({})).await["signIn"].clone();
    assert_eq!(result["date"], "2026-03-11");
    let calendar = app.data(Some(&token), CALENDAR, json!({})).await["signCalendar"].clone();
    assert_eq!(calendar["month"], "2026-03");
    assert_eq!(calendar["days"].as_array().unwrap().len(), 11);
    assert_eq!(
        calendar["today"],
        json!({ "date": "2026-03-11", "signed": true, "streak": 1 })
    );
}

#[tokio::test]
async fn signing_in_needs_a_token() {
    let app = TestApp::spawn().await;
    assert_eq!(
        first_code(&app.gql(None, SIGN_IN, json!({})).await),
        "UNAUTHENTICATED"
    );
    assert_eq!(
        first_code(&app.gql(None, CALENDAR, json!({})).await),
        "UNAUTHENTICATED"
    );
}
