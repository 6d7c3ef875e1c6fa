//! Hostile input over every transport: nothing crashes the process or answers 5xx, and no
//! transport gets around a limit. Each rule is checked on POST, GET, persisted queries and
//! both WebSocket protocols (see `via`).
//!
//! The submodules hold the second round of rules, one file per kind of abuse.

mod connections;
mod cost;
mod identity;
mod probes;
mod writes;

use std::time::{Duration, Instant};

use engage::infra::auth::Role;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{
    harness::{global_id, TestApp},
    hostile_documents::{fragment_bombs, nesting_bombs},
    via::{self, code, Via},
};

async fn assert_healthy(app: &TestApp) {
    let response = app
        .http
        .get(app.url("/healthz"))
        .send()
        .await
        .expect("/healthz answers");
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn deep_nesting_of_any_shape_is_a_parse_error_on_every_transport() {
    // The parser's own bound, behind the query-size cap.
    let app = TestApp::spawn_with(|config| {
        config.rate_limit_per_ip = 0;
        config.max_query_bytes = 64 * 1024;
    })
    .await;
    for (name, document) in nesting_bombs(3_000) {
        for via in via::ALL {
            // A URL holds less: the same shapes, less deep, still far past the bound.
            let document = if via == Via::Get {
                nesting_bombs(500)
                    .into_iter()
                    .find(|(n, _)| *n == name)
                    .unwrap()
                    .1
            } else {
                document.clone()
            };
            let answer = via::send(&app, via, None, &document, json!({})).await;
            assert_eq!(
                code(&answer),
                "GRAPHQL_PARSE_FAILED",
                "{name} via {via:?}: {answer}"
            );
        }
    }
    // The first finding, as sent: 4 KB that used to abort the process.
    let killer = format!(
        "#\r{{__typename(a:{}{})}}",
        "[".repeat(2000),
        "]".repeat(2000)
    );
    let response = app
        .http
        .post(app.url("/graphql"))
        .json(&json!({ "query": killer }))
        .send()
        .await
        .unwrap();
    assert!(response.status().is_client_error() || response.status().is_success());
    assert_healthy(&app).await;
}

#[tokio::test]
async fn nesting_within_the_bound_still_parses_on_every_transport() {
    let app = TestApp::spawn().await;
    let nested = "{ ofType ".repeat(8) + "{ name }" + &"}".repeat(8);
    for comment in ["#\r", "#\n", "#\r\n"] {
        let document = format!("{comment}{{ __schema {{ queryType {{ name }} }} }}");
        for via in via::ALL {
            let answer = via::send(&app, via, None, &document, json!({})).await;
            assert_eq!(
                answer["data"]["__schema"]["queryType"]["name"], "Query",
                "{via:?}: {answer}"
            );
        }
    }
    let document = format!("#\r{{ __type(name: \"Query\") {{ fields {{ type {nested} }} }} }}");
    let answer = via::send(&app, Via::Post, None, &document, json!({})).await;
    assert!(answer["data"]["__type"].is_object(), "{answer}");
}

#[tokio::test]
async fn deeply_nested_variables_are_refused_not_recursed_into() {
    let app = TestApp::spawn().await;
    let mut value = json!(1);
    for _ in 0..100 {
        value = json!([value]);
    }
    // serde_json stops at 128 levels; the body is then not JSON it accepts.
    let body = format!(
        "{{\"query\":\"query($v: Int) {{ __typename }}\",\"variables\":{{\"v\":{}1{}}}}}",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let response = app
        .http
        .post(app.url("/graphql"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(code(&answer), "BAD_REQUEST", "{answer}");

    // Within serde's bound, a nested value of the wrong type is an input error.
    for via in [Via::Post, Via::TransportWs, Via::LegacyWs] {
        let answer = via::send(
            &app,
            via,
            None,
            "query($v: Int) { __typename }",
            json!({ "v": value }),
        )
        .await;
        assert!(
            ["BAD_USER_INPUT", "GRAPHQL_VALIDATION_FAILED"].contains(&code(&answer)),
            "{via:?}: {answer}"
        );
    }
}

#[tokio::test]
async fn fragment_chains_fan_outs_and_cycles_are_refused_quickly_on_every_transport() {
    let app = TestApp::spawn_with(|config| config.rate_limit_per_ip = 0).await;
    for (name, document) in fragment_bombs(300) {
        for via in via::ALL {
            let started = Instant::now();
            let answer = via::send(&app, via, None, &document, json!({})).await;
            assert_eq!(
                code(&answer),
                "GRAPHQL_VALIDATION_FAILED",
                "{name} via {via:?}: {answer}"
            );
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{name} via {via:?}"
            );
        }
    }
}

#[tokio::test]
async fn each_websocket_operation_counts_against_the_ip_rate() {
    let app = TestApp::spawn_with(|config| config.rate_limit_per_ip = 2).await;
    for via in [Via::TransportWs, Via::LegacyWs] {
        tokio::time::sleep(Duration::from_secs(3)).await; // a full burst again
        let mut socket = via::open(&app, via, None).await;
        let mut codes = Vec::new();
        for i in 0..10 {
            let payload = json!({ "query": "{ __typename }" });
            let answer = via::operation(&mut socket, via, &i.to_string(), payload).await;
            codes.push(
                answer["errors"][0]["extensions"]["code"]
                    .as_str()
                    .unwrap_or("ok")
                    .to_string(),
            );
        }
        assert!(codes.iter().any(|c| c == "ok"), "{via:?}: {codes:?}");
        assert!(
            codes.iter().any(|c| c == "RATE_LIMITED"),
            "{via:?}: {codes:?}"
        );
    }
}

#[tokio::test]
async fn every_mutation_field_counts_against_the_user_rate_on_every_transport() {
    let app = TestApp::spawn_with(|config| {
        config.rate_limit_per_user = 5; // bursts of 10
        config.rate_limit_per_ip = 0;
    })
    .await;
    let aliases = |n: usize| {
        let fields = (0..n)
            .map(|i| format!("s{i}: signIn {{ alreadySigned }}"))
            .collect::<Vec<_>>()
            .join(" ");
        format!("mutation {{ {fields} }}")
    };
    for (n, via) in [
        Via::Post,
        Via::PersistedQuery,
        Via::TransportWs,
        Via::LegacyWs,
    ]
    .into_iter()
    .enumerate()
    {
        let token = app.user_token(9_100 + n as i64);
        // More than a request may write at all.
        let answer = via::send(&app, via, Some(&token), &aliases(25), json!({})).await;
        assert_eq!(
            code(&answer),
            "GRAPHQL_VALIDATION_FAILED",
            "{via:?}: {answer}"
        );
        // Within that, but more than the user's burst: refused whole, nothing written.
        let answer = via::send(&app, via, Some(&token), &aliases(15), json!({})).await;
        assert_eq!(code(&answer), "RATE_LIMITED", "{via:?}: {answer}");
        assert!(
            answer["data"].is_null() || answer.get("data").is_none(),
            "{answer}"
        );
    }
}

#[tokio::test]
async fn get_refuses_mutations_before_running_them() {
    let app = TestApp::spawn().await;
    let token = app.user_token(9_200);
    let answer = via::send(
        &app,
        Via::Get,
        Some(&token),
        "mutation { signIn { streak } }",
        json!({}),
    )
    .await;
    assert_eq!(code(&answer), "BAD_REQUEST", "{answer}");
}

#[tokio::test]
async fn a_socket_closes_with_4403_when_its_token_expires_and_refuses_operations() {
    let app = TestApp::spawn().await;
    let tokens = app.signer();
    for via in [Via::TransportWs, Via::LegacyWs] {
        // Expires in 2 s (the validation leeway lets it through at init).
        let token = tokens.mint(9_300, Role::User, 2, None);
        let mut socket = via::open(&app, via, Some(&token)).await;
        let started = Instant::now();
        let closed = loop {
            match via::next(&mut socket).await {
                Ok(_) => continue,
                Err(frame) => break frame,
            }
        };
        assert_eq!(
            closed.as_ref().map(|f| u16::from(f.code)),
            Some(4403),
            "{via:?}: {closed:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(5), "{via:?}");
    }
}

#[tokio::test]
async fn a_socket_without_connection_init_is_closed_with_4408() {
    let app = TestApp::spawn().await;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut request = app.ws_url().into_client_request().unwrap();
    request.headers_mut().insert(
        "sec-websocket-protocol",
        "graphql-transport-ws".parse().unwrap(),
    );
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    let started = Instant::now();
    let closed = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            match socket.next().await {
                Some(Ok(tokio_tungstenite::tungstenite::Message::Close(frame))) => break frame,
                Some(Ok(_)) => continue,
                _ => break None,
            }
        }
    })
    .await
    .expect("closed within 15 s");
    assert_eq!(closed.map(|f| u16::from(f.code)), Some(4408));
    assert!(started.elapsed() >= Duration::from_secs(9));
}

#[tokio::test]
async fn a_websocket_message_over_the_body_limit_closes_the_socket() {
    let app = TestApp::spawn_with(|config| config.max_body_bytes = 8 * 1024).await;
    for via in [Via::TransportWs, Via::LegacyWs] {
        let mut socket = via::open(&app, via, None).await;
        let padding = " ".repeat(20 * 1024);
        let payload = json!({ "query": format!("{{ __typename {padding} }}") });
        let answer = via::operation(&mut socket, via, "1", payload).await;
        assert_eq!(answer["closed"], 1009, "{via:?}: {answer}");
    }
    assert_healthy(&app).await;
}

#[tokio::test]
async fn operations_running_on_one_socket_are_capped() {
    let app = TestApp::spawn_with(|config| {
        config.ws_max_operations = 3;
        config.max_subscriptions_per_connection = 100;
    })
    .await;
    for via in [Via::TransportWs, Via::LegacyWs] {
        let mut socket = via::open(&app, via, None).await;
        let subscription = json!({ "query": "subscription { serverTime(everySeconds: 60) }" });
        for id in ["a", "b", "c"] {
            let answer = via::operation(&mut socket, via, id, subscription.clone()).await;
            assert!(answer.get("errors").is_none(), "{via:?}: {answer}");
        }
        let answer = via::operation(&mut socket, via, "d", subscription.clone()).await;
        assert_eq!(code(&answer), "RATE_LIMITED", "{via:?}: {answer}");
    }
}

#[tokio::test]
async fn half_open_connections_are_closed_by_the_header_timeout() {
    let app = TestApp::spawn_with(|config| config.header_read_timeout_seconds = 1).await;
    let address = app.base.trim_start_matches("http://").to_string();
    let mut silent = tokio::net::TcpStream::connect(&address).await.unwrap();
    let mut partial = tokio::net::TcpStream::connect(&address).await.unwrap();
    partial
        .write_all(b"POST /graphql HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    for socket in [&mut silent, &mut partial] {
        let mut buffer = [0u8; 1024];
        let read = tokio::time::timeout(Duration::from_secs(5), socket.read(&mut buffer))
            .await
            .expect("the server closes the connection within 5 s");
        // Closed (0 bytes or a reset), perhaps after a 408.
        if let Ok(n) = read {
            let text = String::from_utf8_lossy(&buffer[..n]);
            assert!(n == 0 || text.starts_with("HTTP/1.1 408"), "{text}");
        }
    }
}

#[tokio::test]
async fn healthz_answers_while_1500_half_open_sockets_are_held() {
    let app = TestApp::spawn().await;
    let address: std::net::SocketAddr = app.base.trim_start_matches("http://").parse().unwrap();
    let mut held = Vec::new();
    for n in 0..1500 {
        // From six addresses, each within its cap of connections (127.0.0.1 asks /healthz).
        let local = std::net::Ipv4Addr::new(127, 0, 0, 10 + (n % 6) as u8);
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind((local, 0).into()).unwrap();
        let mut socket = socket.connect(address).await.unwrap();
        socket
            .write_all(b"GET /healthz HTTP/1.1\r\n")
            .await
            .unwrap();
        held.push(socket);
    }
    let started = Instant::now();
    assert_healthy(&app).await;
    assert!(started.elapsed() < Duration::from_secs(2));
    drop(held);
}

#[tokio::test]
async fn connections_past_the_cap_are_closed_at_once() {
    let app = TestApp::spawn_with(|config| config.max_connections = 20).await;
    let address = app.base.trim_start_matches("http://").to_string();
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(tokio::net::TcpStream::connect(&address).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut extra = tokio::net::TcpStream::connect(&address).await.unwrap();
    let mut buffer = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(2), extra.read(&mut buffer))
        .await
        .expect("closed at once");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_healthy(&app).await;
}

#[tokio::test]
async fn invented_operation_names_add_nothing_to_metrics() {
    let app = TestApp::spawn_with(|config| config.rate_limit_per_ip = 0).await;
    for i in 0..2000 {
        let name = format!("Invented{i}x");
        let query = format!("query {name} {{ __typename }}");
        app.http
            .post(app.url("/graphql"))
            .json(&json!({ "query": query, "operationName": name }))
            .send()
            .await
            .unwrap();
    }
    let metrics = app.get_text("/metrics").await;
    assert!(
        !metrics.contains("Invented"),
        "client names reached /metrics"
    );
    assert!(metrics.contains("operation=\"introspection\""));
}

/// How many of ten requests with these `X-Forwarded-For` headers are rate limited.
async fn limited_of_ten(app: &TestApp, forwarded_for: impl Fn(usize) -> String) -> usize {
    let mut limited = 0;
    for i in 0..10 {
        let response = app
            .http
            .post(app.url("/graphql"))
            .header("x-forwarded-for", forwarded_for(i))
            .json(&json!({ "query": "{ __typename }" }))
            .send()
            .await
            .unwrap();
        limited += usize::from(response.status() == 429);
    }
    limited
}

#[tokio::test]
async fn the_client_ip_is_the_entry_the_trusted_proxy_added() {
    let app = TestApp::spawn_with(|config| {
        config.trust_proxy = true;
        config.rate_limit_per_ip = 2; // bursts of 4
    })
    .await;
    // A client rotating a forged left-most entry is still one client behind the proxy.
    let limited = limited_of_ten(&app, |i| format!("10.9.{i}.1, 203.0.113.7")).await;
    assert!(limited >= 5, "{limited} of 10 limited");

    // The same client upgrading to WebSockets is the same client.
    let mut refused = 0;
    for i in 0..10 {
        let forwarded = format!("10.8.{i}.1, 203.0.113.7");
        let upgrade = via::connect(&app, Via::TransportWs, &[("x-forwarded-for", forwarded)]).await;
        refused += usize::from(upgrade.err() == Some(429));
    }
    assert!(refused >= 5, "{refused} of 10 upgrades refused");
}

#[tokio::test]
async fn two_trusted_hops_take_the_second_entry_from_the_right() {
    let app = TestApp::spawn_with(|config| {
        config.trust_proxy = true;
        config.trusted_proxy_hops = 2;
        config.rate_limit_per_ip = 2;
    })
    .await;
    // The client is 198.51.100.4; the inner proxy appended 10.0.0.2.
    let limited = limited_of_ten(&app, |i| format!("1.1.1.{i}, 198.51.100.4, 10.0.0.2")).await;
    assert!(limited >= 5, "{limited} of 10 limited");
}

/// A registration costs a request more: at a rate of 5 a second (bursts of 10), eight
/// ordinary requests pass where eight registrations do not.
#[tokio::test]
async fn registering_persisted_queries_is_rate_counted() {
    async fn codes_of_eight(via: Via) -> Vec<String> {
        let app = TestApp::spawn_with(|config| config.rate_limit_per_ip = 5).await;
        let mut codes = Vec::new();
        for i in 0..8 {
            let query = format!("query Q{i} {{ __typename }}");
            let answer = via::send(&app, via, None, &query, json!({})).await;
            codes.push(
                answer["errors"][0]["extensions"]["code"]
                    .as_str()
                    .unwrap_or("ok")
                    .to_string(),
            );
        }
        codes
    }
    let ordinary = codes_of_eight(Via::Post).await;
    assert!(ordinary.iter().all(|c| c == "ok"), "{ordinary:?}");
    let registrations = codes_of_eight(Via::PersistedQuery).await;
    assert!(
        registrations.iter().any(|c| c == "RATE_LIMITED"),
        "{registrations:?}"
    );
}

#[tokio::test]
async fn tokens_not_valid_yet_or_living_too_long_are_refused() {
    let app = TestApp::spawn_with(|config| config.jwt_max_ttl_seconds = Some(3600)).await;
    let secret = app.jwt_secret();
    let key = jsonwebtoken::EncodingKey::from_secret(secret.as_bytes());
    let now = chrono::Utc::now().timestamp();
    let sign = |claims: Value| {
        jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key).unwrap()
    };
    let not_yet = sign(json!({ "sub": "7", "role": "user", "exp": now + 600, "nbf": now + 300 }));
    let too_long = sign(json!({ "sub": "7", "role": "user", "exp": now + 30 * 86_400 }));
    let fine = sign(json!({ "sub": "7", "role": "user", "exp": now + 600, "iat": now }));
    for via in [Via::Post, Via::Get] {
        for token in [&not_yet, &too_long] {
            let answer = via::send(&app, via, Some(token), "{ viewer { id } }", json!({})).await;
            assert_eq!(code(&answer), "UNAUTHENTICATED", "{via:?}: {answer}");
        }
        let answer = via::send(&app, via, Some(&fine), "{ viewer { id } }", json!({})).await;
        assert_eq!(
            answer["data"]["viewer"]["id"],
            global_id("User", 7),
            "{via:?}: {answer}"
        );
    }
    for via in [Via::TransportWs, Via::LegacyWs] {
        for token in [&not_yet, &too_long] {
            let mut socket = via::connect(&app, via, &[]).await.unwrap();
            let refusal = via::init(&mut socket, Some(token))
                .await
                .expect_err("refused");
            assert!(
                refusal["closed"] == 4403 || refusal["type"] == "connection_error",
                "{via:?}: {refusal}"
            );
        }
        let answer = via::send(&app, via, Some(&fine), "{ viewer { id } }", json!({})).await;
        assert_eq!(
            answer["data"]["viewer"]["id"],
            global_id("User", 7),
            "{via:?}: {answer}"
        );
    }
}

#[tokio::test]
async fn an_empty_secret_refuses_to_start_with_a_clear_message() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_engage"))
        .arg("serve")
        .env("ENGAGE_JWT_SECRET", "")
        .env("ENGAGE_BIND", "127.0.0.1:0")
        .output()
        .expect("the binary runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("ENGAGE_JWT_SECRET is set but empty"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_short_secret_or_the_dev_secret_off_loopback_refuses_to_start() {
    let mut config = crate::harness::base_config();
    config.jwt_secret = Some("too-short".into());
    let error = config.check().expect_err("a short secret is refused");
    assert!(error.to_string().contains("at least 32"), "{error}");

    config.jwt_secret = None;
    config.bind = "0.0.0.0:0".parse().unwrap();
    let error = config
        .check()
        .expect_err("the dev secret off loopback is refused");
    assert!(error.to_string().contains("loopback"), "{error}");

    config.bind = "127.0.0.1:0".parse().unwrap();
    config
        .check()
        .expect("the dev secret on loopback is allowed");
    config.jwt_secret = Some("x".repeat(32));
    config.bind = "0.0.0.0:0".parse().unwrap();
    config.check().expect("a strong secret may listen anywhere");
}

#[tokio::test]
async fn persisted_queries_register_and_resolve_over_both_websocket_protocols() {
    use sha2::{Digest, Sha256};
    let app = TestApp::spawn().await;
    for via in [Via::TransportWs, Via::LegacyWs] {
        let query = format!("query Persisted{via:?} {{ __typename }}");
        let hash = hex::encode(Sha256::digest(query.as_bytes()));
        let persisted = json!({ "persistedQuery": { "version": 1, "sha256Hash": hash } });
        let mut socket = via::open(&app, via, None).await;
        let unknown =
            via::operation(&mut socket, via, "1", json!({ "extensions": persisted })).await;
        assert_eq!(
            code(&unknown),
            "PERSISTED_QUERY_NOT_FOUND",
            "{via:?}: {unknown}"
        );
        let payload = json!({ "query": query, "extensions": persisted });
        let registered = via::operation(&mut socket, via, "2", payload).await;
        assert_eq!(
            registered["data"]["__typename"], "Query",
            "{via:?}: {registered}"
        );
        let mut found = Value::Null;
        for _ in 0..50 {
            found = via::operation(&mut socket, via, "3", json!({ "extensions": persisted })).await;
            if found.get("data").is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(found["data"]["__typename"], "Query", "{via:?}: {found}");
    }
}
