//! The listening socket: accepts client connections and serves HTTP/1.1 (with WebSocket
//! upgrades) and HTTP/2 on them, with the bounds a public server needs.
//!
//! - **A cap on open connections**, below the process's file-descriptor limit with a
//!   reserve, so that a crowd of idle or half-open sockets can never starve the descriptors
//!   Redis, SQL and callbacks need, nor stop `/healthz` from answering. A connection past
//!   the cap is closed at once: refusing it quickly keeps the listen backlog moving, where
//!   not accepting would leave every new client waiting in it.
//! - **A header-read timeout**: a client that opens a connection and sends its request
//!   headers slowly, or not at all, is disconnected (`ENGAGE_HEADER_READ_TIMEOUT_SECONDS`).
//!   Bodies have a timeout of their own in the router.
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

use std::{convert::Infallible, net::SocketAddr, sync::Arc, time::Duration};

use axum::{
    extract::ConnectInfo,
    http::{header, HeaderValue, StatusCode},
    response::Response,
    Router,
};
use futures::FutureExt;
use hyper::{body::Incoming, server::conn::http1, service::service_fn, Request};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    net::TcpListener,
    sync::{OwnedSemaphorePermit, Semaphore},
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use super::edge;

/// Descriptors kept free of client connections: for Redis, SQL, the listener, logs and
/// callbacks, whatever the clients do.
const RESERVED_DESCRIPTORS: usize = 256;

/// A share of a connection's place under the cap. A WebSocket outlives the HTTP exchange
/// that upgraded it, so its handler keeps a share until the socket closes.
#[derive(Clone)]
pub struct ConnectionSlot(#[allow(dead_code)] Arc<OwnedSemaphorePermit>);

pub struct Limits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
}

/// How many client connections this process may hold: the configured cap, lowered to stay
/// below the descriptor limit (raised to its hard ceiling first, as most servers do).
pub fn connection_cap(configured: usize) -> usize {
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
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    draining: CancellationToken,
    stop: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
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
        let slot = ConnectionSlot(Arc::new(permit));
        let request_slot = slot.clone();
        let router = router.clone();
        let draining = draining.clone();
        let service = service_fn(move |mut request: Request<Incoming>| {
            let extensions = request.extensions_mut();
            extensions.insert(ConnectInfo::<SocketAddr>(peer));
            extensions.insert(request_slot.clone());
            let draining = draining.clone();
            edge::handle(router.clone(), request).map(move |mut response| {
                if draining.is_cancelled() {
                    close_after(&mut response);
                }
                Ok::<_, Infallible>(response)
            })
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
