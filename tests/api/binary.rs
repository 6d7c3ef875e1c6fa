//! The built `engage` binary, run as an operator runs it: what it writes from start to a
//! clean stop, and what it exports before it has done anything.

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{Arc, Mutex},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use serde_json::Value;

/// `engage serve` running on a port of its own, with a Redis prefix and a database of its own
/// (a schema of `TEST_DATABASE_URL` when that is PostgreSQL, else a SQLite file).
pub struct Engage {
    child: Child,
    pub base: String,
    stdout: JoinHandle<Vec<String>>,
    stderr: JoinHandle<Vec<String>>,
    redis_prefix: String,
    database_url: String,
    env: Vec<(String, String)>,
    postgres: Option<(String, String)>,
    _sqlite_dir: Option<tempfile::TempDir>,
}

/// What the binary wrote, once it stopped.
pub struct Stopped {
    pub status: ExitStatus,
    pub stdout: Vec<String>,
    pub stderr: Vec<String>,
}

/// Collects the lines of `stream` on a thread, sending each to `seen` as well.
fn lines(
    stream: impl std::io::Read + Send + 'static,
    seen: Arc<Mutex<Vec<String>>>,
) -> JoinHandle<Vec<String>> {
    std::thread::spawn(move || {
        let mut all = Vec::new();
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            seen.lock().unwrap().push(line.clone());
            all.push(line);
        }
        all
    })
}

impl Engage {
    /// Starts the binary with `env` (besides its own address, prefix and database) and
    /// waits until it says where it listens.
    pub async fn start(env: &[(&str, &str)]) -> Self {
        let unique = uuid::Uuid::new_v4().simple().to_string();
        let redis_prefix = format!("engage-test:{unique}:");
        let mut postgres = None;
        let mut sqlite_dir = None;
        let database_url = match std::env::var("TEST_DATABASE_URL")
            .ok()
            .filter(|url| url.starts_with("postgres"))
        {
            Some(url) => {
                let schema = format!("t_{unique}");
                let admin = sqlx::PgPool::connect(&url).await.unwrap();
                sqlx::query(&format!("CREATE SCHEMA {schema}"))
                    .execute(&admin)
                    .await
                    .unwrap();
                admin.close().await;
                let separator = if url.contains('?') { '&' } else { '?' };
                let with_schema = format!("{url}{separator}options=-c%20search_path%3D{schema}");
                postgres = Some((url, schema));
                with_schema
            }
            None => {
                let dir = tempfile::tempdir().unwrap();
                let url = format!("sqlite://{}/engage.db", dir.path().display());
                sqlite_dir = Some(dir);
                url
            }
        };
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let (child, base, stdout, stderr) = launch(&env, &redis_prefix, &database_url).await;
        Self {
            child,
            base,
            stdout,
            stderr,
            redis_prefix,
            database_url,
            env,
            postgres,
            _sqlite_dir: sqlite_dir,
        }
    }

    /// Starts the binary on the Redis prefix and the database of another (a test's app): it
    /// leaves them to their owner's cleanup.
    pub async fn start_on(redis_prefix: &str, database_url: &str, env: &[(&str, &str)]) -> Self {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let (child, base, stdout, stderr) = launch(&env, redis_prefix, database_url).await;
        Self {
            child,
            base,
            stdout,
            stderr,
            redis_prefix: redis_prefix.to_string(),
            database_url: database_url.to_string(),
            env,
            postgres: None,
            _sqlite_dir: None,
        }
    }

    /// Ends the process with SIGKILL, as a crash would: nothing of it runs after, and it
    /// cleans nothing up.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL is sent");
        self.child.wait().expect("the killed process is reaped");
    }

    /// Kills the process with SIGKILL, as a crash would end it (no drain, nothing handed
    /// back), then starts another on the same Redis prefix and database.
    pub async fn crash_and_restart(&mut self) {
        self.child.kill().expect("SIGKILL is sent");
        self.child.wait().expect("the killed process is reaped");
        let (child, base, stdout, stderr) =
            launch(&self.env, &self.redis_prefix, &self.database_url).await;
        self.child = child;
        self.base = base;
        self.stdout = stdout;
        self.stderr = stderr;
    }

    pub async fn get_text(&self, path: &str) -> String {
        reqwest::get(format!("{}{path}", self.base))
            .await
            .unwrap()
            .error_for_status()
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Sends SIGTERM and waits for the process to end; then removes its Redis keys and its
    /// schema.
    pub async fn stop(mut self) -> Stopped {
        let kill = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(kill.success());
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > Duration::from_secs(30) {
                let _ = self.child.kill();
                panic!("engage did not stop within 30 s of SIGTERM");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let stopped = Stopped {
            status,
            stdout: std::mem::replace(&mut self.stdout, std::thread::spawn(Vec::new))
                .join()
                .unwrap(),
            stderr: std::mem::replace(&mut self.stderr, std::thread::spawn(Vec::new))
                .join()
                .unwrap(),
        };
        self.clean_up().await;
        stopped
    }

    async fn clean_up(&mut self) {
        // On a cluster the keys stay where they are: the cluster of a test run is stopped
        // and removed after it, and a plain client cannot reach every node's keys.
        let config = crate::harness::base_config();
        let client = (config.redis_mode != engage::infra::redis::RedisMode::Cluster)
            .then(|| redis::Client::open(config.infra.redis_url).unwrap());
        let conn = match &client {
            Some(client) => client.get_multiplexed_async_connection().await.ok(),
            None => None,
        };
        if let Some(mut conn) = conn {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("{}*", self.redis_prefix))
                .query_async(&mut conn)
                .await
                .unwrap_or_default();
            for key in keys {
                let _: Result<(), _> = redis::cmd("DEL").arg(key).query_async(&mut conn).await;
            }
        }
        if let Some((url, schema)) = self.postgres.take() {
            if let Ok(admin) = sqlx::PgPool::connect(&url).await {
                let _ = sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
                    .execute(&admin)
                    .await;
                admin.close().await;
            }
        }
    }
}

/// Spawns the binary and waits until it says where it listens.
async fn launch(
    env: &[(String, String)],
    redis_prefix: &str,
    database_url: &str,
) -> (
    Child,
    String,
    JoinHandle<Vec<String>>,
    JoinHandle<Vec<String>>,
) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_engage"));
    command
        .arg("serve")
        .env("ENGAGE_BIND", "127.0.0.1:0")
        .env("ENGAGE_REDIS_PREFIX", redis_prefix)
        .env("DATABASE_URL", database_url)
        // No drain window: the stop is clean but immediate.
        .env("ENGAGE_DRAIN_SECONDS", "0")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("the binary runs");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let stdout = lines(child.stdout.take().unwrap(), seen.clone());
    let stderr = lines(child.stderr.take().unwrap(), seen.clone());
    let started = Instant::now();
    let base = loop {
        let address = seen.lock().unwrap().iter().find_map(|line| {
            let rest = &line[line.find("listening on http://")? + "listening on ".len()..];
            Some(
                rest.split([' ', '"', '\\'])
                    .next()
                    .unwrap_or_default()
                    .to_string(),
            )
        });
        if let Some(address) = address {
            break address;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "engage stopped at start ({status}): {:?}",
                seen.lock().unwrap()
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "engage did not say where it listens: {:?}",
            seen.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    (child, base, stdout, stderr)
}

impl Drop for Engage {
    fn drop(&mut self) {
        // A test that failed before `stop`: the process does not outlive it.
        let _ = self.child.kill();
    }
}

#[tokio::test]
async fn every_line_written_from_start_to_a_clean_stop_is_json_in_json_mode() {
    let engage = Engage::start(&[("ENGAGE_LOG_FORMAT", "json")]).await;
    // Some work between start and stop: a request (its access line) and a scrape.
    engage.get_text("/healthz").await;
    engage.get_text("/metrics").await;
    let stopped = engage.stop().await;
    assert!(stopped.status.success(), "{}", stopped.status);
    let lines: Vec<&String> = stopped.stdout.iter().chain(&stopped.stderr).collect();
    for line in &lines {
        let parsed: Result<Value, _> = serde_json::from_str(line);
        assert!(
            parsed.is_ok_and(|value| value.is_object()),
            "not a JSON object: {line:?}"
        );
    }
    let said = |words: &str| lines.iter().any(|line| line.contains(words));
    assert!(said("listening on http://127.0.0.1:"), "{lines:#?}");
    assert!(said("playground at http://"), "{lines:#?}");
    assert!(said("shutting down"), "{lines:#?}");
}

#[tokio::test]
async fn in_production_the_banner_names_no_playground() {
    let secret = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let engage = Engage::start(&[
        ("ENGAGE_ENV", "production"),
        ("ENGAGE_JWT_SECRET", &secret),
        ("ENGAGE_METRICS_PUBLIC", "true"),
    ])
    .await;
    let stopped = engage.stop().await;
    let lines: Vec<&String> = stopped.stdout.iter().chain(&stopped.stderr).collect();
    assert!(
        lines
            .iter()
            .any(|line| line.contains("listening on http://")),
        "{lines:#?}"
    );
    assert!(
        !lines.iter().any(|line| line.contains("playground")),
        "{lines:#?}"
    );
}
