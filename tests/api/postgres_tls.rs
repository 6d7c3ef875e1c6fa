//! PostgreSQL over TLS (`sslmode` and `sslrootcert` in `DATABASE_URL`): a throwaway
//! PostgreSQL made for the test in a temporary folder, on a free loopback port, that accepts
//! only TLS connections, with a certificate for `localhost` signed by a private authority
//! made by the test. engage must start, migrate and serve over it with
//! `sslmode=verify-full`, and refuse a server whose certificate names another host or was
//! signed by another authority.
//!
//! The shared PostgreSQL of the other tests is left alone: this one is started and stopped
//! here (as the `postgres` user when the tests run as root, which PostgreSQL refuses to run
//! as). Without PostgreSQL's server programs the test fails rather than passing unseen.

use std::{
    net::TcpListener,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use engage::infra::db::Db;

use crate::harness::TestApp;

/// A PostgreSQL server of the test's own; stopped when dropped.
struct TlsPostgres {
    bin: PathBuf,
    port: u16,
    dir: tempfile::TempDir,
}

impl TlsPostgres {
    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn file(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    /// A `DATABASE_URL` for `host` with these TLS parameters.
    fn url(&self, host: &str, tls: &str) -> String {
        format!("postgres://postgres@{host}:{}/postgres?{tls}", self.port)
    }
}

impl Drop for TlsPostgres {
    fn drop(&mut self) {
        let _ = as_postgres(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }
}

/// The newest PostgreSQL's programs in Debian's layout.
fn postgres_bin() -> PathBuf {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .expect("PostgreSQL's server programs (initdb, pg_ctl) under /usr/lib/postgresql/*/bin")
}

/// `program`, run as the `postgres` user when the tests run as root.
fn as_postgres(program: &Path) -> Command {
    let root = std::fs::metadata("/proc/self").is_ok_and(|me| me.uid() == 0);
    if root {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

fn run(command: &mut Command) {
    let output = command.output().expect("the program runs");
    assert!(
        output.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn start_tls_postgres() -> TlsPostgres {
    let bin = postgres_bin();
    let dir = tempfile::tempdir().unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = TlsPostgres { bin, port, dir };

    let (ca, certificate, key) = crate::harness::authority_and_server();
    let (other_ca, _, _) = crate::harness::authority_and_server();
    std::fs::write(server.file("ca.pem"), ca).unwrap();
    std::fs::write(server.file("other-ca.pem"), other_ca).unwrap();
    std::fs::write(server.file("server.pem"), certificate).unwrap();
    std::fs::write(server.file("server.key"), key).unwrap();
    // PostgreSQL reads its key only when no one else may.
    run(Command::new("chmod")
        .arg("600")
        .arg(server.file("server.key")));
    if std::fs::metadata("/proc/self").is_ok_and(|me| me.uid() == 0) {
        run(Command::new("chown")
            .args(["-R", "postgres:"])
            .arg(server.dir.path()));
    }

    run(as_postgres(&server.bin.join("initdb"))
        .arg("-D")
        .arg(server.data())
        .args(["-U", "postgres", "-A", "trust", "--no-sync"]));
    let settings = format!(
        "listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{dir}'\n\
         fsync = off\nssl = on\nssl_cert_file = '{cert}'\nssl_key_file = '{key}'\n",
        dir = server.dir.path().display(),
        cert = server.file("server.pem"),
        key = server.file("server.key"),
    );
    append(&server.data().join("postgresql.conf"), &settings);
    // TLS or nothing: a connection that got through was encrypted.
    std::fs::write(
        server.data().join("pg_hba.conf"),
        "hostssl all all 127.0.0.1/32 trust\nhostnossl all all 127.0.0.1/32 reject\n",
    )
    .unwrap();
    run(as_postgres(&server.bin.join("pg_ctl"))
        .arg("-D")
        .arg(server.data())
        .arg("-l")
        .arg(server.file("postgres.log"))
        .args(["-w", "start"]));
    server
}

fn append(path: &Path, text: &str) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    file.write_all(text.as_bytes()).unwrap();
}

/// Why connecting to `url` failed (it must fail).
async fn refusal(url: &str) -> String {
    match Db::connect(url).await {
        Ok(_) => panic!("{url} was accepted"),
        Err(error) => format!("{error:#}"),
    }
}

#[tokio::test]
async fn over_tls_with_a_private_authority_engage_migrates_and_serves_and_refuses_impostors() {
    let started = Instant::now();
    let postgres = start_tls_postgres();
    let ca = postgres.file("ca.pem");
    let verified = postgres.url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );

    let app = TestApp::spawn_with(|config| config.database_url = verified.clone()).await;
    // A request that writes SQL (items are stored there), over the encrypted connection.
    app.create_item().await;
    let encrypted: bool =
        sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            .fetch_one(app.sql())
            .await
            .unwrap();
    assert!(encrypted);
    let items: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM items")
        .fetch_one(app.sql())
        .await
        .unwrap();
    assert_eq!(items, 1);

    // `require` encrypts without checking who answers (127.0.0.1 is not the certificate's
    // name, and no authority is given); `verify-ca` checks the authority. (sqlx 0.8 checks
    // the name under `verify-ca` too, see docs/configuration.md.)
    Db::connect(&postgres.url("127.0.0.1", "sslmode=require"))
        .await
        .unwrap();
    let ca_only = format!("sslmode=verify-ca&sslrootcert={ca}");
    Db::connect(&postgres.url("localhost", &ca_only))
        .await
        .unwrap();

    // A certificate for another name, or from another authority, is refused.
    let full = format!("sslmode=verify-full&sslrootcert={ca}");
    let wrong_name = refusal(&postgres.url("127.0.0.1", &full)).await;
    assert!(wrong_name.contains("certificate"), "{wrong_name}");
    let other_ca = postgres.file("other-ca.pem");
    let impostor = format!("sslmode=verify-full&sslrootcert={other_ca}");
    let untrusted = refusal(&postgres.url("localhost", &impostor)).await;
    assert!(untrusted.contains("certificate"), "{untrusted}");
    // And the server takes nothing in clear.
    let clear = refusal(&postgres.url("localhost", "sslmode=disable")).await;
    assert!(clear.contains("no encryption"), "{clear}");

    drop(app);
    drop(postgres);
    eprintln!("PostgreSQL over TLS checked in {:?}", started.elapsed());
}
