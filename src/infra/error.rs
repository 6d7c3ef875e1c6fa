//! The one error type of the service and the one table that maps it to `extensions.code`.
//!
//! Domain code returns [`AppError`]; resolvers return it unchanged (async-graphql keeps it as
//! the error's source) and [`crate::api::schema::errors::assign_codes`] turns it into the wire form.
//! Internal details never reach a client: they are logged with the request id instead.

use std::fmt;

use async_graphql::ErrorExtensionValues;

/// Every `extensions.code` the API can answer (SPEC §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    Unauthenticated,
    Forbidden,
    BadUserInput,
    NotFound,
    Conflict,
    RateLimited,
    SoldOut,
    AlreadyOrdered,
    NotStarted,
    Ended,
    JobExists,
    Unavailable,
    Internal,
    GraphqlParseFailed,
    GraphqlValidationFailed,
    PersistedQueryNotFound,
    /// A document that is not in the trusted manifest, where only trusted ones run.
    DocumentNotTrusted,
    BadRequest,
}

impl ErrorCode {
    /// Every code, for reading one back from its text.
    pub const ALL: [Self; 18] = [
        Self::Unauthenticated,
        Self::Forbidden,
        Self::BadUserInput,
        Self::NotFound,
        Self::Conflict,
        Self::RateLimited,
        Self::SoldOut,
        Self::AlreadyOrdered,
        Self::NotStarted,
        Self::Ended,
        Self::JobExists,
        Self::Unavailable,
        Self::Internal,
        Self::GraphqlParseFailed,
        Self::GraphqlValidationFailed,
        Self::PersistedQueryNotFound,
        Self::DocumentNotTrusted,
        Self::BadRequest,
    ];

    /// The code written as `text` (`"NOT_FOUND"`), if it is one of ours.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|code| code.as_str() == text)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unauthenticated => "UNAUTHENTICATED",
            Self::Forbidden => "FORBIDDEN",
            Self::BadUserInput => "BAD_USER_INPUT",
            Self::NotFound => "NOT_FOUND",
            Self::Conflict => "CONFLICT",
            Self::RateLimited => "RATE_LIMITED",
            Self::SoldOut => "SOLD_OUT",
            Self::AlreadyOrdered => "ALREADY_ORDERED",
            Self::NotStarted => "NOT_STARTED",
            Self::Ended => "ENDED",
            Self::JobExists => "JOB_EXISTS",
            Self::Unavailable => "UNAVAILABLE",
            Self::Internal => "INTERNAL",
            Self::GraphqlParseFailed => "GRAPHQL_PARSE_FAILED",
            Self::GraphqlValidationFailed => "GRAPHQL_VALIDATION_FAILED",
            Self::PersistedQueryNotFound => "PERSISTED_QUERY_NOT_FOUND",
            Self::DocumentNotTrusted => "DOCUMENT_NOT_TRUSTED",
            Self::BadRequest => "BAD_REQUEST",
        }
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
    pub fn client(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::Client {
            code,
            message: message.into(),
        }
    }
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::client(ErrorCode::Unauthenticated, message)
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::client(ErrorCode::Forbidden, message)
    }
    pub fn bad_input(message: impl Into<String>) -> Self {
        Self::client(ErrorCode::BadUserInput, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::client(ErrorCode::NotFound, message)
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::client(ErrorCode::Conflict, message)
    }
    pub fn internal(error: impl Into<anyhow::Error>) -> Self {
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
    pub fn public_message(&self) -> String {
        match self {
            Self::Client { message, .. } => message.clone(),
            Self::RateLimited { .. } => self.to_string(),
            Self::Unavailable(_) => "service temporarily unavailable, retry later".into(),
            Self::Internal(_) => "internal error".into(),
        }
    }

    /// Whether the details must be logged because the client does not see them.
    pub fn is_hidden(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::Internal(_))
    }

    /// Writes `code` (and `retryAfter` for rate limits) into GraphQL error extensions.
    pub fn write_extensions(&self, extensions: &mut ErrorExtensionValues) {
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
pub trait ResultExt<T> {
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
        // No wildcard: a new code fails to compile here until it is added to `ALL` too.
        let listed = |code: ErrorCode| match code {
            ErrorCode::Unauthenticated
            | ErrorCode::Forbidden
            | ErrorCode::BadUserInput
            | ErrorCode::NotFound
            | ErrorCode::Conflict
            | ErrorCode::RateLimited
            | ErrorCode::SoldOut
            | ErrorCode::AlreadyOrdered
            | ErrorCode::NotStarted
            | ErrorCode::Ended
            | ErrorCode::JobExists
            | ErrorCode::Unavailable
            | ErrorCode::Internal
            | ErrorCode::GraphqlParseFailed
            | ErrorCode::GraphqlValidationFailed
            | ErrorCode::PersistedQueryNotFound
            | ErrorCode::DocumentNotTrusted
            | ErrorCode::BadRequest => ErrorCode::ALL.contains(&code),
        };
        for code in ErrorCode::ALL {
            assert!(listed(code));
            assert_eq!(ErrorCode::parse(code.as_str()), Some(code));
        }
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
