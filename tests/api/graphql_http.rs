//! GraphQL over HTTP, the playground, health, readiness, metrics and the SDL file.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::harness::{first_code, TestApp};

const GRAPHQL_RESPONSE: &str = "application/graphql-response+json";

#[tokio::test]
async fn typename_answers_over_post_and_get() {
    let app = TestApp::spawn().await;
    let data = app.data(None, "{ __typename }", json!({})).await;
    assert_eq!(data, json!({ "__typename": "Query" }));

    let response = app
        .http
        .get(app.url("/graphql?query=%7B__typename%7D"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["data"]["__typename"], "Query");
}

#[tokio::test]
async fn every_response_has_a_request_id_and_any_origin_may_call() {
    let app = TestApp::spawn().await;
    let response = app
        .http
        .post(app.url("/graphql"))
        .header("origin", "https://app.example")
        .json(&json!({ "query": "{ __typename }" }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["access-control-allow-origin"], "*");
    let first = response.headers()["x-request-id"].clone();
    let second = app.http.get(app.url("/healthz")).send().await.unwrap();
    assert_ne!(second.headers()["x-request-id"], first);

    // A proxy's id is kept, so that its logs and ours join up.
    let relayed = app
        .http
        .get(app.url("/healthz"))
        .header("x-request-id", "lb-7f3a")
        .send()
        .await
        .unwrap();
    assert_eq!(relayed.headers()["x-request-id"], "lb-7f3a");

    // A browser's preflight for a bearer token is granted what it asks for: a wildcard
    // would not cover Authorization.
    let preflight = app
        .http
        .request(reqwest::Method::OPTIONS, app.url("/graphql"))
        .header("origin", "https://app.example")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization, content-type",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.status(), StatusCode::OK);
    let headers = preflight.headers();
    assert_eq!(headers["access-control-allow-origin"], "*");
    assert_eq!(headers["access-control-allow-methods"], "POST");
    assert_eq!(
        headers["access-control-allow-headers"],
        "authorization, content-type"
    );
}

#[tokio::test]
async fn get_refuses_mutations_with_405() {
    let app = TestApp::spawn().await;
    let response = app
        .http
        .get(app.url("/graphql?query=mutation%7B__typename%7D"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(response.headers()["allow"], "POST");
    let body: Value = response.json().await.unwrap();
    assert_eq!(first_code(&body), "BAD_REQUEST");
}

#[tokio::test]
async fn graphql_response_media_type_uses_400_for_request_errors() {
    let app = TestApp::spawn().await;
    let post = |query: &'static str| {
        app.http
            .post(app.url("/graphql"))
            .header("accept", GRAPHQL_RESPONSE)
            .json(&json!({ "query": query }))
            .send()
    };

    let response = post("{ noSuchField }").await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with(GRAPHQL_RESPONSE));
    let body: Value = response.json().await.unwrap();
    assert_eq!(first_code(&body), "GRAPHQL_VALIDATION_FAILED");
    assert!(
        body.get("data").is_none(),
        "request errors carry no data: {body}"
    );

    let response = post("{ __typename ").await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.unwrap();
    assert_eq!(first_code(&body), "GRAPHQL_PARSE_FAILED");

    let response = post("{ __typename }").await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn legacy_json_clients_get_200_for_well_formed_requests() {
    let app = TestApp::spawn().await;
    let response = app
        .http
        .post(app.url("/graphql"))
        .json(&json!({ "query": "{ noSuchField }" }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(first_code(&body), "GRAPHQL_VALIDATION_FAILED");
}

#[tokio::test]
async fn a_body_that_is_not_graphql_is_a_bad_request() {
    let app = TestApp::spawn().await;
    for (content_type, body, status) in [
        ("application/json", "{not json", StatusCode::BAD_REQUEST),
        (
            "application/json",
            "{\"variables\": {}}",
            StatusCode::BAD_REQUEST,
        ),
        (
            "text/plain",
            "{ __typename }",
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
    ] {
        let response = app
            .http
            .post(app.url("/graphql"))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), status, "for {body}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(first_code(&body), "BAD_REQUEST");
    }
}

#[tokio::test]
async fn wrong_variable_types_fail_validation() {
    let app = TestApp::spawn().await;
    let body = app
        .gql(
            None,
            "query($id: ID!) { item(id: $id) { id } }",
            json!({ "id": { "x": 1 } }),
        )
        .await;
    assert_eq!(first_code(&body), "GRAPHQL_VALIDATION_FAILED");
}

#[tokio::test]
async fn playground_serves_graphiql_with_saved_operations() {
    let app = TestApp::spawn().await;
    let response = app.http.get(app.url("/")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let page = response.text().await.unwrap();
    assert!(page.contains("graphiql"), "GraphiQL is loaded");
    assert!(
        page.contains("query Hello"),
        "saved operations are embedded"
    );
    assert!(page.contains("subscription ServerTime"));
}

#[tokio::test]
async fn health_readiness_and_metrics_answer() {
    let app = TestApp::spawn().await;
    let health = app.http.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);

    let ready = app.http.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), StatusCode::OK);
    let ready: Value = ready.json().await.unwrap();
    assert_eq!(
        ready,
        json!({ "status": "ready", "redis": "ok", "sql": "ok" })
    );

    app.http
        .post(app.url("/graphql"))
        .json(&json!({ "query": "query Probe { __typename }", "operationName": "Probe" }))
        .send()
        .await
        .unwrap();
    app.gql(None, "{ nope }", json!({})).await;
    let metrics = app.get_text("/metrics").await;
    // Every counter is exported from start-up at 0: these two have counted.
    let counted = |series: &str| {
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|value| value.trim().parse::<f64>().ok())
            .is_some_and(|value| value >= 1.0)
    };
    assert!(
        counted("engage_graphql_requests_total{operation=\"introspection\"}"),
        "{metrics}"
    );
    assert!(metrics.contains("engage_graphql_request_duration_seconds_bucket"));
    assert!(
        counted("engage_graphql_errors_total{code=\"GRAPHQL_VALIDATION_FAILED\"}"),
        "{metrics}"
    );
    assert!(metrics.contains("engage_redis_pool_connections"));
    assert!(metrics.contains("engage_sql_pool_connections"));
}

#[tokio::test]
async fn the_standard_introspection_query_passes_the_limits() {
    let app = TestApp::spawn().await;
    let body = app.gql(None, INTROSPECTION, json!({})).await;
    assert!(body.get("errors").is_none(), "{body}");
    assert_eq!(body["data"]["__schema"]["queryType"]["name"], "Query");
}

#[test]
fn schema_graphql_is_current() {
    let on_disk = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/schema.graphql"))
        .expect("schema.graphql exists at the repo root");
    assert!(
        on_disk == engage::api::schema::sdl(),
        "schema.graphql is stale: run `cargo run -- schema > schema.graphql`"
    );
}

/// What GraphiQL sends when it opens.
const INTROSPECTION: &str = r#"
query IntrospectionQuery {
  __schema {
    queryType { name } mutationType { name } subscriptionType { name }
    types { ...FullType }
    directives { name description locations args { ...InputValue } }
  }
}
fragment FullType on __Type {
  kind name description
  fields(includeDeprecated: true) {
    name description args { ...InputValue } type { ...TypeRef } isDeprecated deprecationReason
  }
  inputFields { ...InputValue }
  interfaces { ...TypeRef }
  enumValues(includeDeprecated: true) { name description isDeprecated deprecationReason }
  possibleTypes { ...TypeRef }
}
fragment InputValue on __InputValue { name description type { ...TypeRef } defaultValue }
fragment TypeRef on __Type {
  kind name
  ofType { kind name ofType { kind name ofType { kind name ofType { kind name
    ofType { kind name ofType { kind name ofType { kind name } } } } } } }
}
"#;
