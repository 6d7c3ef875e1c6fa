//! An identity provider's signing keys, fetched from its JSON Web Key Set
//! (`ENGAGE_JWT_JWKS_URL`, e.g. `https://issuer/.well-known/jwks.json`).
//!
//! Providers rotate keys by publishing the new one beside the old before they sign with it,
//! so a token whose `kid` is unknown is the signal to fetch the set again. That signal is the
//! caller's to send, though: a stream of tokens with made-up `kid`s must not turn this server
//! into a load generator against the provider, so fetches on demand are rate limited
//! (`REFRESHES_PER_MINUTE`), and only one runs at a time. The set is also fetched again in
//! the background once it is `STALE_AFTER` old, so removed keys stop being trusted.
//!
//! A set is read a chunk at a time and given up past `MAX_SET_BYTES`, whatever its
//! `Content-Length` says or omits; production fetches it over `https://` only (see
//! `Config::check`), since whoever can change the set can sign tokens.

use std::{
    collections::HashMap,
    num::NonZeroU32,
    str::FromStr,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, RwLock,
    },
    time::{Duration, Instant},
};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use jsonwebtoken::{
    jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse},
    Algorithm, DecodingKey,
};
use serde::Deserialize;

use crate::infra::error::{AppError, AppResult};

/// Fetches of the set that unknown `kid`s may cause, per minute (a burst of as many).
const REFRESHES_PER_MINUTE: u32 = 5;
/// A set older than this is fetched again (in the background) on the next use.
const STALE_AFTER: Duration = Duration::from_secs(600);
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// A key set is a few kilobytes; anything far larger is not one.
const MAX_SET_BYTES: usize = 256 * 1024;
const MAX_KEYS: usize = 64;

/// One verification key of the set, with the one algorithm it may verify.
#[derive(Clone)]
pub(crate) struct SigningKey {
    pub(crate) algorithm: Algorithm,
    pub(crate) decoding: DecodingKey,
}

#[derive(Default)]
struct KeySet {
    by_kid: HashMap<String, SigningKey>,
    /// Keys published without a `kid`: tried for tokens without one.
    anonymous: Vec<SigningKey>,
    fetched_at: Option<Instant>,
}

pub struct Jwks {
    url: String,
    client: reqwest::Client,
    keys: RwLock<Arc<KeySet>>,
    /// One fetch at a time; callers that waited look at the set it left.
    fetching: tokio::sync::Mutex<()>,
    refreshes: DefaultDirectRateLimiter,
    /// A background fetch of a stale set is under way (one is enough).
    refreshing_stale: AtomicBool,
    fetches: AtomicU64,
}

impl Jwks {
    /// A key set at `url`, fetched once now. A provider that does not answer at start does
    /// not stop the service: the fetch is tried again when a token arrives.
    pub(crate) async fn new(url: String) -> Arc<Self> {
        let client = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .build()
            .expect("a client with a timeout builds");
        let per_minute = NonZeroU32::new(REFRESHES_PER_MINUTE).expect("not zero");
        let jwks = Arc::new(Self {
            url,
            client,
            keys: RwLock::new(Arc::default()),
            fetching: tokio::sync::Mutex::new(()),
            refreshes: RateLimiter::direct(Quota::per_minute(per_minute)),
            refreshing_stale: AtomicBool::new(false),
            fetches: AtomicU64::new(0),
        });
        if let Err(error) = jwks.fetch().await {
            tracing::error!(url = %jwks.url, %error, "the token key set could not be fetched; tokens are refused until it can");
        }
        jwks
    }

    /// The keys that may have signed a token with this `kid` and algorithm.
    pub(crate) async fn keys_for(
        self: &Arc<Self>,
        kid: Option<&str>,
        algorithm: Algorithm,
    ) -> AppResult<Vec<SigningKey>> {
        let set = self.current();
        let stale = set.fetched_at.is_some_and(|at| at.elapsed() > STALE_AFTER);
        if stale && !self.refreshing_stale.swap(true, Ordering::AcqRel) {
            let (jwks, seen) = (self.clone(), set.clone());
            tokio::spawn(async move {
                jwks.refresh(&seen).await;
                jwks.refreshing_stale.store(false, Ordering::Release);
            });
        }
        let mut found = matching(&set, kid, algorithm);
        if found.is_empty() && self.refresh(&set).await {
            found = matching(&self.current(), kid, algorithm);
        }
        if found.is_empty() {
            return Err(AppError::unauthenticated(match kid {
                Some(_) => "token is signed with a key the issuer does not publish",
                None => "token names no key (kid) and no published key fits it",
            }));
        }
        Ok(found)
    }

    /// How many times the set was fetched (for tests of the rate limit).
    pub fn fetches(&self) -> u64 {
        self.fetches.load(Ordering::Relaxed)
    }

    fn current(&self) -> Arc<KeySet> {
        self.keys.read().expect("poisoned").clone()
    }

    /// Fetches the set again unless another caller did since `seen` (the set the caller
    /// looked at) or the rate limit says no; true when a newer set is in place.
    async fn refresh(&self, seen: &Arc<KeySet>) -> bool {
        let _one_at_a_time = self.fetching.lock().await;
        if !Arc::ptr_eq(seen, &self.current()) {
            return true;
        }
        if self.refreshes.check().is_err() {
            return false;
        }
        match self.fetch().await {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(url = %self.url, %error, "the token key set could not be fetched");
                false
            }
        }
    }

    async fn fetch(&self) -> anyhow::Result<()> {
        self.fetches.fetch_add(1, Ordering::Relaxed);
        let response = self
            .client
            .get(&self.url)
            .send()
            .await?
            .error_for_status()?;
        let body = read_capped(response, MAX_SET_BYTES).await?;
        let set = parse(&body)?;
        tracing::info!(
            url = %self.url,
            keys = set.by_kid.len() + set.anonymous.len(),
            "token key set fetched"
        );
        *self.keys.write().expect("poisoned") = Arc::new(set);
        Ok(())
    }
}

/// The body of `response`, read a chunk at a time and given up as soon as it passes `cap`
/// bytes. `Content-Length` only refuses early: a body sent without one (chunked) or with a
/// wrong one was read whole before its size was checked, so a provider, or whoever stood in
/// for it, could make this server hold any amount.
async fn read_capped(mut response: reqwest::Response, cap: usize) -> anyhow::Result<Vec<u8>> {
    let too_large = || anyhow::anyhow!("the key set is larger than {cap} bytes");
    if response
        .content_length()
        .is_some_and(|length| length > cap as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > cap {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn matching(set: &KeySet, kid: Option<&str>, algorithm: Algorithm) -> Vec<SigningKey> {
    let candidates: Vec<&SigningKey> = match kid {
        Some(kid) => set.by_kid.get(kid).into_iter().collect(),
        None => set.anonymous.iter().collect(),
    };
    candidates
        .into_iter()
        .filter(|key| key.algorithm == algorithm)
        .cloned()
        .collect()
}

#[derive(Deserialize)]
struct RawSet {
    keys: Vec<serde_json::Value>,
}

/// The signing keys of a set. Keys this server cannot use (encryption keys, symmetric
/// keys, unknown types or curves) are skipped, not fatal: providers publish such keys too.
fn parse(body: &[u8]) -> anyhow::Result<KeySet> {
    let raw: RawSet = serde_json::from_slice(body)
        .map_err(|e| anyhow::anyhow!("the key set is not a JWKS document: {e}"))?;
    let mut set = KeySet {
        fetched_at: Some(Instant::now()),
        ..KeySet::default()
    };
    for value in raw.keys.into_iter().take(MAX_KEYS) {
        let Ok(jwk) = serde_json::from_value::<Jwk>(value) else {
            continue;
        };
        let Some(key) = signing_key(&jwk) else {
            continue;
        };
        match jwk.common.key_id {
            Some(kid) => {
                set.by_kid.insert(kid, key);
            }
            None => set.anonymous.push(key),
        }
    }
    Ok(set)
}

fn signing_key(jwk: &Jwk) -> Option<SigningKey> {
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        return None;
    }
    let algorithm = match (&jwk.common.key_algorithm, &jwk.algorithm) {
        (Some(declared), _) => Algorithm::from_str(&declared.to_string()).ok()?,
        // Without `alg`, the key's type says what it signs with.
        (None, AlgorithmParameters::RSA(_)) => Algorithm::RS256,
        (None, AlgorithmParameters::EllipticCurve(ec)) => match ec.curve {
            EllipticCurve::P256 => Algorithm::ES256,
            EllipticCurve::P384 => Algorithm::ES384,
            _ => return None,
        },
        (None, AlgorithmParameters::OctetKeyPair(_)) => Algorithm::EdDSA,
        (None, AlgorithmParameters::OctetKey(_)) => return None,
    };
    // Only public-key algorithms: an HMAC key published in a set would let anyone who read
    // the set sign tokens. And a key verifies only with an algorithm of its own type: an
    // `alg` that names another is a mistake, and such a key verifies nothing.
    let fits = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => matches!(
            algorithm,
            Algorithm::RS256
                | Algorithm::RS384
                | Algorithm::RS512
                | Algorithm::PS256
                | Algorithm::PS384
                | Algorithm::PS512
        ),
        AlgorithmParameters::EllipticCurve(_) => {
            matches!(algorithm, Algorithm::ES256 | Algorithm::ES384)
        }
        AlgorithmParameters::OctetKeyPair(_) => algorithm == Algorithm::EdDSA,
        AlgorithmParameters::OctetKey(_) => false,
    };
    if !fits {
        return None;
    }
    let decoding = DecodingKey::from_jwk(jwk).ok()?;
    Some(SigningKey {
        algorithm,
        decoding,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_it_cannot_verify_with_are_skipped_and_the_rest_kept() {
        let set = parse(
            br#"{"keys":[
                {"kty":"oct","k":"c2VjcmV0","kid":"hmac","alg":"HS256"},
                {"kty":"RSA","use":"enc","kid":"enc","n":"sXch","e":"AQAB"},
                {"kty":"XYZ","kid":"unknown"},
                {"kty":"RSA","kid":"another-type","alg":"ES256","n":"sXch","e":"AQAB"},
                {"kty":"EC","crv":"P-256","kid":"ec",
                 "x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
                 "y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}
            ]}"#,
        )
        .unwrap();
        assert_eq!(set.by_kid.len(), 1);
        assert_eq!(set.by_kid["ec"].algorithm, Algorithm::ES256);
        assert!(parse(b"not json").is_err());
    }
}
