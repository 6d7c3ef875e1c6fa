//! The listening socket: accepts client connections and serves HTTP/1.1 on them (with
//! WebSocket upgrades), with the bounds a public server needs.
//!
//! - **A cap on open connections**, below the process's file-descriptor limit with a
//!   reserve, so that a crowd of idle or half-open sockets can never starve the descriptors
//!   Redis, SQL and callbacks need, nor stop `/healthz` from answering. A connection past
//!   the cap is closed at once: refusing it quickly keeps the listen backlog moving, where
//!   not accepting would leave every new client waiting in it.
//! - **A cap per client address** (`ENGAGE_MAX_CONNECTIONS_PER_IP`, see [`super::caps`]), so
//!   that one client cannot take the places everyone else needs. The TCP peer's connections
//!   count from accept on (idle keep-alive and half-sent headers included); one past the
//!   cap is answered a minimal 429 and closed. Behind a trusted proxy every connection is
//!   the proxy's, so the client address of `X-Forwarded-For` counts instead, per request
//!   in flight and per open WebSocket, and a request past it is answered 429.
//! - **A header-read timeout**: a client that opens a connection and sends its request
//!   headers slowly, or not at all, is disconnected (`ENGAGE_HEADER_READ_TIMEOUT_SECONDS`).
//!   The headers' read buffer is capped (`ENGAGE_MAX_HEADER_BYTES`, 431 beyond), and a
//!   body has one total deadline of its own (see [`super::deadline`]).
//! - **Graceful shutdown**: while draining, every response but an upgrade carries
//!   `Connection: close`, so keep-alive clients (a load balancer's pooled connections
//!   among them) open their next connection elsewhere instead of meeting a closed socket;
//!   once told to stop, no new connections are taken and each open one finishes its
//!   request in flight.
//!
//! `axum::serve` offers neither the cap nor the timeouts, hence this loop over hyper. It
//! speaks HTTP/1.1 only: hyper-util's HTTP/1-or-2 detection waits for a client's first bytes
//! before any timeout runs, so a silent connection would be held for ever; HTTP/2 belongs at
//! the load balancer, which speaks HTTP/1.1 to the service.

use std::{
    convert::Infallible,
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use axum::{
    extract::ConnectInfo,
    http::{header, HeaderValue, StatusCode},
    response::Response,
    Router,
};
use hyper::{body::Incoming, server::conn::http1, service::service_fn, Request};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::{OwnedSemaphorePermit, Semaphore},
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use super::{
    caps::{Caps, Held},
    deadline, edge, forwarded_client, plain_error,
};
use crate::infra::error::{AppError, ErrorCode};

/// Descriptors kept free of client connections: for Redis, SQL, the listener, logs and
/// callbacks, whatever the clients do.
const RESERVED_DESCRIPTORS: usize = 256;

/// Refused connections given time to read their 429 at once, at most; any more are closed
/// without it. Closing a socket whose request is still unread makes the kernel answer with a
/// reset that can overtake the 429, so a refusal waits briefly for the client to hang up.
const LINGERING_REFUSALS: usize = 64;
/// How long a refused connection may take to read its 429 and hang up.
const REFUSAL_LINGER: Duration = Duration::from_millis(500);
/// How long its 429 waits for the request to begin.
const REQUEST_WAIT: Duration = Duration::from_millis(100);

/// A share of a request's places under the caps: its connection's, and its client
/// address's. A WebSocket outlives the HTTP exchange that upgraded it, so its handler keeps
/// a share until the socket closes.
#[derive(Clone)]
pub(crate) struct ConnectionSlot {
    _connection: Arc<OwnedSemaphorePermit>,
    /// The connection's own place under `ENGAGE_MAX_CONNECTIONS_PER_IP`, or behind a
    /// trusted proxy the request's.
    _client: Option<Arc<Held<IpAddr>>>,
}

pub(crate) struct Limits {
    pub(crate) max_connections: usize,
    pub(crate) max_connections_per_ip: usize,
    pub(crate) header_read_timeout: Duration,
    pub(crate) body_read_timeout: Duration,
    /// The largest request head, and so the connection's read buffer while it arrives.
    pub(crate) max_header_bytes: usize,
    /// With trusted proxies in front, how many (the client address is then read from
    /// `X-Forwarded-For`); `None` when clients connect directly.
    pub(crate) trusted_proxy_hops: Option<u32>,
}

/// How many client connections this process may hold: the configured cap, lowered to stay
/// below the descriptor limit (raised to its hard ceiling first, as most servers do).
pub(crate) fn connection_cap(configured: usize) -> usize {
    let descriptors = raise_descriptor_limit();
    let reserve = RESERVED_DESCRIPTORS.max(descriptors / 10);
    configured.min(descriptors.saturating_sub(reserve)).max(1)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and returns it.
fn raise_descriptor_limit() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed by pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 1024;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
}

/// Serves `router` on `listener` until `stop` is cancelled, then waits for the connections'
/// requests in flight. From `draining` on, each response asks its client to close the
/// connection.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    cors: Arc<edge::Cors>,
    draining: CancellationToken,
    stop: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let lingering = Arc::new(Semaphore::new(LINGERING_REFUSALS));
    let per_ip = Arc::new(Caps::new(
        limits.max_connections_per_ip,
        "connections_per_ip",
    ));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        // hyper's default buffer (about 400 KB) lets each connection hold that much of
        // unfinished headers; a head past the cap answers 431.
        .max_buf_size(limits.max_header_bytes.max(MIN_HEADER_BUFFER));
    let connections = TaskTracker::new();
    loop {
        let (stream, peer) = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors or memory for a moment: accepting again at once
                    // would spin, so pause briefly.
                    tracing::warn!(%error, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            metrics::counter!("engage_http_connections_refused_total").increment(1);
            drop(stream);
            continue;
        };
        // Clients connecting directly count from accept on; behind proxies, per request.
        let client = match limits.trusted_proxy_hops {
            Some(_) => None,
            None => match per_ip.try_hold(peer.ip()) {
                Some(held) => Some(Arc::new(held)),
                None => {
                    refuse(stream, per_ip.max(), &lingering, permit);
                    continue;
                }
            },
        };
        let slot = ConnectionSlot {
            _connection: Arc::new(permit),
            _client: client,
        };
        let request_slot = slot.clone();
        let router = router.clone();
        let cors = cors.clone();
        let draining = draining.clone();
        let per_ip = per_ip.clone();
        let hops = limits.trusted_proxy_hops;
        let body_limit = limits.body_read_timeout;
        let service = service_fn(move |request: Request<Incoming>| {
            let (mut parts, body) = request.into_parts();
            let slot = match hops {
                None => Ok(request_slot.clone()),
                Some(hops) => {
                    let ip = forwarded_client(&parts.headers, peer, Some(hops));
                    match per_ip.try_hold(ip) {
                        Some(held) => Ok(ConnectionSlot {
                            _connection: request_slot._connection.clone(),
                            _client: Some(Arc::new(held)),
                        }),
                        None => Err(per_ip.max()),
                    }
                }
            };
            let (body, watch) = deadline::bound(body, body_limit);
            let router = router.clone();
            let cors = cors.clone();
            let draining = draining.clone();
            async move {
                let mut response = match slot {
                    Ok(slot) => {
                        // Held until the response is ready (and by a WebSocket for its life).
                        parts.extensions.insert(ConnectInfo::<SocketAddr>(peer));
                        parts.extensions.insert(slot.clone());
                        let request = Request::from_parts(parts, body);
                        let response = edge::handle(router, &cors, request, watch).await;
                        drop(slot);
                        response
                    }
                    Err(max) => edge::refuse(
                        &cors,
                        Request::from_parts(parts, body),
                        plain_error(StatusCode::TOO_MANY_REQUESTS, &too_many(max)),
                    ),
                };
                if draining.is_cancelled() {
                    close_after(&mut response);
                }
                Ok::<_, Infallible>(response)
            }
        });
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades();
        let stop = stop.clone();
        connections.spawn(async move {
            let mut connection = std::pin::pin!(connection);
            // Errors here are the client's (a reset, a malformed request): nothing to log.
            tokio::select! {
                _ = connection.as_mut() => {}
                () = stop.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
            drop(slot);
        });
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}

/// The smallest read buffer hyper takes.
const MIN_HEADER_BUFFER: usize = 8192;

/// Why a client at its cap is refused.
fn too_many(max: usize) -> AppError {
    AppError::client(
        ErrorCode::RateLimited,
        format!("too many connections from this address: at most {max} at once"),
    )
}

/// Answers a connection past its address's cap, before any request was read: a minimal
/// HTTP/1.1 429, then the connection closes. It keeps its place under
/// `ENGAGE_MAX_CONNECTIONS` until then, so refusals cannot outgrow the descriptors.
fn refuse(
    mut stream: TcpStream,
    max: usize,
    lingering: &Arc<Semaphore>,
    permit: OwnedSemaphorePermit,
) {
    let error = too_many(max);
    let body = serde_json::json!({ "errors": [{
        "message": error.public_message(),
        "extensions": { "code": error.code().as_str() },
    }]})
    .to_string();
    let response = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json; charset=utf-8\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let Ok(linger) = lingering.clone().try_acquire_owned() else {
        // Too many refusals at once: the response if the socket takes it now, that is all.
        let _ = stream.try_write(response.as_bytes());
        return;
    };
    tokio::spawn(async move {
        let _ = tokio::time::timeout(REFUSAL_LINGER, async {
            // A client writes its request before it reads: some (hyper's own client) drop a
            // response that comes first, so the 429 waits briefly for the request to begin.
            let mut sink = [0u8; 1024];
            let _ = tokio::time::timeout(REQUEST_WAIT, stream.read(&mut sink)).await;
            stream.write_all(response.as_bytes()).await?;
            stream.shutdown().await?;
            // Whatever the client sent is read and dropped until it hangs up.
            while stream.read(&mut sink).await? > 0 {}
            std::io::Result::Ok(())
        })
        .await;
        drop((linger, permit));
    });
}

/// Asks the client to close the connection once this response is read, which hyper does
/// on its side too: the client's next request opens a new connection, through the load
/// balancer to an instance that is not draining. Closing idle connections instead would
/// race a request the client is sending on one at that moment. An upgrade (101) is left
/// alone: its connection goes on as the WebSocket, closed with 1001 at the shutdown.
fn close_after(response: &mut Response) {
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
}
