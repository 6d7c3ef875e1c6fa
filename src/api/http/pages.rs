//! The pages served from the binary, so that a browser needs nothing but this server:
//! the playground at `/` (GraphiQL with the saved example operations of
//! `playground/operations/`, grouped by feature, and a token box), the live dashboard at
//! `/dashboard`, the delay queue's admin page at `/queues`, their scripts and the vendored GraphiQL under `/assets/`, and, only when the
//! server signs with the development secret, `POST /dev/token` for the playground's button.
//! In production the playground is served only with `ENGAGE_PLAYGROUND=true`; the
//! dashboard is a product page (a wall screen) and stays.
//!
//! The vendored files are pinned (see `playground/vendor/README.md`) and their URLs carry
//! the version, so they are cached for a year; our own scripts are small and revalidated.
//! Everything here is gzip-compressed for clients that ask: GraphiQL is 3.5 MB raw, 0.7 MB
//! compressed.

use std::sync::LazyLock;

use axum::{
    extract::{Path, State},
    http::{header, HeaderValue, StatusCode},
    middleware::map_response,
    response::{Html, IntoResponse, Response},
    routing::{get, post},
    Json, Router,
};
use serde::Deserialize;
use serde_json::json;
use tower_http::compression::CompressionLayer;

use super::{plain_error, HttpState};
use crate::infra::{auth::Role, config::Config, error::AppError};

include!(concat!(env!("OUT_DIR"), "/playground_operations.rs"));

/// The routes of this module: the playground only where `config` allows it (not in
/// production unless asked for), `/dev/token` only with the development secret.
pub(crate) fn router(config: &Config) -> Router<HttpState> {
    let mut router = Router::new()
        .route("/dashboard", get(dashboard))
        .route("/queues", get(queues))
        .route("/assets/{file}", get(asset));
    if config.playground_enabled() {
        router = router.route("/", get(playground));
    }
    if config.uses_dev_secret() {
        router = router.route("/dev/token", post(dev_token));
    }
    router
        .layer(map_response(with_security_headers))
        .layer(CompressionLayer::new())
}

/// What the pages may load and who may frame them. Everything they load comes from this
/// server (GraphiQL is vendored); the inline scripts (the saved operations, the dev-mode
/// flag) and GraphiQL's inline styles need `'unsafe-inline'`. No other site may frame them
/// (clickjacking the token box), and no URL of theirs leaks in a `Referer`.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self' 'unsafe-inline'; \
    style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; \
    connect-src 'self' ws: wss:; frame-ancestors 'none'; base-uri 'none'; object-src 'none'; \
    form-action 'self'";

/// The headers every page and asset carries.
const SECURITY_HEADERS: [(header::HeaderName, &str); 4] = [
    (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (header::REFERRER_POLICY, "no-referrer"),
    (header::X_FRAME_OPTIONS, "DENY"),
];

async fn with_security_headers(mut response: Response) -> Response {
    for (name, value) in SECURITY_HEADERS {
        response
            .headers_mut()
            .insert(name, HeaderValue::from_static(value));
    }
    response
}

/// Marks the first line of a saved operation that names its feature (the sidebar group).
const FEATURE_HEADER: &str = "# feature:";

/// `(feature, name, operation text)` of a saved operation: the feature comes from its
/// first line, `# feature: Remarks & likes`, which is not shown in the editor.
fn saved_operation(name: &str, source: &str) -> (String, String, String) {
    let (first, rest) = source.split_once('\n').unwrap_or((source, ""));
    match first.strip_prefix(FEATURE_HEADER) {
        Some(feature) => (
            feature.trim().to_string(),
            name.to_string(),
            rest.to_string(),
        ),
        None => ("Other".to_string(), name.to_string(), source.to_string()),
    }
}

static PLAYGROUND: LazyLock<String> = LazyLock::new(|| {
    let operations: Vec<_> = OPERATIONS
        .iter()
        .map(|(name, source)| {
            let (feature, name, query) = saved_operation(name, source);
            json!({ "feature": feature, "name": name, "query": query })
        })
        .collect();
    // `</` must not appear inside the inline script, whatever an operation contains.
    let operations = serde_json::to_string(&operations)
        .unwrap_or_default()
        .replace("</", "<\\/");
    include_str!("../../../playground/index.html").replace("__ENGAGE_OPERATIONS__", &operations)
});

/// The page learns whether the dev token button works from this placeholder.
const DEV_MODE_FLAG: &str = "__ENGAGE_DEV_MODE__";

async fn playground(State(http): State<HttpState>) -> Html<String> {
    let dev_mode = http.gateway.config.uses_dev_secret();
    Html(PLAYGROUND.replace(DEV_MODE_FLAG, if dev_mode { "true" } else { "false" }))
}

/// A live page (the dashboard, the queues) with the head they share.
fn live_page(page: &str) -> String {
    page.replace(
        "__ENGAGE_LIVE_HEAD__",
        include_str!("../../../playground/live-head.html"),
    )
}

static DASHBOARD: LazyLock<String> =
    LazyLock::new(|| live_page(include_str!("../../../playground/dashboard.html")));

async fn dashboard(State(http): State<HttpState>) -> Html<String> {
    let dev_mode = http.gateway.config.uses_dev_secret();
    Html(DASHBOARD.replace(DEV_MODE_FLAG, if dev_mode { "true" } else { "false" }))
}

/// The delay queue's admin page. The page itself holds nothing: every number it shows comes
/// from the API with the admin token typed into it, which the API checks on every call.
static QUEUES: LazyLock<String> =
    LazyLock::new(|| live_page(include_str!("../../../playground/queues.html")));

async fn queues() -> Html<&'static str> {
    Html(QUEUES.as_str())
}

struct Asset {
    file: &'static str,
    content_type: &'static str,
    body: &'static [u8],
    /// Pinned third-party files: the URL names the version, so caches may keep them.
    immutable: bool,
}

static ASSETS: &[Asset] = &[
    Asset {
        file: "graphiql-3.8.3.min.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../../playground/vendor/graphiql.min.js"),
        immutable: true,
    },
    Asset {
        file: "graphiql-3.8.3.min.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../../../playground/vendor/graphiql.min.css"),
        immutable: true,
    },
    Asset {
        file: "react-18.3.1.production.min.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../../playground/vendor/react.production.min.js"),
        immutable: true,
    },
    Asset {
        file: "react-dom-18.3.1.production.min.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../../playground/vendor/react-dom.production.min.js"),
        immutable: true,
    },
    Asset {
        file: "graphql-transport-ws.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../../playground/graphql-transport-ws.js"),
        immutable: false,
    },
    Asset {
        file: "dashboard.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../../playground/dashboard.js"),
        immutable: false,
    },
    Asset {
        file: "queues.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../../playground/queues.js"),
        immutable: false,
    },
];

async fn asset(Path(file): Path<String>) -> Response {
    let Some(asset) = ASSETS.iter().find(|asset| asset.file == file) else {
        return plain_error(
            StatusCode::NOT_FOUND,
            &AppError::not_found(format!("no asset {file:?}")),
        );
    };
    let cache = if asset.immutable {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static(cache)),
        ],
        asset.body,
    )
        .into_response()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DevTokenRequest {
    user_id: i64,
    #[serde(default = "default_role")]
    role: Role,
    name: Option<String>,
}

fn default_role() -> Role {
    Role::User
}

/// Lifetime of a token minted by the dev route: a working day.
const DEV_TOKEN_TTL_SECONDS: i64 = 24 * 3600;

/// Mints a token as `engage token` does. Routed only while the server signs with the
/// development secret, which anyone can read in the source, so it gives nothing away.
async fn dev_token(
    State(http): State<HttpState>,
    Json(request): Json<DevTokenRequest>,
) -> Response {
    if request.user_id <= 0 {
        return plain_error(
            StatusCode::BAD_REQUEST,
            &AppError::bad_input("userId must be a positive integer"),
        );
    }
    let token = http.gateway.tokens.mint(
        request.user_id,
        request.role,
        DEV_TOKEN_TTL_SECONDS,
        request.name,
    );
    Json(json!({ "token": token })).into_response()
}
