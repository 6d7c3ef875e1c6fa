//! Stopping behind a load balancer: on SIGTERM the instance reports itself not ready at once
//! and still serves for the drain window; then it refuses new connections, answers the
//! requests in flight, closes WebSockets with 1001 and returns.
//!
//! The tests assert the order of events, never how long each took: the window is a few
//! seconds, and every wait is bounded generously.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use crate::{
    harness::{next_data, subscribe, Socket, TestApp},
    via::next,
};

const LIKE: &str = "mutation($id: ID!) { likeRemark(remarkId: $id) { likeCount } }";

async fn readyz(app: &TestApp) -> (u16, Value) {
    let response = app.http.get(app.url("/readyz")).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

/// A like whose request is sent up to half its body, on a connection of its own; the rest
/// follows with [`SlowLike::finish`]. It stays in flight as long as the test wants.
struct SlowLike {
    stream: TcpStream,
    rest: Vec<u8>,
}

impl SlowLike {
    async fn start(app: &TestApp, voter: i64, remark: &str) -> Self {
        let body = json!({ "query": LIKE, "variables": { "id": remark } }).to_string();
        let head = format!(
            "POST /graphql HTTP/1.1\r\nhost: engage\r\ncontent-type: application/json\r\n\
             authorization: Bearer {}\r\ncontent-length: {}\r\n\r\n",
            app.user_token(voter),
            body.len()
        );
        let address = app.base.trim_start_matches("http://");
        let mut stream = TcpStream::connect(address).await.unwrap();
        let (first, rest) = body.as_bytes().split_at(body.len() / 2);
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(first).await.unwrap();
        Self {
            stream,
            rest: rest.to_vec(),
        }
    }

    /// Sends the rest of the body and reads the whole response (the server closes the
    /// connection after it).
    async fn finish(mut self) -> String {
        self.stream.write_all(&self.rest).await.unwrap();
        let mut response = String::new();
        tokio::time::timeout(
            Duration::from_secs(10),
            self.stream.read_to_string(&mut response),
        )
        .await
        .expect("the response within 10s")
        .unwrap();
        response
    }
}

/// The code the server closes `socket` with, skipping the messages before it.
async fn closed_with(socket: &mut Socket) -> u16 {
    loop {
        match next(socket).await {
            Ok(_) => continue,
            Err(frame) => return u16::from(frame.expect("a close frame").code),
        }
    }
}

/// Waits (at most 15 s) until a new connection to the app is refused.
async fn connections_refused(app: &TestApp) {
    let address = app.base.trim_start_matches("http://").to_string();
    for _ in 0..300 {
        if TcpStream::connect(&address).await.is_err() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the listener was still open 15s after the drain began");
}

#[tokio::test]
async fn a_terminated_instance_drains_then_refuses_connections_answers_what_is_in_flight_and_returns(
) {
    let mut app = TestApp::spawn_with(|config| config.drain_seconds = 3).await;
    let remark = app.create_remark(1).await;
    let query =
        format!("subscription {{ likeCountChanged(remarkIds: [\"{remark}\"]) {{ likeCount }} }}");
    let mut socket = subscribe(&app, None, &query).await;
    assert_eq!(
        next_data(&mut socket).await["likeCountChanged"]["likeCount"],
        0
    );
    let in_flight = SlowLike::start(&app, 9, &remark).await;
    assert_eq!(readyz(&app).await.0, 200);

    app.terminate();

    // The window: not ready at once, yet everything is served as before, and each answer
    // asks its client to reconnect (through the load balancer, elsewhere).
    let (status, body) = readyz(&app).await;
    assert_eq!((status, &body["status"]), (503, &json!("draining")));
    let response = app
        .http
        .post(app.url("/graphql"))
        .bearer_auth(app.user_token(2))
        .json(&json!({ "query": LIKE, "variables": { "id": remark } }))
        .send()
        .await
        .expect("served while draining");
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["connection"], "close");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["data"]["likeRemark"]["likeCount"], 1, "{body}");
    assert_eq!(
        next_data(&mut socket).await["likeCountChanged"]["likeCount"],
        1,
        "subscriptions are still fed while draining"
    );
    let mut late_socket = subscribe(&app, None, &query).await;
    assert_eq!(
        next_data(&mut late_socket).await["likeCountChanged"]["likeCount"],
        1,
        "an upgrade is still accepted while draining"
    );
    assert!(
        !app.shutting_down(),
        "background tasks run through the window"
    );

    // The end of the window: WebSockets go away with 1001, the listener closes.
    for socket in [&mut socket, &mut late_socket] {
        assert_eq!(closed_with(socket).await, 1001);
    }
    connections_refused(&app).await;

    // The request in flight since before the signal is answered in full.
    let response = in_flight.finish().await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("\"likeCount\":2"), "{response}");

    tokio::time::timeout(Duration::from_secs(15), app.stopped())
        .await
        .expect("serve returns once the work in flight is done")
        .expect("a clean stop");
}

#[tokio::test]
async fn a_shutdown_during_the_drain_window_ends_it_at_once() {
    let mut app = TestApp::spawn_with(|config| config.drain_seconds = 600).await;
    app.terminate();
    assert_eq!(readyz(&app).await.0, 503);

    tokio::time::timeout(Duration::from_secs(15), app.shutdown())
        .await
        .expect("no wait for the rest of the window")
        .expect("a clean stop");
}
