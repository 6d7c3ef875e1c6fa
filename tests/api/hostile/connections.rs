//! One client holding connections, buffers and sockets: deadlines rather than idle timers,
//! caps per client address and per user, a bounded header buffer and bounded operation ids.
//! Where a rule is per address, the abuser connects from 127.0.0.2 and the others from
//! 127.0.0.3 (both reach a server bound on 127.0.0.1).

use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};
use tokio_tungstenite::tungstenite::Message;

use crate::{
    harness::{client_from, server_address, tcp_from, websocket_from, Socket, TestApp},
    via::{self, code, Via},
};

const ABUSER: &str = "127.0.0.2";
const NEIGHBOUR: &str = "127.0.0.3";

/// A POST whose headers promise a body that never comes whole: the connection stays busy.
async fn slow_body_from(app: &TestApp, local: &str, forwarded_for: Option<&str>) -> TcpStream {
    let mut stream = tcp_from(app, local).await;
    let forwarded = forwarded_for.map_or(String::new(), |ip| format!("x-forwarded-for: {ip}\r\n"));
    let head = format!(
        "POST /graphql HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: 1000\r\n{forwarded}\r\n{{\"query\":"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

/// Everything the server writes until it closes the connection (at most `within`).
async fn read_to_close(stream: &mut TcpStream, within: Duration) -> String {
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(within, stream.read_to_end(&mut answer))
        .await
        .expect("the server closes the connection");
    String::from_utf8_lossy(&answer).into_owned()
}

/// The JSON body of a raw HTTP response.
fn json_body(response: &str) -> Value {
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str(body).unwrap_or_else(|_| panic!("a JSON body in {response:?}"))
}

/// How the socket ends (its close code), reading past any messages, within `within`.
async fn closed_within(socket: &mut Socket, within: Duration) -> Option<u16> {
    tokio::time::timeout(within, async {
        loop {
            match socket.next().await {
                Some(Ok(Message::Close(frame))) => break frame.map(|f| u16::from(f.code)),
                Some(Ok(_)) => continue,
                _ => break None,
            }
        }
    })
    .await
    .expect("the socket is closed in time")
}

#[tokio::test]
async fn a_slow_body_is_cut_at_its_deadline_however_it_trickles() {
    let app = TestApp::spawn_with(|config| config.body_read_timeout_seconds = 2).await;
    let mut stream = slow_body_from(&app, "127.0.0.1", None).await;
    let started = Instant::now();
    let (mut reader, mut writer) = stream.split();
    // A byte every 200 ms: an idle timer between frames would never fire.
    let trickle = async {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if writer.write_all(b" ").await.is_err() {
                // Closed: what matters now is what was read.
                std::future::pending::<()>().await;
            }
        }
    };
    let mut answer = Vec::new();
    let read = async {
        let _ = reader.read_to_end(&mut answer).await;
    };
    tokio::select! {
        () = trickle => {}
        () = read => {}
        () = tokio::time::sleep(Duration::from_secs(10)) => panic!("the body was not cut"),
    }
    let elapsed = started.elapsed();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    assert_eq!(code(&json_body(&answer)), "BAD_REQUEST", "{answer}");
    assert!(elapsed >= Duration::from_secs(2), "cut after {elapsed:?}");

    // A body that arrives in time is served as ever.
    let answer = app.gql(None, "{ __typename }", json!({})).await;
    assert_eq!(answer["data"]["__typename"], "Query");
}

#[tokio::test]
async fn an_idle_websocket_is_closed_after_its_idle_time_despite_pings() {
    let app = TestApp::spawn_with(|config| config.ws_idle_seconds = 2).await;
    for via in [Via::TransportWs, Via::LegacyWs] {
        // Before the socket opens: its idle time begins later, at the acknowledgement.
        let started = Instant::now();
        let socket = via::open(&app, via, None).await;
        let (mut sink, mut stream) = socket.split();
        let pinging = async {
            loop {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let ping = Message::text(json!({ "type": "ping" }).to_string());
                if sink.send(ping).await.is_err()
                    || sink
                        .send(Message::Ping(b"x".to_vec().into()))
                        .await
                        .is_err()
                {
                    break;
                }
            }
            std::future::pending::<Option<u16>>().await
        };
        let closed = async {
            loop {
                match stream.next().await {
                    Some(Ok(Message::Close(frame))) => break frame.map(|f| u16::from(f.code)),
                    Some(Ok(_)) => continue,
                    _ => break None,
                }
            }
        };
        let code = tokio::select! {
            code = pinging => code,
            code = closed => code,
            () = tokio::time::sleep(Duration::from_secs(10)) => panic!("{via:?}: still open"),
        };
        assert_eq!(code, Some(1000), "{via:?}");
        assert!(started.elapsed() >= Duration::from_secs(2), "{via:?}");
    }
}

#[tokio::test]
async fn a_running_subscription_keeps_a_socket_open_past_its_idle_time() {
    let app = TestApp::spawn_with(|config| config.ws_idle_seconds = 1).await;
    for via in [Via::TransportWs, Via::LegacyWs] {
        let mut socket = via::open(&app, via, None).await;
        let subscription = json!({ "query": "subscription { serverTime(everySeconds: 60) }" });
        let first = via::operation(&mut socket, via, "live", subscription).await;
        assert!(first.get("errors").is_none(), "{via:?}: {first}");
        tokio::time::sleep(Duration::from_secs(3)).await;
        let answer =
            via::operation(&mut socket, via, "q", json!({ "query": "{ __typename }" })).await;
        assert_eq!(answer["data"]["__typename"], "Query", "{via:?}: {answer}");
        // Once nothing runs, the idle time begins.
        let stop = if via == Via::LegacyWs {
            "stop"
        } else {
            "complete"
        };
        via::write(&mut socket, json!({ "id": "live", "type": stop })).await;
        let code = closed_within(&mut socket, Duration::from_secs(10)).await;
        assert_eq!(code, Some(1000), "{via:?}");
    }
}

#[tokio::test]
async fn one_address_at_its_cap_is_refused_while_others_are_served_at_once() {
    let app = TestApp::spawn_with(|config| config.max_connections_per_ip = 4).await;
    let item = app.create_item().await;
    // The abuser's cap: two slow bodies and two idle sockets.
    let _slow = [
        slow_body_from(&app, ABUSER, None).await,
        slow_body_from(&app, ABUSER, None).await,
    ];
    let mut idle = Vec::new();
    for via in [Via::TransportWs, Via::LegacyWs] {
        let mut socket = websocket_from(&app, ABUSER, via).await.unwrap();
        assert_eq!(
            via::init(&mut socket, None).await.unwrap()["type"],
            "connection_ack"
        );
        idle.push(socket);
    }

    // One more from the abuser: a minimal 429 at once, before any request is read.
    let mut raw = tcp_from(&app, ABUSER).await;
    let answer = read_to_close(&mut raw, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert_eq!(code(&json_body(&answer)), "RATE_LIMITED", "{answer}");
    let response = client_from(ABUSER)
        .get(app.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    let body: Value = response.json().await.unwrap();
    assert_eq!(code(&body), "RATE_LIMITED", "{body}");
    assert_eq!(
        websocket_from(&app, ABUSER, Via::TransportWs).await.err(),
        Some(429)
    );

    // Another address is served, at once.
    let neighbour = client_from(NEIGHBOUR);
    let started = Instant::now();
    let health = neighbour.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let query = json!({ "query": "query($id: ID!) { item(id: $id) { name } }", "variables": { "id": item } });
    let answer: Value = neighbour
        .post(app.url("/graphql"))
        .json(&query)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["data"]["item"]["name"], "Tea House", "{answer}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    let mut socket = websocket_from(&app, NEIGHBOUR, Via::TransportWs)
        .await
        .unwrap();
    assert_eq!(
        via::init(&mut socket, None).await.unwrap()["type"],
        "connection_ack"
    );

    // A place the abuser frees is its own again.
    drop(idle.pop());
    let mut served = false;
    for _ in 0..50 {
        let response = client_from(ABUSER).get(app.url("/healthz")).send().await;
        if response.is_ok_and(|r| r.status() == 200) {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(served, "the freed place was not given back");
}

#[tokio::test]
async fn behind_a_trusted_proxy_the_forwarded_client_is_capped_per_request_and_socket() {
    let app = TestApp::spawn_with(|config| {
        config.trust_proxy = true;
        config.max_connections_per_ip = 3;
    })
    .await;
    // Every connection comes from the proxy; the forwarded address is the client.
    let abuser = "203.0.113.7";
    let mut slow = vec![
        slow_body_from(&app, "127.0.0.1", Some(abuser)).await,
        slow_body_from(&app, "127.0.0.1", Some(abuser)).await,
    ];
    let header = [("x-forwarded-for", abuser.to_string())];
    let mut socket = via::connect(&app, Via::TransportWs, &header).await.unwrap();
    assert_eq!(
        via::init(&mut socket, None).await.unwrap()["type"],
        "connection_ack"
    );

    let request = |ip: &str| {
        app.http
            .post(app.url("/graphql"))
            .header("x-forwarded-for", ip)
            .json(&json!({ "query": "{ __typename }" }))
            .send()
    };
    let refused = request(abuser).await.unwrap();
    assert_eq!(refused.status(), 429);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(code(&body), "RATE_LIMITED", "{body}");
    assert_eq!(
        via::connect(&app, Via::TransportWs, &header).await.err(),
        Some(429)
    );
    let started = Instant::now();
    let served: Value = request("203.0.113.8").await.unwrap().json().await.unwrap();
    assert_eq!(served["data"]["__typename"], "Query", "{served}");
    assert!(started.elapsed() < Duration::from_secs(1));

    // A request answered frees its place: the client's next one is served.
    drop(slow.pop());
    let mut served = false;
    for _ in 0..50 {
        let response = request(abuser).await.unwrap();
        if response.status() == 200 {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(served, "the freed place was not given back");
}

#[tokio::test]
async fn a_user_may_hold_at_most_its_cap_of_websockets() {
    let app = TestApp::spawn_with(|config| config.ws_max_per_user = 2).await;
    let token = app.user_token(9_400);
    let mut held = vec![
        via::open(&app, Via::TransportWs, Some(&token)).await,
        via::open(&app, Via::LegacyWs, Some(&token)).await,
    ];
    for via in [Via::TransportWs, Via::LegacyWs] {
        let mut socket = via::connect(&app, via, &[]).await.unwrap();
        let refusal = via::init(&mut socket, Some(&token)).await.unwrap_err();
        match via {
            Via::TransportWs => assert_eq!(refusal["closed"], 4429, "{refusal}"),
            _ => {
                assert_eq!(refusal["type"], "connection_error", "{refusal}");
                let code = closed_within(&mut socket, Duration::from_secs(5)).await;
                assert_eq!(code, Some(4429));
            }
        }
    }
    // Another user, and anonymous sockets, are not affected.
    let other = app.user_token(9_401);
    via::open(&app, Via::TransportWs, Some(&other)).await;
    via::open(&app, Via::TransportWs, None).await;

    // A socket closed frees its place.
    let _ = held.pop().unwrap().close(None).await;
    let mut acknowledged = false;
    for _ in 0..50 {
        let mut socket = via::connect(&app, Via::TransportWs, &[]).await.unwrap();
        if via::init(&mut socket, Some(&token)).await.is_ok() {
            acknowledged = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(acknowledged, "the freed place was not given back");
}

#[tokio::test]
async fn headers_beyond_the_cap_answer_431() {
    let app = TestApp::spawn_with(|config| config.max_header_bytes = 16 * 1024).await;
    // Headers within the cap are served.
    let response = app
        .http
        .get(app.url("/healthz"))
        .header("x-padding", "a".repeat(12 * 1024))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // As many bytes as the cap, unfinished: the server reads them all, then refuses.
    let mut stream = TcpStream::connect(server_address(&app)).await.unwrap();
    let head = format!(
        "GET /healthz HTTP/1.1\r\nhost: x\r\nx-padding: {}",
        "a".repeat(16 * 1024)
    );
    stream
        .write_all(&head.as_bytes()[..16 * 1024])
        .await
        .unwrap();
    let answer = read_to_close(&mut stream, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
}

#[tokio::test]
async fn an_operation_id_longer_than_128_bytes_is_refused() {
    let app = TestApp::spawn().await;
    let query = json!({ "query": "{ __typename }" });
    for via in [Via::TransportWs, Via::LegacyWs] {
        let mut socket = via::open(&app, via, None).await;
        let longest = "i".repeat(128);
        let answer = via::operation(&mut socket, via, &longest, query.clone()).await;
        assert_eq!(answer["data"]["__typename"], "Query", "{via:?}: {answer}");
        let answer = via::operation(&mut socket, via, &"i".repeat(129), query.clone()).await;
        let expected = if via == Via::LegacyWs { 1002 } else { 4400 };
        assert_eq!(answer["closed"], expected, "{via:?}: {answer}");
    }
}

#[tokio::test]
async fn pings_count_against_the_ip_rate_and_past_it_are_not_answered() {
    let app = TestApp::spawn_with(|config| config.rate_limit_per_ip = 5).await; // bursts of 10
    let mut socket = via::open(&app, Via::TransportWs, None).await;
    for _ in 0..200 {
        let ping = Message::text(json!({ "type": "ping" }).to_string());
        socket.send(ping).await.unwrap();
    }
    via::write(
        &mut socket,
        json!({ "id": "1", "type": "subscribe", "payload": { "query": "{ __typename }" } }),
    )
    .await;
    // The pongs come first, then the operation's answer: refused (the protocol's `error`),
    // the pings took the rate.
    let mut pongs = 0;
    let answer = loop {
        let message = via::next(&mut socket).await.expect("the socket stays open");
        match message["type"].as_str() {
            Some("pong") => pongs += 1,
            Some("error") if message["id"] == "1" => break json!({ "errors": message["payload"] }),
            _ => panic!("unexpected {message}"),
        }
    };
    assert!((1..=20).contains(&pongs), "{pongs} of 200 pings answered");
    assert_eq!(code(&answer), "RATE_LIMITED", "{answer}");

    // WebSocket ping frames count alike.
    tokio::time::sleep(Duration::from_secs(3)).await; // a full burst again
    for _ in 0..50 {
        socket
            .send(Message::Ping(b"x".to_vec().into()))
            .await
            .unwrap();
    }
    let answer = via::operation(
        &mut socket,
        Via::TransportWs,
        "2",
        json!({ "query": "{ __typename }" }),
    )
    .await;
    assert_eq!(code(&answer), "RATE_LIMITED", "{answer}");
}
