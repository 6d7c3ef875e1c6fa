//! `/healthz` (the process answers), `/readyz` (Redis and SQL answer), `/metrics`.

use std::time::Duration;

use axum::{extract::State, http::StatusCode, response::IntoResponse, Json};
use serde_json::json;

use super::HttpState;

pub async fn healthz() -> impl IntoResponse {
    Json(json!({ "status": "ok" }))
}

/// 200 when both stores answer within a second, 503 otherwise, with each one's state.
pub async fn readyz(State(http): State<HttpState>) -> impl IntoResponse {
    let timeout = Duration::from_secs(1);
    let gateway = &http.gateway;
    let (redis, sql) = tokio::join!(
        tokio::time::timeout(timeout, crate::infra::redis::is_ready(&gateway.infra.redis)),
        tokio::time::timeout(timeout, gateway.infra.db.is_ready()),
    );
    let redis = redis.unwrap_or(false);
    let sql = sql.unwrap_or(false);
    let status = if redis && sql {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let word = |ok: bool| if ok { "ok" } else { "down" };
    (
        status,
        Json(json!({
            "status": if redis && sql { "ready" } else { "unavailable" },
            "redis": word(redis),
            "sql": word(sql),
        })),
    )
}

pub async fn metrics(State(http): State<HttpState>) -> impl IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        crate::infra::metrics::render(&http.gateway.infra),
    )
}
