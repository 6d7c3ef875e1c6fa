//! `POST /bench/like`, compiled only with the `bench` feature: the like path without GraphQL.
//!
//! Same admission of the caller (rate limits, token check, first-sight user write), same Lua script through
//! the same pool as `likeRemark`; only parsing, validation and execution of a GraphQL
//! document are left out. `bench/run` loads it beside `likeRemark` in one run, so the ratio
//! of the two is what GraphQL costs on the hot path.

use std::{net::SocketAddr, sync::Arc};

use axum::{
    extract::{ConnectInfo, DefaultBodyLimit, State},
    http::{header, HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::post,
    Json, Router,
};
use serde::Deserialize;
use serde_json::json;

use super::{admission, client_ip, Gateway};
use crate::{
    api::schema::id::RemarkId,
    features::remarks::{
        likes::{self, Vote},
        Remarks,
    },
    infra::error::{AppError, AppResult},
};

/// What `/bench/like` uses: the gateway's admission of the caller, and the remarks whose
/// likes it casts. Its own handle, so that the gateway every transport shares carries no
/// feature only this route needs.
pub(crate) struct BenchLikes {
    gateway: Arc<Gateway>,
    remarks: Remarks,
}

/// `POST /bench/like`, with the body limit of every other route.
pub(crate) fn router(gateway: Arc<Gateway>, remarks: Remarks) -> Router {
    let max_body = gateway.config.max_body_bytes;
    Router::new()
        .route("/bench/like", post(like))
        .layer(DefaultBodyLimit::max(max_body))
        // Behind an Arc: axum clones the state for each request, and the remarks handle
        // holds the infra's pools, keys and clocks.
        .with_state(Arc::new(BenchLikes { gateway, remarks }))
}

#[derive(Deserialize)]
pub(crate) struct LikeBody {
    #[serde(rename = "remarkId")]
    remark_id: String,
}

pub(crate) async fn like(
    State(bench): State<Arc<BenchLikes>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Json(body): Json<LikeBody>,
) -> Response {
    match vote(&bench, peer, &headers, &body).await {
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
    bench: &BenchLikes,
    peer: SocketAddr,
    headers: &HeaderMap,
    body: &LikeBody,
) -> AppResult<likes::VoteOutcome> {
    let gateway = &bench.gateway;
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
    bench
        .remarks
        .vote(viewer.user_id, remark_id, Vote::Like)
        .await
}
