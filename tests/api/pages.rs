//! The pages served from the binary (playground, dashboard, their assets) and the dev token
//! route. What the pages do in a browser is tested by `e2e/` in headless Chromium.

use reqwest::{header, StatusCode};
use serde_json::{json, Value};

use crate::harness::{global_id, TestApp};

async fn dev_mode_app() -> TestApp {
    TestApp::spawn_with(|config| config.jwt_secret = None).await
}

async fn mint(app: &TestApp, body: Value) -> reqwest::Response {
    app.http
        .post(app.url("/dev/token"))
        .json(&body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn in_dev_mode_the_dev_route_mints_a_token_the_api_accepts() {
    let app = dev_mode_app().await;
    let response = mint(&app, json!({ "userId": 42, "role": "admin" })).await;
    assert_eq!(response.status(), StatusCode::OK);
    let token = response.json::<Value>().await.unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string();

    let data = app.data(Some(&token), "{ viewer { id } }", json!({})).await;
    assert_eq!(data["viewer"]["id"], global_id("User", 42));
    // The role came through too: creating an item is for admins.
    let data = app
        .data(
            Some(&token),
            "mutation { createItem(input: { name: \"Dev Cafe\" }) { name } }",
            json!({}),
        )
        .await;
    assert_eq!(data["createItem"]["name"], "Dev Cafe");
}

#[tokio::test]
async fn the_dev_route_refuses_a_user_id_that_is_not_positive() {
    let app = dev_mode_app().await;
    let response = mint(&app, json!({ "userId": 0 })).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn with_a_configured_secret_the_dev_route_does_not_exist() {
    let app = TestApp::spawn().await;
    let response = mint(&app, json!({ "userId": 42, "role": "admin" })).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_playground_shows_the_dev_token_button_only_in_dev_mode() {
    let page = |app: TestApp| async move { app.get_text("/").await };
    let with_secret = page(TestApp::spawn().await).await;
    assert!(with_secret.contains("const DEV_MODE = false;"));
    let dev = page(dev_mode_app().await).await;
    assert!(dev.contains("const DEV_MODE = true;"));
}

#[tokio::test]
async fn the_playground_embeds_every_saved_operation_grouped_by_feature() {
    let app = TestApp::spawn().await;
    let page = app.get_text("/").await;
    assert!(!page.contains("unpkg.com"), "the page must work offline");
    let start = page.find("const SAVED_OPERATIONS = ").unwrap() + 25;
    let end = start + page[start..].find(";\n").unwrap();
    let operations: Vec<Value> = serde_json::from_str(&page[start..end]).unwrap();
    let saved = std::fs::read_dir("playground/operations").unwrap().count();
    assert_eq!(operations.len(), saved);
    assert_eq!(operations[0]["feature"], "Getting started");
    assert_eq!(operations[0]["name"], "01_hello");
    assert!(operations.iter().all(
        |op| op["feature"] != "Other" && !op["query"].as_str().unwrap().contains("# feature:")
    ));
}

#[tokio::test]
async fn pages_and_assets_are_served_with_their_types_caching_and_compression() {
    let app = TestApp::spawn().await;
    let dashboard = app.http.get(app.url("/dashboard")).send().await.unwrap();
    assert_eq!(dashboard.status(), StatusCode::OK);
    assert!(dashboard
        .text()
        .await
        .unwrap()
        .contains("/assets/dashboard.js"));

    let graphiql = app
        .http
        .get(app.url("/assets/graphiql-3.8.3.min.js"))
        .header(header::ACCEPT_ENCODING, "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(graphiql.status(), StatusCode::OK);
    let headers = graphiql.headers();
    assert_eq!(
        headers[header::CONTENT_TYPE],
        "text/javascript; charset=utf-8"
    );
    assert_eq!(headers[header::CONTENT_ENCODING], "gzip");
    assert_eq!(
        headers[header::CACHE_CONTROL],
        "public, max-age=31536000, immutable"
    );
    let compressed = graphiql.bytes().await.unwrap().len();
    assert!(compressed < 1_000_000, "{compressed} bytes");

    let own = app
        .http
        .get(app.url("/assets/dashboard.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(own.headers()[header::CACHE_CONTROL], "no-cache");

    let missing = app
        .http
        .get(app.url("/assets/nothing.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn pages_carry_security_headers_and_may_not_be_framed() {
    let app = TestApp::spawn().await;
    for path in [
        "/",
        "/dashboard",
        "/assets/dashboard.js",
        "/queues",
        "/assets/queues.js",
    ] {
        let response = app.http.get(app.url(path)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let headers = response.headers();
        let policy = headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        assert!(
            policy.contains("frame-ancestors 'none'"),
            "{path}: {policy}"
        );
        assert!(policy.contains("default-src 'self'"), "{path}: {policy}");
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{path}");
        assert_eq!(headers[header::REFERRER_POLICY], "no-referrer", "{path}");
        assert_eq!(headers[header::X_FRAME_OPTIONS], "DENY", "{path}");
    }
}

#[tokio::test]
async fn the_queues_page_is_served_and_its_data_needs_an_admin_token() {
    let app = TestApp::spawn().await;
    let page = app.http.get(app.url("/queues")).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let text = page.text().await.unwrap();
    assert!(text.contains("/assets/queues.js"), "{text}");
    // The page holds no data: what it shows comes from the API, which refuses it without
    // an admin's (or a service's) token.
    let topics = "query { topics { name } }";
    let anonymous = app.gql(None, topics, serde_json::json!({})).await;
    assert_eq!(
        crate::harness::first_code(&anonymous),
        "UNAUTHENTICATED",
        "{anonymous}"
    );
    let user = app
        .gql(Some(&app.user_token(5)), topics, serde_json::json!({}))
        .await;
    assert_eq!(crate::harness::first_code(&user), "FORBIDDEN", "{user}");
    let admin = app
        .data(Some(&app.admin_token()), topics, serde_json::json!({}))
        .await;
    assert!(admin["topics"].is_array(), "{admin}");
}
