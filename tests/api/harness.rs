//! Starts the whole app in-process on a random port, against the real Redis (a key prefix of
//! its own) and a real database (a temporary SQLite file, or a fresh PostgreSQL schema when
//! `TEST_DATABASE_URL` points at PostgreSQL). Everything is removed when the test ends;
//! nothing shared is flushed.

use std::time::Duration;

use clap::Parser;
use engage::{
    app::{cli::Cli, settings::Settings, App, AppState},
    features::{
        boards::Boards, feed::Feed, jobs::Jobs, leaderboard::Leaderboards, nearby::Nearby,
        recovery::Rebuilt, remarks::Remarks, users::UserDirectory, vouchers::Vouchers,
    },
    infra::{
        auth::{Role, Tokens},
        clock::Month,
        config::Config,
        db::Backend,
        error::AppResult,
        recovery::Report,
        redis::{counting::CountedConnection, Keys, RedisConn, RedisMode, RedisTarget},
        Infra,
    },
};
use serde_json::{json, Value};

pub struct TestApp {
    pub base: String,
    /// The started instance's state: reached only through the methods below, which name
    /// what a test looks at or does behind the API's back.
    state: AppState,
    pub http: reqwest::Client,
    server: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    /// What SIGTERM is to `engage serve`: the `stop` the server was started with.
    terminate: tokio_util::sync::CancellationToken,
    cleanup: Option<Cleanup>,
    _sqlite_dir: Option<tempfile::TempDir>,
}

struct Cleanup {
    redis: RedisTarget,
    redis_prefix: String,
    postgres: Option<(String, String)>,
}

/// A configuration with the defaults and environment of a real start.
pub fn base_config() -> Settings {
    Cli::try_parse_from(["engage"])
        .expect("defaults parse")
        .config
}

/// One Redis node, for the tests of one node's outages: `REDIS_URL` itself, or when the
/// suite runs against a cluster, `TEST_NODE_REDIS_URL` (default: the local Redis).
pub fn node_redis_url() -> String {
    let config = base_config();
    match config.redis_mode {
        RedisMode::Cluster => {
            std::env::var("TEST_NODE_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
        }
        _ => config.infra.redis_url,
    }
}

/// Settings without the per-address and per-user limits, for tests that send many requests
/// from the one loopback address.
pub fn unlimited(config: &mut Settings) {
    config.max_connections_per_ip = 0;
    config.rate_limit_per_ip = 0;
    config.rate_limit_per_user = 0;
}

impl TestApp {
    pub async fn spawn() -> Self {
        Self::spawn_with(|_| {}).await
    }

    pub async fn spawn_with(adjust: impl FnOnce(&mut Settings)) -> Self {
        // Logs of the app under test, shown for failing tests (RUST_LOG, default: warnings).
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "warn".into()),
            )
            .with_test_writer()
            .try_init();
        let unique = uuid::Uuid::new_v4().simple().to_string();
        let mut config = base_config();
        config.bind = "127.0.0.1:0".parse().unwrap();
        config.redis_prefix = format!("engage-test:{unique}:");
        // 244 random bits: production's check of the secret (some tests run production)
        // asks for 128 by its estimate, which a single UUID's 122 do not reach.
        let random = uuid::Uuid::new_v4().simple();
        config.jwt_secret = Some(format!("test-secret-{unique}{random}"));
        config.shutdown_grace_seconds = 5;

        let mut sqlite_dir = None;
        let mut postgres = None;
        match std::env::var("TEST_DATABASE_URL")
            .ok()
            .filter(|u| u.starts_with("postgres"))
        {
            Some(url) => {
                let schema = format!("t_{unique}");
                let admin = sqlx::PgPool::connect(&url)
                    .await
                    .expect("TEST_DATABASE_URL answers");
                sqlx::query(&format!("CREATE SCHEMA {schema}"))
                    .execute(&admin)
                    .await
                    .unwrap();
                admin.close().await;
                let separator = if url.contains('?') { '&' } else { '?' };
                // The application name lets the cleanup end this app's sessions, whatever
                // they hold, before it drops the schema.
                config.database_url = format!(
                    "{url}{separator}options=-c%20search_path%3D{schema}&application_name={schema}"
                );
                postgres = Some((url, schema));
            }
            None => {
                let dir = tempfile::tempdir().expect("temp dir");
                config.database_url = format!("sqlite://{}/engage.db", dir.path().display());
                sqlite_dir = Some(dir);
            }
        }
        adjust(&mut config);

        let cleanup = Cleanup {
            redis: RedisTarget::new(
                &config.redis_url,
                config.redis_mode,
                config.redis_ca_file.as_deref(),
            )
            .expect("a valid REDIS_URL"),
            redis_prefix: config.redis_prefix.clone(),
            postgres,
        };
        Self::start(config, Some(cleanup), sqlite_dir).await
    }

    async fn start(
        config: Settings,
        cleanup: Option<Cleanup>,
        sqlite_dir: Option<tempfile::TempDir>,
    ) -> Self {
        let app = App::start(config).await.expect("the app starts");
        let base = format!("http://{}", app.local_addr());
        let state = app.state.clone();
        let terminate = tokio_util::sync::CancellationToken::new();
        let server = tokio::spawn(app.serve(terminate.clone().cancelled_owned()));
        Self {
            base,
            state,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
            server: Some(server),
            terminate,
            cleanup,
            _sqlite_dir: sqlite_dir,
        }
    }

    /// A second instance sharing this one's Redis prefix and database, as a second server
    /// behind the same load balancer would. It leaves the cleanup to the first, and starts
    /// on the first's clock (a test set on a date works on that date in both), which each
    /// then keeps on its own.
    pub async fn spawn_sibling(&self) -> Self {
        let mut config = self.state.config.clone();
        config.bind = "127.0.0.1:0".parse().unwrap();
        let sibling = Self::start(config, None, None).await;
        sibling.set_clock(self.now());
        sibling
    }

    /// An item created by an admin; its id.
    pub async fn create_item(&self) -> String {
        let query = "mutation { createItem(input: { name: \"Tea House\" }) { id } }";
        let data = self.data(Some(&self.admin_token()), query, json!({})).await;
        data["createItem"]["id"]
            .as_str()
            .expect("an item id")
            .to_string()
    }

    /// A remark by `author` on `item`; its id.
    pub async fn create_remark_on(&self, author: i64, item: &str) -> String {
        let input = json!({ "input": {
            "itemId": item, "score": 5, "content": format!("review by {author}") } });
        let query = "mutation($input: CreateRemarkInput!) { createRemark(input: $input) { id } }";
        let data = self
            .data(Some(&self.user_token(author)), query, input)
            .await;
        data["createRemark"]["id"]
            .as_str()
            .expect("a remark id")
            .to_string()
    }

    /// A remark by `author` on a new item; its id.
    pub async fn create_remark(&self, author: i64) -> String {
        let item = self.create_item().await;
        self.create_remark_on(author, &item).await
    }

    /// `voter` likes (or unlikes) the remark: the payload's `remarkId`, `likeCount`, `liked`
    /// and `changed`.
    pub async fn vote(&self, voter: i64, remark: &str, like: bool) -> Value {
        let field = if like { "likeRemark" } else { "unlikeRemark" };
        let query = format!(
            "mutation($id: ID!) {{ {field}(remarkId: $id) {{ remarkId likeCount liked changed }} }}"
        );
        let data = self
            .data(
                Some(&self.user_token(voter)),
                &query,
                json!({ "id": remark }),
            )
            .await;
        data[field].clone()
    }

    /// `follower` follows `followee`, who must be known (have made a request).
    pub async fn follow(&self, follower: i64, followee: i64) {
        let data = self
            .data(
                Some(&self.user_token(follower)),
                "mutation($u: ID!) { follow(userId: $u) }",
                json!({ "u": global_id("User", followee) }),
            )
            .await;
        assert_eq!(data["follow"], true, "{follower} follows {followee}");
    }

    /// A voucher on a new item, on sale from a minute ago for an hour, with `stock` and
    /// `pay_within` seconds to pay; its id.
    pub async fn create_voucher(&self, stock: i64, pay_within: i64) -> String {
        let now = self.now();
        let input = json!({
            "itemId": self.create_item().await, "title": "Half price", "stock": stock,
            "beginsAt": (now - chrono::Duration::minutes(1)).to_rfc3339(),
            "endsAt": (now + chrono::Duration::hours(1)).to_rfc3339(),
            "payWithinSeconds": pay_within,
        });
        let query = "mutation($input: CreateVoucherInput!) { createVoucher(input: $input) { id } }";
        let data = self
            .data(Some(&self.admin_token()), query, json!({ "input": input }))
            .await;
        data["createVoucher"]["id"]
            .as_str()
            .expect("a voucher id")
            .to_string()
    }

    /// A flash-sale attempt by the holder of `token` that must succeed; the order's id.
    pub async fn seckill(&self, token: &str, voucher: &str) -> String {
        let query = "mutation($v: ID!) { seckillVoucher(voucherId: $v) { id } }";
        let data = self.data(Some(token), query, json!({ "v": voucher })).await;
        data["seckillVoucher"]["id"]
            .as_str()
            .expect("an order id")
            .to_string()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// GETs a path and returns the body as text (whatever the status).
    pub async fn get_text(&self, path: &str) -> String {
        self.http
            .get(self.url(path))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    pub fn ws_url(&self) -> String {
        self.url("/graphql").replacen("http", "ws", 1)
    }

    pub fn token(&self, user_id: i64, role: Role) -> String {
        self.signer().mint(user_id, role, 3600, None)
    }

    /// What signs this app's tokens (the configured secret), for tokens a test shapes itself.
    pub fn signer(&self) -> Tokens {
        Tokens::signer(&self.state.config)
    }

    /// The shared secret tokens are signed with.
    pub fn jwt_secret(&self) -> String {
        self.state
            .config
            .jwt_secret()
            .expect("a shared secret")
            .to_string()
    }

    /// The token check the app runs (its identity provider's keys, when it has one).
    pub fn tokens(&self) -> &Tokens {
        &self.state.gateway.tokens
    }

    /// The configuration the app was started with.
    pub fn config(&self) -> &Config {
        &self.state.config
    }

    pub fn user_token(&self, user_id: i64) -> String {
        self.token(user_id, Role::User)
    }

    pub fn admin_token(&self) -> String {
        self.token(1, Role::Admin)
    }

    /// POSTs a GraphQL request and returns the JSON body (whatever the status).
    pub async fn gql(&self, token: Option<&str>, query: &str, variables: Value) -> Value {
        let mut request = self
            .http
            .post(self.url("/graphql"))
            .json(&json!({ "query": query, "variables": variables }));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request
            .send()
            .await
            .expect("request sent")
            .json()
            .await
            .expect("JSON body")
    }

    /// A job's `fields` (a selection of `Job`), as the service reads them.
    pub async fn job(&self, topic: &str, id: &str, fields: &str) -> Value {
        let query = format!(
            "query($topic: String!, $id: ID!) {{ job(topic: $topic, id: $id) {{ {fields} }} }}"
        );
        let variables = json!({ "topic": topic, "id": id });
        self.data(Some(&self.admin_token()), &query, variables)
            .await["job"]
            .clone()
    }

    /// `data` of a request that must succeed.
    pub async fn data(&self, token: Option<&str>, query: &str, variables: Value) -> Value {
        let body = self.gql(token, query, variables).await;
        assert!(body.get("errors").is_none(), "unexpected errors: {body}");
        body["data"].clone()
    }

    /// The app's database, to read what it wrote or to write behind its back.
    pub fn sql(&self) -> &sqlx::AnyPool {
        &self.state.infra.db.pool
    }

    /// Which SQL the app speaks.
    pub fn sql_backend(&self) -> Backend {
        self.state.infra.db.backend
    }

    /// A connection from the app's own Redis pool.
    pub async fn redis_connection(&self) -> RedisConn<'_> {
        self.state.infra.redis.get().await.expect("Redis answers")
    }

    /// [`TestApp::redis_connection`], or `None` while Redis does not answer.
    pub async fn try_redis_connection(&self) -> Option<RedisConn<'_>> {
        self.state.infra.redis.get().await.ok()
    }

    /// The app's key names (its prefix, its shards, its hash tags).
    pub fn keys(&self) -> &Keys {
        &self.state.infra.keys
    }

    /// The infrastructure, for the tests of its parts (locks, streams, recovery runs).
    pub fn infra(&self) -> &Infra {
        &self.state.infra
    }

    /// Whether Redis is a cluster.
    pub fn on_cluster(&self) -> bool {
        self.state.infra.instance.redis.is_cluster()
    }

    /// This instance's name among its siblings (its stream consumer's, its locks' owner).
    pub fn instance_id(&self) -> String {
        self.state.infra.instance.id.to_string()
    }

    /// Redis round trips the app has made so far.
    pub fn redis_round_trips(&self) -> u64 {
        self.state
            .infra
            .redis_round_trips
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Redis commands the app has sent so far (a script call is one).
    pub fn redis_commands(&self) -> u64 {
        self.state
            .infra
            .redis_commands
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// How many subscriptions of this instance listen on a live channel.
    pub fn listeners_here(&self, channel: &str) -> usize {
        self.state.infra.live.local_subscribers(channel)
    }

    /// A fresh id from the app's generator.
    pub async fn next_id(&self) -> i64 {
        self.state.infra.ids.next_id().await.expect("an id")
    }

    /// The app's time (which tests may move).
    pub fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.state.infra.clock.now()
    }

    /// [`TestApp::now`] in milliseconds since the epoch.
    pub fn now_ms(&self) -> i64 {
        self.state.infra.clock.now_ms()
    }

    /// The month (the season) of the app's time.
    pub fn current_month(&self) -> Month {
        self.state.infra.clock.current_month()
    }

    /// Moves the app's time by `by` (backwards when negative).
    pub fn advance_clock(&self, by: chrono::Duration) {
        self.state.infra.clock.advance(by)
    }

    /// Sets the app's time to `at`.
    pub fn set_clock(&self, at: chrono::DateTime<chrono::Utc>) {
        self.state.infra.clock.set(at)
    }

    /// How many shards the likes of remarks are spread over.
    pub fn remark_shards(&self) -> u32 {
        self.state.features.remarks.settings.shards()
    }

    /// How many shards a sale's orders are spread over.
    pub fn sale_shards(&self) -> u32 {
        self.state.features.vouchers.shards()
    }

    /// What every feature's check of Redis against SQL finds.
    pub async fn verify_all(&self) -> AppResult<Vec<Report>> {
        self.state.features.verify().await
    }

    /// Rebuilds every feature's Redis state from SQL, as `engage rebuild` does.
    pub async fn rebuild_from_sql(&self) -> AppResult<Vec<Rebuilt>> {
        self.state.features.rebuild(&self.state.infra, false).await
    }

    /// The users seen so far (their records, the first sights still to write).
    pub fn users(&self) -> &UserDirectory {
        &self.state.features.users
    }

    /// The delayed jobs: their registry of handlers, scheduling, checks.
    pub fn jobs(&self) -> &Jobs {
        &self.state.features.jobs
    }

    /// Gives `topic` an in-process handler that does nothing, as a topic must have one (or
    /// its jobs a callback) for jobs of it to be scheduled.
    pub fn handle_topic(&self, topic: &str) {
        struct Idle;
        #[async_trait::async_trait]
        impl engage::features::jobs::JobHandler for Idle {
            async fn handle(
                &self,
                _: &engage::features::jobs::handlers::Delivery,
            ) -> Result<(), engage::features::jobs::JobError> {
                Ok(())
            }
        }
        self.jobs()
            .registry
            .register(topic, std::sync::Arc::new(Idle), None);
    }

    pub fn remarks(&self) -> &Remarks {
        &self.state.features.remarks
    }

    pub fn leaderboards(&self) -> &Leaderboards {
        &self.state.features.leaderboard
    }

    pub fn boards(&self) -> &Boards {
        &self.state.features.boards
    }

    pub fn vouchers(&self) -> &Vouchers {
        &self.state.features.vouchers
    }

    pub fn feed(&self) -> &Feed {
        &self.state.features.feed
    }

    pub fn nearby(&self) -> &Nearby {
        &self.state.features.nearby
    }

    /// Whether the instance has begun to shut down.
    pub fn shutting_down(&self) -> bool {
        self.state.infra.instance.shutdown.is_cancelled()
    }

    /// Stops the server at once, without the drain window, and waits for it.
    pub async fn shutdown(&mut self) -> anyhow::Result<()> {
        self.state.infra.instance.shutdown.cancel();
        self.stopped().await
    }

    /// Tells the server to stop as SIGTERM does: it drains for `ENGAGE_DRAIN_SECONDS`,
    /// then shuts down. [`TestApp::stopped`] waits for it.
    pub fn terminate(&self) {
        self.terminate.cancel();
    }

    /// Waits for the server to return.
    pub async fn stopped(&mut self) -> anyhow::Result<()> {
        match self.server.take() {
            Some(server) => server.await.expect("server task"),
            None => Ok(()),
        }
    }
}

/// Polls `check` every 50 ms until it holds, for at most 10 s: for effects that background
/// consumers bring about after a request has been answered.
pub async fn eventually(check: impl AsyncFnMut() -> bool) {
    eventually_within("a condition", Duration::from_secs(10), check).await;
}

/// Waits until `check` holds, failing with `what` after `limit`.
pub async fn eventually_within(what: &str, limit: Duration, mut check: impl AsyncFnMut() -> bool) {
    let started = std::time::Instant::now();
    while !check().await {
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `group` has read and acknowledged everything in each of `streams`.
pub async fn streams_settled(app: &TestApp, streams: &[String], group: &str) {
    let mut conn = redis(app).await;
    for _ in 0..300 {
        let mut settled = true;
        for stream in streams {
            let Ok(info) = redis::cmd("XINFO")
                .arg("STREAM")
                .arg(stream)
                .query_async::<redis::streams::StreamInfoStreamReply>(&mut conn)
                .await
            else {
                continue; // no stream yet: nothing to archive
            };
            let groups: redis::streams::StreamInfoGroupsReply = redis::cmd("XINFO")
                .arg("GROUPS")
                .arg(stream)
                .query_async(&mut conn)
                .await
                .unwrap_or_default();
            match groups.groups.iter().find(|g| g.name == group) {
                Some(g) => {
                    settled &= g.pending == 0 && g.last_delivered_id == info.last_generated_id
                }
                None => settled &= info.length == 0,
            }
        }
        if settled {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("{group} did not catch up with {streams:?}");
}

pub type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A `graphql-transport-ws` connection (acknowledged, with a token if given) running one
/// subscription under the id "1".
pub async fn subscribe(app: &TestApp, token: Option<&str>, query: &str) -> Socket {
    subscribe_as(app, "graphql-transport-ws", "1", token, query).await
}

/// [`subscribe`] in `protocol` (`graphql-transport-ws` or the legacy `graphql-ws`), as
/// operation `id`.
pub async fn subscribe_as(
    app: &TestApp,
    protocol: &str,
    id: &str,
    token: Option<&str>,
    query: &str,
) -> Socket {
    use futures::SinkExt;
    use tokio_tungstenite::tungstenite::{client::IntoClientRequest, Message};

    let mut request = app.ws_url().into_client_request().unwrap();
    request
        .headers_mut()
        .insert("sec-websocket-protocol", protocol.parse().unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(request)
        .await
        .expect("upgrade accepted");
    let payload = token.map_or(
        json!({}),
        |token| json!({ "Authorization": format!("Bearer {token}") }),
    );
    let init = json!({ "type": "connection_init", "payload": payload });
    socket.send(Message::text(init.to_string())).await.unwrap();
    assert_eq!(next_message(&mut socket).await["type"], "connection_ack");
    let start = if protocol == "graphql-ws" {
        "start"
    } else {
        "subscribe"
    };
    let subscribe = json!({ "id": id, "type": start, "payload": { "query": query } });
    socket
        .send(Message::text(subscribe.to_string()))
        .await
        .unwrap();
    socket
}

/// The next text message, as JSON (within ten seconds).
pub async fn next_message(socket: &mut Socket) -> Value {
    use futures::StreamExt;
    use tokio_tungstenite::tungstenite::Message;

    loop {
        let message = tokio::time::timeout(Duration::from_secs(10), socket.next())
            .await
            .expect("a message within 10s")
            .expect("the socket is open")
            .expect("a readable message");
        if let Message::Text(text) = message {
            return serde_json::from_str(&text).unwrap();
        }
    }
}

/// `data` of the next `next` message.
pub async fn next_data(socket: &mut Socket) -> Value {
    loop {
        let message = next_message(socket).await;
        if message["type"] == "next" {
            return message["payload"]["data"].clone();
        }
    }
}

/// The `extensions.code` of the first error.
pub fn first_code(body: &Value) -> &str {
    body["errors"][0]["extensions"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("no error code in {body}"))
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.state.infra.instance.shutdown.cancel();
        let Some(cleanup) = self.cleanup.take() else {
            return;
        };
        // Async work cannot run in Drop; a short-lived runtime on its own thread does it.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(cleanup.run());
        })
        .join();
    }
}

impl Cleanup {
    async fn run(self) {
        if let Ok(mut conn) = engage::infra::redis::dedicated(&self.redis).await {
            let pattern = format!("{}*", self.redis_prefix);
            let _ = engage::infra::redis::unlink_matching(&mut conn, &pattern).await;
        }
        if let Some((url, schema)) = self.postgres {
            use sqlx::Connection;
            if let Ok(mut conn) = sqlx::PgConnection::connect(&url).await {
                // A task of the app stopped mid-transaction may still hold locks; its
                // session goes first, then the schema.
                let _ = sqlx::query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
                )
                .bind(&schema)
                .execute(&mut conn)
                .await;
                let _ = sqlx::query("SET lock_timeout = '10s'")
                    .execute(&mut conn)
                    .await;
                let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                    .execute(&mut conn)
                    .await;
                let _ = conn.close().await;
            }
        }
    }
}

/// A URL query component: unreserved characters kept, every other byte `%XX`.
pub fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Every key matching `pattern` in the whole keyspace (on every master of a cluster).
/// A walk that fails part-way (a cluster node slow to answer while the whole suite runs on
/// two cores) is walked again, a few times.
pub async fn scan(app: &TestApp, pattern: &str) -> Vec<String> {
    let mut tries = 0;
    loop {
        match app.state.infra.redis.scan(pattern).await {
            Ok(keys) => return keys,
            Err(error) if tries < 3 => {
                tries += 1;
                eprintln!("scan of {pattern} failed ({error}); walking again");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            Err(error) => panic!("scan of {pattern}: {error}"),
        }
    }
}

/// Removes `keys` (one UNLINK each: on a cluster they live in many slots).
pub async fn unlink(app: &TestApp, keys: &[String]) {
    let mut conn = redis(app).await;
    let mut unlink = redis::pipe();
    for key in keys {
        unlink.cmd("UNLINK").arg(key).ignore();
    }
    let () = unlink.query_async(&mut conn).await.unwrap();
}

/// How many connections listen on a live channel (sharded on a cluster).
pub async fn listeners(app: &TestApp, channel: &str) -> i64 {
    let mut conn = redis(app).await;
    let reply = match conn.as_cluster().cloned() {
        Some(cluster) => {
            let count = redis::cmd("PUBSUB").arg("SHARDNUMSUB").arg(channel).clone();
            cluster.query_at_key(channel, &count).await
        }
        None => {
            redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(channel)
                .query_async(&mut conn)
                .await
        }
    };
    let (_, listeners): (String, i64) =
        redis::FromRedisValue::from_redis_value(reply.unwrap()).expect("a channel and its count");
    listeners
}

/// A Redis connection of the test's own to the app's Redis (one node or the cluster).
pub async fn redis(app: &TestApp) -> CountedConnection {
    engage::infra::redis::dedicated(&app.state.infra.instance.redis)
        .await
        .expect("Redis answers")
}

/// A private certificate authority and a certificate for `localhost` signed by it: the
/// PEMs of the authority, the certificate and its key (for the TLS tests of Redis and SQL).
pub fn authority_and_server() -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "engage test authority");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let server_key = rcgen::KeyPair::generate().unwrap();
    let server = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&server_key, &ca)
        .unwrap();
    (ca.pem(), server.pem(), server_key.serialize_pem())
}

/// An HTTP client whose connections leave from `local`, a loopback address other than
/// 127.0.0.1 (all of 127.0.0.0/8 reaches the app): the rules kept per client address see it
/// as another client.
pub fn client_from(local: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(local.parse::<std::net::IpAddr>().unwrap())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// The app's listening address.
pub fn server_address(app: &TestApp) -> std::net::SocketAddr {
    app.base.trim_start_matches("http://").parse().unwrap()
}

/// A TCP connection to the app from `local` (a loopback address).
pub async fn tcp_from(app: &TestApp, local: &str) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(std::net::SocketAddr::new(local.parse().unwrap(), 0))
        .unwrap();
    socket.connect(server_address(app)).await.unwrap()
}

/// A WebSocket of `via`'s protocol from `local`, before `connection_init`; the HTTP status
/// when the upgrade is refused.
pub async fn websocket_from(
    app: &TestApp,
    local: &str,
    via: crate::via::Via,
) -> Result<Socket, u16> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let stream = tcp_from(app, local).await;
    let mut request = app.ws_url().into_client_request().unwrap();
    let protocol = if via == crate::via::Via::LegacyWs {
        "graphql-ws"
    } else {
        "graphql-transport-ws"
    };
    request
        .headers_mut()
        .insert("sec-websocket-protocol", protocol.parse().unwrap());
    let stream = tokio_tungstenite::MaybeTlsStream::Plain(stream);
    match tokio_tungstenite::client_async(request, stream).await {
        Ok((socket, _)) => Ok(socket),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            Err(response.status().as_u16())
        }
        Err(error) => panic!("the upgrade failed: {error}"),
    }
}

/// The global id clients are given for object `local` of GraphQL type `type_name`: what
/// graphql-relay's `toGlobalId` writes, the padded base64 of `Type:local`.
pub fn global_id(type_name: &str, local: impl std::fmt::Display) -> String {
    use base64::{engine::general_purpose::STANDARD, Engine};
    STANDARD.encode(format!("{type_name}:{local}"))
}

/// The local id of an object's global id: its row's id in SQL, its keys' in Redis.
pub fn local_id(global: &str) -> i64 {
    use base64::{engine::general_purpose::STANDARD, Engine};
    let decoded = STANDARD
        .decode(global)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .unwrap_or_else(|| panic!("{global:?} is not a global id"));
    decoded
        .split_once(':')
        .and_then(|(_, local)| local.parse().ok())
        .unwrap_or_else(|| panic!("{decoded:?} has no numeric local id"))
}
