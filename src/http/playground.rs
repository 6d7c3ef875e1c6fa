//! The playground at `/`: GraphiQL with the saved example operations of
//! `playground/operations/` opened as tabs and a field for the bearer token.

use std::sync::LazyLock;

use axum::response::Html;
use serde_json::json;

include!(concat!(env!("OUT_DIR"), "/playground_operations.rs"));

static PAGE: LazyLock<String> = LazyLock::new(|| {
    let operations: Vec<_> = OPERATIONS
        .iter()
        .map(|(name, query)| json!({ "name": name, "query": query }))
        .collect();
    // `</` must not appear inside the inline script, whatever an operation contains.
    let operations = serde_json::to_string(&operations)
        .unwrap_or_default()
        .replace("</", "<\\/");
    include_str!("../../playground/index.html").replace("__ENGAGE_OPERATIONS__", &operations)
});

pub async fn page() -> Html<&'static str> {
    Html(PAGE.as_str())
}
