//! Tokens of an identity provider: keys from a JSON Web Key Set served over HTTP, as Auth0,
//! Cognito, Keycloak or Firebase publish theirs; subjects that are not engage ids; roles in
//! a claim of the provider's choosing.

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc, Mutex,
};

use axum::{extract::State, routing::get, Json, Router};
use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rsa::{pkcs8::EncodePrivateKey, traits::PublicKeyParts};
use serde_json::{json, Value};
use sqlx::Row;

use crate::harness::{first_code, local_id, TestApp};

pub(crate) const ISSUER: &str = "https://id.engage.test/";
const AUDIENCE: &str = "engage-api";
const ROLE_CLAIM: &str = "https://engage.test/roles";
const CREATE_ITEM: &str = "mutation { createItem(input: { name: \"Tea House\" }) { id } }";

/// A signing key of the provider: its private half to sign with, its public half as a JWK.
pub(crate) struct ProviderKey {
    kid: String,
    algorithm: Algorithm,
    encoding: EncodingKey,
    jwk: Value,
}

impl ProviderKey {
    fn rsa(kid: &str) -> Self {
        let private = rsa::RsaPrivateKey::new(&mut rand_core::OsRng, 2048).unwrap();
        let pem = private.to_pkcs8_pem(rsa::pkcs8::LineEnding::LF).unwrap();
        let b64 = |bytes: Vec<u8>| URL_SAFE_NO_PAD.encode(bytes);
        Self {
            kid: kid.into(),
            algorithm: Algorithm::RS256,
            encoding: EncodingKey::from_rsa_pem(pem.as_bytes()).unwrap(),
            jwk: json!({
                "kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid,
                "n": b64(private.n().to_bytes_be()), "e": b64(private.e().to_bytes_be()),
            }),
        }
    }

    pub(crate) fn ec(kid: &str) -> Self {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        // The uncompressed point: 0x04, then x and y of 32 bytes each.
        let point = key.public_key_raw();
        assert_eq!(point.len(), 65);
        Self {
            kid: kid.into(),
            algorithm: Algorithm::ES256,
            encoding: EncodingKey::from_ec_pem(key.serialize_pem().as_bytes()).unwrap(),
            // No `alg`: the curve says ES256.
            jwk: json!({
                "kty": "EC", "crv": "P-256", "kid": kid,
                "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
                "y": URL_SAFE_NO_PAD.encode(&point[33..]),
            }),
        }
    }

    pub(crate) fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(self.algorithm);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding).unwrap()
    }
}

/// The provider's key set, served over HTTP on a loopback port; it counts its fetches.
pub(crate) struct Provider {
    pub(crate) url: String,
    published: Arc<Mutex<Vec<Value>>>,
    fetches: Arc<AtomicU64>,
}

#[derive(Clone)]
struct Served {
    published: Arc<Mutex<Vec<Value>>>,
    fetches: Arc<AtomicU64>,
}

impl Provider {
    pub(crate) async fn start(keys: &[&ProviderKey]) -> Self {
        let published = Arc::new(Mutex::new(keys.iter().map(|k| k.jwk.clone()).collect()));
        let fetches = Arc::new(AtomicU64::new(0));
        let served = Served {
            published: published.clone(),
            fetches: fetches.clone(),
        };
        let router = Router::new()
            .route(
                "/.well-known/jwks.json",
                get(|State(served): State<Served>| async move {
                    served.fetches.fetch_add(1, Ordering::SeqCst);
                    // Providers publish other keys too: an encryption key, a symmetric one.
                    let mut keys = served.published.lock().unwrap().clone();
                    keys.push(json!({"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"}));
                    Json(json!({ "keys": keys }))
                }),
            )
            .with_state(served);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "http://{}/.well-known/jwks.json",
            listener.local_addr().unwrap()
        );
        tokio::spawn(async move { axum::serve(listener, router).await });
        Self {
            url,
            published,
            fetches,
        }
    }

    fn publish(&self, keys: &[&ProviderKey]) {
        *self.published.lock().unwrap() = keys.iter().map(|k| k.jwk.clone()).collect();
    }

    fn fetches(&self) -> u64 {
        self.fetches.load(Ordering::SeqCst)
    }
}

/// An app that takes the provider's tokens and has no secret of its own.
async fn app_of(provider: &Provider) -> TestApp {
    let url = provider.url.clone();
    TestApp::spawn_with(move |config| {
        config.jwt_secret = None;
        config.jwt_jwks_url = Some(url);
        config.jwt_issuer = Some(ISSUER.into());
        config.jwt_audience = Some(format!("other-api, {AUDIENCE}"));
        config.jwt_role_claim = ROLE_CLAIM.into();
    })
    .await
}

/// Claims as the provider writes them, lasting an hour.
fn claims(sub: &str, extra: Value) -> Value {
    let now = chrono::Utc::now().timestamp();
    let mut claims = json!({
        "iss": ISSUER, "aud": [AUDIENCE, "https://id.engage.test/userinfo"], "sub": sub,
        "iat": now, "exp": now + 3600, "scope": "openid profile",
    });
    claims
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    claims
}

/// The number of the user a token names.
async fn viewer_id(app: &TestApp, token: &str) -> String {
    let data = app
        .data(Some(token), "{ viewer { id name } }", json!({}))
        .await;
    local_id(data["viewer"]["id"].as_str().unwrap()).to_string()
}

#[tokio::test]
async fn rs256_and_es256_tokens_of_a_provider_sign_in_its_users_under_stable_ids() {
    let rsa = ProviderKey::rsa("rsa-1");
    let ec = ProviderKey::ec("ec-1");
    let provider = Provider::start(&[&rsa, &ec]).await;
    let app = app_of(&provider).await;

    let by_rsa = rsa.sign(&claims("auth0|abc123", json!({ "name": "Mei" })));
    let by_ec = ec.sign(&claims("auth0|abc123", json!({})));
    let mei = viewer_id(&app, &by_rsa).await;
    assert_eq!(viewer_id(&app, &by_ec).await, mei, "one subject, one user");
    let data = app
        .data(Some(&by_ec), "{ viewer { name } }", json!({}))
        .await;
    assert_eq!(data["viewer"]["name"], "Mei", "named at first sight");

    let other = viewer_id(&app, &ec.sign(&claims("a3f1c2-uuid", json!({})))).await;
    assert_ne!(other, mei);
    // A numeric subject of a provider not listed in ENGAGE_JWT_NUMERIC_SUBJECT_ISSUERS is
    // the provider's own numbering: mapped like any other, never engage's user 77.
    let numeric = viewer_id(&app, &rsa.sign(&claims("77", json!({})))).await;
    assert_ne!(numeric, "77");
    assert_eq!(
        viewer_id(&app, &ec.sign(&claims("77", json!({})))).await,
        numeric
    );

    // The mapping is in SQL: another instance, with an empty memory, finds the same id.
    let sibling = app.spawn_sibling().await;
    assert_eq!(viewer_id(&sibling, &by_ec).await, mei);
    let stored: i64 = sqlx::query(
        "SELECT user_id FROM user_subjects WHERE issuer = $1 AND subject = 'auth0|abc123'",
    )
    .bind(ISSUER)
    .fetch_one(app.sql())
    .await
    .unwrap()
    .get("user_id");
    assert_eq!(stored.to_string(), mei);

    // Roles come from the configured claim; none, or only unknown names, mean `user`.
    let body = app.gql(Some(&by_rsa), CREATE_ITEM, json!({})).await;
    assert_eq!(first_code(&body), "FORBIDDEN");
    let admin = rsa.sign(&claims(
        "auth0|boss",
        json!({ ROLE_CLAIM: ["viewer", "admin"] }),
    ));
    let data = app.data(Some(&admin), CREATE_ITEM, json!({})).await;
    assert!(data["createItem"]["id"].is_string());
    let stranger = rsa.sign(&claims("auth0|x", json!({ ROLE_CLAIM: "superuser" })));
    let body = app.gql(Some(&stranger), CREATE_ITEM, json!({})).await;
    assert_eq!(first_code(&body), "FORBIDDEN");
}

#[tokio::test]
async fn first_sights_of_one_subject_on_two_instances_at_once_give_one_id() {
    let ec = ProviderKey::ec("ec-1");
    let provider = Provider::start(&[&ec]).await;
    let app = app_of(&provider).await;
    let sibling = app.spawn_sibling().await;
    let mut reads = Vec::new();
    for n in 0..20 {
        let token = ec.sign(&claims(&format!("google-oauth2|{}", n % 4), json!({})));
        let instance = if n % 2 == 0 { &app } else { &sibling };
        reads.push(async move { (n % 4, viewer_id(instance, &token).await) });
    }
    let mut ids: Vec<(i32, String)> = futures::future::join_all(reads).await;
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4, "one id per subject: {ids:?}");
}

#[tokio::test]
async fn tokens_the_provider_did_not_issue_for_this_api_are_refused() {
    let rsa = ProviderKey::rsa("rsa-1");
    let ec = ProviderKey::ec("ec-1");
    let provider = Provider::start(&[&rsa, &ec]).await;
    let app = app_of(&provider).await;
    let now = chrono::Utc::now().timestamp();

    let unpublished = ProviderKey::rsa("rsa-1");
    let public_pem = {
        // The provider's public key, which anyone can read, used as an HMAC secret.
        let n = rsa.jwk["n"].as_str().unwrap().to_string();
        format!("{n}{}", rsa.jwk["e"].as_str().unwrap())
    };
    let mut confused = Header::new(Algorithm::HS256);
    confused.kid = Some("rsa-1".into());
    let mut mislabelled = Header::new(Algorithm::ES256);
    mislabelled.kid = Some("rsa-1".into());
    let tampered = {
        let token = rsa.sign(&claims("auth0|abc", json!({})));
        let parts: Vec<&str> = token.split('.').collect();
        let payload =
            URL_SAFE_NO_PAD.encode(claims("auth0|abc", json!({ ROLE_CLAIM: "admin" })).to_string());
        format!("{}.{payload}.{}", parts[0], parts[2])
    };
    let cases = [
        (
            "another issuer",
            rsa.sign(&claims("a", json!({ "iss": "https://evil.test/" }))),
        ),
        ("no issuer", {
            let mut c = claims("a", json!({}));
            c.as_object_mut().unwrap().remove("iss");
            rsa.sign(&c)
        }),
        (
            "another audience",
            rsa.sign(&claims("a", json!({ "aud": "someone-else" }))),
        ),
        (
            "expired",
            ec.sign(&claims("a", json!({ "exp": now - 600 }))),
        ),
        (
            "not yet valid",
            ec.sign(&claims("a", json!({ "nbf": now + 600 }))),
        ),
        ("no subject", {
            let mut c = claims("a", json!({}));
            c.as_object_mut().unwrap().remove("sub");
            ec.sign(&c)
        }),
        (
            "a subject that is not a string",
            ec.sign(&claims("a", json!({ "sub": 42 }))),
        ),
        (
            "signed by a key the provider does not publish",
            unpublished.sign(&claims("a", json!({}))),
        ),
        (
            "HS256 signed with the provider's public key",
            jsonwebtoken::encode(
                &confused,
                &claims("a", json!({})),
                &EncodingKey::from_secret(public_pem.as_bytes()),
            )
            .unwrap(),
        ),
        (
            "HS256 signed with the development secret",
            jsonwebtoken::encode(
                &Header::new(Algorithm::HS256),
                &claims("7", json!({})),
                &EncodingKey::from_secret(engage::infra::config::DEV_JWT_SECRET.as_bytes()),
            )
            .unwrap(),
        ),
        (
            "an RSA key's kid on an ES256 token",
            jsonwebtoken::encode(&mislabelled, &claims("a", json!({})), &ec.encoding).unwrap(),
        ),
        ("a payload changed after signing", tampered),
    ];
    for (what, token) in cases {
        let body = app.gql(Some(&token), "{ viewer { id } }", json!({})).await;
        assert_eq!(first_code(&body), "UNAUTHENTICATED", "{what}: {body}");
    }
    // engage's own tokens need a secret this server does not have.
    let response = app
        .http
        .post(app.url("/dev/token"))
        .json(&json!({ "userId": 7 }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_rotated_key_is_fetched_when_first_seen_and_made_up_kids_do_not_flood_the_provider() {
    let old = ProviderKey::rsa("2026-10");
    let provider = Provider::start(&[&old]).await;
    // A provider whose subjects are engage ids, so that each token's user is plain to see.
    let url = provider.url.clone();
    let app = TestApp::spawn_with(move |config| {
        config.jwt_secret = None;
        config.jwt_jwks_url = Some(url);
        config.jwt_issuer = Some(ISSUER.into());
        config.jwt_audience = Some(AUDIENCE.into());
        config.jwt_numeric_subject_issuers = Some(ISSUER.into());
    })
    .await;
    assert_eq!(
        viewer_id(&app, &old.sign(&claims("7", json!({})))).await,
        "7"
    );
    let fetched_at_start = provider.fetches();

    // The provider publishes a new key beside the old one, then signs with it.
    let new = ProviderKey::ec("2026-11");
    provider.publish(&[&old, &new]);
    assert_eq!(
        viewer_id(&app, &new.sign(&claims("8", json!({})))).await,
        "8"
    );
    assert_eq!(
        provider.fetches(),
        fetched_at_start + 1,
        "one fetch for the new key"
    );
    // Both keys verify now, from memory.
    assert_eq!(
        viewer_id(&app, &old.sign(&claims("9", json!({})))).await,
        "9"
    );
    assert_eq!(provider.fetches(), fetched_at_start + 1);

    // Tokens with made-up key ids: refused, and they cost the provider a few fetches a
    // minute at most, not one each.
    for n in 0..40 {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(format!("made-up-{n}"));
        let token = jsonwebtoken::encode(&header, &claims("a", json!({})), &new.encoding).unwrap();
        let body = app.gql(Some(&token), "{ viewer { id } }", json!({})).await;
        assert_eq!(first_code(&body), "UNAUTHENTICATED");
    }
    assert!(
        provider.fetches() <= fetched_at_start + 5,
        "{} fetches for 40 unknown kids",
        provider.fetches() - fetched_at_start
    );
    let jwks = app.tokens().jwks().unwrap();
    assert_eq!(jwks.fetches(), provider.fetches());
}
