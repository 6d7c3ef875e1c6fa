//! Depth, complexity, body size and rate limits, and persisted queries.

use reqwest::StatusCode;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::harness::{first_code, percent_encode, TestApp};

#[tokio::test]
async fn a_depth_bomb_is_refused_without_a_server_error() {
    let app = TestApp::spawn().await;
    // Deeper than ENGAGE_MAX_DEPTH, through introspection types that nest for ever.
    let nested = "ofType { ".repeat(30) + "name" + &"}".repeat(30);
    let query = format!("{{ __schema {{ types {{ fields {{ type {{ {nested} }} }} }} }} }}");
    let body = app.gql(None, &query, json!({})).await;
    assert_eq!(first_code(&body), "GRAPHQL_VALIDATION_FAILED", "{body}");

    // Nested far beyond what a parser should recurse into.
    let query = "{".repeat(20_000) + &"}".repeat(20_000);
    let response = app
        .http
        .post(app.url("/graphql"))
        .json(&json!({ "query": query }))
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success() || response.status().is_client_error());
    let body: Value = response.json().await.unwrap();
    assert_eq!(first_code(&body), "GRAPHQL_PARSE_FAILED");
}

#[tokio::test]
async fn an_overly_complex_query_is_refused() {
    let app = TestApp::spawn_with(|config| config.max_complexity = 20).await;
    let fields = (0..30)
        .map(|i| format!("a{i}: viewer {{ id }}"))
        .collect::<Vec<_>>()
        .join(" ");
    let body = app.gql(None, &format!("{{ {fields} }}"), json!({})).await;
    assert_eq!(first_code(&body), "GRAPHQL_VALIDATION_FAILED", "{body}");
}

#[tokio::test]
async fn an_oversized_body_answers_413() {
    let app = TestApp::spawn_with(|config| config.max_body_bytes = 4096).await;
    let padding = " ".repeat(10_000);
    let response = app
        .http
        .post(app.url("/graphql"))
        .json(&json!({ "query": format!("{{ __typename {padding} }}") }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body: Value = response.json().await.unwrap();
    assert_eq!(first_code(&body), "BAD_REQUEST");
}

#[tokio::test]
async fn too_many_requests_from_one_ip_are_rate_limited() {
    // 1 request per second with a burst of 2.
    let app = TestApp::spawn_with(|config| config.rate_limit_per_ip = 1).await;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let response = app
            .http
            .post(app.url("/graphql"))
            .json(&json!({ "query": "{ __typename }" }))
            .send()
            .await
            .unwrap();
        statuses.push(response.status());
        if response.status() == StatusCode::TOO_MANY_REQUESTS {
            let retry_after: u64 = response.headers()["retry-after"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!((1..=2).contains(&retry_after));
            let body: Value = response.json().await.unwrap();
            assert_eq!(first_code(&body), "RATE_LIMITED");
        }
    }
    assert_eq!(statuses[..2], [StatusCode::OK, StatusCode::OK]);
    assert_eq!(statuses[3], StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn too_many_requests_from_one_user_are_rate_limited() {
    let app = TestApp::spawn_with(|config| config.rate_limit_per_user = 1).await;
    let alice = app.user_token(11);
    let bob = app.user_token(12);
    let mut codes = Vec::new();
    for _ in 0..4 {
        let body = app.gql(Some(&alice), "{ __typename }", json!({})).await;
        codes.push(
            body["errors"][0]["extensions"]["code"]
                .as_str()
                .unwrap_or("OK")
                .to_string(),
        );
    }
    assert_eq!(codes[3], "RATE_LIMITED");
    // Another user on the same address is not held back.
    app.data(Some(&bob), "{ __typename }", json!({})).await;
}

#[tokio::test]
async fn automatic_persisted_queries_round_trip() {
    let app = TestApp::spawn().await;
    let query = "query Persisted { __typename }";
    let hash = hex::encode(Sha256::digest(query.as_bytes()));
    let extensions = json!({ "persistedQuery": { "version": 1, "sha256Hash": hash } });

    let post = |body: Value| app.http.post(app.url("/graphql")).json(&body).send();
    let unknown: Value = post(json!({ "extensions": extensions }))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(first_code(&unknown), "PERSISTED_QUERY_NOT_FOUND");

    let registered: Value = post(json!({ "query": query, "extensions": extensions }))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(registered["data"]["__typename"], "Query");

    let by_hash: Value = post(json!({ "extensions": extensions }))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(by_hash["data"]["__typename"], "Query");

    // Mobile clients send persisted queries with GET so that CDNs can cache them.
    let url = format!(
        "{}?extensions={}",
        app.url("/graphql"),
        percent_encode(&extensions.to_string())
    );
    let by_get: Value = app
        .http
        .get(url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(by_get["data"]["__typename"], "Query");

    let mismatch = json!({ "persistedQuery": { "version": 1, "sha256Hash": "0".repeat(64) } });
    let wrong: Value = post(json!({ "query": query, "extensions": mismatch }))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(first_code(&wrong), "BAD_REQUEST");
}
