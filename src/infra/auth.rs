//! Bearer tokens (HS256 JWT), the viewer of a request, and role guards.
//!
//! The acting user always comes from a verified token, never from an argument. Only HS256 is
//! accepted: a token that names another algorithm (`none` included) is refused.

use std::{fmt, sync::Arc, time::Duration};

use async_graphql::{Context, Guard};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use crate::infra::{
    cache::TtlCache,
    error::{AppError, AppResult},
};

/// Longer tokens are verified each time rather than remembered (memory stays bounded).
const MAX_REMEMBERED_TOKEN: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Service,
    Admin,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::User => "user",
            Role::Service => "service",
            Role::Admin => "admin",
        })
    }
}

impl std::str::FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "user" => Ok(Role::User),
            "service" => Ok(Role::Service),
            "admin" => Ok(Role::Admin),
            other => Err(format!("unknown role {other:?} (user, service or admin)")),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    /// The user id, as a decimal string.
    pub sub: String,
    pub role: Role,
    /// Expiry, seconds since the Unix epoch.
    pub exp: i64,
    /// Not valid before, seconds since the Unix epoch (checked when present).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<i64>,
    /// Issued at, seconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iat: Option<i64>,
    /// Display name used when the user is first seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Who is making a request: present only when a valid token came with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Viewer {
    pub user_id: i64,
    pub role: Role,
}

#[derive(Clone)]
pub struct Tokens {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    /// Longest lifetime a token may claim (`ENGAGE_JWT_MAX_TTL_SECONDS`).
    max_ttl_seconds: Option<i64>,
    /// Tokens whose signature was verified lately, with their claims. A client sends the
    /// same token with every request, and checking its signature again (decoding it,
    /// hashing it, parsing its claims) cost more than a like's Lua script; the times are
    /// still checked on every use.
    verified: Arc<TtlCache<String, (Viewer, Claims)>>,
}

/// How long a verified token is remembered, and how many are.
const VERIFIED_TTL: Duration = Duration::from_secs(60);
const VERIFIED_KEPT: usize = 20_000;
/// The clock skew allowed on `exp` and `nbf`, as jsonwebtoken's leeway.
const LEEWAY_SECONDS: i64 = 5;

impl Tokens {
    pub fn new(secret: &str) -> Self {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = LEEWAY_SECONDS as u64;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "sub"]);
        Self {
            encoding: EncodingKey::from_secret(secret.as_bytes()),
            decoding: DecodingKey::from_secret(secret.as_bytes()),
            validation,
            max_ttl_seconds: None,
            verified: Arc::new(TtlCache::new(VERIFIED_TTL, VERIFIED_KEPT)),
        }
    }

    /// Refuses tokens that claim to live longer than `seconds` (from now, and from `iat`
    /// when they carry it): a leaked long-lived token stays usable for its whole life.
    pub fn with_max_ttl(mut self, seconds: Option<u64>) -> Self {
        self.max_ttl_seconds = seconds.map(|s| i64::try_from(s).unwrap_or(i64::MAX));
        self
    }

    pub fn mint(&self, user_id: i64, role: Role, ttl_seconds: i64, name: Option<String>) -> String {
        let now = chrono::Utc::now().timestamp();
        let claims = Claims {
            sub: user_id.to_string(),
            role,
            exp: now + ttl_seconds,
            nbf: None,
            iat: Some(now),
            name,
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .expect("HS256 signing of serializable claims cannot fail")
    }

    /// Verifies a token and returns its claims; `UNAUTHENTICATED` with the reason otherwise.
    pub fn verify(&self, token: &str) -> AppResult<(Viewer, Claims)> {
        if let Some(verified) = self.verified.get(token) {
            self.check_times(&verified.1)?;
            return Ok(verified.as_ref().clone());
        }
        let verified = self.decode(token)?;
        self.check_times(&verified.1)?;
        if token.len() <= MAX_REMEMBERED_TOKEN {
            self.verified
                .insert(token.to_string(), Arc::new(verified.clone()));
        }
        Ok(verified)
    }

    /// The signature and the claims of a token (jsonwebtoken checks the times too).
    fn decode(&self, token: &str) -> AppResult<(Viewer, Claims)> {
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)
            .map_err(|e| {
                use jsonwebtoken::errors::ErrorKind;
                let reason = match e.kind() {
                    ErrorKind::ExpiredSignature => "token expired",
                    ErrorKind::InvalidSignature => "token signature is invalid",
                    ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => {
                        "token algorithm is not HS256"
                    }
                    ErrorKind::MissingRequiredClaim(_) => "token lacks a required claim",
                    ErrorKind::ImmatureSignature => "token is not valid yet (nbf)",
                    _ => "token is malformed",
                };
                AppError::unauthenticated(reason)
            })?;
        let user_id = crate::infra::ids::parse(&data.claims.sub, "token subject")
            .map_err(|_| AppError::unauthenticated("token subject is not a user id"))?;
        Ok((
            Viewer {
                user_id,
                role: data.claims.role,
            },
            data.claims,
        ))
    }

    /// What depends on the time of use: expiry, not-before and the longest lifetime.
    fn check_times(&self, claims: &Claims) -> AppResult<()> {
        let now = chrono::Utc::now().timestamp();
        if claims.exp.saturating_add(LEEWAY_SECONDS) < now {
            return Err(AppError::unauthenticated("token expired"));
        }
        if claims
            .nbf
            .is_some_and(|nbf| nbf > now.saturating_add(LEEWAY_SECONDS))
        {
            return Err(AppError::unauthenticated("token is not valid yet (nbf)"));
        }
        if let Some(max) = self.max_ttl_seconds {
            let lifetime = claims
                .exp
                .saturating_sub(claims.iat.unwrap_or(now).min(now));
            if lifetime > max {
                return Err(AppError::unauthenticated(format!(
                    "token lives longer than the {max} s this server accepts"
                )));
            }
        }
        Ok(())
    }

    /// Reads `Bearer <token>` (the form of both the HTTP header and the WebSocket
    /// `connection_init` payload). `Ok(None)` when there is no token at all.
    pub fn from_header_value(&self, value: Option<&str>) -> AppResult<Option<(Viewer, Claims)>> {
        let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
            return Ok(None);
        };
        let token = value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("bearer "))
            .ok_or_else(|| AppError::unauthenticated("authorization must be `Bearer <token>`"))?;
        self.verify(token.trim()).map(Some)
    }
}

/// The viewer of the current GraphQL operation, if signed in.
pub fn viewer<'a>(ctx: &'a Context<'_>) -> Option<&'a Viewer> {
    ctx.data_opt::<Viewer>()
}

/// The viewer, or `UNAUTHENTICATED`.
pub fn require_viewer<'a>(ctx: &'a Context<'_>) -> AppResult<&'a Viewer> {
    viewer(ctx).ok_or_else(|| AppError::unauthenticated("sign in first"))
}

/// Field guard: the viewer must hold one of the roles.
/// `#[graphql(guard = "RoleGuard::admin()")]`
pub struct RoleGuard {
    allowed: &'static [Role],
}

impl RoleGuard {
    pub fn admin() -> Self {
        Self {
            allowed: &[Role::Admin],
        }
    }

    pub fn service_or_admin() -> Self {
        Self {
            allowed: &[Role::Service, Role::Admin],
        }
    }

    pub fn signed_in() -> Self {
        Self {
            allowed: &[Role::User, Role::Service, Role::Admin],
        }
    }
}

impl Guard for RoleGuard {
    async fn check(&self, ctx: &Context<'_>) -> async_graphql::Result<()> {
        let viewer = require_viewer(ctx)?;
        if self.allowed.contains(&viewer.role) {
            Ok(())
        } else {
            Err(AppError::forbidden(format!("this needs the {} role", self.allowed[0])).into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remembered_token_is_checked_for_its_times_on_every_use() {
        let tokens =
            Tokens::new("a test secret that is long enough for HS256").with_max_ttl(Some(600));
        let token = tokens.mint(7, Role::User, 300, None);
        let (viewer, claims) = tokens.verify(&token).unwrap();
        assert_eq!(viewer.user_id, 7);
        // The second use is answered from memory, with the same claims.
        assert!(tokens.verified.get(token.as_str()).is_some());
        assert_eq!(tokens.verify(&token).unwrap().0, viewer);

        let now = chrono::Utc::now().timestamp();
        let expired = Claims {
            exp: now - LEEWAY_SECONDS - 1,
            ..claims.clone()
        };
        assert!(tokens.check_times(&expired).is_err());
        let early = Claims {
            nbf: Some(now + 60),
            ..claims.clone()
        };
        assert!(tokens.check_times(&early).is_err());
        let long_lived = Claims {
            exp: now + 3600,
            iat: Some(now),
            ..claims
        };
        assert!(tokens.check_times(&long_lived).is_err());
    }
}
