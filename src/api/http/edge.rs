//! What every HTTP request passes on its way in and out, whatever its route: its request id,
//! the CORS headers, a panic turned into a 500 instead of a dropped connection, a body that
//! missed its deadline turned into a 408 (see [`super::deadline`]), its span (continuing the
//! caller's `traceparent`) and its access line (target `engage::access`: method, path,
//! GraphQL operation, status, duration, request id).
//!
//! One function around the whole router rather than a tower-http layer each
//! (`SetRequestId`, `PropagateRequestId`, `Cors`, `CatchPanic`, `Trace`): axum applies a
//! router's layers to every route and clones them for every request, and the five layers,
//! with a UUID (a `getrandom` call) per request id, cost about as much as the whole GraphQL
//! validation of a `likeRemark` (BENCHMARKS.md, "What each change bought").
//!
//! CORS ([`Cors`], `ENGAGE_CORS_ORIGINS`): the origins whose pages may call the API from a
//! browser. Bearer tokens, not cookies, carry identity, so a foreign page cannot borrow a
//! user's session; but a page that holds a token (a web app's own) is the only one that
//! should use it, and production names its apps' origins (any origin, `*`, is development
//! only; unset, production sends no CORS headers: same-origin pages only). An allowed
//! origin is echoed in `Access-Control-Allow-Origin` (with `Vary: origin`, so that a cache
//! keeps one answer per origin); another gets no CORS headers, its preflight a 403, and the
//! browser then keeps the answer from the page. A preflight is answered here with the
//! methods and headers it asks for (a wildcard would not cover `Authorization`, which
//! browsers never match against `*`).

use std::{
    cell::Cell,
    panic::AssertUnwindSafe,
    sync::{
        atomic::{AtomicU64, Ordering},
        LazyLock,
    },
    time::Instant,
};

use axum::{
    body::Body,
    http::{header, HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode},
    response::{IntoResponse, Response},
    Router,
};
use futures::FutureExt;
use opentelemetry::propagation::Extractor;
use tower::ServiceExt;
use tracing::Instrument;

use super::{deadline::BodyWatch, plain_error};
use crate::infra::{config::Config, error::AppError, telemetry};

pub(crate) const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The longest request id taken from a client; a longer or unprintable one is replaced.
const MAX_CLIENT_REQUEST_ID: usize = 128;

/// How long a browser may cache a preflight's answer.
const PREFLIGHT_MAX_AGE: HeaderValue = HeaderValue::from_static("86400");

const VARY: HeaderValue = HeaderValue::from_static(
    "origin, access-control-request-method, access-control-request-headers",
);

tokio::task_local! {
    /// The GraphQL operation a request ran (its metrics label), for its access line: the
    /// GraphQL handler runs inside the request's task and notes it here, which costs
    /// neither an allocation nor a header.
    static OPERATION: Cell<&'static str>;
}

/// The access line's `operation` of a request that ran no GraphQL.
const NO_OPERATION: &str = "-";

/// Notes the operation of the request being served (its label in `/metrics`).
pub(crate) fn note_operation(label: &'static str) {
    let _ = OPERATION.try_with(|operation| operation.set(label));
}

/// Serves one request through `router`. `body`, when the request has one, tells whether it
/// ran out of time before the handler read it all: the answer is then 408.
pub(crate) async fn handle(
    router: Router,
    cors: &Cors,
    mut request: Request<Body>,
    body: Option<BodyWatch>,
) -> Response {
    let started = Instant::now();
    let request_id = take_request_id(request.headers_mut());
    // Both are cheap copies: a method is an enum, a URI shares the request's bytes.
    let method = request.method().clone();
    let uri = request.uri().clone();
    let allow_origin = cors.allow(request.headers());
    if is_preflight(&request) {
        let mut response = preflight(request.headers(), allow_origin.as_ref());
        access(
            &method,
            uri.path(),
            NO_OPERATION,
            response.status(),
            started,
            &request_id,
        );
        finish(response.headers_mut(), request_id, allow_origin);
        return response;
    }
    let span = if is_probe(uri.path()) {
        tracing::Span::none()
    } else {
        request_span(&request, &request_id)
    };
    let served = OPERATION
        .scope(Cell::new(NO_OPERATION), async move {
            let served = AssertUnwindSafe(router.oneshot(request))
                .catch_unwind()
                .await;
            (served, OPERATION.with(Cell::get))
        })
        .instrument(span.clone())
        .await;
    let (served, operation) = served;
    let mut response = match served {
        Ok(Ok(response)) => response,
        Ok(Err(infallible)) => match infallible {},
        Err(_) => {
            tracing::error!(parent: &span, ?request_id, "a handler panicked");
            plain_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &AppError::internal(anyhow::anyhow!("panic")),
            )
        }
    };
    if let Some(body) = body.filter(BodyWatch::expired) {
        response = body.response();
    }
    let status = response.status();
    if telemetry::exporting() {
        span.record("http.response.status_code", i64::from(status.as_u16()));
    }
    span.in_scope(|| access(&method, uri.path(), operation, status, started, &request_id));
    finish(response.headers_mut(), request_id, allow_origin);
    response
}

/// Answers `request` with `response` without routing it (a client past its cap), with the
/// headers and the access line every response has.
pub(crate) fn refuse(cors: &Cors, mut request: Request<Body>, mut response: Response) -> Response {
    let started = Instant::now();
    let request_id = take_request_id(request.headers_mut());
    let allow_origin = cors.allow(request.headers());
    let path = request.uri().path();
    access(
        request.method(),
        path,
        NO_OPERATION,
        response.status(),
        started,
        &request_id,
    );
    finish(response.headers_mut(), request_id, allow_origin);
    response
}

/// The web origins whose pages may call the API (`ENGAGE_CORS_ORIGINS`).
#[derive(Debug, Clone)]
pub(crate) enum Cors {
    /// Any origin (development): `Access-Control-Allow-Origin: *`.
    Any,
    /// These origins only, each echoed back; none at all means same-origin pages only.
    Only(Vec<HeaderValue>),
}

impl Cors {
    pub(crate) fn from_config(config: &Config) -> Self {
        match config.cors_origins() {
            None => Self::Any,
            Some(origins) => Self::Only(
                origins
                    .iter()
                    // `Config::check` refused anything that is not an origin.
                    .filter_map(|origin| HeaderValue::try_from(origin.as_str()).ok())
                    .collect(),
            ),
        }
    }

    /// The `Access-Control-Allow-Origin` a request from these headers gets, if any.
    fn allow(&self, headers: &HeaderMap) -> Option<HeaderValue> {
        match self {
            Self::Any => Some(ANY_ORIGIN),
            Self::Only(origins) => {
                let origin = headers.get(header::ORIGIN)?;
                origins.contains(origin).then(|| origin.clone())
            }
        }
    }
}

const ANY_ORIGIN: HeaderValue = HeaderValue::from_static("*");

/// The span of one request, continuing the caller's trace when it sent a `traceparent`.
/// Without traces (JSON logs, or `RUST_LOG=engage::request=debug`) it only carries the
/// request id to the log lines written inside it.
fn request_span(request: &Request<Body>, request_id: &HeaderValue) -> tracing::Span {
    let request_id = request_id.to_str().unwrap_or("-");
    if !telemetry::exporting() {
        return tracing::debug_span!(target: telemetry::REQUEST, "request", request_id);
    }
    let method = request.method();
    let path = request.uri().path();
    let span = tracing::debug_span!(
        target: telemetry::REQUEST,
        "request",
        otel.name = %SpanName(method, path),
        otel.kind = "server",
        http.request.method = %method,
        url.path = path,
        request_id,
        http.response.status_code = tracing::field::Empty,
    );
    telemetry::continue_trace(&span, &Headers(request.headers()));
    span
}

/// `POST /graphql`, or the method alone for other paths (span names stay few).
struct SpanName<'a>(&'a Method, &'a str);

impl std::fmt::Display for SpanName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.1 {
            "/graphql" => write!(f, "{} /graphql", self.0),
            _ => write!(f, "{}", self.0),
        }
    }
}

/// The access line of a request: info, but debug for the probes of load balancers and
/// Prometheus, which would otherwise drown the traffic (`RUST_LOG=engage::access=debug`
/// shows them).
fn access(
    method: &Method,
    path: &str,
    operation: &'static str,
    status: StatusCode,
    started: Instant,
    request_id: &HeaderValue,
) {
    macro_rules! line {
        ($level:ident) => {
            tracing::$level!(
                target: telemetry::ACCESS,
                method = %method,
                path = %path,
                operation = %operation,
                status = status.as_u16(),
                duration_ms = started.elapsed().as_micros() as f64 / 1000.0,
                request_id = %request_id.to_str().unwrap_or("-"),
                "served"
            )
        };
    }
    if is_probe(path) {
        line!(debug);
    } else {
        line!(info);
    }
}

/// The paths that load balancers and Prometheus poll.
fn is_probe(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/metrics")
}

/// A request's headers, as OpenTelemetry's propagator reads them.
struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
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

fn is_preflight(request: &Request<Body>) -> bool {
    request.method() == Method::OPTIONS
        && request.headers().contains_key(header::ORIGIN)
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
}

/// A preflight's answer: what it asks for, to an allowed origin; 403 without any allow
/// header to another (the browser then sends nothing).
fn preflight(asked: &HeaderMap, allow_origin: Option<&HeaderValue>) -> Response {
    if allow_origin.is_none() {
        return StatusCode::FORBIDDEN.into_response();
    }
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

/// The headers every response carries, and the CORS ones a response to an allowed origin
/// does.
fn finish(headers: &mut HeaderMap, request_id: HeaderValue, allow_origin: Option<HeaderValue>) {
    headers.insert(REQUEST_ID, request_id);
    if let Some(origin) = allow_origin {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static("*"),
        );
    }
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
