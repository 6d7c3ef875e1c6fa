//! One operation sent over any of the five transports a client can use, with the answer in
//! one shape (`{"data": …, "errors": […]}`), so that a test states a rule once and checks
//! it on all of them.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio_tungstenite::tungstenite::{
    client::IntoClientRequest, http::HeaderValue, protocol::CloseFrame, Message,
};

use crate::harness::{percent_encode, Socket, TestApp};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Post,
    Get,
    /// POST with the document registered as an automatic persisted query.
    PersistedQuery,
    /// `graphql-transport-ws`.
    TransportWs,
    /// The legacy `graphql-ws` (subscriptions-transport-ws).
    LegacyWs,
}

pub const ALL: [Via; 5] = [
    Via::Post,
    Via::Get,
    Via::PersistedQuery,
    Via::TransportWs,
    Via::LegacyWs,
];

impl Via {
    pub fn is_websocket(self) -> bool {
        matches!(self, Via::TransportWs | Via::LegacyWs)
    }

    fn protocol(self) -> &'static str {
        match self {
            Via::LegacyWs => "graphql-ws",
            _ => "graphql-transport-ws",
        }
    }
}

/// Sends `query` with `variables` and returns the answer; a WebSocket closed instead of
/// answering gives `{"closed": code}`.
pub async fn send(
    app: &TestApp,
    via: Via,
    token: Option<&str>,
    query: &str,
    variables: Value,
) -> Value {
    match via {
        Via::Post => app.gql(token, query, variables).await,
        Via::Get => {
            let mut url = format!("/graphql?query={}", percent_encode(query));
            if variables != json!({}) {
                url.push_str(&format!(
                    "&variables={}",
                    percent_encode(&variables.to_string())
                ));
            }
            let mut request = app.http.get(app.url(&url));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            json_or_status(request.send().await.expect("request sent")).await
        }
        Via::PersistedQuery => {
            let hash = hex::encode(Sha256::digest(query.as_bytes()));
            let mut request = app.http.post(app.url("/graphql")).json(&json!({
                "query": query,
                "variables": variables,
                "extensions": { "persistedQuery": { "version": 1, "sha256Hash": hash } },
            }));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            json_or_status(request.send().await.expect("request sent")).await
        }
        Via::TransportWs | Via::LegacyWs => {
            let mut socket = open(app, via, token).await;
            let payload = json!({ "query": query, "variables": variables });
            let answer = operation(&mut socket, via, "1", payload).await;
            let _ = socket.close(None).await;
            answer
        }
    }
}

async fn json_or_status(response: reqwest::Response) -> Value {
    let status = response.status();
    assert!(
        !status.is_server_error(),
        "a server error: {status} {}",
        response.text().await.unwrap_or_default()
    );
    response.json().await.expect("a JSON body")
}

/// An acknowledged WebSocket of `via`'s protocol.
pub async fn open(app: &TestApp, via: Via, token: Option<&str>) -> Socket {
    let mut socket = connect(app, via, &[]).await.expect("upgrade accepted");
    match init(&mut socket, token).await {
        Ok(message) => assert_eq!(message["type"], "connection_ack", "{message}"),
        Err(refusal) => panic!("refused instead of acknowledged: {refusal}"),
    }
    socket
}

/// A WebSocket of `via`'s protocol, upgraded with extra request headers; the HTTP status
/// when the upgrade is refused.
pub async fn connect(
    app: &TestApp,
    via: Via,
    headers: &[(&'static str, String)],
) -> Result<Socket, u16> {
    assert!(via.is_websocket());
    let mut request = app.ws_url().into_client_request().unwrap();
    request.headers_mut().insert(
        "sec-websocket-protocol",
        HeaderValue::from_static(via.protocol()),
    );
    for (name, value) in headers {
        request
            .headers_mut()
            .insert(*name, HeaderValue::from_str(value).unwrap());
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok((socket, _)) => Ok(socket),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            Err(response.status().as_u16())
        }
        Err(error) => panic!("the upgrade failed: {error}"),
    }
}

/// Sends `connection_init` and returns the answer; a refusal as the close code
/// (graphql-transport-ws) or the `connection_error` message (legacy graphql-ws).
pub async fn init(socket: &mut Socket, token: Option<&str>) -> Result<Value, Value> {
    let payload = token.map_or(
        json!({}),
        |t| json!({ "Authorization": format!("Bearer {t}") }),
    );
    write(
        socket,
        json!({ "type": "connection_init", "payload": payload }),
    )
    .await;
    match next(socket).await {
        Ok(message) if message["type"] == "connection_error" => Err(message),
        Ok(message) => Ok(message),
        Err(close) => Err(json!({ "closed": close.map(|c| u16::from(c.code)) })),
    }
}

pub async fn write(socket: &mut Socket, message: Value) {
    socket
        .send(Message::text(message.to_string()))
        .await
        .expect("the socket takes a message");
}

/// Starts an operation under `id` and returns its first answer.
pub async fn operation(socket: &mut Socket, via: Via, id: &str, payload: Value) -> Value {
    let start = if via == Via::LegacyWs {
        "start"
    } else {
        "subscribe"
    };
    write(
        socket,
        json!({ "id": id, "type": start, "payload": payload }),
    )
    .await;
    answer(socket, id).await
}

/// The first answer to operation `id`, in the shape of an HTTP answer.
pub async fn answer(socket: &mut Socket, id: &str) -> Value {
    loop {
        let message = match next(socket).await {
            Ok(message) => message,
            Err(close) => return json!({ "closed": close.map(|c| u16::from(c.code)) }),
        };
        if message["id"] != id {
            continue;
        }
        match message["type"].as_str() {
            Some("next" | "data") => return message["payload"].clone(),
            Some("error") => {
                let errors = &message["payload"];
                return if errors.is_array() {
                    json!({ "errors": errors })
                } else {
                    json!({ "errors": [errors] })
                };
            }
            Some("complete") => return json!({ "completed": true }),
            _ => continue,
        }
    }
}

/// The next text message as JSON, or the close frame (within ten seconds).
pub async fn next(socket: &mut Socket) -> Result<Value, Option<CloseFrame>> {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(10), socket.next())
            .await
            .expect("a message within 10s");
        match message {
            Some(Ok(Message::Text(text))) => return Ok(serde_json::from_str(&text).unwrap()),
            Some(Ok(Message::Close(frame))) => return Err(frame),
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return Err(None),
        }
    }
}

/// The code of an answer's first error.
pub fn code(answer: &Value) -> &str {
    answer["errors"][0]["extensions"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("no coded error in {answer}"))
}
