//! The one error type of the service and the one table that maps it to `extensions.code`.
//!
//! Domain code returns [`AppError`]; resolvers return it unchanged (async-graphql keeps it as
//! the error's source) and [`crate::api::schema::errors::assign_codes`] turns it into the wire form.
//! Internal details never reach a client: they are logged with the request id instead.
//!
//! [`ErrorCode`] is at once the Rust list and the schema's `ErrorCode` enum (reached by
//! `Query.errorCodes`): the wire text of a code is its GraphQL name and each doc
//! comment below is its description in the SDL, so the list clients generate types from
//! cannot drift from what the service answers. A mirror type with a conversion was the
//! alternative; it would be a second list to keep in step.

use std::fmt;

use async_graphql::{EnumType, ErrorExtensionValues};

/// Every code engage answers in an error's `extensions.code`, so that clients can generate a
/// type for it and branch on it (`Query.errorCodes` lists them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, async_graphql::Enum)]
pub enum ErrorCode {
    /// No valid token where one is needed: none sent for a field that needs a viewer, or one
    /// that is malformed, expired or signed by a key this server does not trust (that refuses
    /// the whole request, HTTP 401). Sign in again.
    Unauthenticated,
    /// Signed in, but without the role a field needs (admin or service fields); also
    /// introspection on a server that has it turned off.
    Forbidden,
    /// An argument is invalid (out of range, misspelled, a date outside what is allowed);
    /// the message says which. Do not retry unchanged.
    BadUserInput,
    /// No such thing for this caller: an item, voucher, order, remark, user or dead job.
    NotFound,
    /// The thing is in a state that refuses the change: an order already paid, cancelled or
    /// expired (for anything but paying an expired one, see `PAY_WINDOW_OVER`), an item the
    /// caller already reviewed.
    Conflict,
    /// Too many requests: retry after `extensions.retryAfter` seconds (HTTP 429 with
    /// `Retry-After`). Without `retryAfter`, too many at once (connections from one address,
    /// WebSockets of one user, operations or subscriptions on one socket): retry once one
    /// ends.
    RateLimited,
    /// `seckillVoucher`: the voucher has no stock left (a cancelled or expired order may give
    /// one back).
    SoldOut,
    /// `seckillVoucher`: the caller already has an order for this voucher (one per buyer).
    AlreadyOrdered,
    /// `seckillVoucher`: the sale has not started yet; `submitScore`: the board's window
    /// (`startsAt`) has not opened.
    NotStarted,
    /// `seckillVoucher`: the sale has ended; `submitScore`, `joinBoard`: the board's window
    /// (`endsAt`) has closed.
    Ended,
    /// Scheduling a job whose id is pending already.
    JobExists,
    /// Scheduling a job with no `callbackUrl` on a topic that has no handler: nothing
    /// could run it.
    NoJobHandler,
    /// Scheduling a job whose `callbackUrl` names a host that is not on
    /// `ENGAGE_CALLBACK_HOSTS`.
    CallbackHostNotAllowed,
    /// Redis or SQL did not answer in time: retry later. Carries `extensions.requestId`.
    Unavailable,
    /// A fault of the server; carries `extensions.requestId` to find it in the logs.
    Internal,
    /// Before execution: the document is not valid GraphQL syntax (no `data`).
    GraphqlParseFailed,
    /// Before execution: the document does not fit the schema or the limits of depth,
    /// complexity and size (no `data`).
    GraphqlValidationFailed,
    /// Before execution: an Automatic Persisted Query hash this server does not hold; send
    /// the query text with it.
    PersistedQueryNotFound,
    /// Before execution: a document that is not in the trusted manifest, where only trusted
    /// ones run.
    DocumentNotTrusted,
    /// Before execution: the HTTP request or WebSocket message itself is malformed (no
    /// query, a bad body, a deadline header out of range).
    BadRequest,
    /// `repairDay`, `makeUpSignIn`: no repairs left this month (`ENGAGE_REPAIRS_PER_MONTH`,
    /// `ENGAGE_MAKEUP_PER_MONTH` a month); a new allowance starts on the first of next month.
    MakeupLimit,
    /// `payOrder`: the order's pay-by time has passed; it is expired and its stock given
    /// back. The buyer may order again while the sale lasts.
    PayWindowOver,
    /// `spendPoints`: the balance is short of the amount; nothing was spent, and the
    /// idempotency key stays free for a later try.
    InsufficientPoints,
    /// `submitScore`: the board requires joining and the user has not joined it
    /// (`joinBoard`).
    NotJoined,
    /// `joinBoard`: the board has all the entries its `maxEntries` allows.
    BoardFull,
}

impl ErrorCode {
    /// Every code, in the order of the enum.
    pub fn all() -> impl Iterator<Item = Self> {
        Self::items().iter().map(|item| item.value)
    }

    /// The code written as `text` (`"NOT_FOUND"`), if it is one of ours.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        Self::items()
            .iter()
            .find(|item| item.name == text)
            .map(|item| item.value)
    }

    /// The code's text on the wire: its name in the schema.
    pub fn as_str(self) -> &'static str {
        // The derive lists the variants in their order, without explicit discriminants.
        Self::items()[self as usize].name
    }

    /// Errors that stop a request before execution: they have no `data` in the response.
    pub fn is_request_error(self) -> bool {
        matches!(
            self,
            Self::GraphqlParseFailed
                | Self::GraphqlValidationFailed
                | Self::PersistedQueryNotFound
                | Self::DocumentNotTrusted
                | Self::BadRequest
        )
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum AppError {
    /// Something the client can act on: the message is shown as is.
    #[error("{message}")]
    Client { code: ErrorCode, message: String },

    /// Too many requests; the client may retry after the given number of seconds.
    #[error("rate limit exceeded, retry in {retry_after_secs}s")]
    RateLimited { retry_after_secs: u64 },

    /// Redis or SQL did not answer; the client may retry. The source is logged, not shown.
    #[error("a backing service is unavailable: {0}")]
    Unavailable(String),

    /// A bug or an unexpected state. The source is logged, not shown.
    #[error("internal error: {0:#}")]
    Internal(std::sync::Arc<anyhow::Error>),
}

pub type AppResult<T> = Result<T, AppError>;

impl AppError {
    pub(crate) fn client(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::Client {
            code,
            message: message.into(),
        }
    }
    pub(crate) fn unauthenticated(message: impl Into<String>) -> Self {
        Self::client(ErrorCode::Unauthenticated, message)
    }
    pub(crate) fn forbidden(message: impl Into<String>) -> Self {
        Self::client(ErrorCode::Forbidden, message)
    }
    pub(crate) fn bad_input(message: impl Into<String>) -> Self {
        Self::client(ErrorCode::BadUserInput, message)
    }
    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::client(ErrorCode::NotFound, message)
    }
    pub(crate) fn conflict(message: impl Into<String>) -> Self {
        Self::client(ErrorCode::Conflict, message)
    }
    pub(crate) fn internal(error: impl Into<anyhow::Error>) -> Self {
        Self::Internal(std::sync::Arc::new(error.into()))
    }

    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Client { code, .. } => *code,
            Self::RateLimited { .. } => ErrorCode::RateLimited,
            Self::Unavailable(_) => ErrorCode::Unavailable,
            Self::Internal(_) => ErrorCode::Internal,
        }
    }

    /// What a client may read: the message of client errors, a fixed sentence otherwise.
    pub(crate) fn public_message(&self) -> String {
        match self {
            Self::Client { message, .. } => message.clone(),
            Self::RateLimited { .. } => self.to_string(),
            Self::Unavailable(_) => "service temporarily unavailable, retry later".into(),
            Self::Internal(_) => "internal error".into(),
        }
    }

    /// Whether the details must be logged because the client does not see them.
    pub(crate) fn is_hidden(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::Internal(_))
    }

    /// Writes `code` (and `retryAfter` for rate limits) into GraphQL error extensions.
    pub(crate) fn write_extensions(&self, extensions: &mut ErrorExtensionValues) {
        extensions.set("code", self.code().as_str());
        if let Self::RateLimited { retry_after_secs } = self {
            extensions.set("retryAfter", *retry_after_secs);
        }
    }
}

impl From<sqlx::Error> for AppError {
    fn from(error: sqlx::Error) -> Self {
        match error {
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
                Self::Unavailable(format!("sql: {error}"))
            }
            sqlx::Error::RowNotFound => Self::not_found("not found"),
            // PostgreSQL refuses the NUL character in text (22021, and 22P05 for an
            // untranslatable character): whatever field carried it, the input is at fault.
            sqlx::Error::Database(ref db)
                if matches!(db.code().as_deref(), Some("22021" | "22P05")) =>
            {
                Self::bad_input("text must not contain the NUL character (U+0000)")
            }
            other => Self::internal(anyhow::Error::new(other).context("sql")),
        }
    }
}

impl From<redis::RedisError> for AppError {
    fn from(error: redis::RedisError) -> Self {
        if error.is_io_error()
            || error.is_connection_dropped()
            || error.is_connection_refusal()
            || error.is_timeout()
            || error.is_cluster_error()
            || error.kind() == redis::ErrorKind::ClusterConnectionNotFound
            || redis_refuses_for_now(&error)
        {
            Self::Unavailable(format!("redis: {error}"))
        } else {
            Self::internal(anyhow::Error::new(error).context("redis"))
        }
    }
}

/// Answers of a Redis that is up but cannot serve the command for the moment: loading its
/// data after a restart (`LOADING`, seconds with a large AOF), a failover in progress
/// (`TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `READONLY` from a demoted primary), full under
/// `noeviction` (`OOM`) or blocked by a script past its time limit (`BUSY`). The client
/// should retry later, so they answer UNAVAILABLE, not INTERNAL.
fn redis_refuses_for_now(error: &redis::RedisError) -> bool {
    matches!(error.retry_method(), redis::RetryMethod::WaitAndRetry)
        || matches!(
            error.code(),
            Some(
                "LOADING" | "TRYAGAIN" | "CLUSTERDOWN" | "MASTERDOWN" | "READONLY" | "OOM" | "BUSY"
            )
        )
}

impl From<bb8::RunError<redis::RedisError>> for AppError {
    fn from(error: bb8::RunError<redis::RedisError>) -> Self {
        match error {
            bb8::RunError::User(error) => error.into(),
            bb8::RunError::TimedOut => Self::Unavailable("redis: pool timed out".into()),
        }
    }
}

/// Turns a unique-constraint violation into a client error, as realworld-axum-sqlx does,
/// instead of letting it become an internal error.
pub(crate) trait ResultExt<T> {
    fn on_unique_violation(self, error: impl FnOnce() -> AppError) -> AppResult<T>;
}

impl<T> ResultExt<T> for Result<T, sqlx::Error> {
    fn on_unique_violation(self, error: impl FnOnce() -> AppError) -> AppResult<T> {
        self.map_err(|e| match &e {
            sqlx::Error::Database(db) if db.is_unique_violation() => error(),
            _ => e.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_reads_back_from_its_text_and_nothing_else_does() {
        let codes: Vec<ErrorCode> = ErrorCode::all().collect();
        // `as_str` indexes the derive's items by discriminant: each must land on itself.
        for (index, code) in codes.iter().enumerate() {
            assert_eq!(*code as usize, index);
            assert_eq!(ErrorCode::parse(code.as_str()), Some(*code));
        }
        assert_eq!(ErrorCode::MakeupLimit.as_str(), "MAKEUP_LIMIT");
        assert_eq!(ErrorCode::PayWindowOver.as_str(), "PAY_WINDOW_OVER");
        assert_eq!(
            ErrorCode::GraphqlParseFailed.as_str(),
            "GRAPHQL_PARSE_FAILED"
        );
        assert_eq!(ErrorCode::parse("MADE_UP"), None);
        assert_eq!(ErrorCode::parse("not_found"), None);
    }

    fn redis_reply_error(reply: &str) -> redis::RedisError {
        redis::parse_redis_value(reply.as_bytes())
            .and_then(redis::Value::extract_error)
            .expect_err("an error reply")
    }

    #[test]
    fn a_redis_that_cannot_serve_for_now_is_unavailable_and_a_bad_command_is_internal() {
        for reply in [
            "-LOADING Redis is loading the dataset in memory\r\n",
            "-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
            "-MASTERDOWN Link with MASTER is down\r\n",
            "-READONLY You can't write against a read only replica.\r\n",
            "-OOM command not allowed when used memory > 'maxmemory'.\r\n",
            "-BUSY Redis is busy running a script.\r\n",
        ] {
            let error = AppError::from(redis_reply_error(reply));
            assert!(
                matches!(error, AppError::Unavailable(_)),
                "{reply}: {error:?}"
            );
        }
        let error = AppError::from(redis_reply_error("-ERR unknown command 'NOPE'\r\n"));
        assert_eq!(error.code(), ErrorCode::Internal);
    }
}
