//! GraphQL over HTTP: `POST /graphql` (JSON body) and `GET /graphql` (queries only).
//!
//! Follows the GraphQL-over-HTTP draft: a client that accepts
//! `application/graphql-response+json` gets that media type with 4xx for request errors
//! (nothing executed, no `data`), and 200 once execution began; a client that only accepts
//! `application/json` gets 200 for every well-formed request, as legacy clients expect.
//! Either way a request that is not GraphQL at all answers 4xx with `BAD_REQUEST`.
//!
//! Every request passes [`admission`] (rates, token, size, persisted query, parse, cost)
//! before it runs; this module only speaks HTTP around it:
//!
//! - **Batches**: a POST body that is a JSON array holds up to `ENGAGE_MAX_BATCH`
//!   operations (Apollo's `BatchHttpLink`, relay's batching network layers). The caller is
//!   identified once; each operation is admitted and charged as a request of its own, their
//!   mutation fields together may be at most `ENGAGE_MAX_MUTATIONS_PER_REQUEST` (else
//!   nothing runs), and they run one after another, in order, so that a batch's mutations
//!   apply as the client listed them. The answer is a JSON array in the same order, 200
//!   whatever each holds: an operation refused by admission answers its error in its place.
//! - **Compression**: answers of 1 KB or more are sent gzip or br as the client accepts
//!   ([`encoding`]), with `Vary: accept-encoding`.
//! - **Caching**: an anonymous GET query of public reads only
//!   ([`crate::api::schema::PUBLIC_READS`]) answered without errors is
//!   `Cache-Control: public, max-age=N` (`ENGAGE_PUBLIC_MAX_AGE_SECONDS`): CDNs and browsers
//!   may then serve a hot item page without reaching the instance. Every other answer is
//!   `no-store`, not `private`: a signed-in answer changes with the viewer's own mutations,
//!   which a browser's HTTP cache would not see (GraphQL clients keep their own normalised
//!   caches), and should not outlive a sign-out on a shared device.

use std::{collections::BTreeMap, net::SocketAddr, time::Instant};

use async_graphql::{parser::types::OperationType, Variables};
use axum::{
    body::Bytes,
    extract::{rejection::BytesRejection, ConnectInfo, FromRequestParts, RawQuery, Request, State},
    http::{header, HeaderMap, HeaderValue, Method, StatusCode},
    response::{IntoResponse, Response},
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tracing::Instrument;

use super::{
    admission::{self, Caller, RawOperation, Transport},
    apq, client_ip, edge, encoding, request_id,
    server::ConnectionSlot,
    ws, HttpState,
};
use crate::{
    api::schema::errors::{assign_codes, code_of},
    infra::{
        error::{AppError, ErrorCode},
        metrics,
    },
};

/// The body of a POST, or the parameters of a GET.
#[derive(Debug, Default, Deserialize)]
struct GraphqlParams {
    query: Option<String>,
    #[serde(rename = "operationName")]
    operation_name: Option<String>,
    variables: Option<Value>,
    extensions: Option<Value>,
}

/// GET parameters arrive as strings; `variables` and `extensions` hold JSON text.
#[derive(Debug, Default, Deserialize)]
struct GetParams {
    query: Option<String>,
    #[serde(rename = "operationName")]
    operation_name: Option<String>,
    variables: Option<String>,
    extensions: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MediaType {
    GraphqlResponseJson,
    Json,
}

impl MediaType {
    /// The client's choice; `application/json` when it states none (legacy clients).
    fn negotiate(headers: &HeaderMap) -> Self {
        let accept = headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if accept.contains("application/graphql-response+json") {
            Self::GraphqlResponseJson
        } else {
            Self::Json
        }
    }

    fn content_type(self) -> HeaderValue {
        HeaderValue::from_static(match self {
            Self::GraphqlResponseJson => "application/graphql-response+json; charset=utf-8",
            Self::Json => "application/json; charset=utf-8",
        })
    }
}

/// A request stopped before execution, with the HTTP status it answers.
struct Rejection {
    status: StatusCode,
    error: AppError,
}

impl Rejection {
    fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            status,
            error: AppError::client(code, message),
        }
    }

    /// GraphQL request errors: 400 for the new media type, 200 for legacy JSON.
    fn request_error(media: MediaType, error: AppError) -> Self {
        let status = match media {
            MediaType::GraphqlResponseJson => StatusCode::BAD_REQUEST,
            MediaType::Json => StatusCode::OK,
        };
        Self { status, error }
    }

    fn from_app_error(media: MediaType, error: AppError) -> Self {
        let status = match error.code() {
            ErrorCode::Unauthenticated => StatusCode::UNAUTHORIZED,
            ErrorCode::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::BadRequest => StatusCode::BAD_REQUEST,
            _ => return Self::request_error(media, error),
        };
        Self { status, error }
    }

    /// The error's JSON body (an operation's answer in a batch, or the whole response).
    fn body(&self, request_id: &str) -> String {
        let mut extensions = json!({ "code": self.error.code().as_str() });
        if let AppError::RateLimited { retry_after_secs } = &self.error {
            extensions["retryAfter"] = json!(retry_after_secs);
        }
        if self.error.is_hidden() {
            tracing::error!(request_id, error = %self.error, "request rejected");
            extensions["requestId"] = json!(request_id);
        }
        metrics::record_error(self.error.code());
        json!({ "errors": [{
            "message": self.error.public_message(),
            "extensions": extensions,
        }]})
        .to_string()
    }

    fn into_response(self, media: MediaType, request_id: &str) -> Response {
        let mut response = (self.status, self.body(request_id)).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, media.content_type());
        match &self.error {
            AppError::RateLimited { retry_after_secs } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_secs));
            }
            AppError::Client {
                code: ErrorCode::Unauthenticated,
                ..
            } => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer error=\"invalid_token\""),
                );
            }
            _ => {}
        }
        if self.status == StatusCode::METHOD_NOT_ALLOWED {
            headers.insert(header::ALLOW, HeaderValue::from_static("POST"));
        }
        response
    }
}

pub(crate) async fn post(
    State(http): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match parse_post_body(&headers, body) {
        Ok(Posted::Batch(batch)) => execute_batch(&http, peer, &headers, batch).await,
        Ok(Posted::One(params)) => execute(&http, peer, &headers, Method::POST, Ok(params)).await,
        Err(rejection) => execute(&http, peer, &headers, Method::POST, Err(rejection)).await,
    }
}

/// A POST body: one operation, or a batch of them (a JSON array).
enum Posted {
    One(GraphqlParams),
    Batch(Vec<GraphqlParams>),
}

/// `GET /graphql`: a WebSocket upgrade (subscriptions) or a query in the URL.
pub(crate) async fn get(
    State(http): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    RawQuery(raw_query): RawQuery,
    request: Request,
) -> Response {
    let (mut parts, _) = request.into_parts();
    if ws::is_upgrade(&parts.headers) {
        return match axum::extract::ws::WebSocketUpgrade::from_request_parts(&mut parts, &()).await
        {
            Ok(upgrade) => {
                let slot = parts.extensions.remove::<ConnectionSlot>();
                ws::upgrade(http, peer, &parts.headers, slot, upgrade)
            }
            Err(rejection) => rejection.into_response(),
        };
    }
    let params = parse_get_params(raw_query.as_deref().unwrap_or(""));
    execute(&http, peer, &parts.headers, Method::GET, params).await
}

fn parse_post_body(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Posted, Rejection> {
    let body = body.map_err(|rejection| {
        let status = rejection.status();
        let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
            "request body is too large".to_string()
        } else {
            format!("cannot read the request body: {rejection}")
        };
        Rejection::new(status, ErrorCode::BadRequest, message)
    })?;
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !content_type.starts_with("application/json")
        && !content_type.starts_with("application/graphql-response+json")
    {
        return Err(Rejection::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::BadRequest,
            "POST bodies must be application/json",
        ));
    }
    let not_graphql = |e: serde_json::Error| {
        Rejection::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::BadRequest,
            format!("the body is not a GraphQL request: {e}"),
        )
    };
    if body.trim_ascii_start().starts_with(b"[") {
        return serde_json::from_slice(&body)
            .map(Posted::Batch)
            .map_err(not_graphql);
    }
    serde_json::from_slice(&body)
        .map(Posted::One)
        .map_err(not_graphql)
}

fn parse_get_params(raw_query: &str) -> Result<GraphqlParams, Rejection> {
    let bad =
        |message: String| Rejection::new(StatusCode::BAD_REQUEST, ErrorCode::BadRequest, message);
    let params: GetParams =
        serde_urlencoded::from_str(raw_query).map_err(|e| bad(format!("bad query string: {e}")))?;
    let json_param = |name: &str, text: Option<String>| -> Result<Option<Value>, Rejection> {
        text.filter(|t| !t.is_empty())
            .map(|t| serde_json::from_str(&t).map_err(|e| bad(format!("{name} is not JSON: {e}"))))
            .transpose()
    };
    Ok(GraphqlParams {
        variables: json_param("variables", params.variables)?,
        extensions: json_param("extensions", params.extensions)?,
        query: params.query,
        operation_name: params.operation_name,
    })
}

async fn execute(
    http: &HttpState,
    peer: SocketAddr,
    headers: &HeaderMap,
    method: Method,
    params: Result<GraphqlParams, Rejection>,
) -> Response {
    let started = Instant::now();
    let media = MediaType::negotiate(headers);
    let request_id = request_id(headers);
    let mut label = admission::UNREAD;
    let incoming = Incoming {
        peer,
        headers,
        method,
    };
    let span = admission::operation_span(Transport::Http);
    let answered = run(
        http,
        &incoming,
        params,
        media,
        &request_id,
        &mut label,
        &span,
    )
    .instrument(span.clone())
    .await;
    if label == admission::UNREAD {
        span.record("engage.operation", label);
    }
    metrics::record_request(label, started.elapsed());
    edge::note_operation(label);
    let cache = match &answered {
        Ok(answer)
            if answer.public_read
                && incoming.method == Method::GET
                && !headers.contains_key(header::AUTHORIZATION) =>
        {
            public_cache(http)
        }
        _ => NO_STORE,
    };
    let response = match answered {
        Ok(answer) => respond(headers, media, answer.status, answer.body).await,
        Err(rejection) => rejection.into_response(media, &request_id),
    };
    finish(response, cache)
}

/// The access line's operation of a batched request (in `/metrics`, each operation is
/// counted under its own label).
const BATCH: &str = "batch";

/// A batched POST: see the module doc.
async fn execute_batch(
    http: &HttpState,
    peer: SocketAddr,
    headers: &HeaderMap,
    batch: Vec<GraphqlParams>,
) -> Response {
    let started = Instant::now();
    let media = MediaType::negotiate(headers);
    let request_id = request_id(headers);
    let incoming = Incoming {
        peer,
        headers,
        method: Method::POST,
    };
    edge::note_operation(BATCH);
    let response = match run_batch(http, &incoming, batch, media, &request_id).await {
        Ok(body) => respond(headers, media, StatusCode::OK, body).await,
        Err(rejection) => {
            // Refused whole, as a request refused before its document was read is counted.
            metrics::record_request(admission::UNREAD, started.elapsed());
            rejection.into_response(media, &request_id)
        }
    };
    finish(response, NO_STORE)
}

const NO_STORE: HeaderValue = HeaderValue::from_static("no-store");

/// The `Cache-Control` of a public answer, or `no-store` when the setting is 0.
fn public_cache(http: &HttpState) -> HeaderValue {
    match http.gateway.config.public_max_age_seconds {
        0 => NO_STORE,
        seconds => HeaderValue::try_from(format!("public, max-age={seconds}"))
            .expect("digits are a valid header value"),
    }
}

/// An answer's response, compressed when the client accepts it and it is worth it.
async fn respond(
    headers: &HeaderMap,
    media: MediaType,
    status: StatusCode,
    body: Vec<u8>,
) -> Response {
    let (body, coding) = encoding::compress(headers, body).await;
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, media.content_type());
    if let Some(coding) = coding {
        headers.insert(header::CONTENT_ENCODING, coding);
    }
    response
}

/// The headers every GraphQL answer over HTTP carries: whether it may be cached, and that
/// it varies with `Accept-Encoding` (a cache must not give a gzip answer to a client that
/// did not ask for one).
fn finish(mut response: Response, cache: HeaderValue) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, cache);
    headers.append(header::VARY, HeaderValue::from_static("accept-encoding"));
    response
}

/// A response body, serialised straight from async-graphql's values: building a
/// `serde_json::Value` of the whole response first cost an allocation per field.
#[derive(Serialize)]
struct Body<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a async_graphql::Value>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    errors: &'a [async_graphql::ServerError],
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    extensions: &'a BTreeMap<String, async_graphql::Value>,
}

/// Where a request came from and how.
struct Incoming<'a> {
    peer: SocketAddr,
    headers: &'a HeaderMap,
    method: Method,
}

/// One operation's answer.
struct Answer {
    status: StatusCode,
    /// Its JSON body.
    body: Vec<u8>,
    /// A query of public reads only, answered without errors.
    public_read: bool,
}

/// Identifies the caller of a request (once for a batch).
async fn identify(
    http: &HttpState,
    incoming: &Incoming<'_>,
    media: MediaType,
) -> Result<Caller, Rejection> {
    let gateway = &http.gateway;
    let ip = client_ip(incoming.headers, incoming.peer, &gateway.config);
    let authorization = incoming
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    admission::identify(gateway, ip, authorization)
        .await
        .map_err(|error| Rejection::from_app_error(media, error))
}

impl From<GraphqlParams> for RawOperation {
    fn from(params: GraphqlParams) -> Self {
        Self {
            query: params.query,
            operation_name: params.operation_name,
            variables: Variables::from_json(params.variables.unwrap_or(Value::Null)),
            extensions: params.extensions,
        }
    }
}

async fn run(
    http: &HttpState,
    incoming: &Incoming<'_>,
    params: Result<GraphqlParams, Rejection>,
    media: MediaType,
    request_id: &str,
    label: &mut &'static str,
    span: &tracing::Span,
) -> Result<Answer, Rejection> {
    let gateway = &http.gateway;
    let app_error = |error: AppError| Rejection::from_app_error(media, error);
    let caller = identify(http, incoming, media).await?;
    let params = params?;
    let admitted = admission::admit(gateway, &caller, params.into(), Transport::Http)
        .await
        .map_err(app_error)?;
    *label = admitted.label;
    admission::record(span, &admitted);
    if incoming.method == Method::GET
        && admitted
            .operation_type
            .is_some_and(|ty| ty != OperationType::Query)
    {
        return Err(Rejection::new(
            StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::BadRequest,
            "only queries may use GET; send mutations with POST",
        ));
    }

    answer(http, admitted, media, request_id).await
}

/// Runs an admitted operation.
async fn answer(
    http: &HttpState,
    admitted: admission::Admitted,
    media: MediaType,
    request_id: &str,
) -> Result<Answer, Rejection> {
    let gateway = &http.gateway;
    let public_read = admitted.public_read;
    let schema = http.schemas.for_request(&admitted.validation);
    let mut response = schema.execute(admitted.request).await;
    assign_codes(&mut response, request_id);

    let request_error =
        response.data == async_graphql::Value::Null && admission::is_request_error(&response);
    if !request_error {
        admitted.validation.passed();
    }
    if let Some((hash, query)) = admitted.register.filter(|_| !request_error) {
        if let Err(error) = apq::register(gateway, &hash, &query).await {
            tracing::warn!(request_id, %error, "could not store a persisted query");
        }
    }
    for error in &response.errors {
        let code = code_of(error).and_then(ErrorCode::parse);
        metrics::record_error(code.unwrap_or(ErrorCode::Internal));
    }

    let body = Body {
        data: (!request_error).then_some(&response.data),
        errors: &response.errors,
        extensions: &response.extensions,
    };
    let status = if request_error && media == MediaType::GraphqlResponseJson {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    let body = serde_json::to_vec(&body).map_err(|error| {
        Rejection::from_app_error(media, AppError::internal(anyhow::anyhow!(error)))
    })?;
    Ok(Answer {
        status,
        body,
        public_read: public_read && response.errors.is_empty(),
    })
}

/// A batch's operations: identified once, each admitted and charged, their mutation fields
/// counted together, then run in order; the JSON array of their answers.
async fn run_batch(
    http: &HttpState,
    incoming: &Incoming<'_>,
    batch: Vec<GraphqlParams>,
    media: MediaType,
    request_id: &str,
) -> Result<Vec<u8>, Rejection> {
    let gateway = &http.gateway;
    let max_batch = gateway.config.max_batch;
    if batch.is_empty() || batch.len() > max_batch {
        return Err(Rejection::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::BadRequest,
            format!(
                "a batch holds 1 to {max_batch} operations, this one has {}",
                batch.len()
            ),
        ));
    }
    let caller = identify(http, incoming, media).await?;
    let mut admitted = Vec::with_capacity(batch.len());
    for (index, params) in batch.into_iter().enumerate() {
        let started = Instant::now();
        let span = admission::operation_span(Transport::Http);
        let result = async {
            if index > 0 {
                admission::charge_batched(gateway, &caller)?;
            }
            admission::admit(gateway, &caller, params.into(), Transport::Http).await
        }
        .instrument(span.clone())
        .await;
        match &result {
            Ok(operation) => admission::record(&span, operation),
            Err(_) => {
                span.record("engage.operation", admission::UNREAD);
            }
        }
        admitted.push((result, span, started));
    }
    let writes: usize = admitted
        .iter()
        .filter_map(|(result, ..)| result.as_ref().ok())
        .map(|operation| operation.writes)
        .sum();
    let max_writes = gateway.config.max_mutations_per_request;
    if writes > max_writes {
        return Err(Rejection::request_error(
            media,
            AppError::client(
                ErrorCode::GraphqlValidationFailed,
                format!(
                    "a batch may run at most {max_writes} mutation fields across its \
                     operations, this one has {writes}"
                ),
            ),
        ));
    }
    let mut body = Vec::from(*b"[");
    for (index, (result, span, started)) in admitted.into_iter().enumerate() {
        if index > 0 {
            body.push(b',');
        }
        let (label, answered) = match result {
            Ok(operation) => (
                operation.label,
                answer(http, operation, media, request_id)
                    .instrument(span)
                    .await,
            ),
            Err(error) => (
                admission::UNREAD,
                Err(Rejection::from_app_error(media, error)),
            ),
        };
        match answered {
            Ok(answer) => body.extend_from_slice(&answer.body),
            Err(rejection) => body.extend_from_slice(rejection.body(request_id).as_bytes()),
        }
        metrics::record_request(label, started.elapsed());
    }
    body.push(b']');
    Ok(body)
}
