//! GraphQL over HTTP: `POST /graphql` (JSON body) and `GET /graphql` (queries only).
//!
//! Follows the GraphQL-over-HTTP draft: a client that accepts
//! `application/graphql-response+json` gets that media type with 4xx for request errors
//! (nothing executed, no `data`), and 200 once execution began; a client that only accepts
//! `application/json` gets 200 for every well-formed request, as legacy clients expect.
//! Either way a request that is not GraphQL at all answers 4xx with `BAD_REQUEST`.
//!
//! Every request passes [`admission`] (rates, token, size, persisted query, parse, cost)
//! before it runs; this module only speaks HTTP around it.

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
    admission::{self, RawOperation, Transport},
    apq, client_ip, edge, request_id,
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

    fn into_response(self, media: MediaType, request_id: &str) -> Response {
        let mut extensions = json!({ "code": self.error.code().as_str() });
        if let AppError::RateLimited { retry_after_secs } = &self.error {
            extensions["retryAfter"] = json!(retry_after_secs);
        }
        if self.error.is_hidden() {
            tracing::error!(request_id, error = %self.error, "request rejected");
            extensions["requestId"] = json!(request_id);
        }
        metrics::record_error(self.error.code());
        let body = json!({ "errors": [{
            "message": self.error.public_message(),
            "extensions": extensions,
        }]});
        let mut response = (self.status, body.to_string()).into_response();
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

pub async fn post(
    State(http): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let params = parse_post_body(&headers, body);
    execute(&http, peer, &headers, Method::POST, params).await
}

/// `GET /graphql`: a WebSocket upgrade (subscriptions) or a query in the URL.
pub async fn get(
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
) -> Result<GraphqlParams, Rejection> {
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
    serde_json::from_slice(&body).map_err(|e| {
        Rejection::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::BadRequest,
            format!("the body is not a GraphQL request: {e}"),
        )
    })
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
    let response = async {
        match run(
            http,
            &incoming,
            params,
            media,
            &request_id,
            &mut label,
            &span,
        )
        .await
        {
            Ok(response) => response,
            Err(rejection) => rejection.into_response(media, &request_id),
        }
    }
    .instrument(span.clone())
    .await;
    if label == admission::UNREAD {
        span.record("engage.operation", label);
    }
    metrics::record_request(label, started.elapsed());
    edge::note_operation(label);
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

async fn run(
    http: &HttpState,
    incoming: &Incoming<'_>,
    params: Result<GraphqlParams, Rejection>,
    media: MediaType,
    request_id: &str,
    label: &mut &'static str,
    span: &tracing::Span,
) -> Result<Response, Rejection> {
    let gateway = &http.gateway;
    let app_error = |error: AppError| Rejection::from_app_error(media, error);
    let ip = client_ip(incoming.headers, incoming.peer, &gateway.config);
    let authorization = incoming
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let caller = admission::identify(gateway, ip, authorization)
        .await
        .map_err(app_error)?;
    let params = params?;
    let operation = RawOperation {
        query: params.query,
        operation_name: params.operation_name,
        variables: Variables::from_json(params.variables.unwrap_or(Value::Null)),
        extensions: params.extensions,
    };
    let admitted = admission::admit(gateway, &caller, operation, Transport::Http)
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

    let mut response = http.schema.execute(admitted.request).await;
    assign_codes(&mut response, request_id);

    let request_error =
        response.data == async_graphql::Value::Null && admission::is_request_error(&response);
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
    let mut http_response = (status, body).into_response();
    http_response
        .headers_mut()
        .insert(header::CONTENT_TYPE, media.content_type());
    Ok(http_response)
}
