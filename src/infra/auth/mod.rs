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
use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use hmac::{Hmac, Mac};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::Sha256;

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
    hs256: Option<Hs256>,
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

impl Policy {
    /// The claims a token must carry (`exp` and `sub`, and `iss` and `aud` where an issuer
    /// or an audience is configured), and the configured issuer and audience: `aud` one of
    /// them, or a list naming one.
    fn admits(&self, payload: &Map<String, Value>) -> AppResult<()> {
        let lacks = |name: &str| !payload.contains_key(name);
        if lacks("exp")
            || lacks("sub")
            || (self.issuer.is_some() && lacks("iss"))
            || (!self.audiences.is_empty() && lacks("aud"))
        {
            return Err(AppError::unauthenticated("token lacks a required claim"));
        }
        if let Some(issuer) = &self.issuer {
            if payload.get("iss").and_then(Value::as_str) != Some(issuer.as_str()) {
                return Err(AppError::unauthenticated("token issuer is not accepted"));
            }
        }
        if !self.audiences.is_empty() {
            let accepted = |aud: &Value| {
                aud.as_str()
                    .is_some_and(|aud| self.audiences.iter().any(|a| a == aud))
            };
            let admitted = match &payload["aud"] {
                Value::Array(named) => named.iter().any(accepted),
                one => accepted(one),
            };
            if !admitted {
                return Err(AppError::unauthenticated("token audience is not accepted"));
            }
        }
        Ok(())
    }
}

impl Tokens {
    /// HS256 tokens of `secret` alone, with no issuer or audience to check.
    pub fn new(secret: &str) -> Self {
        Self {
            hs256: Some(Hs256::new(secret)),
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
            hs256: config.jwt_secret().map(Hs256::new),
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
        let hs256 = self
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
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &hs256.encoding)
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

    /// The signature and the claims of a token; its times are checked on every use
    /// ([`Tokens::check_times`]).
    ///
    /// jsonwebtoken reads the header and checks a public key's signature. The rest is done
    /// here, once: its `decode` read the header and the claims twice, made the HMAC key
    /// anew for every token and built its checks' sets per call, a tenth of a like's
    /// instructions when the token was new.
    async fn decode(&self, token: &str) -> AppResult<Verified> {
        let malformed = || AppError::unauthenticated("token is malformed");
        // `header.payload.signature`: a fourth part leaves a `.` in the header, which
        // does not decode.
        let (message, signature) = token.rsplit_once('.').ok_or_else(malformed)?;
        let (_, payload) = message.rsplit_once('.').ok_or_else(malformed)?;
        let header = jsonwebtoken::decode_header(token).map_err(|_| malformed())?;
        // Only a token signed with this server's own secret names an engage id by itself.
        let ids = match header.alg {
            Algorithm::HS256 => {
                let Some(hs256) = &self.hs256 else {
                    return Err(AppError::unauthenticated(
                        "token algorithm HS256 is not accepted here",
                    ));
                };
                if !hs256.signed(message, signature) {
                    return Err(AppError::unauthenticated("token signature is invalid"));
                }
                SubjectIds::Own
            }
            Algorithm::HS384 | Algorithm::HS512 => {
                return Err(AppError::unauthenticated(
                    "token algorithm is not accepted here",
                ))
            }
            public_key => {
                let Some(jwks) = &self.jwks else {
                    return Err(AppError::unauthenticated(
                        "token algorithm is not HS256, and no key set is configured",
                    ));
                };
                let keys = jwks.keys_for(header.kid.as_deref(), public_key).await?;
                let mut verdict = Ok(false);
                for key in &keys {
                    verdict = jsonwebtoken::crypto::verify(
                        signature,
                        message.as_bytes(),
                        &key.decoding,
                        public_key,
                    );
                    if matches!(verdict, Ok(true)) {
                        break;
                    }
                }
                match verdict {
                    Ok(true) => SubjectIds::ListedIssuers(&self.policy.numeric_subject_issuers),
                    Ok(false) => {
                        return Err(AppError::unauthenticated("token signature is invalid"))
                    }
                    Err(_) => return Err(malformed()),
                }
            }
        };
        let payload: Map<String, Value> = URL_SAFE_NO_PAD
            .decode(payload)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .ok_or_else(malformed)?;
        self.policy.admits(&payload)?;
        claims::read(payload, &self.policy.role_claim, ids)
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

/// The HS256 secret: the key tokens are signed with, and its HMAC state made once.
#[derive(Clone)]
struct Hs256 {
    encoding: EncodingKey,
    mac: Hmac<Sha256>,
}

impl Hs256 {
    fn new(secret: &str) -> Self {
        Self {
            encoding: EncodingKey::from_secret(secret.as_bytes()),
            mac: Hmac::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any length"),
        }
    }

    /// `signature` is the HMAC of `message` under the secret, as unpadded base64url: the one
    /// spelling of it that was signed (padding, or stray bits in the last character, are
    /// refused by the decoder), compared in constant time.
    fn signed(&self, message: &str, signature: &str) -> bool {
        // Room for one byte more than a SHA-256 HMAC, so that a longer one is refused
        // by its length rather than by the decoder's estimate.
        let mut bytes = [0u8; 33];
        match URL_SAFE_NO_PAD.decode_slice(signature, &mut bytes) {
            Ok(32) => self
                .mac
                .clone()
                .chain_update(message)
                .verify_slice(&bytes[..32])
                .is_ok(),
            _ => false,
        }
    }
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

    #[test]
    fn the_configured_issuer_and_audience_are_required_and_matched() {
        let policy = Policy {
            issuer: Some("https://id.engage.test/".into()),
            audiences: vec!["engage".into(), "other-api".into()],
            role_claim: "role".into(),
            max_ttl_seconds: None,
            numeric_subject_issuers: Vec::new(),
        };
        let admits = |changes: serde_json::Value| {
            let mut payload = serde_json::json!({
                "exp": 1, "sub": "a", "iss": "https://id.engage.test/", "aud": "engage",
            });
            for (name, value) in changes.as_object().unwrap() {
                match value {
                    Value::Null => payload.as_object_mut().unwrap().remove(name),
                    value => payload
                        .as_object_mut()
                        .unwrap()
                        .insert(name.clone(), value.clone()),
                };
            }
            match policy.admits(payload.as_object().unwrap()) {
                Ok(()) => "admitted".to_string(),
                Err(error) => error.to_string(),
            }
        };
        use serde_json::json;
        assert_eq!(admits(json!({})), "admitted");
        assert_eq!(
            admits(json!({ "aud": ["someone", "other-api"] })),
            "admitted"
        );
        for missing in ["exp", "sub", "iss", "aud"] {
            assert!(admits(json!({ missing: null })).contains("lacks a required claim"));
        }
        assert!(admits(json!({ "iss": "https://evil.test/" })).contains("issuer"));
        assert!(admits(json!({ "iss": 7 })).contains("issuer"));
        assert!(admits(json!({ "aud": "someone" })).contains("audience"));
        assert!(admits(json!({ "aud": ["someone", 7] })).contains("audience"));
        assert!(admits(json!({ "aud": [] })).contains("audience"));

        // Without an issuer or audience configured, neither is needed nor looked at.
        let open = Policy {
            issuer: None,
            audiences: Vec::new(),
            ..policy.clone()
        };
        let payload = serde_json::json!({ "exp": 1, "sub": "a", "aud": 7 });
        assert!(open.admits(payload.as_object().unwrap()).is_ok());
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
