//! Automatic Persisted Queries (the Apollo protocol), stored in Redis so that a query
//! registered through one instance is found by all of them.
//!
//! A client first sends only `extensions.persistedQuery.sha256Hash`; if the query is unknown
//! it gets `PERSISTED_QUERY_NOT_FOUND` and sends the text with the hash, which is stored once
//! it has parsed and validated (so no garbage is kept). Entries expire when unused for a week.

use redis::AsyncCommands;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::{
    app::AppState,
    error::{AppError, ErrorCode},
};

const TTL_SECONDS: u64 = 7 * 24 * 3600;

/// The query to run, and the hash to register once it proves valid.
pub struct Resolved {
    pub query: String,
    pub register: Option<String>,
}

pub async fn resolve(
    state: &AppState,
    query: Option<String>,
    extensions: Option<&Value>,
) -> Result<Resolved, AppError> {
    let Some(persisted) = extensions.and_then(|e| e.get("persistedQuery")) else {
        let query = query
            .filter(|q| !q.trim().is_empty())
            .ok_or_else(|| AppError::client(ErrorCode::BadRequest, "the request has no query"))?;
        return Ok(Resolved {
            query,
            register: None,
        });
    };
    if persisted.get("version").and_then(Value::as_i64) != Some(1) {
        return Err(AppError::client(
            ErrorCode::BadRequest,
            "persisted query version must be 1",
        ));
    }
    let hash = persisted
        .get("sha256Hash")
        .and_then(Value::as_str)
        .filter(|h| h.len() == 64 && h.chars().all(|c| c.is_ascii_hexdigit()))
        .ok_or_else(|| {
            AppError::client(
                ErrorCode::BadRequest,
                "persistedQuery.sha256Hash must be 64 hex digits",
            )
        })?
        .to_ascii_lowercase();

    match query {
        Some(query) => {
            if hex::encode(Sha256::digest(query.as_bytes())) != hash {
                return Err(AppError::client(
                    ErrorCode::BadRequest,
                    "provided sha does not match query",
                ));
            }
            Ok(Resolved {
                query,
                register: Some(hash),
            })
        }
        None => {
            let mut conn = state.redis.get().await?;
            let stored: Option<String> = redis::cmd("GETEX")
                .arg(state.keys.persisted_query(&hash))
                .arg("EX")
                .arg(TTL_SECONDS)
                .query_async(&mut *conn)
                .await?;
            stored
                .map(|query| Resolved {
                    query,
                    register: None,
                })
                .ok_or_else(|| {
                    AppError::client(ErrorCode::PersistedQueryNotFound, "PersistedQueryNotFound")
                })
        }
    }
}

/// Stores a query that has run, under its hash.
pub async fn register(state: &AppState, hash: &str, query: &str) -> Result<(), AppError> {
    let mut conn = state.redis.get().await?;
    let () = conn
        .set_ex(state.keys.persisted_query(hash), query, TTL_SECONDS)
        .await?;
    Ok(())
}
