//! Gives every GraphQL error an `extensions.code`, in one place, for HTTP and WebSocket alike.
//!
//! - Errors of our own carry an [`AppError`] as their source: its code is written, and the
//!   message of internal and unavailable errors is replaced by a fixed sentence (the details
//!   are logged with the request id, which the client also receives as `requestId`).
//! - Parse and validation failures get the codes Apollo clients know.
//! - What remains comes from async-graphql coercing an argument during execution (an `Int`
//!   out of range, an enum value misspelled): `BAD_USER_INPUT`.

use std::sync::Arc;

use async_graphql::{
    extensions::{
        Extension, ExtensionContext, ExtensionFactory, NextParseQuery, NextRequest, NextSubscribe,
        NextValidation,
    },
    parser::types::ExecutableDocument,
    Response, ServerError, ServerResult, ValidationResult, Variables,
};
use futures::{stream::BoxStream, StreamExt};

use crate::infra::error::{AppError, ErrorCode};

/// The id of the HTTP request or WebSocket connection, for logs and error extensions.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

pub struct ErrorCodes;

impl ExtensionFactory for ErrorCodes {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(ErrorCodes)
    }
}

#[async_trait::async_trait]
impl Extension for ErrorCodes {
    async fn request(&self, ctx: &ExtensionContext<'_>, next: NextRequest<'_>) -> Response {
        let request_id = ctx.data_opt::<RequestId>().map(|id| id.0.clone());
        let mut response = next.run(ctx).await;
        for error in &mut response.errors {
            assign_code(error, request_id.as_deref());
        }
        response
    }

    fn subscribe<'s>(
        &self,
        ctx: &ExtensionContext<'_>,
        stream: BoxStream<'s, Response>,
        next: NextSubscribe<'_>,
    ) -> BoxStream<'s, Response> {
        let request_id = ctx.data_opt::<RequestId>().map(|id| id.0.clone());
        next.run(ctx, stream)
            .map(move |mut response| {
                for error in &mut response.errors {
                    assign_code(error, request_id.as_deref());
                }
                response
            })
            .boxed()
    }

    async fn parse_query(
        &self,
        ctx: &ExtensionContext<'_>,
        query: &str,
        variables: &Variables,
        next: NextParseQuery<'_>,
    ) -> ServerResult<ExecutableDocument> {
        next.run(ctx, query, variables)
            .await
            .map_err(|error| with_code(error, ErrorCode::GraphqlParseFailed))
    }

    async fn validation(
        &self,
        ctx: &ExtensionContext<'_>,
        next: NextValidation<'_>,
    ) -> Result<ValidationResult, Vec<ServerError>> {
        next.run(ctx).await.map_err(|errors| {
            errors
                .into_iter()
                .map(|error| with_code(error, ErrorCode::GraphqlValidationFailed))
                .collect()
        })
    }
}

/// The code an error carries, if any.
pub fn code_of(error: &ServerError) -> Option<&str> {
    match error.extensions.as_ref()?.get("code")? {
        async_graphql::Value::String(code) => Some(code),
        _ => None,
    }
}

pub fn with_code(mut error: ServerError, code: ErrorCode) -> ServerError {
    error
        .extensions
        .get_or_insert_with(Default::default)
        .set("code", code.as_str());
    error
}

fn assign_code(error: &mut ServerError, request_id: Option<&str>) {
    let app_error = error
        .source::<AppError>()
        .or_else(|| error.source::<Arc<AppError>>().map(|e| e.as_ref()))
        .cloned();
    if let Some(app_error) = app_error {
        if app_error.is_hidden() {
            tracing::error!(request_id, path = ?error.path, error = %app_error, "request failed");
        }
        let extensions = error.extensions.get_or_insert_with(Default::default);
        app_error.write_extensions(extensions);
        if app_error.is_hidden() {
            if let Some(id) = request_id {
                extensions.set("requestId", id);
            }
        }
        error.message = app_error.public_message();
        return;
    }
    if code_of(error).is_some() {
        return;
    }
    let code = if error.path.is_empty() {
        ErrorCode::GraphqlValidationFailed
    } else {
        ErrorCode::BadUserInput
    };
    *error = with_code(std::mem::replace(error, ServerError::new("", None)), code);
}
