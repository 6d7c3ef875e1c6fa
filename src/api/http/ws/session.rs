//! One WebSocket's conversation, after the upgrade: `connection_init` and its answer,
//! operations started and stopped by id, pings, and how the socket ends (see the close
//! codes in [`protocol`]): its deadlines (`connection_init`'s, the token's expiry, the idle
//! time with no operation running) are one timer. Each operation's results are one stream;
//! all of a socket's streams are polled together, each only when it was woken.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use async_graphql::{http::WebSocketProtocols, Data};
use axum::extract::ws::{CloseFrame, Message};
use futures::{
    future::BoxFuture,
    stream::{AbortHandle, Abortable, BoxStream, SelectAll},
    StreamExt,
};
use serde_json::Value;
use tokio::{sync::mpsc, time::Instant};

use super::{
    credentials,
    operations::{Admitter, Connection, Reply},
    protocol::{self, ClientMessage, Outgoing},
    writer::SocketWriter,
    Inbound, INIT_TIMEOUT, MAX_OPERATION_ID,
};
use crate::{
    api::{
        http::{admission, caps::Held, HttpState},
        live::{DirectOutlet, Envelope, SubscriptionSlots},
    },
    infra::error::{AppError, ErrorCode},
};

/// Close code sent when the socket has been idle too long: it ends normally, and a client
/// opens a new one for its next operation.
const IDLE: u16 = 1000;
/// Close code sent when the server goes away.
const GOING_AWAY: u16 = 1001;
/// Close code for a message larger than the limit.
const MESSAGE_TOO_BIG: u16 = 1009;

/// Which operation a result belongs to: its id, written once as JSON, and a serial that
/// tells a stopped operation's end from a later one's under the same id.
struct Tag {
    id: String,
    quoted: Arc<str>,
    serial: u64,
}

/// An operation's results; taken out (and so dropped) at once when the client stops it,
/// so that what it held (its place among the running operations, its subscription slot,
/// its channels) is free for the client's next message.
type Results = Arc<Mutex<Option<BoxStream<'static, Reply>>>>;

struct Running {
    serial: u64,
    results: Results,
    /// Wakes the operation's stream so that the session lets go of it too.
    abort: AbortHandle,
}

impl Running {
    fn stop(self) {
        let results = self.results.lock().expect("poisoned").take();
        drop(results);
        self.abort.abort();
    }
}

/// The state of one socket's conversation.
pub(super) struct Session {
    http: HttpState,
    protocol: WebSocketProtocols,
    connection: Arc<Connection>,
    admitter: Admitter,
    writer: Arc<SocketWriter>,
    header_token: Option<String>,
    /// Set once `connection_init` was answered with `connection_ack`.
    data: Option<Arc<Data>>,
    /// The user's place under `ENGAGE_WS_MAX_PER_USER`, for as long as the socket is open.
    _user: Option<Held<i64>>,
    init_sent: bool,
    /// When the socket was opened: `connection_init` is due [`INIT_TIMEOUT`] later.
    opened: Instant,
    /// When the token stops authorising, from the acknowledgement on.
    expires: Option<Instant>,
    /// Since when no operation has been running, from the acknowledgement on.
    idle_since: Option<Instant>,
    idle_limit: Duration,
    running: HashMap<String, Running>,
    results: SelectAll<BoxStream<'static, (Arc<Tag>, Option<Reply>)>>,
    serial: u64,
}

/// What the socket does after a message.
enum Next {
    Go,
    End,
}

/// An accepted `connection_init`: the operations' shared data, and the user's place.
struct Accepted {
    data: Data,
    user: Option<Held<i64>>,
}

impl Session {
    pub(super) fn new(
        http: HttpState,
        protocol: WebSocketProtocols,
        connection: Arc<Connection>,
        writer: Arc<SocketWriter>,
        header_token: Option<String>,
    ) -> Self {
        let admitter = Admitter {
            http: http.clone(),
            connection: connection.clone(),
        };
        let idle_limit = Duration::from_secs(http.gateway.config.ws_idle_seconds);
        Self {
            http,
            protocol,
            connection,
            admitter,
            writer,
            header_token,
            data: None,
            _user: None,
            init_sent: false,
            opened: Instant::now(),
            expires: None,
            idle_since: None,
            idle_limit,
            running: HashMap::new(),
            results: SelectAll::new(),
            serial: 0,
        }
    }

    /// Talks with the client until either side ends the conversation. `inbox` carries the
    /// client's messages; it ends when the client hangs up or sent a message over the limit
    /// (`too_big` then says so).
    pub(super) async fn run(
        mut self,
        mut inbox: mpsc::Receiver<Inbound>,
        too_big: impl Fn() -> bool,
    ) {
        let writer = self.writer.clone();
        let shutdown = self
            .http
            .gateway
            .infra
            .instance
            .shutdown
            .clone()
            .cancelled_owned();
        let mut shutdown = std::pin::pin!(shutdown);
        let mut init: Option<BoxFuture<'static, Result<Accepted, AppError>>> = None;
        // One timer per socket, set to the earliest of its deadlines (see `deadline`).
        let mut armed = self.deadline();
        let deadline = tokio::time::sleep_until(armed.unwrap_or_else(Instant::now));
        let mut deadline = std::pin::pin!(deadline);
        let mut out: Vec<Outgoing> = Vec::new();
        loop {
            let next = tokio::select! {
                () = &mut shutdown => {
                    out.push(protocol::close(GOING_AWAY, "server shutting down"));
                    Next::End
                }
                result = self.results.next(), if !self.results.is_empty() => {
                    let Some((tag, payload)) = result else { continue };
                    self.on_result(&tag, payload, &mut out);
                    Next::Go
                }
                // While `connection_init` is being checked the client's messages wait.
                message = inbox.recv(), if init.is_none() => match message {
                    Some(Inbound::Message(bytes)) => self.on_message(&bytes, &mut init, &mut out),
                    Some(Inbound::KeepAlive) => {
                        self.charge_keep_alive();
                        Next::Go
                    }
                    None => {
                        if too_big() {
                            out.push(protocol::close(MESSAGE_TOO_BIG, "message too big"));
                        }
                        Next::End
                    }
                },
                accepted = async { init.as_mut().expect("guarded").await }, if init.is_some() => {
                    init = None;
                    self.on_init(accepted, &mut out)
                }
                // Direct deliveries left a message for the socket: write it out, then let
                // those that could not send try again.
                drained = writer.drain() => match drained {
                    Ok(()) => Next::Go,
                    Err(_) => return,
                },
                () = &mut deadline, if armed.is_some() => {
                    armed = None;
                    self.on_deadline(&mut out)
                }
            };
            if !write(&writer, &mut out).await {
                return;
            }
            if let Next::End = next {
                break;
            }
            self.settle();
            let wanted = self.deadline();
            if wanted != armed {
                if let Some(at) = wanted {
                    deadline.as_mut().reset(at);
                }
                armed = wanted;
            }
        }
        writer.close().await;
    }

    /// Notes when the socket became idle (acknowledged, no operation running), or that it
    /// no longer is.
    fn settle(&mut self) {
        if self.data.is_none() {
            return;
        }
        match (self.running.is_empty(), self.idle_since) {
            (true, None) => self.idle_since = Some(Instant::now()),
            (false, Some(_)) => self.idle_since = None,
            _ => {}
        }
    }

    /// When the socket closes unless something changes: `connection_init`'s deadline until
    /// it is acknowledged, then the token's expiry or the end of the idle time, whichever
    /// comes first; `None` for an anonymous socket running an operation.
    fn deadline(&self) -> Option<Instant> {
        if self.data.is_none() {
            return Some(self.opened + INIT_TIMEOUT);
        }
        let idle_end = self.idle_since.map(|since| since + self.idle_limit);
        [self.expires, idle_end].into_iter().flatten().min()
    }

    fn on_deadline(&mut self, out: &mut Vec<Outgoing>) -> Next {
        let now = Instant::now();
        let idle = format!("no operation for {} s", self.idle_limit.as_secs());
        let (code, reason) = if self.data.is_none() {
            (
                protocol::INIT_TIMED_OUT,
                "Connection initialisation timeout",
            )
        } else if self.expires.is_some_and(|at| at <= now) {
            (protocol::FORBIDDEN, "token expired")
        } else if self
            .idle_since
            .is_some_and(|since| since + self.idle_limit <= now)
        {
            (IDLE, idle.as_str())
        } else {
            return Next::Go;
        };
        out.push(protocol::close(code, reason));
        Next::End
    }

    /// Counts a ping (or pong) against the client's per-IP rate, as an operation is; false
    /// past the rate. Keep-alives cost the server a read and a write each: unbounded, one
    /// socket sent 50,000 a second.
    fn charge_keep_alive(&self) -> bool {
        self.http
            .gateway
            .rate_limits
            .charge_ip(self.connection.ip, 1)
            .is_ok()
    }

    fn on_result(&mut self, tag: &Tag, reply: Option<Reply>, out: &mut Vec<Outgoing>) {
        let current = |running: &HashMap<String, Running>| {
            running.get(&tag.id).is_some_and(|r| r.serial == tag.serial)
        };
        match reply {
            Some(Reply::Next(payload)) => {
                out.push(protocol::next(self.protocol, &tag.quoted, &payload));
            }
            // The legacy protocol's `error` is for an operation that did not run; a
            // resolver's failure is a result there, and the operation completes after it.
            Some(Reply::Error {
                errors,
                executed: true,
            }) if self.protocol == WebSocketProtocols::SubscriptionsTransportWS => {
                let payload = serde_json::to_string(&async_graphql::Response::from_errors(errors))
                    .expect("a response serialises");
                out.push(protocol::next(self.protocol, &tag.quoted, &payload));
            }
            // The operation's end: `error` takes the place of `complete`.
            Some(Reply::Error { errors, .. }) => {
                if current(&self.running) {
                    self.running.remove(&tag.id);
                    out.push(protocol::error(self.protocol, &tag.quoted, &errors));
                }
            }
            // The operation's end; unless the client stopped it, which it knows.
            None => {
                if current(&self.running) {
                    self.running.remove(&tag.id);
                    out.push(protocol::complete(&tag.quoted));
                }
            }
        }
    }

    fn on_message(
        &mut self,
        bytes: &[u8],
        init: &mut Option<BoxFuture<'static, Result<Accepted, AppError>>>,
        out: &mut Vec<Outgoing>,
    ) -> Next {
        let message = match ClientMessage::from_bytes(bytes) {
            Ok(message) => message,
            Err(error) => return self.violation(protocol::BAD_REQUEST, &error.to_string(), out),
        };
        if let ClientMessage::Start { id, .. } | ClientMessage::Stop { id } = &message {
            if id.len() > MAX_OPERATION_ID {
                return self.violation(
                    protocol::BAD_REQUEST,
                    &format!("an operation id is at most {MAX_OPERATION_ID} bytes"),
                    out,
                );
            }
        }
        match message {
            ClientMessage::ConnectionInit { payload } => {
                if self.init_sent {
                    return self.violation(
                        protocol::TOO_MANY_INITS,
                        "Too many initialisation requests",
                        out,
                    );
                }
                self.init_sent = true;
                *init = Some(self.accept(payload.unwrap_or_default()));
            }
            ClientMessage::Start { id, payload } => {
                let Some(data) = self.data.clone() else {
                    return self.violation(protocol::UNAUTHORIZED, "Unauthorized", out);
                };
                if let Some(running) = self.running.remove(&id) {
                    match self.protocol {
                        WebSocketProtocols::GraphQLWS => {
                            return self.violation(
                                protocol::DUPLICATE_ID,
                                &format!("Subscriber for {id} already exists"),
                                out,
                            );
                        }
                        // The legacy protocol's servers replace the operation.
                        WebSocketProtocols::SubscriptionsTransportWS => running.stop(),
                    }
                }
                self.start(id, payload, data);
            }
            ClientMessage::Stop { id } => {
                if let Some(running) = self.running.remove(&id) {
                    running.stop();
                    if self.protocol == WebSocketProtocols::SubscriptionsTransportWS {
                        out.push(protocol::complete(&protocol::quoted(&id)));
                    }
                }
            }
            ClientMessage::ConnectionTerminate => return Next::End,
            // Past the rate a ping is not answered: the socket and its operations go on,
            // since the rate is the address's and its other clients may have spent it.
            ClientMessage::Ping { .. } => {
                if self.charge_keep_alive() {
                    out.push(protocol::pong());
                }
            }
            ClientMessage::Pong { .. } => {
                self.charge_keep_alive();
            }
        }
        Next::Go
    }

    fn start(&mut self, id: String, request: async_graphql::Request, data: Arc<Data>) {
        self.serial += 1;
        let quoted: Arc<str> = protocol::quoted(&id).into();
        let outlet = DirectOutlet::new(
            self.writer.clone(),
            Envelope::new(
                protocol::next_head(self.protocol, &quoted),
                protocol::NEXT_TAIL,
            ),
            self.http.renderings.clone(),
        );
        let results = self.admitter.run(request, data, outlet);
        let (abort, registration) = AbortHandle::new_pair();
        let results: Results = Arc::new(Mutex::new(Some(results)));
        let tag = Arc::new(Tag {
            quoted,
            id: id.clone(),
            serial: self.serial,
        });
        self.running.insert(
            id,
            Running {
                serial: self.serial,
                results: results.clone(),
                abort,
            },
        );
        let end = tag.clone();
        self.results.push(
            Abortable::new(stoppable(results), registration)
                .map(move |reply| (tag.clone(), Some(reply)))
                .chain(futures::stream::once(async move { (end, None) }))
                .boxed(),
        );
    }

    /// Checks `connection_init`'s token, and the user's place under
    /// `ENGAGE_WS_MAX_PER_USER`: the connection's data once accepted.
    fn accept(&self, payload: Value) -> BoxFuture<'static, Result<Accepted, AppError>> {
        let gateway = self.http.gateway.clone();
        let connection = self.connection.clone();
        let token = credentials::authorization_in(&payload)
            .map(|token| token.or_else(|| self.header_token.clone()));
        Box::pin(async move {
            let token = token?;
            let caller = admission::identify(&gateway, connection.ip, token.as_deref()).await?;
            // Within the verification's leeway an expired token is still valid, but the
            // socket would be closed as soon as it is acknowledged.
            admission::unexpired(&caller)?;
            let user = match &caller.viewer {
                Some(viewer) => {
                    let caps = &gateway.websockets_per_user;
                    let held = caps.try_hold(viewer.user_id).ok_or_else(|| {
                        AppError::client(
                            ErrorCode::RateLimited,
                            format!(
                                "a user may have at most {} WebSockets open at once",
                                caps.max()
                            ),
                        )
                    })?;
                    Some(held)
                }
                None => None,
            };
            let _ = connection.caller.set(caller);
            let mut data = Data::default();
            data.insert(SubscriptionSlots::new(connection.max_subscriptions));
            Ok(Accepted { data, user })
        })
    }

    fn on_init(&mut self, accepted: Result<Accepted, AppError>, out: &mut Vec<Outgoing>) -> Next {
        match accepted {
            Ok(Accepted { data, user }) => {
                self.data = Some(Arc::new(data));
                self._user = user;
                self.expires = self
                    .connection
                    .caller
                    .get()
                    .and_then(|caller| caller.token_expires_at)
                    .map(instant_of);
                out.push(protocol::connection_ack());
                Next::Go
            }
            Err(error) => {
                let message = error.public_message();
                // A refusal about the token is the protocol's 4403, a credential in a shape
                // not read 4400; a client past its rate or its cap gets 4429, which
                // `graphql-ws` clients do not retry at once.
                let code = match error.code() {
                    ErrorCode::Unauthenticated => protocol::FORBIDDEN,
                    ErrorCode::BadRequest => protocol::BAD_REQUEST,
                    ErrorCode::RateLimited => protocol::TOO_MANY_REQUESTS,
                    _ => protocol::PROTOCOL_ERROR,
                };
                match self.protocol {
                    WebSocketProtocols::GraphQLWS => out.push(protocol::close(code, &message)),
                    WebSocketProtocols::SubscriptionsTransportWS => {
                        out.push(protocol::connection_error(&message));
                        if code == protocol::TOO_MANY_REQUESTS {
                            out.push(protocol::close(code, &message));
                        }
                    }
                }
                Next::End
            }
        }
    }

    fn violation(&self, code: u16, reason: &str, out: &mut Vec<Outgoing>) -> Next {
        out.extend(protocol::violation(self.protocol, code, reason));
        Next::End
    }
}

/// Writes out `out`; false once the socket is closed (by a close among them, or broken).
async fn write(writer: &SocketWriter, out: &mut Vec<Outgoing>) -> bool {
    for message in out.drain(..) {
        let closing = matches!(message, Outgoing::Close(..));
        if writer.send(into_message(message)).await.is_err() {
            return false;
        }
        if closing {
            writer.close().await;
            return false;
        }
    }
    true
}

/// The stream the session polls for one operation: its results until they are taken out.
fn stoppable(results: Results) -> impl futures::Stream<Item = Reply> {
    futures::stream::poll_fn(move |cx| match results.lock().expect("poisoned").as_mut() {
        Some(results) => results.poll_next_unpin(cx),
        None => std::task::Poll::Ready(None),
    })
}

fn into_message(message: Outgoing) -> Message {
    match message {
        Outgoing::Text(text) => Message::Text(text.into()),
        Outgoing::Close(code, reason) => Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        })),
    }
}

/// The moment of a Unix time in seconds, on tokio's clock.
fn instant_of(unix_seconds: i64) -> Instant {
    let left = unix_seconds.saturating_sub(chrono::Utc::now().timestamp());
    Instant::now() + Duration::from_secs(u64::try_from(left).unwrap_or(0))
}
