//! Gives every GraphQL error an `extensions.code`, in one place, for HTTP and WebSocket alike:
//! each transport hands every response it sends to [`assign_codes`].
//!
//! - Errors of our own carry an [`AppError`] as their source: its code is written, and the
//!   message of internal and unavailable errors is replaced by a fixed sentence (the details
//!   are logged with the request id, which the client also receives as `requestId`).
//! - Errors without a path are the document's (admission parsed it, so they come from
//!   validation: unknown fields, bad variables, depth and complexity): Apollo's
//!   `GRAPHQL_VALIDATION_FAILED`.
//! - What remains comes from async-graphql coercing an argument during execution (an `Int`
//!   out of range, an enum value misspelled): `BAD_USER_INPUT`.
//!
//! Why not an async-graphql extension: with any extension installed, async-graphql resolves
//! every field and list item through its extension chain (a registry lookup, type names
//! formatted, a boxed future each), which was most of the cost of a page of 20 remarks.

use std::sync::Arc;

use async_graphql::{Response, ServerError};

use crate::infra::error::{AppError, ErrorCode};

/// Gives each error of a response its code (see the module's documentation).
pub(crate) fn assign_codes(response: &mut Response, request_id: &str) {
    for error in &mut response.errors {
        assign_code(error, request_id);
    }
}

/// The code an error carries, if any.
pub(crate) fn code_of(error: &ServerError) -> Option<&str> {
    match error.extensions.as_ref()?.get("code")? {
        async_graphql::Value::String(code) => Some(code),
        _ => None,
    }
}

pub(crate) fn with_code(mut error: ServerError, code: ErrorCode) -> ServerError {
    error
        .extensions
        .get_or_insert_with(Default::default)
        .set("code", code.as_str());
    error
}

fn assign_code(error: &mut ServerError, request_id: &str) {
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
            extensions.set("requestId", request_id);
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
