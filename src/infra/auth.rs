//! Bearer tokens (HS256 JWT), the viewer of a request, and role guards.
//!
//! The acting user always comes from a verified token, never from an argument. Only HS256 is
//! accepted: a token that names another algorithm (`none` included) is refused.

use std::fmt;

use async_graphql::{Context, Guard};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use crate::infra::error::{AppError, AppResult};

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
}

impl Tokens {
    pub fn new(secret: &str) -> Self {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 5;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "sub"]);
        Self {
            encoding: EncodingKey::from_secret(secret.as_bytes()),
            decoding: DecodingKey::from_secret(secret.as_bytes()),
            validation,
            max_ttl_seconds: None,
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
        if let Some(max) = self.max_ttl_seconds {
            let claims = &data.claims;
            let now = chrono::Utc::now().timestamp();
            let lifetime = claims
                .exp
                .saturating_sub(claims.iat.unwrap_or(now).min(now));
            if lifetime > max {
                return Err(AppError::unauthenticated(format!(
                    "token lives longer than the {max} s this server accepts"
                )));
            }
        }
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
