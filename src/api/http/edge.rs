//! What every HTTP request passes on its way in and out, whatever its route: its request id,
//! the CORS headers, and a panic turned into a 500 instead of a dropped connection.
//!
//! One function around the whole router rather than a tower-http layer each
//! (`SetRequestId`, `PropagateRequestId`, `Cors`, `CatchPanic`, `Trace`): axum applies a
//! router's layers to every route and clones them for every request, and the five layers,
//! with a UUID (a `getrandom` call) per request id, cost about as much as the whole GraphQL
//! validation of a `likeRemark` (BENCHMARKS.md, "What each change bought").
//!
//! CORS: bearer tokens, not cookies, carry identity, so any origin may call the API. A
//! preflight is answered here with the methods and headers it asks for (a wildcard would
//! not cover `Authorization`, which browsers never match against `*`).

use std::{
    panic::AssertUnwindSafe,
    sync::{
        atomic::{AtomicU64, Ordering},
        LazyLock,
    },
};

use axum::{
    body::Body,
    http::{header, HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode},
    response::{IntoResponse, Response},
    Router,
};
use futures::FutureExt;
use hyper::body::Incoming;
use tower::ServiceExt;
use tracing::Instrument;

use super::plain_error;
use crate::infra::error::AppError;

pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The longest request id taken from a client; a longer or unprintable one is replaced.
const MAX_CLIENT_REQUEST_ID: usize = 128;

/// How long a browser may cache a preflight's answer.
const PREFLIGHT_MAX_AGE: HeaderValue = HeaderValue::from_static("86400");

const VARY: HeaderValue = HeaderValue::from_static(
    "origin, access-control-request-method, access-control-request-headers",
);

/// Serves one request through `router`.
pub async fn handle(router: Router, mut request: Request<Incoming>) -> Response {
    let request_id = take_request_id(request.headers_mut());
    if is_preflight(&request) {
        let mut response = preflight(request.headers());
        finish(response.headers_mut(), request_id);
        return response;
    }
    let span = tracing::debug_span!("http", method = %request.method(), path = %request.uri().path(), request_id = ?request_id);
    let served = AssertUnwindSafe(router.oneshot(request.map(Body::new)))
        .catch_unwind()
        .instrument(span)
        .await;
    let mut response = match served {
        Ok(Ok(response)) => response,
        Ok(Err(infallible)) => match infallible {},
        Err(_) => {
            tracing::error!(?request_id, "a handler panicked");
            plain_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &AppError::internal(anyhow::anyhow!("panic")),
            )
        }
    };
    finish(response.headers_mut(), request_id);
    response
}

/// The request's id: the client's `x-request-id` when it is short and printable (a proxy in
/// front may have set it, and logs then join up), else a new one. Written into the request
/// so that handlers read it from there.
fn take_request_id(headers: &mut HeaderMap) -> HeaderValue {
    let given = headers.get(REQUEST_ID).filter(|value| {
        !value.is_empty()
            && value.len() <= MAX_CLIENT_REQUEST_ID
            && value.as_bytes().iter().all(u8::is_ascii_graphic)
    });
    if let Some(given) = given {
        return given.clone();
    }
    let id = new_request_id();
    headers.insert(REQUEST_ID, id.clone());
    id
}

/// `<process>-<sequence>`: a random name for this process and a counter, unique across
/// instances without a random draw per request.
fn new_request_id() -> HeaderValue {
    static PROCESS: LazyLock<String> = LazyLock::new(|| format!("{:08x}", rand::random::<u32>()));
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let sequence = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    HeaderValue::try_from(format!("{}-{sequence:x}", *PROCESS))
        .expect("hex digits and a dash are a valid header value")
}

fn is_preflight(request: &Request<Incoming>) -> bool {
    request.method() == Method::OPTIONS
        && request.headers().contains_key(header::ORIGIN)
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
}

fn preflight(asked: &HeaderMap) -> Response {
    let mut response = StatusCode::OK.into_response();
    let headers = response.headers_mut();
    for (ask, allow) in [
        (
            header::ACCESS_CONTROL_REQUEST_METHOD,
            header::ACCESS_CONTROL_ALLOW_METHODS,
        ),
        (
            header::ACCESS_CONTROL_REQUEST_HEADERS,
            header::ACCESS_CONTROL_ALLOW_HEADERS,
        ),
    ] {
        if let Some(value) = asked.get(ask) {
            headers.insert(allow, value.clone());
        }
    }
    headers.insert(header::ACCESS_CONTROL_MAX_AGE, PREFLIGHT_MAX_AGE);
    response
}

/// The headers every response carries.
fn finish(headers: &mut HeaderMap, request_id: HeaderValue) {
    headers.insert(REQUEST_ID, request_id);
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    headers.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("*"),
    );
    headers.append(header::VARY, VARY);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clients_printable_request_id_is_kept_and_others_are_replaced() {
        let mut headers = HeaderMap::new();
        headers.insert(REQUEST_ID, HeaderValue::from_static("lb-42"));
        assert_eq!(take_request_id(&mut headers), "lb-42");

        let mut headers = HeaderMap::new();
        headers.insert(REQUEST_ID, HeaderValue::from_static("has space"));
        let replaced = take_request_id(&mut headers);
        assert_ne!(replaced, "has space");
        assert_eq!(headers.get(REQUEST_ID), Some(&replaced));

        let mut headers = HeaderMap::new();
        let first = take_request_id(&mut headers);
        let second = take_request_id(&mut HeaderMap::new());
        assert_ne!(first, second);
    }
}
