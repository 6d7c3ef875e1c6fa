//! People: profiles, follower and following lists, and what a profile shows.

use std::collections::HashSet;

use futures::future::join_all;
use serde_json::{json, Value};

use crate::harness::{eventually, first_code, unlimited, TestApp};

async fn app() -> TestApp {
    TestApp::spawn_with(unlimited).await
}

/// Makes sure users exist (first sight), then that their rows are written.
async fn meet(app: &TestApp, users: impl IntoIterator<Item = i64>) {
    join_all(users.into_iter().map(|user| async move {
        app.data(Some(&app.user_token(user)), "{ viewer { id } }", json!({}))
            .await
    }))
    .await;
    eventually(async || app.users().first_sights_queued() == 0).await;
}

async fn follow(app: &TestApp, follower: i64, followee: i64, on: bool) -> Value {
    let field = if on { "followUser" } else { "unfollowUser" };
    app.data(
        Some(&app.user_token(follower)),
        &format!("mutation($u: ID!) {{ {field}(userId: $u) {{ changed }} }}"),
        json!({ "u": followee.to_string() }),
    )
    .await
}

fn local(id: &Value) -> i64 {
    crate::harness::local_id(id.as_str().unwrap())
}

/// Every user of a user's `followers` or `following`, page after page of `page`.
async fn read_list(
    app: &TestApp,
    viewer: Option<i64>,
    user: i64,
    list: &str,
    page: i64,
) -> Vec<i64> {
    let token = viewer.map(|v| app.user_token(v));
    let query = format!(
        "query($id: ID!, $after: String, $first: Int) {{ user(id: $id) {{
            {list}(first: $first, after: $after) {{
                edges {{ cursor node {{ id }} }} pageInfo {{ hasNextPage endCursor }} }} }} }}"
    );
    let (mut ids, mut after) = (Vec::new(), Value::Null);
    loop {
        let body = app
            .data(
                token.as_deref(),
                &query,
                json!({ "id": user.to_string(), "after": after, "first": page }),
            )
            .await;
        let connection = &body["user"][list];
        for edge in connection["edges"].as_array().unwrap() {
            ids.push(local(&edge["node"]["id"]));
        }
        if connection["pageInfo"]["hasNextPage"] != true {
            return ids;
        }
        after = connection["pageInfo"]["endCursor"].clone();
    }
}

async fn sql_count(app: &TestApp, sql: &str, user: i64) -> i64 {
    use sqlx::Row;
    sqlx::query(sql)
        .bind(user)
        .fetch_one(app.sql())
        .await
        .unwrap()
        .try_get("n")
        .unwrap()
}

const PROFILE: &str = "query($id: ID!) { user(id: $id) {
    id name avatarUrl bio followerCount followingCount remarkCount isFollowedByMe } }";

#[tokio::test]
async fn profiles_and_follow_lists_agree_under_200_concurrent_follows_and_unfollows() {
    let app = app().await;
    let star = 1;
    let fans: Vec<i64> = (2..=201).collect();
    meet(&app, std::iter::once(star).chain(fans.iter().copied())).await;

    // Every fan follows the star; the odd ones unfollow again; the star follows ten fans;
    // all at once, while a reader pages through the star's followers.
    let changes = join_all(fans.iter().map(|&fan| {
        let app = &app;
        async move {
            assert_eq!(
                follow(app, fan, star, true).await["followUser"]["changed"],
                true
            );
            if fan % 2 == 1 {
                assert_eq!(
                    follow(app, fan, star, false).await["unfollowUser"]["changed"],
                    true
                );
            }
            if fan <= 11 {
                follow(app, star, fan, true).await;
            }
        }
    }));
    let reader = async {
        for _ in 0..5 {
            let seen = read_list(&app, None, star, "followers", 7).await;
            let unique: HashSet<i64> = seen.iter().copied().collect();
            assert_eq!(
                unique.len(),
                seen.len(),
                "a page repeated a follower: {seen:?}"
            );
        }
    };
    tokio::join!(changes, reader);

    let followers = read_list(&app, Some(2), star, "followers", 30).await;
    let expected: HashSet<i64> = fans.iter().copied().filter(|f| f % 2 == 0).collect();
    assert_eq!(followers.len(), 100, "no follower twice, none missing");
    assert_eq!(followers.iter().copied().collect::<HashSet<_>>(), expected);
    let following = read_list(&app, None, star, "following", 3).await;
    assert_eq!(
        following.iter().copied().collect::<HashSet<_>>(),
        (2..=11).collect::<HashSet<_>>()
    );

    let profile = app
        .data(
            Some(&app.user_token(2)),
            PROFILE,
            json!({ "id": star.to_string() }),
        )
        .await;
    assert_eq!(profile["user"]["followerCount"], 100, "{profile}");
    assert_eq!(profile["user"]["followingCount"], 10, "{profile}");
    assert_eq!(profile["user"]["isFollowedByMe"], true);
    let odd = app
        .data(
            Some(&app.user_token(3)),
            PROFILE,
            json!({ "id": star.to_string() }),
        )
        .await;
    assert_eq!(odd["user"]["isFollowedByMe"], false);
    assert_eq!(
        sql_count(
            &app,
            "SELECT COUNT(*) AS n FROM follows WHERE followee_id = $1",
            star
        )
        .await,
        100
    );
    let drift: Vec<String> = app
        .verify_all()
        .await
        .unwrap()
        .into_iter()
        .filter(|report| report.feature == "follows" && !report.is_clean())
        .map(|report| format!("{:?}", report.examples))
        .collect();
    assert!(drift.is_empty(), "{drift:?}");
}

#[tokio::test]
async fn follow_lists_are_newest_first_and_a_refollow_comes_back_on_top() {
    let app = app().await;
    meet(&app, 1..=5).await;
    for fan in [2, 3, 4, 5] {
        follow(&app, fan, 1, true).await;
        app.advance_clock(chrono::Duration::milliseconds(10));
    }
    assert_eq!(read_list(&app, None, 1, "followers", 2).await, [5, 4, 3, 2]);
    follow(&app, 3, 1, false).await;
    app.advance_clock(chrono::Duration::milliseconds(10));
    follow(&app, 3, 1, true).await;
    assert_eq!(read_list(&app, None, 1, "followers", 2).await, [3, 5, 4, 2]);
    assert_eq!(read_list(&app, None, 3, "following", 2).await, [1]);

    let bad = app
        .gql(
            None,
            "{ user(id: \"1\") { followers(after: \"c12\") { edges { cursor } } } }",
            json!({}),
        )
        .await;
    assert_eq!(first_code(&bad), "BAD_USER_INPUT");
}

#[tokio::test]
async fn a_profile_shows_its_public_fields_and_the_owner_changes_them() {
    let app = app().await;
    meet(&app, [7]).await;
    let update = "mutation($input: UpdateProfileInput!) { updateProfile(input: $input) {
        id name avatarUrl bio } }";
    let token = app.user_token(7);
    let changed = app
        .data(
            Some(&token),
            update,
            json!({ "input": { "name": "  Mei ", "avatarUrl": "https://img.example/mei.png", "bio": "Tea and trails." } }),
        )
        .await;
    assert_eq!(changed["updateProfile"]["name"], "Mei");
    assert_eq!(changed["updateProfile"]["bio"], "Tea and trails.");

    // Another instance shows the change at once.
    let sibling = app.spawn_sibling().await;
    let profile = sibling.data(None, PROFILE, json!({ "id": "7" })).await;
    assert_eq!(
        profile["user"],
        json!({ "id": profile["user"]["id"], "name": "Mei", "avatarUrl": "https://img.example/mei.png",
                "bio": "Tea and trails.", "followerCount": 0, "followingCount": 0, "remarkCount": 0,
                "isFollowedByMe": false })
    );

    // A field left out stays; null clears.
    let cleared = app
        .data(Some(&token), update, json!({ "input": { "bio": null } }))
        .await;
    assert_eq!(cleared["updateProfile"]["name"], "Mei");
    assert_eq!(cleared["updateProfile"]["bio"], Value::Null);
    assert_eq!(
        cleared["updateProfile"]["avatarUrl"],
        "https://img.example/mei.png"
    );

    for input in [
        json!({ "avatarUrl": "http://img.example/mei.png" }),
        json!({ "avatarUrl": "javascript:alert(1)" }),
        json!({ "name": "" }),
        json!({ "name": "x".repeat(51) }),
        json!({ "name": "a\u{7}b" }),
        json!({ "bio": "b".repeat(301) }),
    ] {
        let refused = app
            .gql(Some(&token), update, json!({ "input": input }))
            .await;
        assert_eq!(first_code(&refused), "BAD_USER_INPUT", "{input}: {refused}");
    }
    let anonymous = app
        .gql(None, update, json!({ "input": { "name": "x" } }))
        .await;
    assert_eq!(first_code(&anonymous), "UNAUTHENTICATED");

    assert_eq!(
        app.data(None, PROFILE, json!({ "id": "999999" })).await["user"],
        Value::Null
    );
}

#[tokio::test]
async fn a_profile_lists_its_remarks_newest_first_with_their_count() {
    let app = app().await;
    meet(&app, [8]).await;
    let token = app.user_token(8);
    let mut ids = Vec::new();
    for _ in 0..3 {
        let item = app.create_item().await;
        let created = app
            .data(
                Some(&token),
                "mutation($i: ID!) { createRemark(input: { itemId: $i, score: 5, content: \"good\" }) { id } }",
                json!({ "i": item }),
            )
            .await;
        ids.push(created["createRemark"]["id"].clone());
    }
    let body = app
        .data(
            None,
            "{ user(id: \"8\") { remarkCount remarks(first: 2) { edges { node { id author { id } } }
               pageInfo { hasNextPage } } } }",
            json!({}),
        )
        .await;
    assert_eq!(body["user"]["remarkCount"], 3);
    let edges = body["user"]["remarks"]["edges"].as_array().unwrap();
    assert_eq!(edges[0]["node"]["id"], ids[2]);
    assert_eq!(edges[1]["node"]["id"], ids[1]);
    assert_eq!(body["user"]["remarks"]["pageInfo"]["hasNextPage"], true);
}
