//! The HTTP surface: routes, shared middleware and the small helpers the handlers share.

pub(crate) mod admission;
pub(crate) mod apq;
#[cfg(feature = "bench")]
pub(crate) mod bench;
pub(crate) mod caps;
pub(crate) mod deadline;
pub(crate) mod document;
pub(crate) mod edge;
pub(crate) mod encoding;
pub(crate) mod graphql;
pub(crate) mod health;
pub(crate) mod pages;
pub(crate) mod rate_limit;
pub(crate) mod server;
pub(crate) mod trusted;
pub(crate) mod validated;
pub(crate) mod ws;

use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
};

use axum::{
    extract::DefaultBodyLimit,
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    routing::get,
    Router,
};
use serde_json::json;

use crate::{
    api::{
        http::{rate_limit::RateLimits, trusted::TrustedDocuments, validated::Schemas},
        live::Renderings,
    },
    features::users::UserDirectory,
    infra::{auth::Tokens, config::Config, error::AppError, Infra},
};

/// What every transport shares: the limits, the token check, the rate limits, the trusted
/// documents, the users seen so far, the WebSockets each user holds, and the infrastructure
/// (persisted queries live in Redis; readiness asks Redis and SQL).
pub struct Gateway {
    pub(crate) config: Config,
    pub(crate) infra: Infra,
    pub tokens: Tokens,
    pub(crate) rate_limits: RateLimits,
    /// Open WebSockets per signed-in user (`ENGAGE_WS_MAX_PER_USER`).
    pub(crate) websockets_per_user: caps::Caps<i64>,
    /// The documents of `ENGAGE_TRUSTED_DOCUMENTS`, parsed once at start.
    pub(crate) trusted: TrustedDocuments,
    pub(crate) users: Arc<UserDirectory>,
}

/// What every handler receives.
#[derive(Clone)]
pub(crate) struct HttpState {
    pub(crate) gateway: Arc<Gateway>,
    pub(crate) schemas: Schemas,
    /// Direct subscriptions' responses, shared by the subscribers of equal selections.
    pub(crate) renderings: Arc<Renderings>,
}

pub(crate) fn router(gateway: Arc<Gateway>, schemas: Schemas) -> Router {
    crate::infra::metrics::install();
    let max_body = gateway.config.max_body_bytes;
    let pages = pages::router(&gateway.config);
    let public_metrics = gateway.config.metrics_public();
    let http = HttpState {
        gateway,
        schemas,
        renderings: Arc::default(),
    };
    let routes = Router::new()
        .merge(pages)
        .route("/graphql", get(graphql::get).post(graphql::post))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz));
    // With a private address of their own, metrics are not answered to the public unless
    // asked to be.
    let routes = if public_metrics {
        routes.route("/metrics", get(health::metrics))
    } else {
        routes
    };
    routes
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(http)
}

/// `/metrics` alone, for the listener of `ENGAGE_METRICS_BIND`: an address that only the
/// monitoring network reaches, so the public one need not answer what the instance is
/// doing (its error rates, its queues, its memory).
pub(crate) fn metrics_router(gateway: Arc<Gateway>, schemas: Schemas) -> Router {
    crate::infra::metrics::install();
    Router::new()
        .route("/metrics", get(health::metrics))
        .with_state(HttpState {
            gateway,
            schemas,
            renderings: Arc::default(),
        })
}

/// The request id given by [`edge`] (or sent by the client).
pub(crate) fn request_id(headers: &HeaderMap) -> String {
    headers
        .get(edge::REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_string()
}

/// The client's address: the peer, or behind trusted proxies the `X-Forwarded-For` entry
/// that the outermost of them added.
///
/// Each proxy appends the address it received the request from, so the right-most entries
/// are the trusted ones and everything to their left is whatever the client wrote. With
/// `ENGAGE_TRUSTED_PROXY_HOPS` proxies the client is the entry that many places from the
/// right. A header with fewer entries did not come through all of them: the peer is used.
pub(crate) fn client_ip(headers: &HeaderMap, peer: SocketAddr, config: &Config) -> IpAddr {
    forwarded_client(
        headers,
        peer,
        config.trust_proxy.then_some(config.trusted_proxy_hops),
    )
}

/// [`client_ip`] with `hops` trusted proxies in front (`None`: clients connect directly),
/// for the listener, which counts connections per client before any handler runs.
pub(crate) fn forwarded_client(headers: &HeaderMap, peer: SocketAddr, hops: Option<u32>) -> IpAddr {
    let Some(hops) = hops else {
        return peer.ip();
    };
    let hops = hops as usize;
    let entries: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|list| list.split(','))
        .map(str::trim)
        .collect();
    entries
        .len()
        .checked_sub(hops)
        .and_then(|index| entries[index].parse().ok())
        .unwrap_or_else(|| peer.ip())
}

/// A JSON error body outside GraphQL execution (panics, refused upgrades).
pub(crate) fn plain_error(status: StatusCode, error: &AppError) -> Response {
    let body = json!({ "errors": [{
        "message": error.public_message(),
        "extensions": { "code": error.code().as_str() },
    }]});
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    if let AppError::RateLimited { retry_after_secs } = error {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_secs));
    }
    response
}
