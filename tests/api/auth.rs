//! Bearer tokens, roles and the viewer.

use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use engage::infra::auth::Role;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::harness::{eventually, first_code, global_id, TestApp};

const CREATE_ITEM: &str = "mutation { createItem(input: { name: \"Tea House\" }) { id name } }";

async fn post_with_authorization(
    app: &TestApp,
    authorization: &str,
    query: &str,
) -> (StatusCode, Value) {
    let response = app
        .http
        .post(app.url("/graphql"))
        .header("authorization", authorization)
        .json(&json!({ "query": query }))
        .send()
        .await
        .unwrap();
    (response.status(), response.json().await.unwrap())
}

#[tokio::test]
async fn a_missing_token_is_unauthenticated_where_a_user_is_needed() {
    let app = TestApp::spawn().await;
    let body = app.gql(None, CREATE_ITEM, json!({})).await;
    assert_eq!(first_code(&body), "UNAUTHENTICATED");
    // Reading the viewer without a token is not an error: there is no viewer.
    let data = app.data(None, "{ viewer { id } }", json!({})).await;
    assert_eq!(data["viewer"], Value::Null);
}

#[tokio::test]
async fn expired_forged_and_unsigned_tokens_are_refused() {
    let app = TestApp::spawn().await;
    let secret = app.jwt_secret();
    let expired = engage::infra::auth::Tokens::new(&secret).mint(7, Role::Admin, -3600, None);
    let forged =
        engage::infra::auth::Tokens::new("someone-elses-secret").mint(7, Role::Admin, 3600, None);
    let unsigned = format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#),
        URL_SAFE_NO_PAD.encode(format!(
            r#"{{"sub":"7","role":"admin","exp":{}}}"#,
            chrono::Utc::now().timestamp() + 3600
        ))
    );
    for (what, token) in [
        ("expired", expired),
        ("forged", forged),
        ("alg none", unsigned),
        ("garbage", "abc".into()),
    ] {
        let (status, body) =
            post_with_authorization(&app, &format!("Bearer {token}"), CREATE_ITEM).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{what}");
        assert_eq!(first_code(&body), "UNAUTHENTICATED", "{what}: {body}");
    }
    let (status, body) = post_with_authorization(&app, "Basic dXNlcjpwYXNz", CREATE_ITEM).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(first_code(&body), "UNAUTHENTICATED");
}

#[tokio::test]
async fn only_admins_create_items() {
    let app = TestApp::spawn().await;
    let body = app
        .gql(Some(&app.user_token(5)), CREATE_ITEM, json!({}))
        .await;
    assert_eq!(first_code(&body), "FORBIDDEN");
    let body = app
        .gql(Some(&app.token(5, Role::Service)), CREATE_ITEM, json!({}))
        .await;
    assert_eq!(first_code(&body), "FORBIDDEN");
    let data = app
        .data(Some(&app.admin_token()), CREATE_ITEM, json!({}))
        .await;
    assert_eq!(data["createItem"]["name"], "Tea House");
}

/// Rows in `users` among the ids `low..=high`.
async fn user_rows(app: &TestApp, low: i64, high: i64) -> i64 {
    sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM users WHERE id BETWEEN $1 AND $2")
        .bind(low)
        .bind(high)
        .fetch_one(app.sql())
        .await
        .unwrap()
}

#[tokio::test]
async fn first_sights_gather_until_a_batch_is_full_or_the_instance_shuts_down() {
    let mut app = TestApp::spawn_with(|config| {
        config.archive_linger_ms = 60_000;
        config.rate_limit_per_ip = 0;
        // 300 users at once, all from the test's one address.
        config.max_connections_per_ip = 0;
    })
    .await;
    let viewer = async |app: &TestApp, user: i64| {
        let token = app.user_token(user);
        app.data(Some(&token), "{ viewer { name } }", json!({}))
            .await["viewer"]["name"]
            .clone()
    };
    // A trickle gathers: the users are shown at once, their rows wait for company.
    assert_eq!(viewer(&app, 9001).await, "user9001");
    assert_eq!(viewer(&app, 9002).await, "user9002");
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(user_rows(&app, 9001, 9002).await, 0);

    // A burst that fills a batch (300 users) is written without waiting out the linger.
    let burst = futures::future::join_all((10_001..=10_300).map(|user| viewer(&app, user))).await;
    assert!(burst.iter().all(|name| name.is_string()));
    eventually(async || user_rows(&app, 9001, 10_300).await >= 300).await;

    // Shutdown writes what is still queued before the instance lets go of SQL (a second
    // instance on the same database reads the rows).
    let sibling = app.spawn_sibling().await;
    app.shutdown().await.unwrap();
    assert_eq!(app.users().first_sights_queued(), 0);
    assert_eq!(user_rows(&sibling, 9001, 10_300).await, 302);
}

#[tokio::test]
async fn a_user_is_created_on_first_sight_with_the_name_claim() {
    let app = TestApp::spawn().await;
    let token = app.signer().mint(42, Role::User, 3600, Some("Mei".into()));
    let data = app
        .data(Some(&token), "{ viewer { id name avatarUrl } }", json!({}))
        .await;
    assert_eq!(
        data["viewer"],
        json!({ "id": global_id("User", 42), "name": "Mei", "avatarUrl": null })
    );

    let data = app
        .data(
            Some(&app.user_token(43)),
            "{ viewer { id name } }",
            json!({}),
        )
        .await;
    assert_eq!(
        data["viewer"],
        json!({ "id": global_id("User", 43), "name": "user43" })
    );
}
