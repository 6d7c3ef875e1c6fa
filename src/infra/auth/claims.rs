//! What a verified token says: who (`sub`, with the issuer that vouches for it), in which
//! role, until when, and the name to show at first sight.
//!
//! Tokens come from engage itself (`engage token`, HS256, `sub` a user id and a `role`
//! claim) and from identity providers (Auth0, Cognito, Keycloak, Firebase: `sub` any string,
//! roles in a claim of the provider's choosing, often a list). Both are read by one set of
//! rules here. What a token says is the sender's to choose: the name is cleaned before it is
//! shown or stored, and a provider's subject is an engage id only where that is configured.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::Role;
use crate::infra::error::{AppError, AppResult};

/// The longest `sub` accepted: providers' subjects are well under this, and each distinct
/// one becomes a row.
pub(crate) const MAX_SUBJECT_BYTES: usize = 255;

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
    /// The user's IANA time zone (OpenID Connect's `zoneinfo`): the zone a user's sign-in
    /// days start in, until the user sets one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zoneinfo: Option<String>,
}

/// Who a token speaks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Subject {
    /// `sub` is a user id (a positive decimal integer): engage's own tokens, and the issuers
    /// of `ENGAGE_JWT_NUMERIC_SUBJECT_ISSUERS`, whose users already have engage ids.
    User(i64),
    /// Any other `sub` (`auth0|abc123`, a UUID), known by its issuer: mapped to an internal
    /// user id at first sight (`UserDirectory::user_for_subject`).
    External { issuer: String, subject: String },
}

/// A token whose signature, issuer, audience and times were checked.
#[derive(Debug, Clone)]
pub struct Verified {
    pub(crate) subject: Subject,
    pub(crate) role: Role,
    pub(crate) claims: Claims,
}

/// Whose numeric subjects are engage user ids.
#[derive(Debug, Clone, Copy)]
pub enum SubjectIds<'a> {
    /// engage's own HS256 tokens: `sub` is the user id it minted.
    Own,
    /// A provider's tokens: a numeric `sub` is an engage id only when the token's issuer is
    /// listed (`ENGAGE_JWT_NUMERIC_SUBJECT_ISSUERS`). Any other is the provider's own
    /// numbering, which would otherwise pick out whichever engage user has that id.
    ListedIssuers(&'a [String]),
}

impl SubjectIds<'_> {
    fn accepts(self, issuer: Option<&str>) -> bool {
        match self {
            SubjectIds::Own => true,
            SubjectIds::ListedIssuers(listed) => {
                issuer.is_some_and(|issuer| listed.iter().any(|l| l == issuer))
            }
        }
    }
}

/// The longest name kept from a token, in characters.
pub(crate) const MAX_NAME_CHARS: usize = 64;

/// A name as it may be shown and stored: control characters (NUL, line breaks, escapes)
/// taken out, trimmed, at most [`MAX_NAME_CHARS`]; `None` when nothing is left. Stripped
/// rather than refused: the name is only shown, and a user whose provider sends a bad one
/// is still served (PostgreSQL refuses NUL in text, which once failed every first sight
/// written with it).
fn shown_name(name: Option<String>) -> Option<String> {
    let kept: String = name?.chars().filter(|c| !c.is_control()).collect();
    let kept: String = kept.trim().chars().take(MAX_NAME_CHARS).collect();
    let kept = kept.trim_end().to_string();
    (!kept.is_empty()).then_some(kept)
}

/// Reads a token's payload: the standard claims, and the role from `role_claim`; `ids` says
/// whether a numeric `sub` is an engage user id.
pub(crate) fn read(
    payload: Map<String, Value>,
    role_claim: &str,
    ids: SubjectIds<'_>,
) -> AppResult<Verified> {
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
    // The subject and the issuer name a row of `user_subjects`: refused rather than altered,
    // since two spellings of one subject must never be two users (and PostgreSQL refuses NUL).
    let iss = text("iss");
    if sub
        .chars()
        .chain(iss.iter().flat_map(|iss| iss.chars()))
        .any(char::is_control)
    {
        return Err(AppError::unauthenticated(
            "token subject and issuer must not contain control characters",
        ));
    }
    let claims = Claims {
        exp: seconds("exp")
            .ok_or_else(|| AppError::unauthenticated("token lacks a required claim"))?,
        nbf: seconds("nbf"),
        iat: seconds("iat"),
        name: shown_name(text("name")).or_else(|| shown_name(text("preferred_username"))),
        zoneinfo: text("zoneinfo").filter(|zone| zone.len() <= 64),
        iss,
        sub,
    };
    let subject = match user_id_in(&claims.sub).filter(|_| ids.accepts(claims.iss.as_deref())) {
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
pub(crate) fn role_in(payload: &Map<String, Value>, role_claim: &str) -> Role {
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
                SubjectIds::Own,
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

    #[test]
    fn a_providers_numeric_subject_is_an_id_only_for_a_listed_issuer() {
        let listed = vec!["https://listed".to_string()];
        let subject = |iss: Option<&str>| {
            let mut claims = json!({"sub": "42", "exp": 2_000_000_000});
            if let Some(iss) = iss {
                claims["iss"] = json!(iss);
            }
            read(payload(claims), "role", SubjectIds::ListedIssuers(&listed))
                .unwrap()
                .subject
        };
        assert_eq!(subject(Some("https://listed")), Subject::User(42));
        assert_eq!(
            subject(Some("https://other")),
            Subject::External {
                issuer: "https://other".into(),
                subject: "42".into()
            }
        );
        assert!(matches!(subject(None), Subject::External { .. }));
    }

    #[test]
    fn control_characters_leave_the_name_and_refuse_the_subject() {
        let read = |claims: Value| read(payload(claims), "role", SubjectIds::Own);
        let name = |claims: Value| read(claims).unwrap().claims.name;
        let base = |extra: Value| {
            let mut claims = json!({"sub": "a", "exp": 2_000_000_000});
            claims
                .as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            claims
        };
        assert_eq!(
            name(base(json!({"name": "Ann\u{0}ie\n"}))),
            Some("Annie".into())
        );
        assert_eq!(
            name(base(
                json!({"name": "\u{0}\u{1b} ", "preferred_username": "bo\u{7f}b"})
            )),
            Some("bob".into())
        );
        assert_eq!(name(base(json!({"name": "\u{0}"}))), None);
        assert_eq!(
            name(base(json!({"name": "x".repeat(100)}))).unwrap().len(),
            MAX_NAME_CHARS
        );
        assert!(read(json!({"sub": "a\u{0}b", "exp": 2_000_000_000})).is_err());
        assert!(read(json!({"sub": "a", "iss": "idp\u{0}", "exp": 2_000_000_000})).is_err());
    }
}
