//! Claims, subjects, key sets and secrets that must not be trusted as they come; writes acknowledged only once announced.
//!
//! - a name with control characters is cleaned, and its user served; a row SQL refuses
//!   (PostgreSQL refuses NUL) costs its own user alone, never the batch of first sights it
//!   came with;
//! - a provider's numeric `sub` is an engage id only from an issuer listed in
//!   `ENGAGE_JWT_NUMERIC_SUBJECT_ISSUERS`;
//! - a key set is read no further than its cap, however it is sent, and production fetches
//!   it over `https://` only;
//! - production refuses a secret that was typed rather than drawn;
//! - a remark acknowledged while Redis refused its announcement is announced once Redis is
//!   back.

use std::{
    convert::Infallible,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use axum::{body::Body, routing::get, Router};
use base64::{engine::general_purpose::STANDARD, Engine};
use engage::app::settings::Settings;
use engage::infra::{
    auth::{Claims, Role},
    config::{Environment, DEV_JWT_SECRET},
};
use futures::StreamExt;
use serde_json::json;
use sqlx::Row;

use crate::{
    faults,
    harness::{base_config, eventually, first_code, global_id, local_id, TestApp},
    oidc::{Provider, ProviderKey, ISSUER},
};

const VIEWER: &str = "{ viewer { id name } }";

/// Which of `ids` have a row in `users`, with their names.
async fn rows_of(app: &TestApp, ids: &[i64]) -> Vec<(i64, String)> {
    let list: Vec<String> = ids.iter().map(i64::to_string).collect();
    let rows = sqlx::query(&format!(
        "SELECT id, name FROM users WHERE id IN ({}) ORDER BY id",
        list.join(", ")
    ))
    .fetch_all(app.sql())
    .await
    .unwrap();
    rows.iter().map(|r| (r.get("id"), r.get("name"))).collect()
}

fn named_token(app: &TestApp, user_id: i64, name: &str) -> String {
    app.signer()
        .mint(user_id, Role::User, 3600, Some(name.into()))
}

#[tokio::test]
async fn a_name_with_control_characters_is_cleaned_and_its_user_served() {
    let app = TestApp::spawn().await;
    let token = named_token(&app, 501, "Mal\u{0}lory\u{1b}[31m\r\n");
    let data = app.data(Some(&token), VIEWER, json!({})).await;
    assert_eq!(data["viewer"]["id"], global_id("User", 501));
    assert_eq!(data["viewer"]["name"], "Mallory[31m");
    // Nothing left of a name but control characters: the placeholder.
    let token = named_token(&app, 502, "\u{0}\u{7}");
    let data = app.data(Some(&token), VIEWER, json!({})).await;
    assert_eq!(data["viewer"]["name"], "user502");
    let mut rows = Vec::new();
    eventually(async || {
        rows = rows_of(&app, &[501, 502]).await;
        rows.len() == 2
    })
    .await;
    assert_eq!(
        rows,
        vec![(501, "Mallory[31m".into()), (502, "user502".into())]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_bad_name_never_keeps_twenty_new_users_from_their_rows() {
    let app = TestApp::spawn_with(|config| {
        config.rate_limit_per_ip = 0;
        config.rate_limit_per_user = 0;
    })
    .await;
    // Over HTTP: an attacker sends a NUL name five times a second while twenty new users
    // arrive.
    let attacker = {
        let app_url = app.url("/graphql");
        let http = app.http.clone();
        let tokens: Vec<String> = (0..20)
            .map(|i| named_token(&app, 900 + i, "evil\u{0}name"))
            .collect();
        tokio::spawn(async move {
            for token in tokens {
                let _ = http
                    .post(&app_url)
                    .bearer_auth(token)
                    .json(&json!({ "query": "{ viewer { id } }" }))
                    .send()
                    .await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let newcomers: Vec<i64> = (1..=20).map(|i| 600 + i).collect();
    for &user in &newcomers {
        let token = named_token(&app, user, &format!("newcomer {user}"));
        app.data(Some(&token), "{ viewer { id } }", json!({})).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    attacker.await.unwrap();
    eventually(async || rows_of(&app, &newcomers).await.len() == 20).await;
    let attackers: Vec<i64> = (900..920).collect();
    eventually(async || rows_of(&app, &attackers).await.len() == 20).await;
    assert!(rows_of(&app, &attackers)
        .await
        .iter()
        .all(|(_, name)| name == "evilname"));

    // Past the token's cleaning, straight into the batch writer: a row SQL refuses
    // (PostgreSQL refuses NUL; SQLite stores it) is written alone, and the twenty users of
    // its batch get their rows all the same.
    let users = app.users();
    let now = app.now_ms();
    let claims = |name: &str| Claims {
        sub: String::new(),
        exp: i64::MAX,
        nbf: None,
        iat: None,
        iss: None,
        name: Some(name.into()),
        zoneinfo: None,
    };
    users.ensure(700, &claims("raw\u{0}name"), now).await;
    let batch: Vec<i64> = (701..=720).collect();
    for &user in &batch {
        users
            .ensure(user, &claims(&format!("batch {user}")), now)
            .await;
    }
    eventually(async || users.first_sights_queued() == 0).await;
    assert_eq!(rows_of(&app, &batch).await.len(), 20);
    if app.sql_backend() == engage::infra::db::Backend::Postgres {
        assert!(rows_of(&app, &[700]).await.is_empty());
        // Forgotten, not marked written: a later request of the user (with a name SQL
        // takes) writes the row.
        users.ensure(700, &claims("repaired"), now).await;
        eventually(async || rows_of(&app, &[700]).await.len() == 1).await;
    }
}

/// An app that takes the provider's tokens from any issuer, and takes numeric subjects of
/// `listed` as engage ids.
async fn provider_app(provider: &Provider, listed: &str) -> TestApp {
    let url = provider.url.clone();
    let listed = listed.to_string();
    TestApp::spawn_with(move |config| {
        config.jwt_secret = None;
        config.jwt_jwks_url = Some(url);
        config.jwt_numeric_subject_issuers = Some(listed);
    })
    .await
}

#[tokio::test]
async fn a_numeric_subject_names_an_engage_id_only_from_a_listed_issuer() {
    let key = ProviderKey::ec("numeric");
    let provider = Provider::start(&[&key]).await;
    let app = provider_app(&provider, &format!(" https://other.test/ , {ISSUER}")).await;
    let now = chrono::Utc::now().timestamp();
    let viewer_of = |iss: Option<&str>| {
        let mut claims = json!({ "sub": "7", "exp": now + 600 });
        if let Some(iss) = iss {
            claims["iss"] = json!(iss);
        }
        key.sign(&claims)
    };
    // The number of the user a token names.
    let id_for = async |token: String| {
        local_id(
            app.data(Some(&token), VIEWER, json!({})).await["viewer"]["id"]
                .as_str()
                .unwrap(),
        )
        .to_string()
    };
    assert_eq!(id_for(viewer_of(Some(ISSUER))).await, "7");
    assert_eq!(id_for(viewer_of(Some("https://other.test/"))).await, "7");
    // Any other issuer, or none: the provider's own numbering, mapped like any subject.
    let unlisted = id_for(viewer_of(Some("https://attacker.test/"))).await;
    assert_ne!(unlisted, "7");
    assert_eq!(
        id_for(viewer_of(Some("https://attacker.test/"))).await,
        unlisted,
        "the same subject maps to the same user"
    );
    let no_issuer = id_for(viewer_of(None)).await;
    assert_ne!(no_issuer, "7");
    assert_ne!(no_issuer, unlisted);
    let mapped: i64 = sqlx::query(
        "SELECT COUNT(*) AS n FROM user_subjects WHERE subject = '7' AND issuer IN \
         ('https://attacker.test/', '')",
    )
    .fetch_one(app.sql())
    .await
    .unwrap()
    .get("n");
    assert_eq!(mapped, 2);

    // With nothing listed, no provider names an engage id, not even a configured issuer.
    let app = provider_app(&provider, "").await;
    let token = viewer_of(Some(ISSUER));
    let id = app.data(Some(&token), VIEWER, json!({})).await["viewer"]["id"].clone();
    assert_ne!(id, "7");
    // engage's own HS256 tokens still do.
    let app = TestApp::spawn().await;
    let data = app.data(Some(&app.user_token(7)), VIEWER, json!({})).await;
    assert_eq!(data["viewer"]["id"], global_id("User", 7));
}

/// A key set that never ends, sent without `Content-Length` (chunked), counting the bytes
/// each response produced.
async fn endless_key_set() -> (String, Arc<Mutex<Vec<Arc<AtomicU64>>>>) {
    let responses: Arc<Mutex<Vec<Arc<AtomicU64>>>> = Arc::default();
    let served = responses.clone();
    let router = Router::new().route(
        "/jwks.json",
        get(move || {
            let sent = Arc::new(AtomicU64::new(0));
            served.lock().unwrap().push(sent.clone());
            async move {
                let chunk = axum::body::Bytes::from(format!("{{\"keys\":[{}", " ".repeat(65_536)));
                // 256 MiB: far past any cap, and more than a test wants to wait for.
                let body = futures::stream::iter(0..4096).map(move |_| {
                    sent.fetch_add(chunk.len() as u64, Ordering::SeqCst);
                    Ok::<_, Infallible>(chunk.clone())
                });
                Body::from_stream(body)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/jwks.json", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (url, responses)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_set_without_content_length_is_given_up_at_its_cap_not_read_whole() {
    let (url, responses) = endless_key_set().await;
    let app = TestApp::spawn_with(move |config| {
        config.jwt_secret = None;
        config.jwt_jwks_url = Some(url);
    })
    .await;
    let key = ProviderKey::ec("big");
    let now = chrono::Utc::now().timestamp();
    let token = key.sign(&json!({ "sub": "a", "exp": now + 600 }));
    let body = app.gql(Some(&token), VIEWER, json!({})).await;
    assert_eq!(first_code(&body), "UNAUTHENTICATED", "{body}");
    // Once a fetch has given up, its response stops being produced; what was produced is
    // the cap and what the sockets' buffers took, not the 256 MiB on offer.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let sent: Vec<u64> = responses
        .lock()
        .unwrap()
        .iter()
        .map(|sent| sent.load(Ordering::SeqCst))
        .collect();
    assert!(!sent.is_empty(), "the key set was fetched");
    for bytes in &sent {
        assert!(*bytes < 32 << 20, "a fetch read {bytes} bytes: {sent:?}");
    }
}

fn production(adjust: impl FnOnce(&mut Settings)) -> anyhow::Result<()> {
    let mut config = base_config();
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.environment = Environment::Production;
    // Metrics on an address of their own, as production wants: only the identity settings
    // are at stake here.
    config.metrics_bind = Some("127.0.0.1:0".parse().unwrap());
    adjust(&mut config);
    config.check()
}

#[test]
fn production_refuses_a_key_set_over_plain_http() {
    let error = production(|c| {
        c.jwt_secret = None;
        c.jwt_jwks_url = Some("http://id.engage.test/.well-known/jwks.json".into());
    })
    .expect_err("http:// is refused in production");
    assert!(error.to_string().contains("https://"), "{error}");
    production(|c| {
        c.jwt_secret = None;
        c.jwt_jwks_url = Some("https://id.engage.test/.well-known/jwks.json".into());
    })
    .expect("https:// is taken");
    // Development keeps http:// for a provider on the same machine.
    let mut config = base_config();
    config.jwt_secret = None;
    config.jwt_jwks_url = Some("http://127.0.0.1:8080/jwks.json".into());
    config.check().expect("development takes http://");
}

#[test]
fn production_refuses_each_shape_of_a_typed_secret_and_takes_a_random_one() {
    let refused = |secret: &str| {
        production(|c| c.jwt_secret = Some(secret.into()))
            .expect_err(secret)
            .to_string()
    };
    for secret in [
        DEV_JWT_SECRET.to_string(),
        DEV_JWT_SECRET.to_uppercase(),
        "Engage-Dev-Secret-Do-Not-Use-In-Production".into(),
        format!("  {DEV_JWT_SECRET}\t"),
    ] {
        let error = refused(&secret);
        assert!(error.contains("development secret"), "{secret}: {error}");
    }
    for secret in [
        "0123456789abcdef0123456789abcdef".to_string(),
        "a".repeat(40),
        "9876543210zyxwvutsrqponmlkjihgfedcba".into(),
        "0123456789ABCDEF".repeat(3),
        "ab".repeat(20),
        "k3Y!".repeat(10),
        "qwertyuiopasdfghjklzxcvbnm1234567890".into(),
        "my-super-secret-password-for-production-2026".into(),
    ] {
        let error = refused(&secret);
        assert!(
            error.contains("random") && error.contains("bits"),
            "{secret}: {error}"
        );
    }
    let mut bytes = [0u8; 32];
    for _ in 0..20 {
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut bytes);
        for secret in [hex::encode(bytes), STANDARD.encode(bytes)] {
            production(|c| c.jwt_secret = Some(secret.clone())).expect(&secret);
        }
    }
    // Development takes any secret of 32 bytes.
    let mut config = base_config();
    config.jwt_secret = Some("0123456789abcdef0123456789abcdef".into());
    config.check().expect("development is not judged");
}

const CREATE_REMARK: &str =
    "mutation($i: ID!) { createRemark(input: { itemId: $i, score: 5, content: \"said\" }) { id } }";
const FEED: &str = "{ feed(first: 20) { edges { node { id } } } }";

/// The remark ids of a reader's feed.
async fn feed_of(app: &TestApp, reader: i64) -> Vec<String> {
    let body = app
        .gql(Some(&app.user_token(reader)), FEED, json!({}))
        .await;
    body["data"]["feed"]["edges"]
        .as_array()
        .map(|edges| {
            edges
                .iter()
                .filter_map(|e| e["node"]["id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remark_acknowledged_while_redis_refused_its_announcement_is_announced_once_redis_is_back(
) {
    let (plug, app) = faults::unpluggable_app().await;
    let (author, reader) = (31, 32);
    app.data(Some(&app.user_token(author)), VIEWER, json!({}))
        .await;
    app.data(
        Some(&app.user_token(reader)),
        "mutation($u: ID!) { follow(userId: $u) }",
        json!({ "u": author.to_string() }),
    )
    .await;
    let before = app.create_item().await;
    let during = app.create_item().await;
    let first = app
        .data(
            Some(&app.user_token(author)),
            CREATE_REMARK,
            json!({ "i": before }),
        )
        .await["createRemark"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    eventually(async || feed_of(&app, reader).await.contains(&first)).await;

    plug.unplug();
    let answer = app
        .gql(
            Some(&app.user_token(author)),
            CREATE_REMARK,
            json!({ "i": during }),
        )
        .await;
    let stored: i64 = sqlx::query("SELECT COUNT(*) AS n FROM remarks WHERE author_id = $1")
        .bind(author)
        .fetch_one(app.sql())
        .await
        .unwrap()
        .get("n");
    let Some(second) = answer["data"]["createRemark"]["id"].as_str() else {
        // Refused (no id could be had without Redis): then nothing may be visible.
        assert_eq!(stored, 1, "a refused remark was stored: {answer}");
        plug.plug_in();
        return;
    };
    let second = second.to_string();
    assert_eq!(stored, 2, "{answer}");
    let pending: i64 = sqlx::query("SELECT COUNT(*) AS n FROM remark_announcements")
        .fetch_one(app.sql())
        .await
        .unwrap()
        .get("n");
    assert_eq!(pending, 1, "the refused announcement is kept for later");

    tokio::time::sleep(Duration::from_secs(1)).await;
    plug.plug_in();
    let started = Instant::now();
    loop {
        if feed_of(&app, reader).await.contains(&second) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the remark never reached its follower's feed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Its points for writing it too, once.
    let points = "{ pointsHistory(first: 20) { edges { node { type points } } } }";
    eventually(async || {
        let body = app
            .gql(Some(&app.user_token(author)), points, json!({}))
            .await;
        let remark_awards = body["data"]["pointsHistory"]["edges"]
            .as_array()
            .map_or(0, |edges| {
                edges
                    .iter()
                    .filter(|e| e["node"]["type"] == "REMARK")
                    .count()
            });
        remark_awards == 2
    })
    .await;
    let pending: i64 = sqlx::query("SELECT COUNT(*) AS n FROM remark_announcements")
        .fetch_one(app.sql())
        .await
        .unwrap()
        .get("n");
    assert_eq!(pending, 0);
}
