//! One admission path: every HTTP request (POST, GET, persisted queries) and every operation
//! on a WebSocket (either protocol) passes through here before anything runs.
//!
//! - [`identify`]: the caller of a request or of a WebSocket's `connection_init`: per-IP
//!   rate, token, per-user rate, first sight of the user.
//! - [`admit`]: one operation: on a WebSocket, the token must still be valid ([`unexpired`],
//!   checked at `connection_init` too) and the operation counts against the rates like a
//!   request; then the query text's size
//!   (`ENGAGE_MAX_QUERY_BYTES`, trusted documents excepted), the trusted document or
//!   persisted query, the one [`document::parse`] with its nesting bound and its caps on
//!   selections, aliases and variables, and the cost: the document's own (its size, see
//!   `document.rs`; 1 for ordinary operations), every mutation field executed, and a
//!   persisted-query registration count against the rates, and a request may carry at most
//!   `ENGAGE_MAX_MUTATIONS_PER_REQUEST` mutation fields.
//! - [`charge_batched`]: each operation of a batched HTTP request after its first, which
//!   then passes [`admit`] like any other.
//!
//! Depth and complexity limits are applied by the schema during validation, which every
//! admitted request goes through. The order is cheapest first, so a flood is refused before
//! it costs a token verification or a parse.

use std::{
    collections::HashSet,
    net::IpAddr,
    sync::{Arc, LazyLock},
    time::Duration,
};

use async_graphql::{
    parser::types::{DocumentOperations, OperationType},
    Variables,
};
use serde_json::Value;

use super::{apq, document, validated::Validation};
use crate::{
    api::{http::Gateway, schema::errors::code_of},
    infra::{
        auth::{Subject, Verified, Viewer},
        cache::TtlCache,
        error::{AppError, AppResult, ErrorCode},
        telemetry,
    },
};

/// The transports, for the rules that differ between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    /// POST and GET (the HTTP layer refuses anything but queries over GET, with 405).
    Http,
    WebSocket,
}

/// Who is calling, once identified.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    pub(crate) ip: IpAddr,
    pub(crate) viewer: Option<Viewer>,
    /// When the token stops authorising (seconds since the Unix epoch).
    pub(crate) token_expires_at: Option<i64>,
}

/// An operation as a transport received it.
#[derive(Debug, Default)]
pub(crate) struct RawOperation {
    pub(crate) query: Option<String>,
    pub(crate) operation_name: Option<String>,
    pub(crate) variables: Variables,
    pub(crate) extensions: Option<Value>,
}

/// An operation that may run.
pub(crate) struct Admitted {
    pub(crate) request: async_graphql::Request,
    /// The operation's type, when the document names one the request can run (GET may
    /// only run queries).
    pub(crate) operation_type: Option<OperationType>,
    /// Its metrics label: the name of its first root field, a name of the schema.
    pub(crate) label: &'static str,
    /// The name the document gives its only operation (for its span, when the request
    /// does not name it).
    pub(crate) document_name: Option<async_graphql::Name>,
    /// A persisted query to store, as (hash, document), once the operation has run without
    /// a request error.
    pub(crate) register: Option<(String, String)>,
    /// The mutation fields it runs (a batch's together count against
    /// `ENGAGE_MAX_MUTATIONS_PER_REQUEST`).
    pub(crate) writes: usize,
    /// A query of public reads only ([`crate::api::schema::PUBLIC_READS`]): asked
    /// anonymously, its answer is everyone's.
    pub(crate) public_read: bool,
    /// Whether a request of its document and kinds of values passed validation before.
    pub(crate) validation: Validation,
}

/// The label of requests refused before their document was read.
pub(crate) const UNREAD: &str = "unread";

/// The span of one operation (target `engage::graphql`, DEBUG: off unless traces are
/// exported). An HTTP request's is a child of the request's span; a WebSocket's operations
/// each begin a trace of their own (a socket lives for hours). [`record`] fills in what
/// admission learnt.
pub(crate) fn operation_span(transport: Transport) -> tracing::Span {
    use tracing::field::Empty;
    match transport {
        Transport::Http => tracing::debug_span!(
            target: telemetry::GRAPHQL,
            "graphql.operation",
            engage.transport = "http",
            engage.operation = Empty,
            graphql.operation.type = Empty,
            graphql.operation.name = Empty,
        ),
        Transport::WebSocket => tracing::debug_span!(
            target: telemetry::GRAPHQL,
            parent: None,
            "graphql.operation",
            engage.transport = "websocket",
            engage.operation = Empty,
            graphql.operation.type = Empty,
            graphql.operation.name = Empty,
        ),
    }
}

/// Records an admitted operation on its span: its label (as in `/metrics`), its type and
/// the name the client gave it.
pub(crate) fn record(span: &tracing::Span, admitted: &Admitted) {
    if span.is_disabled() {
        return;
    }
    span.record("engage.operation", admitted.label);
    if let Some(ty) = admitted.operation_type {
        span.record("graphql.operation.type", tracing::field::display(ty));
    }
    let name = admitted.request.operation_name.as_deref();
    if let Some(name) = name.or(admitted.document_name.as_deref()) {
        span.record("graphql.operation.name", name);
    }
}

/// Identifies the caller of an HTTP request or of a WebSocket `connection_init`.
pub(crate) async fn identify(
    gateway: &Gateway,
    ip: IpAddr,
    authorization: Option<&str>,
) -> AppResult<Caller> {
    gateway.rate_limits.check_ip(ip)?;
    let verified = gateway.tokens.verify_bearer(authorization).await?;
    let Some(Verified {
        subject,
        role,
        claims,
    }) = verified
    else {
        return Ok(Caller {
            ip,
            viewer: None,
            token_expires_at: None,
        });
    };
    let user_id = match subject {
        Subject::User(user_id) => user_id,
        Subject::External { issuer, subject } => {
            gateway.users.user_for_subject(&issuer, &subject).await?
        }
    };
    gateway.rate_limits.check_user(user_id)?;
    gateway
        .users
        .ensure(user_id, &claims, gateway.infra.clock.now_ms())
        .await;
    Ok(Caller {
        ip,
        viewer: Some(Viewer {
            user_id,
            role,
            zone: claims.zoneinfo.as_deref().and_then(|z| z.parse().ok()),
        }),
        token_expires_at: Some(claims.exp),
    })
}

/// Refuses a caller whose token's expiry has passed. A request is let through within the
/// verification's leeway for clock skew, but a WebSocket lives on after its token: one
/// whose token expired already is refused at `connection_init`, not acknowledged only to
/// be closed a moment later, and each of its operations is checked again.
pub(crate) fn unexpired(caller: &Caller) -> AppResult<()> {
    if caller
        .token_expires_at
        .is_some_and(|exp| exp <= chrono::Utc::now().timestamp())
    {
        return Err(AppError::unauthenticated("token expired"));
    }
    Ok(())
}

/// Admits one operation of an identified caller.
pub(crate) async fn admit(
    gateway: &Gateway,
    caller: &Caller,
    operation: RawOperation,
    transport: Transport,
) -> AppResult<Admitted> {
    if transport == Transport::WebSocket {
        unexpired(caller)?;
        charge(gateway, caller, 1)?;
    }
    let max_bytes = gateway.config.max_query_bytes;
    if operation.query.as_ref().is_some_and(|q| {
        // Hashing a long text is cheaper than refusing a document the apps were built with.
        q.len() > max_bytes && gateway.trusted.by_text(q).is_none()
    }) {
        return Err(AppError::client(
            ErrorCode::BadRequest,
            format!("the query is longer than {max_bytes} bytes"),
        ));
    }
    let resolved = apq::resolve(gateway, operation.query, operation.extensions.as_ref()).await?;
    let parsed = match resolved.trusted {
        Some(parsed) => parsed,
        None => parse_cached(&resolved.query)?,
    };
    let shape = parsed.operation(operation.operation_name.as_deref());
    let writes = match shape {
        Some(shape) if shape.ty == OperationType::Mutation => shape.root_fields,
        _ => 0,
    };
    let max_writes = gateway.config.max_mutations_per_request;
    if writes > max_writes {
        return Err(AppError::client(
            ErrorCode::GraphqlValidationFailed,
            format!(
                "a request may run at most {max_writes} mutation fields, this one has {writes}"
            ),
        ));
    }
    // A registration past the address's budget of stored bytes is not made: the query
    // runs, and its client goes on sending the text, as for a text too long to store.
    let register = resolved.register.filter(|_| {
        let bytes = resolved.query.len() + apq::ENTRY_OVERHEAD_BYTES;
        let allowed = gateway.rate_limits.may_register(caller.ip, bytes);
        if !allowed {
            metrics::counter!("engage_persisted_queries_not_stored_total").increment(1);
        }
        allowed
    });
    // The request itself paid for one: the document pays the rest of its cost (its size
    // included), each further write its own, and a registration one more, as the one write
    // to Redis it is. What registrations may store is bounded by the address's byte budget
    // above, so a client's first page load, registering its few documents at once, stays
    // well within its rate.
    let registration = usize::from(register.is_some());
    let extra = (parsed.cost as usize - 1) + writes.saturating_sub(1) + registration;
    if extra > 0 {
        charge(gateway, caller, u32::try_from(extra).unwrap_or(u32::MAX))?;
    }

    let root = shape.and_then(|s| s.first_root_field.as_deref());
    if matches!(root, Some("__schema" | "__type")) && !gateway.config.introspection_enabled() {
        // The schema would answer `null`; a client deserves to know why.
        return Err(AppError::client(
            ErrorCode::Forbidden,
            "introspection is turned off on this server",
        ));
    }
    let label = root.map_or("other", known_label);
    let document_name = match &parsed.document.operations {
        DocumentOperations::Multiple(operations) if operations.len() == 1 => {
            operations.keys().next().cloned()
        }
        _ => None,
    };
    let register = register.map(|hash| (hash, resolved.query.clone()));
    let validation = Validation::of(
        parsed.clone(),
        operation.operation_name.as_deref(),
        &operation.variables,
    );
    let mut request = async_graphql::Request::new(resolved.query).variables(operation.variables);
    if let Some(name) = operation.operation_name {
        request = request.operation_name(name);
    }
    if let Some(viewer) = &caller.viewer {
        request = request.data::<Viewer>(viewer.clone());
    }
    request.set_parsed_query(parsed.document.clone());
    Ok(Admitted {
        request,
        operation_type: shape.map(|s| s.ty),
        label,
        document_name,
        register,
        writes,
        public_read: shape.is_some_and(|s| s.ty == OperationType::Query && s.public_reads_only),
        validation,
    })
}

/// Whether a response is a parse or validation failure: nothing ran, so there is no `data`
/// to show and no persisted query to store.
pub(crate) fn is_request_error(response: &async_graphql::Response) -> bool {
    response.errors.iter().any(|e| {
        code_of(e).is_some_and(|code| {
            code == ErrorCode::GraphqlParseFailed.as_str()
                || code == ErrorCode::GraphqlValidationFailed.as_str()
        })
    })
}

/// Charges an operation of a batch after its first what a request pays: the first rode on
/// the request's own charge in [`identify`], each further one is a request of its own.
pub(crate) fn charge_batched(gateway: &Gateway, caller: &Caller) -> AppResult<()> {
    charge(gateway, caller, 1)
}

/// Charges `cost` requests against the caller's per-IP and per-user rates.
fn charge(gateway: &Gateway, caller: &Caller, cost: u32) -> AppResult<()> {
    gateway.rate_limits.charge_ip(caller.ip, cost)?;
    if let Some(viewer) = &caller.viewer {
        gateway.rate_limits.charge_user(viewer.user_id, cost)?;
    }
    Ok(())
}

/// Parsed documents of the queries clients repeat (every client sends the same few
/// operations): parsing was the largest single cost of a `likeRemark` after the network.
/// Only short documents are kept, so the cache stays a few MB whatever clients send.
static PARSED: LazyLock<TtlCache<String, document::Parsed>> =
    LazyLock::new(|| TtlCache::new(Duration::from_secs(600), 512));
const CACHED_QUERY_MAX_BYTES: usize = 4096;

fn parse_cached(query: &str) -> AppResult<Arc<document::Parsed>> {
    if let Some(parsed) = PARSED.get(query) {
        return Ok(parsed);
    }
    let parsed = Arc::new(document::parse(query)?);
    if query.len() <= CACHED_QUERY_MAX_BYTES {
        PARSED.insert(query.to_string(), parsed.clone());
    }
    Ok(parsed)
}

/// Every name the schema defines: the only values a metrics label may take besides a few
/// fixed words, so that clients cannot grow `/metrics` by inventing names.
static SCHEMA_NAMES: LazyLock<HashSet<&'static str>> = LazyLock::new(|| {
    crate::api::schema::build(None, async_graphql::ValidationMode::Strict)
        .names()
        .into_iter()
        .map(|name| &*Box::leak(name.into_boxed_str()))
        .collect()
});

fn known_label(field: &str) -> &'static str {
    if field.starts_with("__") {
        return "introspection";
    }
    SCHEMA_NAMES.get(field).copied().unwrap_or("other")
}
