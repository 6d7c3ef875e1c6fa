//! GraphQL over WebSocket on `/graphql`, speaking `graphql-transport-ws` and the legacy
//! `graphql-ws` (chosen by `Sec-WebSocket-Protocol`).
//!
//! - The token travels in the `connection_init` payload as `{"Authorization": "Bearer …"}`
//!   or `{"headers": {"Authorization": "Bearer …"}}` (see `credentials.rs`; the header,
//!   when the client could set one, is accepted too). A credential in another shape closes
//!   the connection with 4400, a bad or expired token with 4403, before any
//!   `connection_ack`; no token means an anonymous connection. When the token expires the
//!   connection is closed with 4403, so a socket never outlives its authorisation.
//! - A socket that sends no `connection_init` within [`INIT_TIMEOUT`] is closed with 4408.
//!   A signed-in user may have `ENGAGE_WS_MAX_PER_USER` sockets open; `connection_init` on
//!   one more is refused with 4429.
//! - A socket with no operation running for `ENGAGE_WS_IDLE_SECONDS` is closed with 1000,
//!   whatever else it sends: pings (the protocol's and WebSocket frames) keep a connection
//!   alive through proxies, not a socket open on the server. Each ping counts against the
//!   per-IP rate like an operation; past it a `ping` is not answered.
//! - Operation ids are at most [`MAX_OPERATION_ID`] bytes (each of the operation's messages
//!   repeats it); a longer one breaks the protocol (4400).
//! - Every operation goes through the same admission as an HTTP request (rates, size,
//!   parse, cost): see `operations.rs`. One that fails before its first result (refused,
//!   not valid, its subscription resolver failed) is answered with the protocol's `error`
//!   and no `complete`. A subscription resolver may have its updates written straight to
//!   the socket instead of through async-graphql ([`crate::api::live`]): the session gives
//!   each operation a [`DirectOutlet`](crate::api::live::DirectOutlet), the socket's
//!   sending half (`writer.rs`) and its result message's envelope (`protocol.rs`).
//! - The conversation itself (both protocols' messages, operations by id, close codes) is
//!   `session.rs`'s.
//! - Messages larger than `ENGAGE_MAX_BODY_BYTES` close the socket (1009). One socket may
//!   have `ENGAGE_WS_MAX_OPERATIONS` operations running and hold `ENGAGE_MAX_SUBSCRIPTIONS`
//!   subscriptions (its [`SubscriptionSlots`](crate::api::live::SubscriptionSlots)); each
//!   operation counts against the per-IP and per-user rates.
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

use async_graphql::http::{WebSocketProtocols, ALL_WEBSOCKET_PROTOCOLS};
use axum::{
    extract::ws::{Message, WebSocket, WebSocketUpgrade},
    http::{header, HeaderMap},
    response::Response as HttpResponse,
};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_util::task::AbortOnDropHandle;

mod credentials;
mod operations;
mod protocol;
mod session;
mod writer;

use operations::Connection;
use session::Session;
use writer::SocketWriter;

use super::{client_ip, server::ConnectionSlot, HttpState};

/// How long a socket may stay open without `connection_init` (the protocol's example value).
pub(crate) const INIT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest operation id, in bytes: a UUID is 36, clients' counters a few.
pub(crate) const MAX_OPERATION_ID: usize = 128;

pub(crate) fn is_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

pub(crate) fn upgrade(
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
            let _open = http.gateway.infra.instance.open.websocket();
            let connection = Arc::new(Connection::new(ip, &http));
            serve(http, socket, protocol, header_token, connection).await;
            drop(slot);
        })
}

/// What the reader task hands the session.
enum Inbound {
    /// A text or binary message.
    Message(Vec<u8>),
    /// A ping or pong frame (tungstenite answers pings itself): it counts against the
    /// client's rate like a protocol `ping`, and is no activity either.
    KeepAlive,
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
    let (sink, mut stream) = socket.split();
    // The client's messages are read by a task of their own and handed over through a
    // channel: polling the socket for input each time an update is sent made tungstenite
    // zero a read buffer and try a read, with thousands of subscribers a tenth of the cost
    // of each update. The reader task is woken only when the client actually sends something.
    let (received, inbox) = mpsc::channel::<Inbound>(16);
    let too_big = Arc::new(AtomicBool::new(false));
    let reader_too_big = too_big.clone();
    let reader = tokio::spawn(async move {
        while let Some(message) = stream.next().await {
            let inbound = match message {
                Ok(Message::Text(text)) => Inbound::Message(text.as_bytes().to_vec()),
                Ok(Message::Binary(bytes)) => Inbound::Message(bytes.to_vec()),
                Ok(Message::Ping(_) | Message::Pong(_)) => Inbound::KeepAlive,
                Ok(Message::Close(_)) => continue,
                Err(error) => {
                    // tungstenite refuses a message or frame over the limit with a
                    // capacity error ("… too long"); other errors are a broken peer.
                    if error.to_string().contains("too long") {
                        reader_too_big.store(true, Ordering::Release);
                    }
                    return;
                }
            };
            if received.send(inbound).await.is_err() {
                return;
            }
        }
    });
    let _reader = AbortOnDropHandle::new(reader);
    let writer = Arc::new(SocketWriter::new(sink));
    Session::new(http, protocol, connection, writer, header_token)
        .run(inbox, move || too_big.load(Ordering::Acquire))
        .await;
}
