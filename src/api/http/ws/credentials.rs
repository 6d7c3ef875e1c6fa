//! The credentials a `connection_init` payload carries: the one place that reads them.
//!
//! Accepted, as `Bearer <token>`:
//! - `{"Authorization": …}` (the key in any case: `authorization` too), what the
//!   `graphql-ws` library's `connectionParams` usually hold;
//! - `{"headers": {"Authorization": …}}` (any case too), what Hasura and Apollo clients send.
//!
//! No payload, `null`, `{}`, or an `Authorization` that is `null` or empty is an anonymous
//! connection. Anything else that looks like a credential is refused rather than ignored: a
//! client that sent a token and got an anonymous connection would find out only from its
//! answers, far from the cause. So a bare token (no `Bearer `), a value that is not a
//! string, a key that names a credential in another way (`token`, `authToken`, `jwt`,
//! `accessToken`, `x-api-key`…), and two `Authorization`s that disagree are each a bad
//! request. Keys that carry no credential (`clientName`, `locale`, other headers) are
//! ignored, as the protocol leaves the payload to the server.

use serde_json::{Map, Value};

use crate::infra::error::{AppError, ErrorCode};

/// The shapes accepted, as a refusal names them (with its reason, within the 123 bytes a
/// close frame's reason holds).
const ACCEPTED: &str =
    r#"use {"Authorization":"Bearer <token>"} or {"headers":{"Authorization":…}}"#;

/// The `Authorization` value (`Bearer <token>`) a `connection_init` payload carries, `None`
/// for an anonymous connection; an error (`BAD_REQUEST`) for a credential in another shape.
pub(crate) fn authorization_in(payload: &Value) -> Result<Option<String>, AppError> {
    let object = match payload {
        Value::Null => return Ok(None),
        Value::Object(object) => object,
        _ => return Err(refusal("the payload is not an object")),
    };
    let top = authorization_among(object)?;
    let headers = match object
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case("headers"))
    {
        None | Some((_, Value::Null)) => None,
        Some((_, Value::Object(headers))) => authorization_among(headers)?,
        Some(_) => return Err(refusal("`headers` is not an object")),
    };
    match (top, headers) {
        (Some(top), Some(headers)) if top != headers => {
            Err(refusal("two Authorization values disagree"))
        }
        (top, headers) => Ok(top.or(headers)),
    }
}

/// The `Authorization` among one object's keys (the payload's own, or its `headers`).
fn authorization_among(object: &Map<String, Value>) -> Result<Option<String>, AppError> {
    let mut found: Option<String> = None;
    for (key, value) in object {
        if key.eq_ignore_ascii_case("authorization") {
            let value = match value {
                Value::Null => continue,
                Value::String(value) if value.trim().is_empty() => continue,
                Value::String(value) => value,
                _ => return Err(refusal(&format!("`{key}` is not a string"))),
            };
            let Some(token) = bearer_token(value) else {
                return Err(refusal(&format!("`{key}` is not Bearer <token>")));
            };
            let value = format!("Bearer {token}");
            if found.as_ref().is_some_and(|earlier| *earlier != value) {
                return Err(refusal("two Authorization values disagree"));
            }
            found = Some(value);
        } else if names_a_credential(key) {
            return Err(refusal(&format!("`{}` is not read", shown(key))));
        }
    }
    Ok(found)
}

/// The token of `Bearer <token>`, the scheme in any case as HTTP allows. A bare token is
/// refused, as in the HTTP header: accepting it here only would make the two transports
/// disagree, and a value in another scheme would be taken for a token.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Whether a key's name says it carries a credential (compared without case, `-` or `_`):
/// such a key is a client's mistake to point out, not a key to ignore.
fn names_a_credential(key: &str) -> bool {
    let name: String = key
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    name.starts_with("auth")
        || [
            "token",
            "jwt",
            "bearer",
            "apikey",
            "password",
            "secret",
            "credential",
            "cookie",
        ]
        .iter()
        .any(|word| name.contains(word))
}

fn refusal(why: &str) -> AppError {
    AppError::client(ErrorCode::BadRequest, format!("{why}; {ACCEPTED}"))
}

/// A client's key as a refusal quotes it: its first 20 characters.
fn shown(key: &str) -> &str {
    key.char_indices()
        .nth(20)
        .map_or(key, |(end, _)| &key[..end])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn read(payload: Value) -> Result<Option<String>, ErrorCode> {
        authorization_in(&payload).map_err(|error| error.code())
    }

    #[test]
    fn the_accepted_shapes_give_the_bearer_value() {
        let bearer = Some("Bearer abc".to_string());
        for payload in [
            json!({ "Authorization": "Bearer abc" }),
            json!({ "authorization": "Bearer abc" }),
            json!({ "headers": { "Authorization": "Bearer abc" } }),
            json!({ "headers": { "authorization": "Bearer abc", "X-Client": "web" } }),
            json!({ "Authorization": "Bearer abc", "headers": { "authorization": "Bearer abc" } }),
            json!({ "Authorization": "Bearer abc", "clientName": "web", "locale": "fr" }),
            json!({ "Authorization": " BEARER  abc " }),
            json!({ "Authorization": "bearer abc", "headers": { "authorization": "Bearer abc" } }),
        ] {
            assert_eq!(read(payload.clone()), Ok(bearer.clone()), "{payload}");
        }
    }

    #[test]
    fn no_credential_is_anonymous() {
        for payload in [
            Value::Null,
            json!({}),
            json!({ "clientName": "web" }),
            json!({ "Authorization": null }),
            json!({ "Authorization": "" }),
            json!({ "headers": {} }),
            json!({ "headers": null }),
        ] {
            assert_eq!(read(payload.clone()), Ok(None), "{payload}");
        }
    }

    #[test]
    fn any_other_credential_is_a_bad_request() {
        for payload in [
            json!("Bearer abc"),
            json!({ "token": "abc" }),
            json!({ "authToken": "abc" }),
            json!({ "accessToken": "abc" }),
            json!({ "jwt": "abc" }),
            json!({ "x-api-key": "abc" }),
            json!({ "Authorization": 42 }),
            json!({ "Authorization": "abc" }),
            json!({ "Authorization": "Bearer " }),
            json!({ "Authorization": "Basic YTpi" }),
            json!({ "headers": "Bearer abc" }),
            json!({ "headers": { "token": "abc" } }),
            json!({ "Authorization": "Bearer a", "headers": { "Authorization": "Bearer b" } }),
            json!({ "Authorization": "Bearer a", "authorization": "Bearer b" }),
        ] {
            assert_eq!(
                read(payload.clone()),
                Err(ErrorCode::BadRequest),
                "{payload}"
            );
        }
    }
}
