//! What a verified token says: who (`sub`, with the issuer that vouches for it), in which
//! role, until when, and the name to show at first sight.
//!
//! Tokens come from engage itself (`engage token`, HS256, `sub` a user id and a `role`
//! claim) and from identity providers (Auth0, Cognito, Keycloak, Firebase: `sub` any string,
//! roles in a claim of the provider's choosing, often a list). Both are read by one set of
//! rules here.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::Role;
use crate::infra::error::{AppError, AppResult};

/// The longest `sub` accepted: providers' subjects are well under this, and each distinct
/// one becomes a row.
pub const MAX_SUBJECT_BYTES: usize = 255;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    pub sub: String,
    /// Expiry, seconds since the Unix epoch.
    pub exp: i64,
    /// Not valid before, seconds since the Unix epoch (checked when present).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<i64>,
    /// Issued at, seconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iat: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iss: Option<String>,
    /// Display name used when the user is first seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Who a token speaks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Subject {
    /// `sub` is a user id (a positive decimal integer): engage's own tokens, and any issuer
    /// whose users already have engage ids.
    User(i64),
    /// Any other `sub` (`auth0|abc123`, a UUID), known by its issuer: mapped to an internal
    /// user id at first sight (`UserDirectory::user_for_subject`).
    External { issuer: String, subject: String },
}

/// A token whose signature, issuer, audience and times were checked.
#[derive(Debug, Clone)]
pub struct Verified {
    pub subject: Subject,
    pub role: Role,
    pub claims: Claims,
}

/// Reads a token's payload: the standard claims, and the role from `role_claim`.
pub fn read(payload: Map<String, Value>, role_claim: &str) -> AppResult<Verified> {
    let role = role_in(&payload, role_claim);
    let text = |name: &str| {
        payload
            .get(name)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let seconds = |name: &str| payload.get(name).and_then(as_seconds);
    let sub =
        text("sub").ok_or_else(|| AppError::unauthenticated("token subject is not a string"))?;
    if sub.is_empty() || sub.len() > MAX_SUBJECT_BYTES {
        return Err(AppError::unauthenticated(format!(
            "token subject must be 1 to {MAX_SUBJECT_BYTES} bytes"
        )));
    }
    let claims = Claims {
        exp: seconds("exp")
            .ok_or_else(|| AppError::unauthenticated("token lacks a required claim"))?,
        nbf: seconds("nbf"),
        iat: seconds("iat"),
        iss: text("iss"),
        name: text("name").or_else(|| text("preferred_username")),
        sub,
    };
    let subject = match user_id_in(&claims.sub) {
        Some(user_id) => Subject::User(user_id),
        None => Subject::External {
            issuer: claims.iss.clone().unwrap_or_default(),
            subject: claims.sub.clone(),
        },
    };
    Ok(Verified {
        subject,
        role,
        claims,
    })
}

/// A subject that is a user id, written the one way engage writes ids (`7`, not `007` or
/// `+7`): two spellings must never be two subjects of one user.
fn user_id_in(sub: &str) -> Option<i64> {
    let id = sub.parse::<i64>().ok().filter(|id| *id > 0)?;
    (id.to_string() == sub).then_some(id)
}

/// Times are integers by the standard, but some issuers write fractions.
fn as_seconds(value: &Value) -> Option<i64> {
    value
        .as_i64()
        .or_else(|| value.as_f64().filter(|f| f.is_finite()).map(|f| f as i64))
}

/// The role a token grants: the claim named exactly so (a URL-like key such as
/// `https://engage.example/role` included), else that dotted path (`realm_access.roles`).
/// A string is one role, a list grants the highest role it names; unknown names count for
/// nothing, and no role at all means `user`.
pub fn role_in(payload: &Map<String, Value>, role_claim: &str) -> Role {
    let value = payload.get(role_claim).or_else(|| {
        let mut parts = role_claim.split('.');
        let first = payload.get(parts.next()?)?;
        parts.try_fold(first, |value, part| value.get(part))
    });
    let named = |value: &Value| {
        value
            .as_str()
            .and_then(|name| name.trim().to_ascii_lowercase().parse::<Role>().ok())
    };
    match value {
        Some(Value::Array(names)) => names.iter().filter_map(named).max(),
        Some(value) => named(value),
        None => None,
    }
    .unwrap_or(Role::User)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn payload(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn the_role_is_found_by_name_url_or_path_and_defaults_to_user() {
        let claims = payload(json!({
            "role": "admin",
            "https://engage.example/role": "service",
            "realm_access": { "roles": ["offline_access", "Service", "user"] },
            "groups": ["nobody"],
        }));
        assert_eq!(role_in(&claims, "role"), Role::Admin);
        assert_eq!(
            role_in(&claims, "https://engage.example/role"),
            Role::Service
        );
        assert_eq!(role_in(&claims, "realm_access.roles"), Role::Service);
        assert_eq!(role_in(&claims, "groups"), Role::User);
        assert_eq!(role_in(&claims, "missing"), Role::User);
        assert_eq!(
            role_in(&payload(json!({"role": "root"})), "role"),
            Role::User
        );
    }

    #[test]
    fn a_numeric_subject_is_a_user_id_and_any_other_is_mapped_by_issuer() {
        let read = |sub: &str| {
            read(
                payload(json!({"sub": sub, "exp": 2_000_000_000, "iss": "https://idp"})),
                "role",
            )
        };
        assert_eq!(read("42").unwrap().subject, Subject::User(42));
        assert_eq!(
            read("auth0|abc123").unwrap().subject,
            Subject::External {
                issuer: "https://idp".into(),
                subject: "auth0|abc123".into()
            }
        );
        // Not canonical decimal ids: mapped, never read as another user's id.
        for sub in ["007", "+42", " 42", "-3", "0", "42.0"] {
            assert!(
                matches!(read(sub).unwrap().subject, Subject::External { .. }),
                "{sub}"
            );
        }
        assert!(read("").is_err());
        assert!(read(&"x".repeat(MAX_SUBJECT_BYTES + 1)).is_err());
    }
}
