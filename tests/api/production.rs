//! `ENGAGE_ENV=production`: no start without a real token issuer, and none of the
//! development conveniences (dev tokens, the playground, introspection, field suggestions)
//! unless asked for one by one.

use engage::{
    app::{settings::Settings, App},
    infra::config::{Environment, DEV_JWT_SECRET},
};
use reqwest::StatusCode;
use serde_json::json;

use crate::harness::{base_config, first_code, global_id, TestApp};

const INTROSPECTION: &str = "{ __schema { queryType { name } } }";

async fn production_app(adjust: impl FnOnce(&mut Settings)) -> TestApp {
    TestApp::spawn_with(|config| {
        config.environment = Environment::Production;
        // Production needs an answer on where metrics go (hostile::probes tests it).
        config.metrics_public = Some(true);
        adjust(config);
    })
    .await
}

#[tokio::test]
async fn production_refuses_to_start_without_a_real_token_issuer() {
    let refusal = |adjust: fn(&mut Settings)| async move {
        let mut config = base_config();
        config.bind = "127.0.0.1:0".parse().unwrap();
        config.environment = Environment::Production;
        adjust(&mut config);
        format!("{:#}", App::start(config).await.err().expect("refused"))
    };
    let none = refusal(|c| c.jwt_secret = None).await;
    assert!(none.contains("ENGAGE_JWT_JWKS_URL"), "{none}");
    let dev = refusal(|c| c.jwt_secret = Some(DEV_JWT_SECRET.into())).await;
    assert!(dev.contains("development secret"), "{dev}");
    let short = refusal(|c| c.jwt_secret = Some("short".into())).await;
    assert!(short.contains("at least 32"), "{short}");
    let typed = refusal(|c| c.jwt_secret = Some("ab".repeat(20))).await;
    assert!(typed.contains("random"), "{typed}");
    let not_a_url = refusal(|c| {
        c.jwt_secret = None;
        c.jwt_jwks_url = Some("file:///etc/keys.json".into());
    })
    .await;
    assert!(not_a_url.contains("http(s)"), "{not_a_url}");
}

#[tokio::test]
async fn production_serves_no_dev_tokens_playground_introspection_or_suggestions() {
    let app = production_app(|_| {}).await;
    for (method, path) in [("GET", "/"), ("POST", "/dev/token")] {
        let request = match method {
            "GET" => app.http.get(app.url(path)),
            _ => app.http.post(app.url(path)).json(&json!({ "userId": 7 })),
        };
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{method} {path}");
    }
    // The wall dashboard is a product page, not a development tool.
    let response = app.http.get(app.url("/dashboard")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    let body = app.gql(None, INTROSPECTION, json!({})).await;
    assert_eq!(first_code(&body), "FORBIDDEN", "{body}");
    // Where it is not the first field, the schema answers `null` for it.
    let body = app
        .gql(
            None,
            "{ viewer { id } __schema { queryType { name } } }",
            json!({}),
        )
        .await;
    assert!(body["data"]["__schema"].is_null(), "{body}");
    // `__typename` is not introspection: clients use it as a ping.
    let data = app.data(None, "{ __typename }", json!({})).await;
    assert_eq!(data["__typename"], "Query");

    let body = app.gql(None, "{ viewr { id } }", json!({})).await;
    let message = body["errors"][0]["message"].as_str().unwrap();
    assert!(!message.contains("Did you mean"), "{message}");
    assert_eq!(first_code(&body), "GRAPHQL_VALIDATION_FAILED");

    // Tokens still work: production is not locked, only quiet.
    let data = app
        .data(Some(&app.user_token(5)), "{ viewer { id } }", json!({}))
        .await;
    assert_eq!(data["viewer"]["id"], global_id("User", 5));
}

#[tokio::test]
async fn production_serves_the_playground_and_introspection_when_asked_to() {
    let app = production_app(|config| {
        config.playground = Some(true);
        config.introspection = Some(true);
    })
    .await;
    assert!(app.get_text("/").await.contains("const DEV_MODE = false;"));
    let data = app.data(None, INTROSPECTION, json!({})).await;
    assert_eq!(data["__schema"]["queryType"]["name"], "Query");

    // And development turns them off when asked to.
    let app = TestApp::spawn_with(|config| {
        config.playground = Some(false);
        config.introspection = Some(false);
    })
    .await;
    let response = app.http.get(app.url("/")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let body = app.gql(None, INTROSPECTION, json!({})).await;
    assert_eq!(first_code(&body), "FORBIDDEN", "{body}");
    let body = app.gql(None, "{ viewr { id } }", json!({})).await;
    let message = body["errors"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("Did you mean"),
        "development keeps suggestions: {message}"
    );
}
