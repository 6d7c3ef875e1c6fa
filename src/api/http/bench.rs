//! `POST /bench/like`, compiled only with the `bench` feature: the like path without GraphQL.
//!
//! Same admission of the caller (rate limits, token check, first-sight user write), same Lua script through
//! the same pool as `likeRemark`; only parsing, validation and execution of a GraphQL
//! document are left out. `bench/run` loads it beside `likeRemark` in one run, so the ratio
//! of the two is what GraphQL costs on the hot path.

use std::net::SocketAddr;

use axum::{
    extract::{ConnectInfo, State},
    http::{header, HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use serde::Deserialize;
use serde_json::json;

use super::{admission, client_ip, HttpState};
use crate::{
    api::schema::id::RemarkId,
    features::remarks::likes::{self, Vote},
    infra::error::{AppError, AppResult},
};

#[derive(Deserialize)]
pub struct LikeBody {
    #[serde(rename = "remarkId")]
    remark_id: String,
}

pub async fn like(
    State(http): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Json(body): Json<LikeBody>,
) -> Response {
    match vote(&http, peer, &headers, &body).await {
        Ok(outcome) => Json(json!({
            "remarkId": RemarkId::new(outcome.remark_id).encode(),
            "likeCount": outcome.like_count,
            "liked": outcome.liked,
            "changed": outcome.changed,
        }))
        .into_response(),
        Err(error) => (
            StatusCode::BAD_REQUEST,
            Json(json!({ "code": error.code().as_str() })),
        )
            .into_response(),
    }
}

async fn vote(
    http: &HttpState,
    peer: SocketAddr,
    headers: &HeaderMap,
    body: &LikeBody,
) -> AppResult<likes::VoteOutcome> {
    let gateway = &http.gateway;
    let ip = client_ip(headers, peer, &gateway.config);
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let caller = admission::identify(gateway, ip, authorization).await?;
    let viewer = caller
        .viewer
        .ok_or_else(|| AppError::unauthenticated("sign in first"))?;
    // Read as `likeRemark` reads it: the remark's global id, or the bare number.
    let remark_id = RemarkId::read(&body.remark_id)
        .map_err(|message| AppError::bad_input(format!("remarkId: {message}")))?
        .0;
    gateway
        .remarks
        .vote(viewer.user_id, remark_id, Vote::Like)
        .await
}
