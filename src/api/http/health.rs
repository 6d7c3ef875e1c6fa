//! `/healthz` (the process answers), `/readyz` (requests can be served), `/metrics`.

use std::time::Duration;

use axum::{extract::State, http::StatusCode, response::IntoResponse, Json};
use serde_json::json;

use super::HttpState;

pub async fn healthz() -> impl IntoResponse {
    Json(json!({ "status": "ok" }))
}

/// 200 while Redis answers within a second, 503 otherwise, with each store's state; 503
/// at once while the instance drains before a shutdown, so that the load balancer takes
/// it out of rotation while it still serves (`App::serve` has the order of a stop).
///
/// SQL does not decide: likes, sign-ins and orders are served from Redis and archived once
/// SQL is back, so an instance whose SQL is down still serves, and is reported `degraded`.
/// Were SQL to decide, a database outage would take every instance out of its load
/// balancer at once, and with them the writes that would have worked.
pub async fn readyz(State(http): State<HttpState>) -> impl IntoResponse {
    let timeout = Duration::from_secs(1);
    let gateway = &http.gateway;
    if gateway.infra.instance.draining.is_cancelled() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "draining" })),
        );
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
}

/// The Prometheus text exposition; served on the public listener, or on
/// `ENGAGE_METRICS_BIND` alone when that is set ([`super::metrics_router`]).
pub async fn metrics(State(http): State<HttpState>) -> impl IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        crate::infra::metrics::render(&http.gateway.infra).await,
    )
}
