//! What web clients (Apollo Client, urql, graphql-request, relay) expect of an HTTP API:
//! compressed answers, CORS for the apps' origins only, `Cache-Control` on public reads,
//! and batched operations.

use std::io::Read;

use engage::{
    app::{settings::Settings, App},
    infra::config::Environment,
};
use reqwest::{header, Method, StatusCode};
use serde_json::{json, Value};

use crate::harness::{base_config, first_code, percent_encode, TestApp};

const PAGE: &str = "query Page($item: ID!) { remarks(itemId: $item, first: 50) { edges { node { \
    id score content createdAt likeCount likedByMe author { id name avatarUrl } } } \
    pageInfo { hasNextPage endCursor } } }";

/// Remark texts, varied as real ones are (compression ratios of one text repeated would
/// flatter).
const OPENINGS: &[&str] = &[
    "Quiet corner, kind staff.",
    "Busy at noon but worth the wait.",
    "The oolong lasts an afternoon.",
    "Came for the view, stayed for the cake.",
    "Small place, big flavours.",
];
const MIDDLES: &[&str] = &[
    "The matcha latte was bitter in the right way and the scones were warm.",
    "Seats by the window fill up fast, so come early on weekends.",
    "Prices went up a little since spring, portions did not.",
    "They let us sit for three hours with one pot and never rushed us.",
    "Wi-Fi is slow; bring a book instead of a laptop.",
    "The owner remembered my order from last month.",
    "Try the osmanthus jelly if it is on the board.",
];
const ENDINGS: &[&str] = &[
    "Will be back.",
    "Four stars.",
    "Recommended!",
    "Meh, once is enough.",
];

/// An app without per-address limits, and an item with 50 remarks (a page of 50 with
/// their text is past the default complexity limit, which prices text by its longest).
async fn app_with_a_page_of_remarks() -> (TestApp, String) {
    let app = TestApp::spawn_with(|config| {
        config.rate_limit_per_ip = 0;
        config.rate_limit_per_user = 0;
        config.max_complexity = 20_000;
    })
    .await;
    let item = app.create_item().await;
    let create = "mutation($input: CreateRemarkInput!) { createRemark(input: $input) { id } }";
    for author in 0..50 {
        let content = format!(
            "{} {} {} Visit {author}.",
            OPENINGS[author as usize % OPENINGS.len()],
            MIDDLES[author as usize * 7 % MIDDLES.len()],
            ENDINGS[author as usize * 3 % ENDINGS.len()],
        );
        let input = json!({ "input": { "itemId": item, "score": 4, "content": content } });
        app.data(Some(&app.user_token(300 + author)), create, input)
            .await;
    }
    (app, item)
}

async fn post_page(app: &TestApp, item: &str, accept_encoding: Option<&str>) -> reqwest::Response {
    let mut request = app
        .http
        .post(app.url("/graphql"))
        .json(&json!({ "query": PAGE, "variables": { "item": item } }));
    if let Some(accept) = accept_encoding {
        request = request.header(header::ACCEPT_ENCODING, accept);
    }
    request.send().await.unwrap()
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn unbrotli(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    brotli::Decompressor::new(bytes, 4096)
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn vary(response: &reqwest::Response) -> String {
    response
        .headers()
        .get_all(header::VARY)
        .iter()
        .map(|v| v.to_str().unwrap().to_ascii_lowercase())
        .collect::<Vec<_>>()
        .join(", ")
}

#[tokio::test]
async fn a_page_of_remarks_is_sent_gzip_or_br_as_the_client_accepts_and_decodes_to_the_same_json() {
    let (app, item) = app_with_a_page_of_remarks().await;

    let plain = post_page(&app, &item, None).await;
    assert_eq!(plain.status(), StatusCode::OK);
    assert!(plain.headers().get(header::CONTENT_ENCODING).is_none());
    assert!(vary(&plain).contains("accept-encoding"), "{}", vary(&plain));
    let plain = plain.bytes().await.unwrap().to_vec();
    let page: Value = serde_json::from_slice(&plain).unwrap();
    assert!(page.get("errors").is_none(), "{page}");
    assert_eq!(
        page["data"]["remarks"]["edges"].as_array().unwrap().len(),
        50
    );

    let gzip = post_page(&app, &item, Some("gzip")).await;
    assert_eq!(gzip.headers()[header::CONTENT_ENCODING], "gzip");
    assert!(vary(&gzip).contains("accept-encoding"));
    let gzip = gzip.bytes().await.unwrap().to_vec();
    assert_eq!(gunzip(&gzip), plain);

    let br = post_page(&app, &item, Some("gzip, deflate, br")).await;
    assert_eq!(br.headers()[header::CONTENT_ENCODING], "br");
    let br = br.bytes().await.unwrap().to_vec();
    assert_eq!(unbrotli(&br), plain);
    assert!(gzip.len() * 4 < plain.len() && br.len() < gzip.len());
    println!(
        "a page of 50 remarks: {} bytes as JSON, {} gzip, {} br",
        plain.len(),
        gzip.len(),
        br.len()
    );

    // q-values rule; a coding refused (q=0) or identity preferred is not used.
    let chosen = async |accept: &str| {
        post_page(&app, &item, Some(accept))
            .await
            .headers()
            .get(header::CONTENT_ENCODING)
            .map(|v| v.to_str().unwrap().to_string())
    };
    assert_eq!(chosen("br;q=0, gzip").await.as_deref(), Some("gzip"));
    assert_eq!(
        chosen("br;q=0.4, gzip;q=0.8").await.as_deref(),
        Some("gzip")
    );
    assert_eq!(chosen("*").await.as_deref(), Some("br"));
    assert_eq!(chosen("identity").await, None);
    assert_eq!(chosen("gzip;q=0, br;q=0").await, None);
    assert_eq!(chosen("deflate, zstd").await, None);
}

#[tokio::test]
async fn an_answer_under_a_kilobyte_is_sent_as_it_is_whatever_the_client_accepts() {
    let app = TestApp::spawn().await;
    let response = app
        .http
        .post(app.url("/graphql"))
        .header(header::ACCEPT_ENCODING, "gzip, br")
        .json(&json!({ "query": "{ __typename }" }))
        .send()
        .await
        .unwrap();
    assert!(response.headers().get(header::CONTENT_ENCODING).is_none());
    assert!(vary(&response).contains("accept-encoding"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["data"]["__typename"], "Query");
}

async fn listed_origins_app() -> TestApp {
    TestApp::spawn_with(|config| {
        config.cors_origins = Some("https://app.example, https://admin.example:8443".into());
    })
    .await
}

async fn preflight(app: &TestApp, origin: &str) -> reqwest::Response {
    app.http
        .request(Method::OPTIONS, app.url("/graphql"))
        .header(header::ORIGIN, origin)
        .header(header::ACCESS_CONTROL_REQUEST_METHOD, "POST")
        .header(
            header::ACCESS_CONTROL_REQUEST_HEADERS,
            "authorization, content-type",
        )
        .send()
        .await
        .unwrap()
}

async fn post_from(app: &TestApp, origin: Option<&str>) -> reqwest::Response {
    let mut request = app
        .http
        .post(app.url("/graphql"))
        .json(&json!({ "query": "{ __typename }" }));
    if let Some(origin) = origin {
        request = request.header(header::ORIGIN, origin);
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn a_listed_origin_is_echoed_and_another_gets_no_cors_headers() {
    let app = listed_origins_app().await;
    for origin in ["https://app.example", "https://admin.example:8443"] {
        let allowed = preflight(&app, origin).await;
        assert_eq!(allowed.status(), StatusCode::OK);
        let headers = allowed.headers();
        assert_eq!(headers[header::ACCESS_CONTROL_ALLOW_ORIGIN], origin);
        assert_eq!(headers[header::ACCESS_CONTROL_ALLOW_METHODS], "POST");
        assert_eq!(
            headers[header::ACCESS_CONTROL_ALLOW_HEADERS],
            "authorization, content-type"
        );
        assert!(vary(&allowed).contains("origin"));

        let answered = post_from(&app, Some(origin)).await;
        assert_eq!(
            answered.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN],
            origin
        );
        assert_eq!(
            answered.headers()[header::ACCESS_CONTROL_EXPOSE_HEADERS],
            "*"
        );
        assert!(vary(&answered).contains("origin"));
    }

    // Another origin (a look-alike, another scheme or port): its preflight is refused with
    // no allow header, and an actual request is answered without CORS headers, so the
    // browser keeps the answer from its page.
    for origin in [
        "https://evil.example",
        "http://app.example",
        "https://app.example:444",
        "https://app.example.evil.example",
    ] {
        let refused = preflight(&app, origin).await;
        assert_eq!(refused.status(), StatusCode::FORBIDDEN, "{origin}");
        for name in [
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            header::ACCESS_CONTROL_ALLOW_METHODS,
            header::ACCESS_CONTROL_ALLOW_HEADERS,
        ] {
            assert!(refused.headers().get(&name).is_none(), "{origin}: {name}");
        }
        let answered = post_from(&app, Some(origin)).await;
        assert_eq!(answered.status(), StatusCode::OK);
        assert!(answered
            .headers()
            .get(header::ACCESS_CONTROL_ALLOW_ORIGIN)
            .is_none());
        assert!(vary(&answered).contains("origin"));
    }

    // A same-origin or non-browser request (no Origin) is answered as ever.
    let plain = post_from(&app, None).await;
    assert_eq!(plain.status(), StatusCode::OK);
    assert!(plain
        .headers()
        .get(header::ACCESS_CONTROL_ALLOW_ORIGIN)
        .is_none());
}

#[tokio::test]
async fn production_sends_no_cors_headers_unless_origins_are_listed() {
    let app = TestApp::spawn_with(|config| {
        config.environment = Environment::Production;
        config.metrics_public = Some(true);
    })
    .await;
    let refused = preflight(&app, "https://app.example").await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    assert!(refused
        .headers()
        .get(header::ACCESS_CONTROL_ALLOW_ORIGIN)
        .is_none());
    let answered = post_from(&app, Some("https://app.example")).await;
    assert_eq!(answered.status(), StatusCode::OK);
    assert!(answered
        .headers()
        .get(header::ACCESS_CONTROL_ALLOW_ORIGIN)
        .is_none());

    // Development answers any origin.
    let development = TestApp::spawn().await;
    let answered = post_from(&development, Some("https://anywhere.example")).await;
    assert_eq!(answered.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN], "*");
}

#[tokio::test]
async fn production_refuses_to_start_with_any_origin_or_with_what_is_not_an_origin() {
    let refusal = async |environment: Environment, origins: &str| {
        let mut config: Settings = base_config();
        config.bind = "127.0.0.1:0".parse().unwrap();
        config.environment = environment;
        config.metrics_public = Some(true);
        config.jwt_secret = Some(format!("{}{}", "k7Qm2xVp9LtR4wYz", "Hn3Bc8Fd6Js1Ge5A"));
        config.cors_origins = Some(origins.into());
        App::start(config).await.err().map(|e| format!("{e:#}"))
    };
    let any = refusal(Environment::Production, "https://app.example, *")
        .await
        .expect("refused");
    assert!(any.contains("ENGAGE_CORS_ORIGINS is *"), "{any}");
    for not_an_origin in [
        "https://app.example/",
        "app.example",
        "https://app.example/graphql",
        "ftp://app.example",
        "https://app.example:http",
    ] {
        let refused = refusal(Environment::Development, not_an_origin)
            .await
            .unwrap_or_else(|| panic!("{not_an_origin} refused"));
        assert!(refused.contains("not an origin"), "{refused}");
    }
}

async fn get_query(app: &TestApp, query: &str, token: Option<&str>) -> reqwest::Response {
    let mut request = app
        .http
        .get(app.url(&format!("/graphql?query={}", percent_encode(query))));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap()
}

fn cache_control(response: &reqwest::Response) -> &str {
    response.headers()[header::CACHE_CONTROL].to_str().unwrap()
}

#[tokio::test]
async fn an_anonymous_get_of_public_reads_may_be_cached_and_nothing_else() {
    let app = TestApp::spawn().await;
    let item = app.create_item().await;
    let public = format!(
        "{{ item(id: \"{item}\") {{ name }} remarks(itemId: \"{item}\") {{ edges {{ node {{ \
         likedByMe }} }} }} seasons {{ id }} leaderboard {{ total me {{ rank }} }} vouchers(itemId: \
         \"{item}\") {{ id }} }}"
    );
    let anonymous = get_query(&app, &public, None).await;
    assert_eq!(anonymous.status(), StatusCode::OK);
    assert_eq!(cache_control(&anonymous), "public, max-age=5");
    let body: Value = anonymous.json().await.unwrap();
    assert!(body.get("errors").is_none(), "{body}");

    // Signed in, the same query is the viewer's own (likedByMe, me).
    let signed_in = get_query(&app, &public, Some(&app.user_token(7))).await;
    assert_eq!(cache_control(&signed_in), "no-store");
    // A root field that is not a public read, beside public ones.
    let viewer = format!("{{ item(id: \"{item}\") {{ name }} viewer {{ id }} }}");
    assert_eq!(
        cache_control(&get_query(&app, &viewer, None).await),
        "no-store"
    );
    // An answer with errors.
    let failed = "{ remarks(itemId: \"1\", first: -1) { pageInfo { hasNextPage } } }";
    let failed = get_query(&app, failed, None).await;
    assert_eq!(cache_control(&failed), "no-store");
    let body: Value = failed.json().await.unwrap();
    assert!(body.get("errors").is_some(), "{body}");
    // The same public query over POST, and a mutation.
    let posted = app
        .http
        .post(app.url("/graphql"))
        .json(&json!({ "query": public }))
        .send()
        .await
        .unwrap();
    assert_eq!(cache_control(&posted), "no-store");
    let mutation = app
        .http
        .post(app.url("/graphql"))
        .bearer_auth(app.admin_token())
        .json(&json!({ "query": "mutation { createItem(input: { name: \"Kiosk\" }) { id } }" }))
        .send()
        .await
        .unwrap();
    assert_eq!(mutation.status(), StatusCode::OK);
    assert_eq!(cache_control(&mutation), "no-store");
    // A request refused before it ran.
    let refused = get_query(&app, "{ nothing }", None).await;
    assert_eq!(cache_control(&refused), "no-store");

    // 0 turns public caching off.
    let uncached = TestApp::spawn_with(|config| config.public_max_age_seconds = 0).await;
    let response = get_query(&uncached, "{ seasons { id } }", None).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(cache_control(&response), "no-store");
}

async fn post_batch(app: &TestApp, token: Option<&str>, batch: Value) -> reqwest::Response {
    let mut request = app.http.post(app.url("/graphql")).json(&batch);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn a_batch_answers_each_operation_in_order_with_its_own_errors() {
    let app = TestApp::spawn().await;
    let admin = app.admin_token();
    let batch = json!([
        { "query": "mutation { createItem(input: { name: \"First\" }) { name } }" },
        { "query": "query Named { __typename }", "operationName": "Named" },
        { "query": "{ nothing }" },
        { "query": "mutation($name: String!) { createItem(input: { name: $name }) { name } }",
          "variables": { "name": "Second" } },
    ]);
    let response = post_batch(&app, Some(&admin), batch).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(cache_control(&response), "no-store");
    let answers: Value = response.json().await.unwrap();
    let answers = answers.as_array().expect("an array");
    assert_eq!(answers.len(), 4);
    assert_eq!(answers[0]["data"]["createItem"]["name"], "First");
    assert_eq!(answers[1]["data"]["__typename"], "Query");
    assert_eq!(first_code(&answers[2]), "GRAPHQL_VALIDATION_FAILED");
    assert_eq!(answers[3]["data"]["createItem"]["name"], "Second");

    // Past the cap, and empty: refused whole, with a code.
    let too_many = json!((0..11)
        .map(|_| json!({ "query": "{ __typename }" }))
        .collect::<Vec<_>>());
    let response = post_batch(&app, None, too_many).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.unwrap();
    assert_eq!(first_code(&body), "BAD_REQUEST");
    assert!(body.to_string().contains("1 to 10 operations"), "{body}");
    let response = post_batch(&app, None, json!([])).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_batch_pays_for_each_operation_as_a_request() {
    // One request a second, bursts of two: the batch's third operation finds none left.
    let app = TestApp::spawn_with(|config| config.rate_limit_per_ip = 1).await;
    let typename = json!({ "query": "{ __typename }" });
    let response = post_batch(&app, None, json!([typename, typename, typename])).await;
    assert_eq!(response.status(), StatusCode::OK);
    let answers: Value = response.json().await.unwrap();
    assert_eq!(answers[0]["data"]["__typename"], "Query");
    assert_eq!(answers[1]["data"]["__typename"], "Query");
    assert_eq!(first_code(&answers[2]), "RATE_LIMITED");
    assert!(answers[2].get("data").is_none());
}

#[tokio::test]
async fn a_batch_runs_at_most_the_mutation_fields_of_one_request_across_its_operations() {
    let app = TestApp::spawn_with(|config| config.max_mutations_per_request = 2).await;
    let admin = app.admin_token();
    let create = |name: &str| json!({ "query": format!("mutation {{ createItem(input: {{ name: \"{name}\" }}) {{ id }} }}") });
    let two = post_batch(&app, Some(&admin), json!([create("A"), create("B")])).await;
    let answers: Value = two.json().await.unwrap();
    assert!(
        answers[0]["data"]["createItem"]["id"].is_string(),
        "{answers}"
    );
    assert!(
        answers[1]["data"]["createItem"]["id"].is_string(),
        "{answers}"
    );

    let three = post_batch(
        &app,
        Some(&admin),
        json!([create("C"), { "query": "{ __typename }" }, create("D"), create("E")]),
    )
    .await;
    let body: Value = three.json().await.unwrap();
    assert!(body.is_object(), "refused whole, not per operation: {body}");
    assert_eq!(first_code(&body), "GRAPHQL_VALIDATION_FAILED");
    assert!(
        body.to_string().contains("at most 2 mutation fields"),
        "{body}"
    );
    assert!(body.get("data").is_none());
}

#[tokio::test]
async fn metrics_go_gzip_to_a_scraper_that_asks_and_a_websocket_upgrade_is_not_compressed() {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::{client::IntoClientRequest, Message};

    let app = TestApp::spawn().await;
    let scrape = app
        .http
        .get(app.url("/metrics"))
        .header(header::ACCEPT_ENCODING, "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(scrape.status(), StatusCode::OK);
    assert_eq!(scrape.headers()[header::CONTENT_ENCODING], "gzip");
    let text = String::from_utf8(gunzip(&scrape.bytes().await.unwrap())).unwrap();
    assert!(text.contains("engage_"), "{text}");

    // Browsers send Accept-Encoding on the handshake too: the upgrade goes through, and
    // the socket speaks as ever.
    let mut request = app.ws_url().into_client_request().unwrap();
    let headers = request.headers_mut();
    headers.insert(
        "sec-websocket-protocol",
        "graphql-transport-ws".parse().unwrap(),
    );
    headers.insert("accept-encoding", "gzip, deflate, br".parse().unwrap());
    let (mut socket, response) = tokio_tungstenite::connect_async(request)
        .await
        .expect("upgrade accepted");
    assert!(response.headers().get("content-encoding").is_none());
    let init = json!({ "type": "connection_init", "payload": {} });
    socket.send(Message::text(init.to_string())).await.unwrap();
    let Some(Ok(Message::Text(ack))) = socket.next().await else {
        panic!("no acknowledgement");
    };
    assert_eq!(
        serde_json::from_str::<Value>(&ack).unwrap()["type"],
        "connection_ack"
    );
}

/// The values of the enum `ErrorCode` in an SDL text, in their order.
fn error_code_values(sdl: &str) -> Vec<String> {
    use async_graphql::parser::types::{TypeKind, TypeSystemDefinition};
    let document = async_graphql::parser::parse_schema(sdl).expect("the SDL parses");
    document
        .definitions
        .into_iter()
        .find_map(|definition| match definition {
            TypeSystemDefinition::Type(ty) if ty.node.name.node == "ErrorCode" => {
                match ty.node.kind {
                    TypeKind::Enum(enumeration) => Some(
                        enumeration
                            .values
                            .into_iter()
                            .map(|value| value.node.value.node.to_string())
                            .collect(),
                    ),
                    _ => None,
                }
            }
            _ => None,
        })
        .expect("the SDL has an enum ErrorCode")
}

#[tokio::test]
async fn the_schemas_error_code_enum_lists_exactly_the_codes_the_service_answers() {
    let codes: Vec<String> = engage::infra::error::ErrorCode::all()
        .map(|code| code.as_str().to_string())
        .collect();
    for required in ["MAKEUP_LIMIT", "PAY_WINDOW_OVER", "SOLD_OUT", "INTERNAL"] {
        assert!(codes.iter().any(|code| code == required), "{required}");
    }
    // The committed file clients generate types from, and the schema the server builds.
    let committed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/schema.graphql"))
        .expect("schema.graphql");
    assert_eq!(error_code_values(&committed), codes, "schema.graphql");
    assert_eq!(error_code_values(&engage::api::schema::sdl()), codes);

    // What introspection tells a running server's clients: every code, each explained.
    let app = TestApp::spawn().await;
    let body = app
        .data(
            None,
            "{ errorCodes __type(name: \"ErrorCode\") { kind enumValues { name description } } }",
            json!({}),
        )
        .await;
    assert_eq!(body["__type"]["kind"], "ENUM");
    let values = body["__type"]["enumValues"].as_array().expect("values");
    let names: Vec<&str> = values
        .iter()
        .map(|value| value["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, codes);
    assert_eq!(body["errorCodes"], json!(codes));
    // The same list for everyone: a public read that caches may keep.
    let anonymous = get_query(&app, "{ errorCodes }", None).await;
    assert_eq!(cache_control(&anonymous), "public, max-age=5");
    for value in values {
        let description = value["description"].as_str().unwrap_or_default();
        assert!(description.len() > 20, "{value} says when it is answered");
    }
}
