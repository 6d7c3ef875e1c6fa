//! Automatic Persisted Queries (the Apollo protocol), stored in Redis so that a query
//! registered through one instance is found by all of them.
//!
//! A client first sends only `extensions.persistedQuery.sha256Hash`; if the query is unknown
//! it gets `PERSISTED_QUERY_NOT_FOUND` and sends the text with the hash, which is stored once
//! it has parsed and validated (so no garbage is kept).
//!
//! Anyone may register, so the store is bounded: a text longer than
//! `ENGAGE_APQ_MAX_QUERY_BYTES` runs but is not stored (its hash alone keeps answering
//! `PERSISTED_QUERY_NOT_FOUND`, and the client goes on sending the text), and all stored
//! texts together stay within `ENGAGE_APQ_MAX_BYTES`: registering evicts the least recently
//! used, and a lookup marks its query used (`lua/apq_register.lua`, `lua/apq_lookup.lua`).
//! A query unused for a week is forgotten at the next registration. Rejected: a key per
//! query with a TTL (as before), which bounds nothing while registrations keep coming.
//!
//! The LRU alone would let one address push everyone's queries out in seconds, so each
//! client IP may register at most `ENGAGE_APQ_REGISTER_BYTES_PER_IP_PER_MINUTE` (counted as
//! the store counts them; `rate_limit.rs`): past it a query runs but is not stored. Churning
//! the default 2 MiB then takes one address an hour, and a query in use is touched by every
//! lookup, so it is the last to go.
//!
//! Trusted documents (`trusted.rs`) are answered before the store: by hash or by text, never
//! registered, never evicted. With `ENGAGE_TRUSTED_DOCUMENTS_ONLY` the store is not used at
//! all.

use std::sync::Arc;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::document::Parsed;
use crate::{
    api::http::Gateway,
    infra::{
        error::{AppError, ErrorCode},
        redis::scripts::{ApqLookup, ApqLookupArgs, ApqRegister, ApqRegisterArgs, Replies},
    },
};

/// A stored query unused this long is forgotten.
const UNUSED_FOR_MS: u64 = 7 * 24 * 3600 * 1000;

/// What a stored query counts besides its text, as `lua/apq_register.lua` counts it.
pub(crate) const ENTRY_OVERHEAD_BYTES: usize = 256;

/// The query to run, and the hash to register once it proves valid (only for texts the
/// store takes, so that admission charges a registration only when one will happen).
pub(crate) struct Resolved {
    pub(crate) query: String,
    pub(crate) register: Option<String>,
    /// The parse of a trusted document, done at start.
    pub(crate) trusted: Option<Arc<Parsed>>,
}

fn not_trusted() -> AppError {
    AppError::client(
        ErrorCode::DocumentNotTrusted,
        "this server runs only its trusted documents, and this is not one of them",
    )
}

fn not_found() -> AppError {
    AppError::client(ErrorCode::PersistedQueryNotFound, "PersistedQueryNotFound")
}

pub(crate) async fn resolve(
    gateway: &Gateway,
    query: Option<String>,
    extensions: Option<&Value>,
) -> Result<Resolved, AppError> {
    let trusted = &gateway.trusted;
    let Some(persisted) = extensions.and_then(|e| e.get("persistedQuery")) else {
        let query = query
            .filter(|q| !q.trim().is_empty())
            .ok_or_else(|| AppError::client(ErrorCode::BadRequest, "the request has no query"))?;
        let listed = trusted.by_text(&query).map(|doc| doc.parsed.clone());
        if listed.is_none() && trusted.only {
            return Err(not_trusted());
        }
        return Ok(Resolved {
            query,
            register: None,
            trusted: listed,
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

    if let Some(query) = &query {
        if hex::encode(Sha256::digest(query.as_bytes())) != hash {
            return Err(AppError::client(
                ErrorCode::BadRequest,
                "provided sha does not match query",
            ));
        }
    }
    if let Some(doc) = trusted.by_hash(&hash) {
        return Ok(Resolved {
            query: doc.text.to_string(),
            register: None,
            trusted: Some(doc.parsed.clone()),
        });
    }
    if trusted.only {
        return Err(if query.is_some() {
            not_trusted()
        } else {
            not_found()
        });
    }

    match query {
        Some(query) => {
            // A text over the size cap runs but is never stored: nothing to register.
            let register = (query.len() <= gateway.config.apq_max_query_bytes).then_some(hash);
            Ok(Resolved {
                query,
                register,
                trusted: None,
            })
        }
        None => {
            let documents = ApqLookup {
                documents: gateway.infra.keys.persisted_queries(),
                recency: gateway.infra.keys.persisted_query_recency(),
            };
            let args = ApqLookupArgs {
                hash: &hash,
                now_ms: gateway.infra.clock.now_ms(),
            };
            let stored = gateway.infra.scripts().call(&documents, &args).await?;
            stored
                .map(|query| Resolved {
                    query,
                    register: None,
                    trusted: None,
                })
                .ok_or_else(not_found)
        }
    }
}

/// The query text, or nil when it is not stored.
impl Replies for ApqLookup {
    type Reply = Option<String>;
}

/// `{ status, documents evicted }`.
impl Replies for ApqRegister {
    type Reply = (i64, u64);
}

/// Stores a query that has run under its hash (one that [`resolve`] marked for it); older
/// queries may be evicted to make room.
pub(crate) async fn register(gateway: &Gateway, hash: &str, query: &str) -> Result<(), AppError> {
    let config = &gateway.config;
    let keys = &gateway.infra.keys;
    let documents = ApqRegister {
        documents: keys.persisted_queries(),
        recency: keys.persisted_query_recency(),
        bytes: keys.persisted_query_bytes(),
    };
    let args = ApqRegisterArgs {
        hash,
        query,
        now_ms: gateway.infra.clock.now_ms(),
        budget: config.apq_max_bytes,
        unused_for_ms: UNUSED_FOR_MS,
    };
    let (_stored, evicted) = gateway.infra.scripts().call(&documents, &args).await?;
    if evicted > 0 {
        metrics::counter!("engage_persisted_queries_evicted_total").increment(evicted);
    }
    Ok(())
}
