//! Subscriptions over WebSocket: both protocols, tokens in `connection_init`, limits and
//! a clean close on shutdown.

use std::time::Duration;

use serde_json::json;
use tokio_tungstenite::{
    connect_async,
    tungstenite::{client::IntoClientRequest, http::HeaderValue, protocol::CloseFrame},
    MaybeTlsStream, WebSocketStream,
};

use crate::{
    harness::{global_id, TestApp},
    via::{next, write as send},
};

type Socket = WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>;

async fn connect(app: &TestApp, protocol: &str) -> Socket {
    let mut request = app.ws_url().into_client_request().unwrap();
    request.headers_mut().insert(
        "sec-websocket-protocol",
        HeaderValue::from_str(protocol).unwrap(),
    );
    let (socket, response) = connect_async(request).await.expect("upgrade accepted");
    assert_eq!(response.headers()["sec-websocket-protocol"], protocol);
    socket
}

#[tokio::test]
async fn graphql_transport_ws_handshake_without_a_token_then_a_subscription() {
    let app = TestApp::spawn().await;
    let mut socket = connect(&app, "graphql-transport-ws").await;
    send(&mut socket, json!({ "type": "connection_init" })).await;
    assert_eq!(next(&mut socket).await.unwrap()["type"], "connection_ack");

    send(&mut socket, json!({ "id": "1", "type": "subscribe", "payload": { "query": "subscription { serverTime }" } })).await;
    let message = next(&mut socket).await.unwrap();
    assert_eq!(message["type"], "next");
    assert_eq!(message["id"], "1");
    assert!(message["payload"]["data"]["serverTime"]
        .as_str()
        .unwrap()
        .contains('T'));
}

#[tokio::test]
async fn graphql_transport_ws_accepts_a_token_in_connection_init() {
    let app = TestApp::spawn().await;
    let mut socket = connect(&app, "graphql-transport-ws").await;
    let token = app.user_token(9);
    send(&mut socket, json!({ "type": "connection_init", "payload": { "Authorization": format!("Bearer {token}") } })).await;
    assert_eq!(next(&mut socket).await.unwrap()["type"], "connection_ack");
    // The same connection runs queries with the viewer of the token.
    send(
        &mut socket,
        json!({ "id": "q", "type": "subscribe", "payload": { "query": "{ viewer { id } }" } }),
    )
    .await;
    let message = next(&mut socket).await.unwrap();
    assert_eq!(
        message["payload"]["data"]["viewer"]["id"],
        global_id("User", 9)
    );
}

#[tokio::test]
async fn graphql_transport_ws_closes_4403_on_a_bad_token() {
    let app = TestApp::spawn().await;
    let mut socket = connect(&app, "graphql-transport-ws").await;
    send(
        &mut socket,
        json!({ "type": "connection_init", "payload": { "Authorization": "Bearer not-a-token" } }),
    )
    .await;
    let frame = next(&mut socket)
        .await
        .expect_err("the connection is closed")
        .expect("with a frame");
    assert_eq!(u16::from(frame.code), 4403);
}

#[tokio::test]
async fn the_legacy_graphql_ws_protocol_works_too() {
    let app = TestApp::spawn().await;
    let mut socket = connect(&app, "graphql-ws").await;
    send(
        &mut socket,
        json!({ "type": "connection_init", "payload": {} }),
    )
    .await;
    assert_eq!(next(&mut socket).await.unwrap()["type"], "connection_ack");
    send(&mut socket, json!({ "id": "1", "type": "start", "payload": { "query": "subscription { serverTime }" } })).await;
    let message = loop {
        let message = next(&mut socket).await.unwrap();
        if message["type"] != "ka" {
            break message;
        }
    };
    assert_eq!(message["type"], "data");
    assert!(message["payload"]["data"]["serverTime"].is_string());
}

#[tokio::test]
async fn a_connection_holds_a_bounded_number_of_subscriptions() {
    let app = TestApp::spawn_with(|config| config.max_subscriptions_per_connection = 2).await;
    let mut socket = connect(&app, "graphql-transport-ws").await;
    send(&mut socket, json!({ "type": "connection_init" })).await;
    next(&mut socket).await.unwrap();
    for id in ["1", "2", "3"] {
        send(&mut socket, json!({ "id": id, "type": "subscribe", "payload": { "query": "subscription { serverTime(everySeconds: 60) }" } })).await;
    }
    let mut refused = None;
    for _ in 0..6 {
        let message = next(&mut socket).await.unwrap();
        assert!(message["payload"]["errors"].is_null(), "{message}");
        if message["type"] == "error" {
            refused = Some(message);
            break;
        }
    }
    // Which of the three loses the race for the two slots is up to the scheduler; it
    // ends with the protocol's `error`, its resolver having failed before its first item.
    let refused = refused.expect("one subscription beyond the limit is refused");
    assert_eq!(refused["payload"][0]["extensions"]["code"], "RATE_LIMITED");
}

#[tokio::test]
async fn shutdown_closes_websockets_with_going_away() {
    let mut app = TestApp::spawn().await;
    let mut socket = connect(&app, "graphql-transport-ws").await;
    send(&mut socket, json!({ "type": "connection_init" })).await;
    next(&mut socket).await.unwrap();
    send(&mut socket, json!({ "id": "1", "type": "subscribe", "payload": { "query": "subscription { serverTime(everySeconds: 60) }" } })).await;
    next(&mut socket).await.unwrap();

    let stopped = tokio::spawn(async move {
        app.shutdown().await.unwrap();
        app
    });
    let frame = loop {
        match next(&mut socket).await {
            Ok(_) => continue,
            Err(frame) => break frame,
        }
    };
    assert_eq!(u16::from(frame.expect("a close frame").code), 1001);
    let _app = tokio::time::timeout(Duration::from_secs(10), stopped)
        .await
        .expect("stops in time")
        .unwrap();
}

#[tokio::test]
async fn graphql_transport_ws_closes_on_its_protocol_errors() {
    let app = TestApp::spawn().await;
    let subscribe = |id: &str| json!({ "id": id, "type": "subscribe", "payload": { "query": "subscription { serverTime(everySeconds: 60) }" } });
    let closed = |frame: Result<serde_json::Value, Option<CloseFrame>>| match frame {
        Err(Some(frame)) => u16::from(frame.code),
        other => panic!("closed instead of {other:?}"),
    };

    // A subscription before the connection is acknowledged.
    let mut socket = connect(&app, "graphql-transport-ws").await;
    send(&mut socket, subscribe("1")).await;
    assert_eq!(closed(next(&mut socket).await), 4401);

    // A message that is not one of the protocol's.
    let mut socket = connect(&app, "graphql-transport-ws").await;
    send(&mut socket, json!({ "type": "connection_init" })).await;
    next(&mut socket).await.unwrap();
    send(&mut socket, json!({ "type": "subscribe", "id": 1 })).await;
    assert_eq!(closed(next(&mut socket).await), 4400);

    // A second connection_init, and an id already running.
    for (second, code) in [
        (json!({ "type": "connection_init" }), 4429),
        (subscribe("1"), 4409),
    ] {
        let mut socket = connect(&app, "graphql-transport-ws").await;
        send(&mut socket, json!({ "type": "connection_init" })).await;
        next(&mut socket).await.unwrap();
        send(&mut socket, subscribe("1")).await;
        assert_eq!(next(&mut socket).await.unwrap()["type"], "next");
        send(&mut socket, second).await;
        assert_eq!(closed(next(&mut socket).await), code);
    }

    // A ping is answered.
    let mut socket = connect(&app, "graphql-transport-ws").await;
    send(&mut socket, json!({ "type": "ping" })).await;
    assert_eq!(next(&mut socket).await.unwrap(), json!({ "type": "pong" }));
}

#[tokio::test]
async fn a_completed_operation_frees_its_id_and_its_subscription_slot() {
    let app = TestApp::spawn_with(|config| config.max_subscriptions_per_connection = 1).await;
    for protocol in ["graphql-transport-ws", "graphql-ws"] {
        let (start, stop) = match protocol {
            "graphql-ws" => ("start", "stop"),
            _ => ("subscribe", "complete"),
        };
        let mut socket = connect(&app, protocol).await;
        send(&mut socket, json!({ "type": "connection_init" })).await;
        assert_eq!(next(&mut socket).await.unwrap()["type"], "connection_ack");
        for _ in 0..3 {
            send(&mut socket, json!({ "id": "1", "type": start, "payload": { "query": "subscription { serverTime(everySeconds: 60) }" } })).await;
            let message = loop {
                let message = next(&mut socket).await.unwrap();
                if message["type"] != "ka" {
                    break message;
                }
            };
            assert!(
                message["payload"]["data"]["serverTime"].is_string(),
                "{protocol}: {message}"
            );
            send(&mut socket, json!({ "id": "1", "type": stop })).await;
            if protocol == "graphql-ws" {
                // The legacy protocol confirms a stop.
                assert_eq!(next(&mut socket).await.unwrap()["type"], "complete");
            }
        }
    }
}
