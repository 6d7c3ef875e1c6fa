//! Bad input and abuse: every argument family at and past its bounds, tokens that lie about
//! themselves, callbacks that try to leave the allow-list through a redirect, and hostile
//! strings that must never change which Redis keys a script touches.

use std::{
    collections::BTreeSet,
    sync::{Arc, Mutex},
    time::Duration,
};

use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use engage::infra::auth::Role;
use serde_json::{json, Value};

use crate::harness::{eventually, first_code, scan, TestApp};

/// The code of the first error, or "" when the request succeeded.
fn outcome(body: &Value) -> String {
    match body.get("errors") {
        Some(errors) => errors[0]["extensions"]["code"]
            .as_str()
            .unwrap_or("<no code>")
            .to_string(),
        None => String::new(),
    }
}

/// Who sends a case.
#[derive(Clone, Copy)]
enum As {
    Anonymous,
    User,
    Service,
    Admin,
}

async fn run_table(app: &TestApp, cases: &[(As, &str, &str)]) {
    let mut wrong = Vec::new();
    for (who, query, expected) in cases {
        let token = match who {
            As::Anonymous => None,
            As::User => Some(app.user_token(5)),
            As::Service => Some(app.token(6, Role::Service)),
            As::Admin => Some(app.admin_token()),
        };
        let body = app.gql(token.as_deref(), query, json!({})).await;
        let got = outcome(&body);
        if got != *expected {
            wrong.push(format!(
                "{query}\n  expected {expected:?}, got {got:?}: {body}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[tokio::test]
async fn every_query_argument_out_of_bounds_answers_bad_user_input_and_unknown_ids_are_null() {
    let app = TestApp::spawn_with(|config| config.rate_limit_per_user = 10_000).await;
    let item = app.create_item().await;
    let big = "99999999999999999999999";
    let cases: Vec<(As, String, &str)> = vec![
        // ids
        (As::User, r#"{ item(id: "abc") { id } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ item(id: "-1") { id } }"#.into(), "BAD_USER_INPUT"),
        (As::User, format!(r#"{{ item(id: "{big}") {{ id }} }}"#), "BAD_USER_INPUT"),
        (As::User, r#"{ item(id: "") { id } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ item(id: "123456") { id } }"#.into(), ""),
        (As::User, r#"{ voucher(id: "x") { id } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ voucher(id: "123456") { id } }"#.into(), ""),
        (As::User, r#"{ vouchers(itemId: "x") { id } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ remarks(itemId: "1e3") { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        // first / offset / radius / cursors
        (As::User, format!(r#"{{ remarks(itemId: "{item}", first: -1) {{ pageInfo {{ hasNextPage }} }} }}"#), "BAD_USER_INPUT"),
        (As::User, format!(r#"{{ remarks(itemId: "{item}", first: 0) {{ pageInfo {{ hasNextPage }} }} }}"#), "BAD_USER_INPUT"),
        (As::User, format!(r#"{{ remarks(itemId: "{item}", first: 101) {{ pageInfo {{ hasNextPage }} }} }}"#), "BAD_USER_INPUT"),
        (As::User, format!(r#"{{ remarks(itemId: "{item}", first: 2147483647) {{ pageInfo {{ hasNextPage }} }} }}"#), "BAD_USER_INPUT"),
        (As::User, format!(r#"{{ remarks(itemId: "{item}", first: 2147483648) {{ pageInfo {{ hasNextPage }} }} }}"#), "GRAPHQL_VALIDATION_FAILED"),
        (As::User, format!(r#"{{ remarks(itemId: "{item}", after: "not-a-cursor") {{ pageInfo {{ hasNextPage }} }} }}"#), "BAD_USER_INPUT"),
        (As::User, format!(r#"{{ remarks(itemId: "{item}", after: "🙂\u0000") {{ pageInfo {{ hasNextPage }} }} }}"#), "BAD_USER_INPUT"),
        (As::User, format!(r#"{{ recommendedRemarks(itemId: "{item}", first: -1) {{ id }} }}"#), "BAD_USER_INPUT"),
        (As::User, format!(r#"{{ recommendedRemarks(itemId: "{item}", first: 1000) {{ id }} }}"#), "BAD_USER_INPUT"),
        (As::User, r#"{ pointsHistory(first: -5) { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ pointsHistory(after: "zz") { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ myOrders(first: -1) { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ myOrders(after: "zz") { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ feed(first: 101) { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ feed(after: "zz") { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, format!(r#"{{ remarks(itemId: "{item}", last: -1) {{ pageInfo {{ hasPreviousPage }} }} }}"#), "BAD_USER_INPUT"),
        (As::User, format!(r#"{{ remarks(itemId: "{item}", last: 101) {{ pageInfo {{ hasPreviousPage }} }} }}"#), "BAD_USER_INPUT"),
        (As::User, format!(r#"{{ remarks(itemId: "{item}", first: 1, last: 1) {{ pageInfo {{ hasPreviousPage }} }} }}"#), "BAD_USER_INPUT"),
        (As::User, format!(r#"{{ remarks(itemId: "{item}", before: "c{big}") {{ pageInfo {{ hasPreviousPage }} }} }}"#), "BAD_USER_INPUT"),
        (As::User, r#"{ pointsHistory(last: 0) { pageInfo { startCursor } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ myOrders(last: 2, before: "zz") { pageInfo { startCursor } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ feed(last: 2, before: "c5") { pageInfo { startCursor } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ feed(first: 2, last: 2) { pageInfo { startCursor } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ leaderboard(first: -1) { total } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ leaderboard(offset: -1) { total } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ leaderboard(offset: 1000000000) { total } }"#.into(), ""),
        (As::User, r#"{ leaderboard(offset: 2147483647) { total } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ leaderboard(seasonId: "abc") { total } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ leaderboard(seasonId: "202613") { total } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ leaderboard(seasonId: "999912") { total } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ leaderboard(seasonId: "200001") { total } }"#.into(), ""),
        (As::User, r#"{ leaderboardAroundMe(radius: -1) { rank } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ leaderboardAroundMe(radius: 1000000) { rank } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ boards(first: -1) { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ boards(first: 101) { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ boards(after: "zz") { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ board(key: "season", first: -1) { total } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ board(key: "season", first: 101) { total } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ board(key: "season", offset: -1) { total } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ board(key: "season", offset: 2147483647) { total } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ board(key: "season", period: "not a period") { total } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ board(key: "no such board") { total } }"#.into(), "NOT_FOUND"),
        (As::User, r#"{ boardAroundMe(key: "season", radius: -1) { rank } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ boardAroundMe(key: "season", radius: 1000000) { rank } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ boardAroundMe(key: "season", radius: 2147483647) { rank } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ items(first: 0) { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ items(first: 101) { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ items(after: "zz") { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ items(near: { lat: 91, lng: 0 }) { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ myLikes(first: -1) { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ myLikes(after: "zz") { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ user(id: "abc") { id } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ user(id: "123456") { id } }"#.into(), ""),
        (As::User, r#"{ order(id: "123456") { id } }"#.into(), ""),
        (As::User, r#"{ calendar(month: "2026-13") { month } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ calendarYear(year: -1) { month } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ calendarYear(year: 2147483647) { month } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ notifications(first: 0) { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ notifications(first: -1) { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ notifications(first: 101) { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ notifications(after: "zz") { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ notifications(after: "") { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"mutation { markNotificationsRead(upTo: "x") }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"mutation { markNotificationsRead(upTo: "-1") }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"mutation { markNotificationsRead(upTo: "99999999999999999999999") }"#.into(), "BAD_USER_INPUT"),
        // months and dates
        (As::User, r#"{ signCalendar(month: "2026-13") { month } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ signCalendar(month: "2026-1") { month } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ signCalendar(month: "abcd-ef") { month } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ signCalendar(month: "-2026-01") { month } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"mutation { makeUpSignIn(date: "2026-02-30") { date } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"mutation { makeUpSignIn(date: "yesterday") { date } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"mutation { makeUpSignIn(date: "1900-01-01") { date } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"mutation { makeUpSignIn(date: "9999-12-31") { date } }"#.into(), "BAD_USER_INPUT"),
        // coordinates
        (As::User, r#"{ nearbyItems(lat: 91, lng: 0, radiusKm: 1) { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ nearbyItems(lat: 0, lng: -181, radiusKm: 1) { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ nearbyItems(lat: 0, lng: 0, radiusKm: -1) { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ nearbyItems(lat: 0, lng: 0, radiusKm: 0) { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ nearbyItems(lat: 0, lng: 0, radiusKm: 1001) { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ nearbyItems(lat: 1e308, lng: 0, radiusKm: 1) { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"{ nearbyItems(lat: 1e309, lng: 0, radiusKm: 1) { pageInfo { hasNextPage } } }"#.into(), "GRAPHQL_PARSE_FAILED"),
        (As::User, r#"{ nearbyItems(lat: 0, lng: 0, radiusKm: 1, after: "zz") { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        // admin-only reads with bad arguments
        (As::Admin, r#"{ jobs(topic: "t", status: DELAYED, first: -1) { pageInfo { hasNextPage } } }"#.into(), "BAD_USER_INPUT"),
        (As::Admin, r#"{ job(topic: "a b", id: "x") { id } }"#.into(), "BAD_USER_INPUT"),
        (As::Admin, r#"{ job(topic: "t", id: "no/slashes") { id } }"#.into(), ""),
        (As::Admin, r#"{ job(topic: "t", id: "unknown") { id } }"#.into(), ""),
    ];
    let cases: Vec<(As, &str, &str)> = cases
        .iter()
        .map(|(who, query, code)| (*who, query.as_str(), *code))
        .collect();
    run_table(&app, &cases).await;

    // A huge offset is named as out of range, not as a negative one.
    let body = app
        .gql(
            Some(&app.user_token(5)),
            "{ leaderboard(offset: 2147483647) { total } }",
            json!({}),
        )
        .await;
    let message = body["errors"][0]["message"].as_str().unwrap();
    assert!(message.contains("between 0 and 1000000000"), "{message}");
}

#[tokio::test]
async fn every_mutation_argument_out_of_bounds_answers_bad_user_input_or_not_found() {
    let app = TestApp::spawn_with(|config| config.rate_limit_per_user = 10_000).await;
    let item = app.create_item().await;
    let long_name = "n".repeat(201);
    let long_content = "c".repeat(2001);
    let long_key = "k".repeat(10_000);
    let long_cron = "1,".repeat(5_000) + "2 * * * *";
    let now = chrono::Utc::now();
    let past = (now - chrono::Duration::hours(2)).to_rfc3339();
    let soon = (now + chrono::Duration::hours(1)).to_rfc3339();
    let voucher = |stock: &str, begins: &str, ends: &str, pay: &str| {
        format!(
            r#"mutation {{ createVoucher(input: {{ itemId: "{item}", title: "Deal", stock: {stock}, beginsAt: "{begins}", endsAt: "{ends}", payWithinSeconds: {pay} }}) {{ id }} }}"#
        )
    };
    let job = |id: &str, topic: &str, body: &str, delay: &str, extra: &str| {
        format!(
            r#"mutation {{ scheduleJob(input: {{ id: {id}, topic: {topic}, body: {body}, delaySeconds: {delay}{extra} }}) {{ id }} }}"#
        )
    };
    let cases: Vec<(As, String, &str)> = vec![
        // items
        (As::Admin, r#"mutation { createItem(input: { name: "" }) { id } }"#.into(), "BAD_USER_INPUT"),
        (As::Admin, format!(r#"mutation {{ createItem(input: {{ name: "{long_name}" }}) {{ id }} }}"#), "BAD_USER_INPUT"),
        (As::Admin, r#"mutation { createItem(input: { name: "a", lat: 10 }) { id } }"#.into(), "BAD_USER_INPUT"),
        (As::Admin, r#"mutation { createItem(input: { name: "a", lat: 91, lng: 0 }) { id } }"#.into(), "BAD_USER_INPUT"),
        (As::Admin, r#"mutation { createItem(input: { name: "a", lat: 0, lng: 180.5 }) { id } }"#.into(), "BAD_USER_INPUT"),
        // remarks and likes
        (As::User, format!(r#"mutation {{ createRemark(input: {{ itemId: "{item}", score: 0, content: "x" }}) {{ id }} }}"#), "BAD_USER_INPUT"),
        (As::User, format!(r#"mutation {{ createRemark(input: {{ itemId: "{item}", score: 6, content: "x" }}) {{ id }} }}"#), "BAD_USER_INPUT"),
        (As::User, format!(r#"mutation {{ createRemark(input: {{ itemId: "{item}", score: -2147483648, content: "x" }}) {{ id }} }}"#), "BAD_USER_INPUT"),
        (As::User, format!(r#"mutation {{ createRemark(input: {{ itemId: "{item}", score: 5, content: "" }}) {{ id }} }}"#), "BAD_USER_INPUT"),
        (As::User, format!(r#"mutation {{ createRemark(input: {{ itemId: "{item}", score: 5, content: "{long_content}" }}) {{ id }} }}"#), "BAD_USER_INPUT"),
        (As::User, format!(r#"mutation {{ createRemark(input: {{ itemId: "{item}", score: 5, content: "a\u0000b" }}) {{ id }} }}"#), "BAD_USER_INPUT"),
        (As::Admin, r#"mutation { createItem(input: { name: "a\u0000b" }) { id } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"mutation { createRemark(input: { itemId: "123456", score: 5, content: "x" }) { id } }"#.into(), "NOT_FOUND"),
        (As::User, r#"mutation { createRemark(input: { itemId: "x", score: 5, content: "x" }) { id } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"mutation { likeRemark(remarkId: "x") { liked } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"mutation { likeRemark(remarkId: "-5") { liked } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"mutation { likeRemark(remarkId: "123456") { liked } }"#.into(), "NOT_FOUND"),
        (As::User, r#"mutation { unlikeRemark(remarkId: "99999999999999999999999") { liked } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"mutation { unlikeRemark(remarkId: "123456") { liked } }"#.into(), "NOT_FOUND"),
        // points
        (As::Service, r#"mutation { awardPoints(userId: "5", type: NOTE, points: -5, idempotencyKey: "a") { awarded } }"#.into(), "BAD_USER_INPUT"),
        (As::Service, r#"mutation { awardPoints(userId: "5", type: NOTE, points: 0, idempotencyKey: "b") { awarded } }"#.into(), "BAD_USER_INPUT"),
        (As::Service, r#"mutation { awardPoints(userId: "x", type: NOTE, points: 1, idempotencyKey: "c") { awarded } }"#.into(), "BAD_USER_INPUT"),
        (As::Service, r#"mutation { awardPoints(userId: "5", type: NOTE, points: 1, idempotencyKey: "") { awarded } }"#.into(), "BAD_USER_INPUT"),
        (As::Service, format!(r#"mutation {{ awardPoints(userId: "5", type: NOTE, points: 1, idempotencyKey: "{long_key}") {{ awarded }} }}"#), "BAD_USER_INPUT"),
        (As::Service, r#"mutation { awardPoints(userId: "5", type: BOGUS, points: 1, idempotencyKey: "d") { awarded } }"#.into(), "GRAPHQL_VALIDATION_FAILED"),
        // vouchers and orders
        (As::Admin, voucher("0", &past, &soon, "60"), "BAD_USER_INPUT"),
        (As::Admin, voucher("-1", &past, &soon, "60"), "BAD_USER_INPUT"),
        (As::Admin, voucher("1000001", &past, &soon, "60"), "BAD_USER_INPUT"),
        (As::Admin, voucher("10", &soon, &past, "60"), "BAD_USER_INPUT"),
        (As::Admin, voucher("10", "yesterday", &soon, "60"), "BAD_USER_INPUT"),
        (As::Admin, voucher("10", &past, "2026-13-01T00:00:00Z", "60"), "BAD_USER_INPUT"),
        (As::Admin, voucher("10", &past, &soon, "-1"), "BAD_USER_INPUT"),
        (As::Admin, voucher("10", &past, &soon, "2147483647"), "BAD_USER_INPUT"),
        (As::User, r#"mutation { seckillVoucher(voucherId: "x") { id } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"mutation { seckillVoucher(voucherId: "123456") { id } }"#.into(), "NOT_FOUND"),
        (As::User, r#"mutation { payOrder(orderId: "x") { id } }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"mutation { payOrder(orderId: "123456") { id } }"#.into(), "NOT_FOUND"),
        (As::User, r#"mutation { cancelOrder(orderId: "123456") { id } }"#.into(), "NOT_FOUND"),
        // follows
        (As::User, r#"mutation { follow(userId: "x") }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"mutation { follow(userId: "5") }"#.into(), "BAD_USER_INPUT"),
        (As::User, r#"mutation { unfollow(userId: "-1") }"#.into(), "BAD_USER_INPUT"),
        // jobs
        (As::Admin, job(r#""ok""#, r#""t""#, r#""{}""#, "-1", ""), "BAD_USER_INPUT"),
        (As::Admin, job(r#""ok""#, r#""t""#, r#""{}""#, "2147483647", ""), "BAD_USER_INPUT"),
        (As::Admin, job(r#""a b""#, r#""t""#, r#""{}""#, "1", ""), "BAD_USER_INPUT"),
        (As::Admin, job(r#""ok""#, r#""t*{x}""#, r#""{}""#, "1", ""), "BAD_USER_INPUT"),
        (As::Admin, job(r#""ok""#, r#""t""#, r#""not json""#, "1", ""), "BAD_USER_INPUT"),
        (As::Admin, job(r#""ok""#, r#""t""#, r#""{}""#, "1", ", maxAttempts: 0"), "BAD_USER_INPUT"),
        (As::Admin, job(r#""ok""#, r#""t""#, r#""{}""#, "1", ", maxAttempts: -1"), "BAD_USER_INPUT"),
        (As::Admin, job(r#""ok""#, r#""t""#, r#""{}""#, "1", r#", callbackUrl: "not a url""#), "BAD_USER_INPUT"),
        (As::Admin, job(r#""ok""#, r#""t""#, r#""{}""#, "0", ", repeat: { everySeconds: 0 }"), "BAD_USER_INPUT"),
        (As::Admin, job(r#""ok""#, r#""t""#, r#""{}""#, "0", ", repeat: { everySeconds: 31536001 }"), "BAD_USER_INPUT"),
        (As::Admin, job(r#""ok""#, r#""t""#, r#""{}""#, "0", r#", repeat: { everySeconds: 60, cron: "* * * * *" }"#), "BAD_USER_INPUT"),
        (As::Admin, job(r#""ok""#, r#""t""#, r#""{}""#, "0", ", repeat: { limit: 3 }"), "BAD_USER_INPUT"),
        (As::Admin, job(r#""ok""#, r#""t""#, r#""{}""#, "0", r#", repeat: { cron: "61 * * * *" }"#), "BAD_USER_INPUT"),
        (As::Admin, job(r#""ok""#, r#""t""#, r#""{}""#, "0", &format!(r#", repeat: {{ cron: "{long_cron}" }}"#)), "BAD_USER_INPUT"),
        (As::Admin, job(r#""ok""#, r#""t""#, r#""{}""#, "0", r#", repeat: { cron: "0 9 * * *", timeZone: "Mars/Olympus_Mons" }"#), "BAD_USER_INPUT"),
        (As::Admin, job(r#""ok""#, r#""t""#, r#""{}""#, "0", &format!(r#", repeat: {{ cron: "0 9 * * *", timeZone: "{long_name}" }}"#)), "BAD_USER_INPUT"),
        (As::Admin, job(r#""ok""#, r#""t""#, r#""{}""#, "0", ", repeat: { everySeconds: 60, limit: 0 }"), "BAD_USER_INPUT"),
        (As::Admin, job(r#""ok""#, r#""t""#, r#""{}""#, "0", r#", repeat: { everySeconds: 60, endsAt: "2000-01-01T00:00:00Z" }"#), "BAD_USER_INPUT"),
        (As::Admin, r#"mutation { cancelJob(topic: "", id: "x") }"#.into(), "BAD_USER_INPUT"),
        (As::Admin, r#"mutation { requeueDeadJob(topic: "t", id: "unknown") { id } }"#.into(), "NOT_FOUND"),
    ];
    let cases: Vec<(As, &str, &str)> = cases
        .iter()
        .map(|(who, query, code)| (*who, query.as_str(), *code))
        .collect();
    run_table(&app, &cases).await;
}

#[tokio::test]
async fn users_and_services_cannot_call_admin_or_service_fields() {
    let app = TestApp::spawn().await;
    let item = app.create_item().await;
    let voucher = format!(
        r#"mutation {{ createVoucher(input: {{ itemId: "{item}", title: "D", stock: 1, beginsAt: "2026-01-01T00:00:00Z", endsAt: "2027-01-01T00:00:00Z", payWithinSeconds: 60 }}) {{ id }} }}"#
    );
    let schedule = r#"mutation { scheduleJob(input: { id: "j", topic: "t", body: "{}", delaySeconds: 1 }) { id } }"#;
    let award = r#"mutation { awardPoints(userId: "5", type: NOTE, points: 1, idempotencyKey: "k") { awarded } }"#;
    let cases: Vec<(As, &str, &str)> = vec![
        (As::User, &voucher, "FORBIDDEN"),
        (As::Service, &voucher, "FORBIDDEN"),
        (As::Anonymous, &voucher, "UNAUTHENTICATED"),
        (As::User, schedule, "FORBIDDEN"),
        (As::Service, schedule, "NO_JOB_HANDLER"),
        (
            As::User,
            r#"mutation { cancelJob(topic: "t", id: "j") }"#,
            "FORBIDDEN",
        ),
        (
            As::User,
            r#"mutation { requeueDeadJob(topic: "t", id: "j") { id } }"#,
            "FORBIDDEN",
        ),
        (
            As::User,
            r#"{ job(topic: "t", id: "j") { id } }"#,
            "FORBIDDEN",
        ),
        (
            As::User,
            r#"{ jobs(topic: "t", status: DEAD) { pageInfo { hasNextPage } } }"#,
            "FORBIDDEN",
        ),
        (As::User, award, "FORBIDDEN"),
        (As::Anonymous, award, "UNAUTHENTICATED"),
        (As::Service, award, ""),
        (
            As::Anonymous,
            "mutation { signIn { streak } }",
            "UNAUTHENTICATED",
        ),
        (
            As::Anonymous,
            r#"mutation { follow(userId: "9") }"#,
            "UNAUTHENTICATED",
        ),
        (
            As::Anonymous,
            "{ myOrders { pageInfo { hasNextPage } } }",
            "UNAUTHENTICATED",
        ),
        (
            As::Anonymous,
            "{ pointsToday { points } }",
            "UNAUTHENTICATED",
        ),
    ];
    run_table(&app, &cases).await;
}

#[tokio::test]
async fn a_token_with_tampered_claims_and_the_original_signature_is_refused() {
    let app = TestApp::spawn().await;
    let token = app.user_token(5);
    let parts: Vec<&str> = token.split('.').collect();
    let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
    let query = r#"mutation { createItem(input: { name: "x" }) { id } }"#;
    for (what, change) in [
        ("role", json!({ "role": "admin" })),
        ("sub", json!({ "sub": "1" })),
    ] {
        let mut tampered = claims.clone();
        for (key, value) in change.as_object().unwrap() {
            tampered[key] = value.clone();
        }
        let forged = format!(
            "{}.{}.{}",
            parts[0],
            URL_SAFE_NO_PAD.encode(tampered.to_string()),
            parts[2]
        );
        let body = app.gql(Some(&forged), query, json!({})).await;
        assert_eq!(outcome(&body), "UNAUTHENTICATED", "{what}: {body}");
    }
    // The header's algorithm cannot be switched either (HS512 over the same secret's claims).
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS512","typ":"JWT"}"#);
    let switched = format!("{header}.{}.{}", parts[1], parts[2]);
    let body = app
        .gql(Some(&switched), "{ viewer { id } }", json!({}))
        .await;
    assert_eq!(outcome(&body), "UNAUTHENTICATED", "{body}");
}

#[tokio::test]
async fn a_callback_redirect_from_a_listed_host_to_an_unlisted_one_is_not_followed() {
    let forbidden_hits = Arc::new(Mutex::new(0usize));
    let counter = forbidden_hits.clone();
    let forbidden = axum::Router::new().fallback(move || {
        let counter = counter.clone();
        async move {
            *counter.lock().unwrap() += 1;
            "reached"
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let forbidden_port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, forbidden).await });

    let redirector_hits = Arc::new(Mutex::new(0usize));
    let counter = redirector_hits.clone();
    let redirector = axum::Router::new().fallback(move || {
        let counter = counter.clone();
        async move {
            *counter.lock().unwrap() += 1;
            axum::response::Redirect::temporary(&format!("http://127.0.0.1:{forbidden_port}/in"))
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let redirector_port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, redirector).await });

    let app = TestApp::spawn_with(move |config| {
        config.jobs.callback_hosts = format!("127.0.0.1:{redirector_port}")
    })
    .await;
    let input = json!({ "id": "hop", "topic": "hooks", "body": "{}", "delaySeconds": 0, "maxAttempts": 1,
        "callbackUrl": format!("http://127.0.0.1:{redirector_port}/hook") });
    app.data(
        Some(&app.admin_token()),
        "mutation($input: ScheduleJobInput!) { scheduleJob(input: $input) { id } }",
        json!({ "input": input }),
    )
    .await;
    for _ in 0..500 {
        if *redirector_hits.lock().unwrap() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        *redirector_hits.lock().unwrap(),
        1,
        "the listed host was called"
    );
    // Wait for the job to settle, so a followed redirect would have happened by now.
    let query = r#"{ job(topic: "hooks", id: "hop") { status } }"#;
    for _ in 0..500 {
        let data = app.data(Some(&app.admin_token()), query, json!({})).await;
        if data["job"]["status"] != "RUNNING" && data["job"]["status"] != "READY" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        *forbidden_hits.lock().unwrap(),
        0,
        "the redirect was followed"
    );
}

/// A key's family: the key without the prefix, each hash of user input (a long hex segment)
/// replaced by `<hash>` and each other run of digits by `#`.
fn family(prefix: &str, key: &str) -> String {
    let mut family = String::new();
    let mut segment = String::new();
    let flush = |segment: &mut String, family: &mut String| {
        if segment.len() >= 16 && segment.chars().all(|c| c.is_ascii_hexdigit()) {
            family.push_str("<hash>");
        } else {
            let mut in_digits = false;
            for c in segment.chars() {
                if c.is_ascii_digit() {
                    if !in_digits {
                        family.push('#');
                    }
                    in_digits = true;
                } else {
                    family.push(c);
                    in_digits = false;
                }
            }
        }
        segment.clear();
    };
    for c in key.trim_start_matches(prefix).chars() {
        if matches!(c, ':' | '{' | '}') {
            flush(&mut segment, &mut family);
            family.push(c);
        } else {
            segment.push(c);
        }
    }
    flush(&mut segment, &mut family);
    family
}

/// Creates an item, a remark, a like, an award and a callback job whose strings all carry
/// `text`, as user `user`.
async fn exercise(app: &TestApp, user: i64, text: &str) {
    let admin = app.admin_token();
    let token = app.user_token(user);
    let item = app
        .data(
            Some(&admin),
            "mutation($name: String!) { createItem(input: { name: $name, lat: 1, lng: 1 }) { id } }",
            json!({ "name": text.chars().take(200).collect::<String>() }),
        )
        .await["createItem"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let remark = app
        .data(
            Some(&token),
            "mutation($item: ID!, $content: String!) { createRemark(input: { itemId: $item, score: 4, content: $content }) { id } }",
            json!({ "item": item, "content": text.chars().take(2000).collect::<String>() }),
        )
        .await["createRemark"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    // The remark reaches the author's outbox off the request path; wait for it, so that both
    // runs are compared with every key they will ever touch.
    let outbox = app.keys().feed_outbox(user);
    eventually(async || {
        let mut conn = app.redis_connection().await;
        redis::cmd("EXISTS")
            .arg(&outbox)
            .query_async::<bool>(&mut *conn)
            .await
            .unwrap()
    })
    .await;
    app.data(
        Some(&app.user_token(user + 1)),
        "mutation($id: ID!) { likeRemark(remarkId: $id) { liked } }",
        json!({ "id": remark }),
    )
    .await;
    app.data(
        Some(&app.token(9, Role::Service)),
        "mutation($user: ID!, $key: String!) { awardPoints(userId: $user, type: NOTE, points: 1, idempotencyKey: $key) { awarded } }",
        json!({ "user": user.to_string(), "key": text.chars().take(128).collect::<String>() }),
    )
    .await;
    let body = json!({ "text": text }).to_string();
    app.data(
        Some(&admin),
        "mutation($input: ScheduleJobInput!) { scheduleJob(input: $input) { id } }",
        json!({ "input": { "id": format!("job{user}"), "topic": "hooks", "body": body, "delaySeconds": 3600,
            "callbackUrl": "http://127.0.0.1:9/hook" } }),
    )
    .await;
    // Hostile strings where ids are expected are refused before any script runs.
    for field in [
        "likeRemark(remarkId: $id) { liked }",
        "seckillVoucher(voucherId: $id) { id }",
    ] {
        let body = app
            .gql(
                Some(&token),
                &format!("mutation($id: ID!) {{ {field} }}"),
                json!({ "id": text.chars().take(200).collect::<String>() }),
            )
            .await;
        assert_eq!(outcome(&body), "BAD_USER_INPUT", "{body}");
    }
    // The users met here are written (their names too) off the request path, in batches:
    // wait for them as for the outbox.
    let users = app.users();
    eventually(async || users.first_sights_queued() == 0).await;
}

#[tokio::test]
async fn hostile_strings_in_content_names_keys_and_ids_never_change_which_keys_are_touched() {
    let app = TestApp::spawn_with(|config| config.jobs.callback_hosts = "127.0.0.1:9".into()).await;
    let prefix = app.config().redis_prefix.clone();
    // The notifications' own jobs (the evening reminders, every quarter hour) run by the
    // clock, not by what the exercise sends: one that ends during the test adds its topic's
    // counters between the two scans.
    let families = |keys: &[String]| -> BTreeSet<String> {
        keys.iter()
            .map(|key| family(&prefix, key))
            .filter(|family| !family.starts_with("{jobs:notifications."))
            .collect()
    };

    exercise(&app, 100, "plain words").await;
    let benign = families(&scan(&app, &format!("{prefix}*")).await);

    let marker = format!("hostilemarker{}", uuid::Uuid::new_v4().simple());
    let hostile = format!(
        "{marker} {{{marker}}} * : \n KEYS[1] ARGV[1] redis.call('FLUSHALL') redis.call('SET', '{marker}', 1) \
         ]] .. '{marker}' -- {prefix}{marker} engage:{marker} \u{202e}😀 {}",
        "x".repeat(1500)
    );
    exercise(&app, 200, &hostile).await;
    let after = families(&scan(&app, &format!("{prefix}*")).await);

    assert_eq!(after, benign, "the same key families, whatever the strings");
    let escaped = scan(&app, &format!("*{marker}*")).await;
    assert!(
        escaped.is_empty(),
        "keys named after user input: {escaped:?}"
    );
}

#[tokio::test]
async fn a_nul_character_in_any_text_postgresql_stores_is_bad_user_input_not_internal() {
    let app = TestApp::spawn().await;
    let item = app.create_item().await;
    let now = chrono::Utc::now();
    let query = "mutation($i: CreateVoucherInput!) { createVoucher(input: $i) { id title } }";
    let input = json!({ "i": {
        "itemId": item, "title": "half\u{0}price", "stock": 5,
        "beginsAt": now.to_rfc3339(), "endsAt": (now + chrono::Duration::hours(1)).to_rfc3339(),
        "payWithinSeconds": 60,
    }});
    let body = app.gql(Some(&app.admin_token()), query, input).await;
    // SQLite stores the character as it is; PostgreSQL's text cannot hold it.
    match app.sql_backend() {
        engage::infra::db::Backend::Postgres => assert_eq!(first_code(&body), "BAD_USER_INPUT"),
        engage::infra::db::Backend::Sqlite => {
            assert_eq!(body["data"]["createVoucher"]["title"], "half\u{0}price")
        }
    }
}
