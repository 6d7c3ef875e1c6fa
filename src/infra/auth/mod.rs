//! Bearer tokens (JWT), the viewer of a request, and role guards.
//!
//! The acting user always comes from a verified token, never from an argument. Tokens are
//! HS256 with the configured secret (engage's own, `engage token`) or signed by an identity
//! provider's published keys (`ENGAGE_JWT_JWKS_URL`: RS256, ES256 and the other public-key
//! algorithms). Which key verifies a token follows from its header, and each key verifies
//! only with its own algorithm: a token that names another (`none`, or HS256 signed with a
//! provider's public key) is refused.

mod claims;
pub(crate) mod jwks;

use std::{fmt, sync::Arc, time::Duration};

use async_graphql::{Context, Guard};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

pub use self::claims::{Claims, Subject, SubjectIds, Verified};
use self::jwks::Jwks;
use crate::infra::{
    cache::TtlCache,
    config::Config,
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

/// Who is making a request: present only when a valid token came with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Viewer {
    pub(crate) user_id: i64,
    pub(crate) role: Role,
    /// The token's `zoneinfo`, when it names an IANA zone.
    pub(crate) zone: Option<chrono_tz::Tz>,
}

/// The claims of a token this server signs.
#[derive(Serialize)]
struct Minted<'a> {
    sub: String,
    role: Role,
    exp: i64,
    iat: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    iss: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    aud: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
}

/// What every accepted token must satisfy, whoever signed it.
#[derive(Clone)]
struct Policy {
    issuer: Option<String>,
    audiences: Vec<String>,
    role_claim: String,
    /// Longest lifetime a token may claim (`ENGAGE_JWT_MAX_TTL_SECONDS`).
    max_ttl_seconds: Option<i64>,
    /// Providers whose numeric subjects are engage user ids
    /// (`ENGAGE_JWT_NUMERIC_SUBJECT_ISSUERS`).
    numeric_subject_issuers: Vec<String>,
}

#[derive(Clone)]
pub struct Tokens {
    /// The HS256 secret's keys, when one is configured (or the development one).
    hs256: Option<(EncodingKey, DecodingKey)>,
    /// The identity provider's keys, when `ENGAGE_JWT_JWKS_URL` is set.
    jwks: Option<Arc<Jwks>>,
    policy: Arc<Policy>,
    /// Tokens whose signature was verified lately, with their claims. A client sends the
    /// same token with every request, and checking its signature again (decoding it,
    /// hashing it, parsing its claims) cost more than a like's Lua script; the times are
    /// still checked on every use.
    verified: Arc<TtlCache<String, Verified>>,
}

/// How long a verified token is remembered, and how many are: as many as the users whose
/// records are kept (`features::users`). Past the count the cache starts again empty, so a
/// count below the tokens in use in a minute made nearly every request verify its token.
const VERIFIED_TTL: Duration = Duration::from_secs(60);
const VERIFIED_KEPT: usize = 100_000;
/// The clock skew allowed on `exp` and `nbf`, as jsonwebtoken's leeway.
const LEEWAY_SECONDS: i64 = 5;

impl Tokens {
    /// HS256 tokens of `secret` alone, with no issuer or audience to check.
    pub fn new(secret: &str) -> Self {
        Self {
            hs256: Some(hs256_keys(secret)),
            jwks: None,
            policy: Arc::new(Policy {
                issuer: None,
                audiences: Vec::new(),
                role_claim: "role".into(),
                max_ttl_seconds: None,
                numeric_subject_issuers: Vec::new(),
            }),
            verified: Arc::new(TtlCache::new(VERIFIED_TTL, VERIFIED_KEPT)),
        }
    }

    /// The tokens `config` accepts, without the provider's key set: enough to sign with
    /// (`engage token`), and to verify HS256 tokens.
    pub fn signer(config: &Config) -> Self {
        Self {
            hs256: config.jwt_secret().map(hs256_keys),
            jwks: None,
            policy: Arc::new(Policy {
                issuer: config.jwt_issuer.clone(),
                audiences: config.jwt_audiences(),
                role_claim: config.jwt_role_claim.clone(),
                max_ttl_seconds: config
                    .jwt_max_ttl_seconds
                    .map(|s| i64::try_from(s).unwrap_or(i64::MAX)),
                numeric_subject_issuers: config.jwt_numeric_subject_issuers(),
            }),
            verified: Arc::new(TtlCache::new(VERIFIED_TTL, VERIFIED_KEPT)),
        }
    }

    /// The tokens `config` accepts; fetches the provider's key set when one is configured.
    pub(crate) async fn from_config(config: &Config) -> Self {
        let mut tokens = Self::signer(config);
        if let Some(url) = &config.jwt_jwks_url {
            tokens.jwks = Some(Jwks::new(url.clone()).await);
        }
        tokens
    }

    /// Refuses tokens that claim to live longer than `seconds` (from now, and from `iat`
    /// when they carry it): a leaked long-lived token stays usable for its whole life.
    #[cfg(test)]
    pub(crate) fn with_max_ttl(mut self, seconds: Option<u64>) -> Self {
        Arc::make_mut(&mut self.policy).max_ttl_seconds =
            seconds.map(|s| i64::try_from(s).unwrap_or(i64::MAX));
        self
    }

    /// The identity provider's key set, if tokens are verified with one.
    pub fn jwks(&self) -> Option<&Arc<Jwks>> {
        self.jwks.as_ref()
    }

    /// There is an HS256 secret to sign tokens with.
    pub(crate) fn can_mint(&self) -> bool {
        self.hs256.is_some()
    }

    /// Signs a token for a user id with the HS256 secret, with the configured issuer and
    /// first audience, so that this server accepts it. Only for a server with a secret
    /// ([`Tokens::can_mint`]: `engage token` asks first, and `/dev/token` exists only with
    /// the development secret).
    pub fn mint(&self, user_id: i64, role: Role, ttl_seconds: i64, name: Option<String>) -> String {
        let (encoding, _) = self
            .hs256
            .as_ref()
            .expect("minting is offered only where there is a secret");
        let now = chrono::Utc::now().timestamp();
        let claims = Minted {
            sub: user_id.to_string(),
            role,
            exp: now + ttl_seconds,
            iat: now,
            iss: self.policy.issuer.as_deref(),
            aud: self.policy.audiences.first().map(String::as_str),
            name,
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, encoding)
            .expect("HS256 signing of serializable claims cannot fail")
    }

    /// Verifies a token; `UNAUTHENTICATED` with the reason otherwise.
    pub(crate) async fn verify(&self, token: &str) -> AppResult<Verified> {
        if let Some(verified) = self.verified.get(token) {
            self.check_times(&verified.claims)?;
            return Ok(verified.as_ref().clone());
        }
        let verified = self.decode(token).await?;
        self.check_times(&verified.claims)?;
        if token.len() <= MAX_REMEMBERED_TOKEN {
            self.verified
                .insert(token.to_string(), Arc::new(verified.clone()));
        }
        Ok(verified)
    }

    /// The signature and the claims of a token (jsonwebtoken checks the times, the issuer
    /// and the audience too).
    async fn decode(&self, token: &str) -> AppResult<Verified> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| AppError::unauthenticated("token is malformed"))?;
        let keys = match header.alg {
            Algorithm::HS256 => match &self.hs256 {
                Some((_, decoding)) => vec![decoding.clone()],
                None => {
                    return Err(AppError::unauthenticated(
                        "token algorithm HS256 is not accepted here",
                    ))
                }
            },
            Algorithm::HS384 | Algorithm::HS512 => {
                return Err(AppError::unauthenticated(
                    "token algorithm is not accepted here",
                ))
            }
            public_key => match &self.jwks {
                Some(jwks) => jwks
                    .keys_for(header.kid.as_deref(), public_key)
                    .await?
                    .into_iter()
                    .map(|key| key.decoding)
                    .collect(),
                None => {
                    return Err(AppError::unauthenticated(
                        "token algorithm is not HS256, and no key set is configured",
                    ))
                }
            },
        };
        let validation = self.validation(header.alg);
        // Only a token signed with this server's own secret names an engage id by itself.
        let ids = match header.alg {
            Algorithm::HS256 => SubjectIds::Own,
            _ => SubjectIds::ListedIssuers(&self.policy.numeric_subject_issuers),
        };
        let mut last_error = None;
        for key in &keys {
            match jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(
                token,
                key,
                &validation,
            ) {
                Ok(data) => return claims::read(data.claims, &self.policy.role_claim, ids),
                Err(error) => last_error = Some(error),
            }
        }
        Err(refusal(last_error))
    }

    fn validation(&self, algorithm: Algorithm) -> Validation {
        let mut validation = Validation::new(algorithm);
        validation.leeway = LEEWAY_SECONDS as u64;
        validation.validate_nbf = true;
        // jsonwebtoken checks `iss` and `aud` only where a token carries them: a configured
        // issuer or audience makes the claim required, so that leaving it out does not pass.
        let mut required = vec!["exp", "sub"];
        if let Some(issuer) = &self.policy.issuer {
            validation.set_issuer(&[issuer]);
            required.push("iss");
        }
        if self.policy.audiences.is_empty() {
            validation.validate_aud = false;
        } else {
            validation.set_audience(&self.policy.audiences);
            required.push("aud");
        }
        validation.set_required_spec_claims(&required);
        validation
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
        if let Some(max) = self.policy.max_ttl_seconds {
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
    pub(crate) async fn verify_bearer(&self, value: Option<&str>) -> AppResult<Option<Verified>> {
        let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
            return Ok(None);
        };
        let token = value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("bearer "))
            .ok_or_else(|| AppError::unauthenticated("authorization must be `Bearer <token>`"))?;
        self.verify(token.trim()).await.map(Some)
    }
}

fn hs256_keys(secret: &str) -> (EncodingKey, DecodingKey) {
    (
        EncodingKey::from_secret(secret.as_bytes()),
        DecodingKey::from_secret(secret.as_bytes()),
    )
}

/// The reason a token was refused, in words a client can act on.
fn refusal(error: Option<jsonwebtoken::errors::Error>) -> AppError {
    use jsonwebtoken::errors::ErrorKind;
    let reason = match error.as_ref().map(|e| e.kind()) {
        Some(ErrorKind::ExpiredSignature) => "token expired",
        Some(ErrorKind::InvalidSignature) => "token signature is invalid",
        Some(ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName) => {
            "token algorithm does not match its key"
        }
        Some(ErrorKind::MissingRequiredClaim(_)) => "token lacks a required claim",
        Some(ErrorKind::ImmatureSignature) => "token is not valid yet (nbf)",
        Some(ErrorKind::InvalidIssuer) => "token issuer is not accepted",
        Some(ErrorKind::InvalidAudience) => "token audience is not accepted",
        _ => "token is malformed",
    };
    AppError::unauthenticated(reason)
}

/// The viewer of the current GraphQL operation, if signed in.
pub(crate) fn viewer<'a>(ctx: &'a Context<'_>) -> Option<&'a Viewer> {
    ctx.data_opt::<Viewer>()
}

/// The viewer, or `UNAUTHENTICATED`.
pub(crate) fn require_viewer<'a>(ctx: &'a Context<'_>) -> AppResult<&'a Viewer> {
    viewer(ctx).ok_or_else(|| AppError::unauthenticated("sign in first"))
}

/// Field guard: the viewer must hold one of the roles.
/// `#[graphql(guard = "RoleGuard::admin()")]`
pub(crate) struct RoleGuard {
    allowed: &'static [Role],
}

impl RoleGuard {
    pub(crate) fn admin() -> Self {
        Self {
            allowed: &[Role::Admin],
        }
    }

    pub(crate) fn service_or_admin() -> Self {
        Self {
            allowed: &[Role::Service, Role::Admin],
        }
    }

    pub(crate) fn signed_in() -> Self {
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

    #[tokio::test]
    async fn an_hs256_token_passes_only_with_the_secrets_signature_over_what_it_says() {
        let secret = "a test secret that is long enough for HS256";
        let tokens = Tokens::new(secret);
        let token = tokens.mint(7, Role::User, 300, None);
        assert_eq!(
            tokens.verify(&token).await.unwrap().subject,
            Subject::User(7)
        );
        let (message, signature) = token.rsplit_once('.').unwrap();
        let refused = |token: String| {
            let tokens = Tokens::new(secret);
            async move { tokens.verify(&token).await.unwrap_err().to_string() }
        };

        // Another secret's signature, a payload changed under the signature, a signature cut.
        let other = Tokens::new("another secret that is long enough for HS256");
        let others = other.mint(7, Role::User, 300, None);
        let (_, other_signature) = others.rsplit_once('.').unwrap();
        assert!(refused(format!("{message}.{other_signature}"))
            .await
            .contains("signature"));
        let admin = other.mint(7, Role::Admin, 300, None);
        let (_, admin_payload) = admin.split_once('.').unwrap();
        let (header, _) = message.split_once('.').unwrap();
        let (admin_payload, _) = admin_payload.split_once('.').unwrap();
        assert!(refused(format!("{header}.{admin_payload}.{signature}"))
            .await
            .contains("signature"));
        assert!(refused(format!("{message}.{}", &signature[..10]))
            .await
            .contains("signature"));
        // The same bytes in another spelling of base64 (padded) are not the token signed.
        assert!(refused(format!("{message}.{signature}="))
            .await
            .contains("signature"));
        assert!(refused(format!("{message}.")).await.contains("signature"));
    }

    #[tokio::test]
    async fn a_remembered_token_is_checked_for_its_times_on_every_use() {
        let tokens =
            Tokens::new("a test secret that is long enough for HS256").with_max_ttl(Some(600));
        let token = tokens.mint(7, Role::User, 300, None);
        let verified = tokens.verify(&token).await.unwrap();
        assert_eq!(verified.subject, Subject::User(7));
        assert_eq!(verified.role, Role::User);
        // The second use is answered from memory, with the same claims.
        assert!(tokens.verified.get(token.as_str()).is_some());
        assert_eq!(
            tokens.verify(&token).await.unwrap().subject,
            Subject::User(7)
        );

        let claims = verified.claims;
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
