//! GraphQL over WebSocket on `/graphql`, speaking `graphql-transport-ws` and the legacy
//! `graphql-ws` (chosen by `Sec-WebSocket-Protocol`).
//!
//! - The token travels in the `connection_init` payload as `{"Authorization": "Bearer …"}`
//!   (the header, when the client could set one, is accepted too). A bad token closes the
//!   connection with 4403; no token means an anonymous connection. When the token expires
//!   the connection is closed with 4403, so a socket never outlives its authorisation.
//! - A socket that sends no `connection_init` within [`INIT_TIMEOUT`] is closed with 4408.
//! - Every operation goes through the same [`admission`] as an HTTP request (rates, size,
//!   parse, cost), through [`Admitter`], the executor async-graphql hands each `subscribe`.
//! - Messages larger than `ENGAGE_MAX_BODY_BYTES` close the socket (1009). One socket may
//!   have `ENGAGE_WS_MAX_OPERATIONS` operations running and hold `ENGAGE_MAX_SUBSCRIPTIONS`
//!   subscriptions; each operation counts against the per-IP and per-user rates.
//! - On shutdown every connection is closed with 1001 (going away) so that clients
//!   reconnect to another instance.

use std::{
    net::SocketAddr,
    str::FromStr,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use async_graphql::{
    http::{WebSocketProtocols, WsMessage, ALL_WEBSOCKET_PROTOCOLS},
    Data,
};
use axum::{
    extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade},
    http::{header, HeaderMap},
    response::Response as HttpResponse,
};
use futures::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::{sync::mpsc, time::Instant};
use tokio_util::task::AbortOnDropHandle;

mod operations;
mod slots;

use operations::{Admitter, Connection};
pub use slots::{SubscriptionSlot, SubscriptionSlots};

use super::{admission, client_ip, server::ConnectionSlot, HttpState};
use crate::infra::error::ErrorCode;

/// Close code sent when the server goes away.
const GOING_AWAY: u16 = 1001;
/// Close code for a message larger than the limit.
const MESSAGE_TOO_BIG: u16 = 1009;
/// Close code of `graphql-transport-ws` for a refused `connection_init` or an expired token.
const FORBIDDEN: u16 = 4403;
/// Close code of `graphql-transport-ws` when `connection_init` does not come in time.
const INIT_TIMED_OUT: u16 = 4408;
/// How long a socket may stay open without `connection_init` (the protocol's example value).
pub const INIT_TIMEOUT: Duration = Duration::from_secs(10);

pub fn is_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

pub fn upgrade(
    http: HttpState,
    peer: SocketAddr,
    headers: &HeaderMap,
    slot: Option<ConnectionSlot>,
    upgrade: WebSocketUpgrade,
) -> HttpResponse {
    let protocol = headers
        .get(header::SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok())
        .and_then(|list| {
            list.split(',')
                .find_map(|p| WebSocketProtocols::from_str(p.trim()).ok())
        })
        .unwrap_or(WebSocketProtocols::GraphQLWS);
    let header_token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let ip = client_ip(headers, peer, &http.gateway.config);
    if let Err(error) = http.gateway.rate_limits.check_ip(ip) {
        return super::plain_error(axum::http::StatusCode::TOO_MANY_REQUESTS, &error);
    }
    let max_message = http.gateway.config.max_body_bytes;
    upgrade
        .protocols(ALL_WEBSOCKET_PROTOCOLS)
        // tungstenite's defaults (128 KiB read and write buffers per socket) cost more than a
        // GB of memory at 10,000 subscribers. Client messages are small and updates are sent
        // as they come, so a few KiB suffice; the write buffer's cap bounds what a client that
        // stops reading can make the server hold (past it the connection is dropped).
        .read_buffer_size(WS_READ_BUFFER)
        .write_buffer_size(0)
        .max_write_buffer_size(WS_MAX_WRITE_BUFFER)
        // A message is a request: the same size limit as an HTTP body.
        .max_message_size(max_message)
        .max_frame_size(max_message)
        .on_upgrade(move |socket| async move {
            let connection = Arc::new(Connection::new(ip, &http));
            serve(http, socket, protocol, header_token, connection).await;
            drop(slot);
        })
}

const WS_READ_BUFFER: usize = 4 * 1024;
const WS_MAX_WRITE_BUFFER: usize = 1024 * 1024;

async fn serve(
    http: HttpState,
    socket: WebSocket,
    protocol: WebSocketProtocols,
    header_token: Option<String>,
    connection: Arc<Connection>,
) {
    let shutdown = http.gateway.infra.instance.shutdown.clone();
    let (mut sink, mut stream) = socket.split();
    // The client's messages are read by a task of their own and handed over through a
    // channel. async-graphql polls its input each time it polls for output, and every poll
    // of the socket made tungstenite zero a read buffer and try a read: with thousands of
    // subscribers that was a tenth of the cost of each update sent. The reader task is
    // woken only when the client actually sends something.
    let (received, mut inbox) = mpsc::channel::<Vec<u8>>(16);
    let too_big = Arc::new(AtomicBool::new(false));
    let reader_too_big = too_big.clone();
    let reader = tokio::spawn(async move {
        while let Some(message) = stream.next().await {
            let bytes = match message {
                Ok(Message::Text(text)) => text.as_bytes().to_vec(),
                Ok(Message::Binary(bytes)) => bytes.to_vec(),
                Ok(_) => continue,
                Err(error) => {
                    // tungstenite refuses a message or frame over the limit with a
                    // capacity error ("… too long"); other errors are a broken peer.
                    if error.to_string().contains("too long") {
                        reader_too_big.store(true, Ordering::Release);
                    }
                    return;
                }
            };
            if received.send(bytes).await.is_err() {
                return;
            }
        }
    });
    let _reader = AbortOnDropHandle::new(reader);
    let input = futures::stream::poll_fn(move |cx| inbox.poll_recv(cx))
        .take_until(shutdown.clone().cancelled_owned());

    let gateway = http.gateway.clone();
    let init_connection = connection.clone();
    let on_init = move |payload: Value| async move {
        let mut data = Data::default();
        data.insert(SubscriptionSlots::new(init_connection.max_subscriptions));
        let token = authorization_in(&payload).or(header_token);
        let caller = admission::identify(&gateway, init_connection.ip, token.as_deref())
            .await
            .inspect_err(|error| {
                if error.code() == ErrorCode::Unauthenticated {
                    init_connection.refused.store(true, Ordering::Release);
                }
            })?;
        let _ = init_connection.caller.set(caller);
        Ok(data)
    };

    let executor = Admitter {
        http: http.clone(),
        connection: connection.clone(),
    };
    let refused = connection.clone();
    let output = async_graphql::http::WebSocket::new(executor, input, protocol)
        .on_connection_init(on_init)
        .map(move |message| match message {
            WsMessage::Text(text) => Message::Text(text.into()),
            // async-graphql closes a refused `connection_init` with 1002; the protocol asks
            // for 4403 when the refusal is about authorization.
            WsMessage::Close(code, reason) => {
                let code = if refused.refused.load(Ordering::Acquire) {
                    FORBIDDEN
                } else {
                    code
                };
                close(code, reason)
            }
        });
    let mut output = std::pin::pin!(output);

    // One timer per socket: first the deadline of `connection_init`, then, once the
    // connection is acknowledged, the token's expiry (none for an anonymous connection).
    let deadline = tokio::time::sleep(INIT_TIMEOUT);
    let mut deadline = std::pin::pin!(deadline);
    let mut watching_init = true;
    let mut deadline_armed = true;
    loop {
        tokio::select! {
            message = output.next() => {
                let Some(message) = message else { break };
                if sink.send(message).await.is_err() {
                    return;
                }
                if watching_init {
                    if let Some(caller) = connection.caller.get() {
                        watching_init = false;
                        match caller.token_expires_at {
                            Some(exp) => deadline.as_mut().reset(instant_of(exp)),
                            None => deadline_armed = false,
                        }
                    }
                }
            }
            () = &mut deadline, if deadline_armed => {
                let (code, reason) = if watching_init {
                    (INIT_TIMED_OUT, "Connection initialisation timeout")
                } else {
                    (FORBIDDEN, "token expired")
                };
                let _ = sink.send(close(code, reason.into())).await;
                let _ = sink.close().await;
                return;
            }
        }
    }
    if too_big.load(Ordering::Acquire) {
        let _ = sink
            .send(close(MESSAGE_TOO_BIG, "message too big".into()))
            .await;
    } else if shutdown.is_cancelled() {
        let _ = sink
            .send(close(GOING_AWAY, "server shutting down".into()))
            .await;
    }
    let _ = sink.close().await;
}

/// The moment of a Unix time in seconds, on tokio's clock.
fn instant_of(unix_seconds: i64) -> Instant {
    let left = unix_seconds.saturating_sub(chrono::Utc::now().timestamp());
    Instant::now() + Duration::from_secs(u64::try_from(left).unwrap_or(0))
}

fn close(code: u16, reason: String) -> Message {
    Message::Close(Some(CloseFrame {
        code,
        reason: reason.into(),
    }))
}

/// `Authorization` (any case) from a `connection_init` payload; `authToken` and `token` as
/// bare tokens are accepted too, since some clients use them.
fn authorization_in(payload: &Value) -> Option<String> {
    let object = payload.as_object()?;
    for (key, value) in object {
        if key.eq_ignore_ascii_case("authorization") {
            return value.as_str().map(str::to_string);
        }
    }
    ["authToken", "token"]
        .iter()
        .find_map(|key| object.get(*key).and_then(Value::as_str))
        .map(|token| format!("Bearer {token}"))
}
