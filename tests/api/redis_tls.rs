//! Redis over TLS (`rediss://`): a real `redis-server` with a TLS port and a certificate of a
//! private authority made for the test. Every connection of the app (requests, the live hub,
//! the stream consumers) must reach it, trusting the authority named by
//! `ENGAGE_REDIS_CA_FILE`, and a server whose certificate is not trusted must be refused.

use std::{
    net::TcpListener,
    path::Path,
    process::{Child, Command, Stdio},
    time::Duration,
};

use engage::{app::App, infra::redis::RedisMode};
use serde_json::json;

use crate::harness::{next_data, subscribe, TestApp};

/// A redis-server that speaks only TLS, on a free port; killed when dropped.
struct TlsRedis {
    port: u16,
    process: Child,
    dir: tempfile::TempDir,
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// A certificate authority and a server certificate for `localhost` signed by it, written
/// as `ca.pem`, `server.pem` and `server.key` in `dir`.
fn make_certificates(dir: &Path) {
    let (ca, server, key) = crate::harness::authority_and_server();
    std::fs::write(dir.join("ca.pem"), ca).unwrap();
    std::fs::write(dir.join("server.pem"), server).unwrap();
    std::fs::write(dir.join("server.key"), key).unwrap();
}

fn start_tls_redis() -> TlsRedis {
    let dir = tempfile::tempdir().unwrap();
    make_certificates(dir.path());
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let file = |name: &str| dir.path().join(name).display().to_string();
    let process = Command::new("redis-server")
        .args(["--port", "0", "--tls-port", &port.to_string()])
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(["--tls-cert-file", &file("server.pem")])
        .args(["--tls-key-file", &file("server.key")])
        .args(["--tls-ca-cert-file", &file("ca.pem")])
        .args(["--tls-auth-clients", "no"])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server is on the PATH");
    TlsRedis { port, process, dir }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_with_a_private_authority_likes_count_and_reach_subscribers() {
    let redis = start_tls_redis();
    let url = format!("rediss://localhost:{}", redis.port);
    let ca = redis.dir.path().join("ca.pem");
    // The server needs a moment to listen.
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", redis.port)).is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let app = TestApp::spawn_with(|config| {
        config.redis_url = url.clone();
        config.redis_mode = RedisMode::Shared;
        config.redis_ca_file = Some(ca.clone());
    })
    .await;

    let item = app.create_item().await;
    let input = json!({ "input": { "itemId": item, "score": 5, "content": "over TLS" } });
    let created = app
        .data(
            Some(&app.user_token(1)),
            "mutation($input: CreateRemarkInput!) { createRemark(input: $input) { id } }",
            input,
        )
        .await;
    let remark = created["createRemark"]["id"].as_str().unwrap().to_string();
    let query = format!(
        "subscription {{ likeCountChanged(remarkIds: [\"{remark}\"]) {{ remarkId likeCount }} }}"
    );
    let mut socket = subscribe(&app, None, &query).await;
    assert_eq!(
        next_data(&mut socket).await["likeCountChanged"]["likeCount"],
        0
    );

    let liked = app
        .data(
            Some(&app.user_token(2)),
            "mutation($id: ID!) { likeRemark(remarkId: $id) { likeCount } }",
            json!({ "id": remark }),
        )
        .await;
    assert_eq!(liked["likeRemark"]["likeCount"], 1);
    assert_eq!(
        next_data(&mut socket).await["likeCountChanged"]["likeCount"],
        1
    );
    // The archive (a stream consumer on its own TLS connection) writes the like to SQL.
    crate::harness::eventually(async || {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM vote_log")
            .fetch_one(app.sql())
            .await
            .is_ok_and(|n| n == 1)
    })
    .await;

    // Without the authority, the server's certificate is not trusted: no start.
    let mut untrusted = crate::harness::base_config();
    untrusted.bind = "127.0.0.1:0".parse().unwrap();
    untrusted.redis_url = url;
    untrusted.redis_mode = RedisMode::Shared;
    untrusted.database_url = format!("sqlite://{}/untrusted.db", redis.dir.path().display());
    let error = App::start(untrusted).await.err().expect("refused");
    assert!(format!("{error:#}").contains("certificate"), "{error:#}");
}
