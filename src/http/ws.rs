//! GraphQL subscriptions over WebSocket on `/graphql`, speaking `graphql-transport-ws` and
//! the legacy `graphql-ws` (chosen by `Sec-WebSocket-Protocol`).
//!
//! The token travels in the `connection_init` payload as `{"Authorization": "Bearer …"}`
//! (the header, when the client could set one, is accepted too). A bad token closes the
//! connection with 4403; no token means an anonymous connection. Each connection may hold
//! `ENGAGE_MAX_SUBSCRIPTIONS` subscriptions at once. On shutdown every connection is closed
//! with 1001 (going away) so that clients reconnect to another instance.

use std::{
    net::SocketAddr,
    str::FromStr,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc,
    },
};

use async_graphql::{
    http::{WebSocketProtocols, WsMessage, ALL_WEBSOCKET_PROTOCOLS},
    Context, Data,
};
use axum::{
    extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade},
    http::{header, HeaderMap},
    response::Response,
};
use futures::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::task::AbortOnDropHandle;

use super::{client_ip, HttpState};
use crate::{
    auth::Viewer,
    error::{AppError, AppResult, ErrorCode},
    schema::errors::RequestId,
};

/// Close code sent when the server goes away.
const GOING_AWAY: u16 = 1001;
/// Close code of `graphql-transport-ws` for a refused `connection_init`.
const FORBIDDEN: u16 = 4403;

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
    upgrade: WebSocketUpgrade,
) -> Response {
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
    let ip = client_ip(headers, peer, http.state.config.trust_proxy);
    if let Err(error) = http.state.rate_limits.check_ip(ip) {
        return super::plain_error(axum::http::StatusCode::TOO_MANY_REQUESTS, &error);
    }
    upgrade
        .protocols(ALL_WEBSOCKET_PROTOCOLS)
        // tungstenite's defaults (128 KiB read and write buffers per socket) cost more than a
        // GB of memory at 10,000 subscribers. Client messages are small and updates are sent
        // as they come, so a few KiB suffice; the write buffer's cap bounds what a client that
        // stops reading can make the server hold (past it the connection is dropped).
        .read_buffer_size(WS_READ_BUFFER)
        .write_buffer_size(0)
        .max_write_buffer_size(WS_MAX_WRITE_BUFFER)
        .on_upgrade(move |socket| serve(http, socket, protocol, header_token))
}

const WS_READ_BUFFER: usize = 4 * 1024;
const WS_MAX_WRITE_BUFFER: usize = 1024 * 1024;

async fn serve(
    http: HttpState,
    socket: WebSocket,
    protocol: WebSocketProtocols,
    header_token: Option<String>,
) {
    let connection_id = uuid::Uuid::new_v4().to_string();
    let shutdown = http.state.shutdown.clone();
    let (mut sink, mut stream) = socket.split();
    // The client's messages are read by a task of their own and handed over through a
    // channel. async-graphql polls its input each time it polls for output, and every poll
    // of the socket made tungstenite zero a read buffer and try a read: with thousands of
    // subscribers that was a tenth of the cost of each update sent. The reader task is
    // woken only when the client actually sends something.
    let (received, mut inbox) = mpsc::channel::<Vec<u8>>(16);
    let reader = tokio::spawn(async move {
        while let Some(Ok(message)) = stream.next().await {
            let bytes = match message {
                Message::Text(text) => text.as_bytes().to_vec(),
                Message::Binary(bytes) => bytes.to_vec(),
                _ => continue,
            };
            if received.send(bytes).await.is_err() {
                return;
            }
        }
    });
    let _reader = AbortOnDropHandle::new(reader);
    let input = futures::stream::poll_fn(move |cx| inbox.poll_recv(cx))
        .take_until(shutdown.clone().cancelled_owned());

    // async-graphql closes a refused `connection_init` with 1002; the protocol asks for 4403
    // when the refusal is about authorization, so the refusal is remembered and the close
    // code replaced below.
    let refused = Arc::new(AtomicBool::new(false));
    let refused_in_init = refused.clone();
    let state = http.state.clone();
    let max_subscriptions = state.config.max_subscriptions_per_connection;
    let on_init = move |payload: Value| async move {
        let mut data = Data::default();
        data.insert(RequestId(connection_id));
        data.insert(SubscriptionSlots::new(max_subscriptions));
        let token = authorization_in(&payload).or(header_token);
        let verified = state
            .tokens
            .from_header_value(token.as_deref())
            .inspect_err(|_| {
                refused_in_init.store(true, Ordering::Release);
            })?;
        if let Some((viewer, claims)) = verified {
            state
                .users
                .ensure(viewer.user_id, &claims, state.clock.now_ms())
                .await?;
            data.insert::<Viewer>(viewer);
        }
        Ok(data)
    };

    let output = async_graphql::http::WebSocket::new(http.schema.clone(), input, protocol)
        .on_connection_init(on_init)
        .map(|message| match message {
            WsMessage::Text(text) => Message::Text(text.into()),
            WsMessage::Close(code, reason) => {
                let code = if refused.load(Ordering::Acquire) {
                    FORBIDDEN
                } else {
                    code
                };
                Message::Close(Some(CloseFrame {
                    code,
                    reason: reason.into(),
                }))
            }
        });
    let mut output = std::pin::pin!(output);
    while let Some(message) = output.next().await {
        if sink.send(message).await.is_err() {
            return;
        }
    }
    if shutdown.is_cancelled() {
        let frame = CloseFrame {
            code: GOING_AWAY,
            reason: "server shutting down".into(),
        };
        let _ = sink.send(Message::Close(Some(frame))).await;
    }
    let _ = sink.close().await;
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

/// How many subscriptions one connection holds; shared by all of its operations.
#[derive(Clone)]
pub struct SubscriptionSlots {
    held: Arc<AtomicUsize>,
    max: usize,
}

impl SubscriptionSlots {
    fn new(max: usize) -> Self {
        Self {
            held: Arc::new(AtomicUsize::new(0)),
            max,
        }
    }
}

/// One held subscription; dropping it (when the stream ends or the client stops it)
/// frees the slot. Every subscription resolver takes one before returning its stream.
pub struct SubscriptionSlot(Option<SubscriptionSlots>);

impl SubscriptionSlot {
    pub fn acquire(ctx: &Context<'_>) -> AppResult<Self> {
        let Some(slots) = ctx.data_opt::<SubscriptionSlots>() else {
            return Ok(Self(None));
        };
        let held = slots.held.fetch_add(1, Ordering::AcqRel);
        if held >= slots.max {
            slots.held.fetch_sub(1, Ordering::AcqRel);
            return Err(AppError::client(
                ErrorCode::RateLimited,
                format!("a connection may hold at most {} subscriptions", slots.max),
            ));
        }
        Ok(Self(Some(slots.clone())))
    }
}

impl Drop for SubscriptionSlot {
    fn drop(&mut self) {
        if let Some(slots) = &self.0 {
            slots.held.fetch_sub(1, Ordering::AcqRel);
        }
    }
}
