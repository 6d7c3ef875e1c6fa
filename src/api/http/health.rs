//! `/healthz` (the process answers), `/readyz` (requests can be served), `/metrics`.
//!
//! `/healthz` costs nothing and is never limited: a liveness check refused would have the
//! process restarted. `/readyz` (a Redis and a SQL round trip) and `/metrics` (every family
//! rendered) are limited per client IP by `ENGAGE_PROBE_RATE_PER_IP`, far above what a load
//! balancer or Prometheus polls; past it they answer 429 with `Retry-After`. What `/metrics`
//! reads from Redis is shared by the scrapes of a second (`infra::metrics`), whoever sends
//! them; it is sent gzip when the scraper asks (Prometheus does), as GraphQL answers are
//! ([`super::encoding`]).

use std::{net::SocketAddr, time::Duration};

use axum::{
    extract::{ConnectInfo, State},
    http::{header, HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use serde_json::json;

use super::{client_ip, plain_error, HttpState};

pub(crate) async fn healthz() -> impl IntoResponse {
    Json(json!({ "status": "ok" }))
}

/// The 429 to answer when the client's IP has used its probe allowance.
fn refusal(http: &HttpState, headers: &HeaderMap, peer: SocketAddr) -> Option<Response> {
    let gateway = &http.gateway;
    let ip = client_ip(headers, peer, &gateway.config);
    let refused = gateway.rate_limits.check_probe(ip).err()?;
    Some(plain_error(StatusCode::TOO_MANY_REQUESTS, &refused))
}

/// 200 while Redis answers within a second, 503 otherwise, with each store's state; 503
/// at once while the instance drains before a shutdown, so that the load balancer takes
/// it out of rotation while it still serves (`App::serve` has the order of a stop).
///
/// SQL does not decide: likes, sign-ins and orders are served from Redis and archived once
/// SQL is back, so an instance whose SQL is down still serves, and is reported `degraded`.
/// Were SQL to decide, a database outage would take every instance out of its load
/// balancer at once, and with them the writes that would have worked.
pub(crate) async fn readyz(
    State(http): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = refusal(&http, &headers, peer) {
        return refused;
    }
    let timeout = Duration::from_secs(1);
    let gateway = &http.gateway;
    if gateway.infra.instance.draining.is_cancelled() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "draining" })),
        )
            .into_response();
    }
    let (redis, sql) = tokio::join!(
        tokio::time::timeout(timeout, crate::infra::redis::is_ready(&gateway.infra.redis)),
        tokio::time::timeout(timeout, gateway.infra.db.is_ready()),
    );
    let redis = redis.unwrap_or(false);
    let sql = sql.unwrap_or(false);
    let (status, word) = match (redis, sql) {
        (true, true) => (StatusCode::OK, "ready"),
        (true, false) => (StatusCode::OK, "degraded"),
        (false, _) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
    };
    let state = |ok: bool| if ok { "ok" } else { "down" };
    (
        status,
        Json(json!({ "status": word, "redis": state(redis), "sql": state(sql) })),
    )
        .into_response()
}

/// The Prometheus text exposition; served on the public listener, or on
/// `ENGAGE_METRICS_BIND` alone when that is set ([`super::metrics_router`]).
pub(crate) async fn metrics(
    State(http): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = refusal(&http, &headers, peer) {
        return refused;
    }
    // Prometheus asks for gzip; a scrape of every family is tens of KB, once per interval.
    let text = crate::infra::metrics::render(&http.gateway.infra).await;
    let (body, coding) = super::encoding::compress(&headers, text.into_bytes()).await;
    let mut response = (
        [
            (header::CONTENT_TYPE, "text/plain; version=0.0.4"),
            (header::VARY, "accept-encoding"),
        ],
        body,
    )
        .into_response();
    if let Some(coding) = coding {
        response
            .headers_mut()
            .insert(header::CONTENT_ENCODING, coding);
    }
    response
}
