//! Depth, complexity, body size and rate limits, and persisted queries.

use reqwest::StatusCode;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::{
    harness::{base_config, first_code, percent_encode, TestApp},
    via::{self, Via},
};

#[tokio::test]
async fn a_depth_bomb_is_refused_without_a_server_error() {
    // The parser's own bound, behind the query-size cap.
    let app = TestApp::spawn_with(|config| config.max_query_bytes = 64 * 1024).await;
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

/// A request whose document and kinds of values passed validation before skips the
/// schema's rules; one with a value of another kind is checked again, on every transport.
#[tokio::test]
async fn a_document_that_passed_validation_is_checked_again_for_values_of_another_kind() {
    let app = TestApp::spawn_with(|config| config.max_complexity = 40).await;
    let refused = |answer: &Value| {
        answer["errors"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|error| error["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED")
    };
    for via in via::ALL {
        // A document of each transport's own, which no request has passed before.
        let query = format!(
            "query Checked{via:?}($id: ID!, $first: Int) {{ \
               item(id: $id) {{ id }} items(first: $first) {{ edges {{ node {{ id }} }} }} }}"
        );
        for (variables, passes) in [
            (json!({ "id": "SXRlbTox", "first": 2 }), true),
            // Another string for the ID: the verdict cannot change, the request runs.
            (json!({ "id": "not an item id", "first": 2 }), true),
            (json!({ "id": null, "first": 2 }), false),
            (json!({ "id": { "an": "object" }, "first": 2 }), false),
            (json!({ "id": ["a", "list"], "first": 2 }), false),
            (json!({ "id": "SXRlbTox", "first": "two" }), false),
            (json!({ "id": "SXRlbTox", "first": 2.5 }), false),
            // Another size: an integer as before, the request runs.
            (json!({ "id": "SXRlbTox", "first": 3 }), true),
            // Over the complexity limit: measured on each request's own values, also where
            // the rules were skipped.
            (json!({ "id": "SXRlbTox", "first": 50 }), false),
            (json!({ "id": "SXRlbTox", "first": 2 }), true),
        ] {
            let answer = via::send(&app, via, None, &query, variables.clone()).await;
            assert_eq!(!refused(&answer), passes, "{via:?} {variables}: {answer}");
        }
    }
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

/// A distinct document of about `bytes` bytes that parses and validates: a comment pads it.
fn padded_document(n: usize, bytes: usize) -> String {
    let head = format!("query Padded{n} {{ __typename }}\n#");
    let padding = "x".repeat(bytes.saturating_sub(head.len()));
    format!("{head}{padding}")
}

/// Registers a document the APQ way (hash and text) and checks that it ran.
async fn register_persisted(app: &TestApp, query: &str) {
    let response = via::send(app, Via::PersistedQuery, None, query, json!({})).await;
    assert_eq!(response["data"]["__typename"], "Query", "{response}");
}

/// Runs a document by its hash alone; the error code when it is not stored.
async fn run_persisted(app: &TestApp, query: &str) -> Result<(), String> {
    let hash = hex::encode(Sha256::digest(query.as_bytes()));
    let body = json!({ "extensions": { "persistedQuery": { "version": 1, "sha256Hash": hash } } });
    let response: Value = app
        .http
        .post(app.url("/graphql"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    match response["data"]["__typename"].as_str() {
        Some("Query") => Ok(()),
        _ => Err(first_code(&response).to_string()),
    }
}

/// Bytes Redis holds for the persisted queries of this app's prefix (MEMORY USAGE, every
/// element counted).
async fn persisted_query_memory(app: &TestApp) -> u64 {
    let mut conn = crate::harness::redis(app).await;
    let pattern = format!("{}{{apq}}*", app.keys().prefix());
    let keys = crate::harness::scan(app, &pattern).await;
    let mut total = 0;
    for key in keys {
        let used: Option<u64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(&key)
            .arg("SAMPLES")
            .arg(0)
            .query_async(&mut conn)
            .await
            .unwrap();
        total += used.unwrap_or(0);
    }
    total
}

/// A web app's first load against a server that does not hold its documents registers
/// each of them at once; at the default rates that must not be refused.
#[tokio::test]
async fn a_first_page_load_registering_its_documents_is_not_rate_limited() {
    let app = TestApp::spawn_with(|config| {
        let defaults = base_config();
        config.rate_limit_per_ip = defaults.rate_limit_per_ip;
        config.rate_limit_per_user = defaults.rate_limit_per_user;
    })
    .await;
    let token = app.user_token(7);
    for n in 0..6 {
        let query = padded_document(n, 1_500);
        let response = via::send(&app, Via::PersistedQuery, Some(&token), &query, json!({})).await;
        assert_eq!(
            response["data"]["__typename"], "Query",
            "document {n}: {response}"
        );
    }
    for n in 0..6 {
        assert_eq!(
            run_persisted(&app, &padded_document(n, 1_500)).await,
            Ok(())
        );
    }
}

#[tokio::test]
async fn one_client_registering_300_documents_of_30_kb_grows_redis_by_at_most_4_mb() {
    // The store's own bound, behind the query-size cap and the per-IP budget.
    let app = TestApp::spawn_with(|config| {
        config.max_connections_per_ip = 0;
        config.rate_limit_per_ip = 0;
        config.max_query_bytes = 64 * 1024;
        config.apq_register_bytes_per_ip_per_minute = 0;
    })
    .await;
    let before = persisted_query_memory(&app).await;
    for n in 0..300 {
        register_persisted(&app, &padded_document(n, 30_000)).await;
    }
    let grown = persisted_query_memory(&app).await - before;
    println!("persisted queries: Redis grew by {grown} bytes for 300 documents of 30 KB");
    assert!(grown <= 4_000_000, "Redis grew by {grown} bytes");
}

#[tokio::test]
async fn a_document_over_the_size_cap_runs_but_is_not_stored() {
    // A text the query cap admits and the store's cap does not.
    let app = TestApp::spawn_with(|config| config.max_query_bytes = 64 * 1024).await;
    let small = padded_document(1, 1_000);
    let large = padded_document(2, 20_000);
    register_persisted(&app, &small).await;
    register_persisted(&app, &large).await;
    assert_eq!(run_persisted(&app, &small).await, Ok(()));
    assert_eq!(
        run_persisted(&app, &large).await,
        Err("PERSISTED_QUERY_NOT_FOUND".to_string())
    );
}

#[tokio::test]
async fn persisted_queries_stay_within_their_budget_and_the_least_recently_used_go_first() {
    // Documents of 30 KB are storable here, so the byte budget is what bounds the store.
    let app = TestApp::spawn_with(|config| {
        config.max_connections_per_ip = 0;
        config.rate_limit_per_ip = 0;
        config.max_query_bytes = 64 * 1024;
        config.apq_max_query_bytes = 64 * 1024;
        config.apq_max_bytes = 2 * 1024 * 1024;
        config.apq_register_bytes_per_ip_per_minute = 0;
    })
    .await;
    let before = persisted_query_memory(&app).await;
    let kept = padded_document(0, 30_000);
    register_persisted(&app, &kept).await;
    for n in 1..300 {
        register_persisted(&app, &padded_document(n, 30_000)).await;
        // A document in use is never the least recently used one.
        if n % 20 == 0 {
            assert_eq!(run_persisted(&app, &kept).await, Ok(()), "after {n}");
        }
    }
    let grown = persisted_query_memory(&app).await - before;
    println!("persisted queries: Redis grew by {grown} bytes for 300 stored documents of 30 KB");
    assert!(grown <= 4_000_000, "Redis grew by {grown} bytes");
    assert_eq!(run_persisted(&app, &kept).await, Ok(()));
    assert_eq!(
        run_persisted(&app, &padded_document(299, 30_000)).await,
        Ok(())
    );
    assert_eq!(
        run_persisted(&app, &padded_document(1, 30_000)).await,
        Err("PERSISTED_QUERY_NOT_FOUND".to_string()),
        "the least recently used were evicted"
    );
}
