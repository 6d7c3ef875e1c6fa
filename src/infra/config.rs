//! Runtime configuration, read once from environment variables (and a `.env` file, loaded
//! before parsing) by clap. Every setting has a default so that `cargo run` works on a fresh
//! machine; every setting is listed in docs/configuration.md.

use std::{net::SocketAddr, time::Duration};

use chrono_tz::Tz;
use clap::{Args, ValueEnum};

use crate::infra::secrets::{self, Weakness, MIN_PRODUCTION_BITS};

/// The development JWT secret. Accepted only with a loud warning at start: anyone who reads
/// this file can mint tokens for a server that uses it.
pub const DEV_JWT_SECRET: &str = "engage-dev-secret-do-not-use-in-production";

/// Where the service runs: what it allows itself follows from this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Environment {
    Development,
    Production,
}

#[derive(Debug, Clone, Args)]
pub struct Config {
    /// Address the HTTP server listens on.
    #[arg(
        long,
        env = "ENGAGE_BIND",
        default_value = "127.0.0.1:8000",
        global = true
    )]
    pub bind: SocketAddr,

    /// Redis 7 or newer: the hot path of every feature. `rediss://` for TLS. In cluster
    /// mode, a comma-separated list of seed nodes (any of them will do; the rest of the
    /// cluster is discovered from them).
    #[arg(
        long,
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379",
        global = true
    )]
    pub redis_url: String,

    /// How requests reach Redis: `shared` (one multiplexed connection every request
    /// pipelines on; about half again the like throughput of the pool in BENCHMARKS.md),
    /// `pool` (a connection lent to each request) or `cluster` (a Redis Cluster: one
    /// multiplexed connection per node, commands routed by their keys' slots).
    #[arg(
        long,
        env = "ENGAGE_REDIS_MODE",
        value_enum,
        default_value_t = crate::infra::redis::RedisMode::Shared,
        global = true
    )]
    pub redis_mode: crate::infra::redis::RedisMode,

    /// Replicas that must hold a write before it is acknowledged (`WAIT N`), for the writes
    /// of `ENGAGE_REDIS_WAIT_WRITES`; 0 acknowledges once the master has it.
    #[arg(
        long,
        env = "ENGAGE_REDIS_WAIT_REPLICAS",
        default_value_t = 0,
        global = true
    )]
    pub redis_wait_replicas: u32,

    /// Which writes wait for `ENGAGE_REDIS_WAIT_REPLICAS` replicas: `orders`, `likes`,
    /// `points`, comma separated.
    #[arg(
        long,
        env = "ENGAGE_REDIS_WAIT_WRITES",
        value_enum,
        value_delimiter = ',',
        default_value = "orders",
        global = true
    )]
    pub redis_wait_writes: Vec<crate::infra::redis::durability::DurableWrite>,

    /// Longest wait for those replicas, in milliseconds; fewer in time answers UNAVAILABLE.
    #[arg(
        long,
        env = "ENGAGE_REDIS_WAIT_TIMEOUT_MS",
        default_value_t = 1000,
        global = true
    )]
    pub redis_wait_timeout_ms: u64,

    /// A PEM file of the certificate authority that signed the Redis servers' TLS
    /// certificates (`rediss://`), when it is not one the system trusts.
    #[arg(long, env = "ENGAGE_REDIS_CA_FILE", global = true)]
    pub redis_ca_file: Option<std::path::PathBuf>,

    /// SQLite (`sqlite://path`, the embedded default) or PostgreSQL (`postgres://…`).
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "sqlite://data/engage.db",
        global = true
    )]
    pub database_url: String,

    /// `development` (the default: `cargo run` works with no configuration) or `production`
    /// (refuses to start without a real token issuer; no dev routes, playground,
    /// introspection or field suggestions unless asked for).
    #[arg(
        long = "env",
        env = "ENGAGE_ENV",
        value_enum,
        default_value = "development",
        global = true
    )]
    pub environment: Environment,

    /// Serve the GraphiQL playground at `/`: default on in development, off in production.
    #[arg(long, env = "ENGAGE_PLAYGROUND", global = true)]
    pub playground: Option<bool>,

    /// Answer introspection queries: default on in development, off in production.
    #[arg(long, env = "ENGAGE_INTROSPECTION", global = true)]
    pub introspection: Option<bool>,

    /// HS256 secret for bearer tokens. Unset (and no JWKS) means the development secret,
    /// with a warning, and only in development.
    #[arg(long, env = "ENGAGE_JWT_SECRET", hide_env_values = true, global = true)]
    pub jwt_secret: Option<String>,

    /// URL of an identity provider's JSON Web Key Set: tokens signed with its RS256, ES256
    /// (and RS384/512, PS256/384/512, ES384, EdDSA) keys are accepted.
    #[arg(long, env = "ENGAGE_JWT_JWKS_URL", global = true)]
    pub jwt_jwks_url: Option<String>,

    /// The `iss` every token must carry; unset: not checked.
    #[arg(long, env = "ENGAGE_JWT_ISSUER", global = true)]
    pub jwt_issuer: Option<String>,

    /// Audiences (comma separated) of which a token's `aud` must name one; unset: not
    /// checked.
    #[arg(long, env = "ENGAGE_JWT_AUDIENCE", global = true)]
    pub jwt_audience: Option<String>,

    /// Issuers (comma separated, each as its tokens' `iss` says it) whose numeric subjects
    /// are engage user ids. Unset: only engage's own HS256 tokens name an id; every other
    /// provider's subject, numeric or not, is mapped to an id of its own at first sight.
    #[arg(long, env = "ENGAGE_JWT_NUMERIC_SUBJECT_ISSUERS", global = true)]
    pub jwt_numeric_subject_issuers: Option<String>,

    /// The claim that holds the role: a name (`role`), a URL-like key
    /// (`https://engage.example/role`) or a dotted path (`realm_access.roles`). A string or
    /// a list of strings; missing or unknown means `user`.
    #[arg(
        long,
        env = "ENGAGE_JWT_ROLE_CLAIM",
        default_value = "role",
        global = true
    )]
    pub jwt_role_claim: String,

    /// IANA time zone that defines "today", months and seasons.
    #[arg(long, env = "ENGAGE_TIMEZONE", default_value = "UTC", global = true)]
    pub timezone: Tz,

    /// Prefix of every Redis key, so that deployments and tests can share one server.
    #[arg(
        long,
        env = "ENGAGE_REDIS_PREFIX",
        default_value = "engage:",
        global = true
    )]
    pub redis_prefix: String,

    /// Largest accepted request body in bytes (larger answers 413).
    #[arg(long, env = "ENGAGE_MAX_BODY_BYTES", default_value_t = 64 * 1024, global = true)]
    pub max_body_bytes: usize,

    /// Longest accepted query text in bytes, on every transport (a persisted query's
    /// registration included); the body cap still bounds the variables around it. A trusted
    /// document may be longer.
    #[arg(
        long,
        env = "ENGAGE_MAX_QUERY_BYTES",
        default_value_t = 16 * 1024,
        global = true
    )]
    pub max_query_bytes: usize,

    /// Deepest accepted selection nesting.
    #[arg(long, env = "ENGAGE_MAX_DEPTH", default_value_t = 16, global = true)]
    pub max_depth: usize,

    /// Highest accepted query complexity (one per field, lists multiply by `first`).
    #[arg(
        long,
        env = "ENGAGE_MAX_COMPLEXITY",
        default_value_t = 2000,
        global = true
    )]
    pub max_complexity: usize,

    /// Sustained requests per second allowed from one client IP (bursts of twice that).
    #[arg(
        long,
        env = "ENGAGE_RATE_LIMIT_PER_IP",
        default_value_t = 100,
        global = true
    )]
    pub rate_limit_per_ip: u32,

    /// Sustained requests per second allowed for one signed-in user (bursts of twice that).
    #[arg(
        long,
        env = "ENGAGE_RATE_LIMIT_PER_USER",
        default_value_t = 30,
        global = true
    )]
    pub rate_limit_per_user: u32,

    /// Take the client IP from `X-Forwarded-For` (only behind a proxy that sets it).
    #[arg(
        long,
        env = "ENGAGE_TRUST_PROXY",
        default_value_t = false,
        global = true
    )]
    pub trust_proxy: bool,

    /// Trusted proxies in front of the service: the client IP is the entry this many places
    /// from the right of `X-Forwarded-For`, the one the outermost trusted proxy added.
    #[arg(
        long,
        env = "ENGAGE_TRUSTED_PROXY_HOPS",
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..=16),
        global = true
    )]
    pub trusted_proxy_hops: u32,

    /// Mutation fields one request may run (aliases and fragments included); each one also
    /// counts against the per-IP and per-user rates.
    #[arg(
        long,
        env = "ENGAGE_MAX_MUTATIONS_PER_REQUEST",
        default_value_t = 20,
        global = true
    )]
    pub max_mutations_per_request: usize,

    /// Operations one batched request (a JSON array body) may carry. Each is admitted and
    /// charged as a request of its own, and the batch's mutation fields together count
    /// against `ENGAGE_MAX_MUTATIONS_PER_REQUEST`. 1 turns batches of more than one away.
    #[arg(long, env = "ENGAGE_MAX_BATCH", default_value_t = 10, global = true)]
    pub max_batch: usize,

    /// The web origins (`https://app.example.com`, comma-separated) whose pages may call
    /// the API from a browser; `*` for any (development only). Unset: `*` in development,
    /// none in production (same-origin only: no CORS headers are sent).
    #[arg(long, env = "ENGAGE_CORS_ORIGINS", global = true)]
    pub cors_origins: Option<String>,

    /// How long shared caches and browsers may keep the answer of an anonymous GET query
    /// of public data (`Cache-Control: public, max-age=N`); 0 marks every answer
    /// `no-store`.
    #[arg(
        long,
        env = "ENGAGE_PUBLIC_MAX_AGE_SECONDS",
        default_value_t = 5,
        global = true
    )]
    pub public_max_age_seconds: u32,

    /// Open client connections (HTTP and WebSocket) one instance serves at once; capped
    /// below the process's file-descriptor limit with a reserve for Redis, SQL and callbacks.
    #[arg(
        long,
        env = "ENGAGE_MAX_CONNECTIONS",
        default_value_t = 10_000,
        global = true
    )]
    pub max_connections: usize,

    /// Seconds a client has to send its request headers (half-open connections are closed).
    #[arg(
        long,
        env = "ENGAGE_HEADER_READ_TIMEOUT_SECONDS",
        default_value_t = 30,
        value_parser = clap::value_parser!(u64).range(1..=300),
        global = true
    )]
    pub header_read_timeout_seconds: u64,

    /// Seconds a request body may take to arrive, in total however it trickles; a handler
    /// still reading it then answers 408 and the connection is closed.
    #[arg(
        long,
        env = "ENGAGE_BODY_READ_TIMEOUT_SECONDS",
        default_value_t = 30,
        value_parser = clap::value_parser!(u64).range(1..=3600),
        global = true
    )]
    pub body_read_timeout_seconds: u64,

    /// Largest request head (request line and headers) in bytes, and so the read buffer a
    /// connection holds while its headers arrive; a larger one answers 431. At least 8192.
    #[arg(
        long,
        env = "ENGAGE_MAX_HEADER_BYTES",
        default_value_t = 32 * 1024,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(8192..=1024 * 1024),
        global = true
    )]
    pub max_header_bytes: usize,

    /// Connections one client address may hold open at once (HTTP and WebSocket); past it
    /// the client is answered 429. Behind a trusted proxy it counts the client's requests in
    /// flight and open WebSockets instead, the proxy's connections being shared. 0: no cap.
    #[arg(
        long,
        env = "ENGAGE_MAX_CONNECTIONS_PER_IP",
        default_value_t = 256,
        global = true
    )]
    pub max_connections_per_ip: usize,

    /// WebSockets one signed-in user may have open at once; past it `connection_init` is
    /// refused with close code 4429. 0: no cap.
    #[arg(
        long,
        env = "ENGAGE_WS_MAX_PER_USER",
        default_value_t = 16,
        global = true
    )]
    pub ws_max_per_user: usize,

    /// Seconds a WebSocket may stay open with no operation running (pings do not count);
    /// it is then closed with 1000.
    #[arg(
        long,
        env = "ENGAGE_WS_IDLE_SECONDS",
        default_value_t = 300,
        value_parser = clap::value_parser!(u64).range(1..=86_400),
        global = true
    )]
    pub ws_idle_seconds: u64,

    /// Operations one WebSocket connection may have running at once (subscriptions
    /// included; `ENGAGE_MAX_SUBSCRIPTIONS` caps those further).
    #[arg(
        long,
        env = "ENGAGE_WS_MAX_OPERATIONS",
        default_value_t = 32,
        global = true
    )]
    pub ws_max_operations: usize,

    /// Longest lifetime of an accepted token in seconds (`exp` minus now, and minus `iat`
    /// when present); unset: any.
    #[arg(long, env = "ENGAGE_JWT_MAX_TTL_SECONDS", global = true)]
    pub jwt_max_ttl_seconds: Option<u64>,

    /// Subscriptions one WebSocket connection may hold at once.
    #[arg(
        long,
        env = "ENGAGE_MAX_SUBSCRIPTIONS",
        default_value_t = 20,
        global = true
    )]
    pub max_subscriptions_per_connection: usize,

    /// Largest query text stored as a persisted query; larger ones run but are not stored.
    #[arg(
        long,
        env = "ENGAGE_APQ_MAX_QUERY_BYTES",
        default_value_t = 16 * 1024,
        global = true
    )]
    pub apq_max_query_bytes: usize,

    /// Bytes all persisted queries together may use in Redis (each counts its length and
    /// 256 bytes of bookkeeping); the least recently used go first to make room.
    #[arg(
        long,
        env = "ENGAGE_APQ_MAX_BYTES",
        default_value_t = 2 * 1024 * 1024,
        global = true
    )]
    pub apq_max_bytes: usize,

    /// Bytes one client IP may register as persisted queries per minute (each counts its
    /// length and 256 bytes of bookkeeping, as in the store), in bursts of twice that; past
    /// it a query runs but is not stored. 0: unbounded.
    #[arg(
        long,
        env = "ENGAGE_APQ_REGISTER_BYTES_PER_IP_PER_MINUTE",
        default_value_t = 32 * 1024,
        global = true
    )]
    pub apq_register_bytes_per_ip_per_minute: u32,

    /// A manifest of trusted documents (graphql-codegen's `persisted-documents.json`: a
    /// JSON object mapping each document's SHA-256 hex to its text), loaded at start and
    /// kept apart from the persisted-query store.
    #[arg(long, env = "ENGAGE_TRUSTED_DOCUMENTS", global = true)]
    pub trusted_documents: Option<std::path::PathBuf>,

    /// Run only the documents of `ENGAGE_TRUSTED_DOCUMENTS`, by text or by hash.
    #[arg(
        long,
        env = "ENGAGE_TRUSTED_DOCUMENTS_ONLY",
        default_value_t = false,
        global = true
    )]
    pub trusted_documents_only: bool,

    /// Sequence numbers the ID generator reserves per Redis round trip.
    #[arg(long, env = "ENGAGE_ID_BLOCK", default_value_t = 64, global = true)]
    pub id_block_size: u32,

    /// Like streams (and the hash tags of remark keys): more shards spread likes over more
    /// Redis Cluster slots and more archive workers. Unset: 4 on one Redis node, 16 on a
    /// cluster.
    #[arg(long, env = "ENGAGE_LIKE_SHARDS", global = true)]
    pub like_shards: Option<u32>,

    /// User buckets of the points keys (daily totals, sign-ins, the season board's parts):
    /// each bucket is one Redis Cluster slot, so more buckets spread points over more
    /// nodes. Unset: 1 on one Redis node, 16 on a cluster. Changing it moves users to other
    /// buckets: run `engage rebuild` after a change.
    #[arg(long, env = "ENGAGE_POINTS_BUCKETS", global = true)]
    pub points_buckets: Option<u32>,

    /// Days a like relation stays in Redis after its last change; older ones are answered
    /// by the SQL archive (so memory stays bounded and a like still counts once).
    #[arg(
        long,
        env = "ENGAGE_LIKE_RELATION_TTL_DAYS",
        default_value_t = 10,
        global = true
    )]
    pub like_relation_ttl_days: u32,

    /// Seconds between refreshes of a cached "recommended remarks" list.
    #[arg(
        long,
        env = "ENGAGE_RECOMMENDED_REFRESH_SECONDS",
        default_value_t = 60,
        global = true
    )]
    pub recommended_refresh_seconds: u64,

    /// How long a page of remarks (with authors) is served from the instance's memory, in
    /// milliseconds; 0 reads SQL every time. A new remark shows at once on the instance that
    /// took it, on others within this time.
    #[arg(
        long,
        env = "ENGAGE_REMARK_PAGE_CACHE_MS",
        default_value_t = 1000,
        global = true
    )]
    pub remark_page_cache_ms: u64,

    /// Longest pause of a stream consumer while SQL fails, in milliseconds.
    #[arg(
        long,
        env = "ENGAGE_CONSUMER_MAX_BACKOFF_MS",
        default_value_t = 30_000,
        global = true
    )]
    pub consumer_max_backoff_ms: u64,

    /// Make-up sign-ins a user may use per month.
    #[arg(
        long,
        env = "ENGAGE_MAKEUP_PER_MONTH",
        default_value_t = 2,
        global = true
    )]
    pub make_ups_per_month: u32,

    /// A TOML file of points rules (see points-rules.example.toml); unset: the defaults.
    #[arg(long, env = "ENGAGE_POINTS_RULES", global = true)]
    pub points_rules: Option<String>,

    /// Seconds between checks for finished seasons to archive.
    #[arg(
        long,
        env = "ENGAGE_ROLLOVER_CHECK_SECONDS",
        default_value_t = 60,
        global = true
    )]
    pub rollover_check_seconds: u64,

    /// Seconds between sweeps for unpaid orders past their pay-by time whose expiry job was
    /// lost (one instance sweeps at a time).
    #[arg(
        long,
        env = "ENGAGE_ORDER_SWEEP_SECONDS",
        default_value_t = 60,
        global = true
    )]
    pub order_sweep_seconds: u64,

    /// Authors with more followers than this are not pushed to inboxes: their remarks are
    /// pulled from their outbox when a follower reads the feed.
    #[arg(
        long,
        env = "ENGAGE_FEED_PUSH_LIMIT",
        default_value_t = 1000,
        global = true
    )]
    pub feed_push_limit: u64,

    /// Entries kept per inbox and per outbox (the oldest are trimmed).
    #[arg(
        long,
        env = "ENGAGE_FEED_INBOX_SIZE",
        default_value_t = 800,
        global = true
    )]
    pub feed_inbox_size: u64,

    /// Order streams of the flash sale (and hash-tag groups of voucher keys). Unset: 4 on
    /// one Redis node, 16 on a cluster.
    #[arg(long, env = "ENGAGE_SALE_SHARDS", global = true)]
    pub sale_shards: Option<u32>,

    /// Hosts (`host` or `host:port`, comma separated) that job callbacks may call. Loopback,
    /// link-local and private addresses are refused unless listed.
    #[arg(long, env = "ENGAGE_CALLBACK_HOSTS", default_value = "", global = true)]
    pub callback_hosts: String,

    /// Seconds a job callback may take.
    #[arg(
        long,
        env = "ENGAGE_CALLBACK_TIMEOUT_SECONDS",
        default_value_t = 10,
        global = true
    )]
    pub callback_timeout_seconds: u64,

    /// Milliseconds between delay-queue ticks (promotion and taking jobs).
    #[arg(
        long,
        env = "ENGAGE_JOBS_TICK_MS",
        default_value_t = 100,
        global = true
    )]
    pub jobs_tick_ms: u64,

    /// Jobs one instance runs at once. Handlers are async (in-process code or an HTTP
    /// callback), so many can wait at once; a take hands out at most as many jobs as there
    /// are free slots, and at 32 a burst of 100,000 due jobs took more than 5 s to deliver.
    #[arg(
        long,
        env = "ENGAGE_JOBS_CONCURRENCY",
        default_value_t = 128,
        global = true
    )]
    pub jobs_concurrency: usize,

    /// Seconds a taken job stays invisible before it is handed out again.
    #[arg(
        long,
        env = "ENGAGE_JOBS_VISIBILITY_SECONDS",
        default_value_t = 60,
        global = true
    )]
    pub jobs_visibility_seconds: u64,

    /// How long an archive (a stream consumer that writes SQL) lets a short batch gather
    /// before it writes: fewer, larger transactions cost SQL less per event; the archive lag
    /// grows by as much.
    #[arg(
        long,
        env = "ENGAGE_ARCHIVE_LINGER_MS",
        default_value_t = 500,
        global = true
    )]
    pub archive_linger_ms: u64,

    /// A stream entry pending this long (milliseconds) with a silent consumer is taken over.
    #[arg(
        long,
        env = "ENGAGE_CONSUMER_CLAIM_IDLE_MS",
        default_value_t = 30_000,
        global = true
    )]
    pub consumer_claim_idle_ms: u64,

    /// Seconds a shutdown waits for in-flight requests and background tasks.
    #[arg(
        long,
        env = "ENGAGE_SHUTDOWN_GRACE_SECONDS",
        default_value_t = 10,
        global = true
    )]
    pub shutdown_grace_seconds: u64,

    /// Seconds between SIGTERM and closing the listener: `/readyz` answers 503 (draining)
    /// while requests are still served, so that a load balancer takes the instance out of
    /// rotation before connections are refused. 0 closes the listener at once.
    #[arg(long, env = "ENGAGE_DRAIN_SECONDS", default_value_t = 5, global = true)]
    pub drain_seconds: u64,

    /// A separate address for `/metrics` (e.g. `10.0.0.5:9100`, one only the monitoring
    /// network reaches); the public listener then answers `/metrics` with 404. Unset: in
    /// development `/metrics` is served on `ENGAGE_BIND`; production refuses to start
    /// unless `ENGAGE_METRICS_PUBLIC=true`.
    #[arg(long, env = "ENGAGE_METRICS_BIND", global = true)]
    pub metrics_bind: Option<SocketAddr>,

    /// Serve `/metrics` on `ENGAGE_BIND` too: default on in development without
    /// `ENGAGE_METRICS_BIND`, off otherwise. Production without `ENGAGE_METRICS_BIND`
    /// starts only when this is `true`.
    #[arg(long, env = "ENGAGE_METRICS_PUBLIC", global = true)]
    pub metrics_public: Option<bool>,

    /// Sustained `/readyz` and `/metrics` requests per second allowed from one client IP,
    /// the two together (bursts of twice that; 0 disables). A load balancer and Prometheus
    /// poll a few times a second at most; `/healthz` is never limited.
    #[arg(
        long,
        env = "ENGAGE_PROBE_RATE_PER_IP",
        default_value_t = 20,
        global = true
    )]
    pub probe_rate_per_ip: u32,

    /// Log lines on stderr: `text` (for people; colour codes only at a terminal) or `json`
    /// (one object a line, with the request id and, when traces are exported, the trace id).
    #[arg(
        long,
        env = "ENGAGE_LOG_FORMAT",
        value_enum,
        default_value_t = crate::infra::telemetry::LogFormat::Text,
        global = true
    )]
    pub log_format: crate::infra::telemetry::LogFormat,
}

/// The shortest secret accepted: HS256 keys shorter than its 256-bit output are guessable.
pub const MIN_JWT_SECRET_BYTES: usize = 32;
/// A board read asks every bucket, so buckets are bounded by what one read may ask.
pub const MAX_POINTS_BUCKETS: u32 = 1024;

impl Config {
    /// The points buckets in effect: as set, or what suits the Redis mode.
    pub fn points_buckets(&self) -> u32 {
        self.points_buckets.unwrap_or(self.by_mode(1, 16))
    }

    /// The like shards in effect: as set, or what suits the Redis mode.
    pub fn like_shards(&self) -> u32 {
        self.like_shards.unwrap_or(self.by_mode(4, 16)).max(1)
    }

    /// The sale shards in effect: as set, or what suits the Redis mode.
    pub fn sale_shards(&self) -> u32 {
        self.sale_shards.unwrap_or(self.by_mode(4, 16)).max(1)
    }

    /// One value for one Redis node, another for a cluster, where each shard or bucket is a
    /// slot the cluster can place on any node: 16 spread a feature over the masters of any
    /// cluster up to 16 masters (4 would leave a master of a 5-node cluster without it).
    fn by_mode(&self, single: u32, cluster: u32) -> u32 {
        match self.redis_mode {
            crate::infra::redis::RedisMode::Cluster => cluster,
            _ => single,
        }
    }

    /// Refuses settings that would leave the service open (no real token issuer in
    /// production, a short secret, a guessable one or a key set over plain HTTP in
    /// production, the development secret and with it `/dev/token` on an address other
    /// hosts can reach, production metrics on the public address unasked, or every web
    /// origin allowed in production) or would not do what they say (waiting for replicas
    /// through a pool, an allowed origin that is not an origin, a batch of no operations).
    pub fn check(&self) -> anyhow::Result<()> {
        if !(1..=MAX_POINTS_BUCKETS).contains(&self.points_buckets()) {
            anyhow::bail!(
                "ENGAGE_POINTS_BUCKETS must be between 1 and {MAX_POINTS_BUCKETS}, got {}",
                self.points_buckets()
            );
        }
        self.check_tokens()?;
        if self.trusted_documents_only && self.trusted_documents.is_none() {
            anyhow::bail!(
                "ENGAGE_TRUSTED_DOCUMENTS_ONLY needs ENGAGE_TRUSTED_DOCUMENTS, the manifest of \
                 the documents to run"
            );
        }
        self.check_metrics()?;
        self.check_cors()?;
        if self.max_batch == 0 {
            anyhow::bail!("ENGAGE_MAX_BATCH must be at least 1");
        }
        if self.redis_wait_replicas > 0 && self.redis_mode == crate::infra::redis::RedisMode::Pool {
            anyhow::bail!(
                "ENGAGE_REDIS_WAIT_REPLICAS needs ENGAGE_REDIS_MODE=shared or cluster: WAIT \
                 covers the writes of the connection it is sent on, and a pool lends each \
                 request another"
            );
        }
        Ok(())
    }

    /// Where `/metrics` is served: never on the public address in production unless asked
    /// for, since it tells anyone what the instance is doing (its error rates, its queues,
    /// its memory). Refusing to start, rather than quietly serving no metrics, keeps a
    /// deployment from discovering the missing address only when it needs its graphs.
    fn check_metrics(&self) -> anyhow::Result<()> {
        if self
            .metrics_bind
            .is_some_and(|metrics| metrics == self.bind && metrics.port() != 0)
        {
            anyhow::bail!(
                "ENGAGE_METRICS_BIND is {}, the address of ENGAGE_BIND: give metrics an address \
                 of their own, or unset it to serve /metrics on ENGAGE_BIND",
                self.bind
            );
        }
        if self.is_production() && self.metrics_bind.is_none() && self.metrics_public != Some(true)
        {
            anyhow::bail!(
                "ENGAGE_ENV=production serves /metrics on an address of its own: set \
                 ENGAGE_METRICS_BIND (e.g. 10.0.0.5:9100, one only the monitoring network \
                 reaches), or ENGAGE_METRICS_PUBLIC=true to serve /metrics on ENGAGE_BIND"
            );
        }
        Ok(())
    }

    /// Which origins may call from a browser: each a valid origin, and `*` only in
    /// development. A production API open to every page lets any site a signed-in user
    /// visits read what that user's tokens read, once a token leaks to script; naming the
    /// apps' origins is the deployment's decision, so production does not guess.
    fn check_cors(&self) -> anyhow::Result<()> {
        let origins = comma_separated(self.cors_origins.as_deref());
        if origins.iter().any(|origin| origin == "*") {
            if self.is_production() {
                anyhow::bail!(
                    "ENGAGE_CORS_ORIGINS is *, which lets every web page call this API; \
                     production needs the origins of its web apps, comma-separated (e.g. \
                     https://app.example.com,https://admin.example.com), or leave it unset \
                     to serve same-origin pages only"
                );
            }
            return Ok(());
        }
        for origin in &origins {
            if !is_origin(origin) {
                anyhow::bail!(
                    "ENGAGE_CORS_ORIGINS holds {origin:?}, which is not an origin: write each \
                     as a browser sends it, scheme://host[:port] with no path or trailing \
                     slash (e.g. https://app.example.com)"
                );
            }
        }
        Ok(())
    }

    /// The origins allowed to call from a browser: `None` for any, else the list (empty:
    /// same-origin only), from `ENGAGE_CORS_ORIGINS` or the environment's default.
    pub fn cors_origins(&self) -> Option<Vec<String>> {
        let origins = match &self.cors_origins {
            Some(list) => comma_separated(Some(list)),
            None if self.is_production() => Vec::new(),
            None => return None,
        };
        if origins.iter().any(|origin| origin == "*") {
            return None;
        }
        Some(origins)
    }

    /// Who may issue tokens: a secret of enough bytes, a key set, or (in development, on a
    /// loopback address) the development secret.
    fn check_tokens(&self) -> anyhow::Result<()> {
        match self.jwt_secret.as_deref() {
            Some("") => anyhow::bail!(
                "ENGAGE_JWT_SECRET is set but empty; set it to a secret of at least \
                 {MIN_JWT_SECRET_BYTES} bytes, or unset it"
            ),
            Some(secret) if secret.len() < MIN_JWT_SECRET_BYTES => anyhow::bail!(
                "ENGAGE_JWT_SECRET is {} bytes long; it must be at least {MIN_JWT_SECRET_BYTES} \
                 (e.g. `openssl rand -hex 32`)",
                secret.len()
            ),
            Some(secret) if self.is_production() => match secrets::weakness(secret, DEV_JWT_SECRET)
            {
                Some(Weakness::Development) => anyhow::bail!(
                    "ENGAGE_JWT_SECRET is the development secret (whatever its case or \
                     spacing), which anyone can read; production needs a random one (e.g. \
                     `openssl rand -hex 32`)"
                ),
                Some(Weakness::Guessable { bits }) => anyhow::bail!(
                    "ENGAGE_JWT_SECRET looks typed, not random: it is worth about {bits:.0} \
                     bits once runs, sequences, repeated patterns and words are discounted, \
                     and production needs {MIN_PRODUCTION_BITS:.0}; use a random one (e.g. \
                     `openssl rand -hex 32`)"
                ),
                None => {}
            },
            _ => {}
        }
        if let Some(url) = self.jwt_jwks_url.as_deref() {
            let parsed = reqwest::Url::parse(url)
                .map_err(|e| anyhow::anyhow!("ENGAGE_JWT_JWKS_URL {url:?} is not a URL: {e}"))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                anyhow::bail!("ENGAGE_JWT_JWKS_URL must be an http(s) URL, got {url:?}");
            }
            // Whoever can change the key set in transit can sign any token; development
            // keeps plain HTTP for an identity provider on the same machine.
            if self.is_production() && parsed.scheme() != "https" {
                anyhow::bail!(
                    "ENGAGE_JWT_JWKS_URL is {url:?}: production fetches the token key set over \
                     https:// only, since anyone who can change it in transit can sign tokens"
                );
            }
        }
        if self.jwt_secret.is_some() || self.jwt_jwks_url.is_some() {
            return Ok(());
        }
        if self.is_production() {
            anyhow::bail!(
                "ENGAGE_ENV=production needs a token issuer: set ENGAGE_JWT_JWKS_URL (an \
                 identity provider's keys) or ENGAGE_JWT_SECRET (at least \
                 {MIN_JWT_SECRET_BYTES} random bytes). The development secret is refused"
            );
        }
        if !self.bind.ip().is_loopback() {
            anyhow::bail!(
                "neither ENGAGE_JWT_SECRET nor ENGAGE_JWT_JWKS_URL is set, so tokens would be \
                 signed with the development secret that anyone can read, and /dev/token \
                 would mint them for anyone; that is only allowed on a loopback address, and \
                 ENGAGE_BIND is {}. Set ENGAGE_JWT_SECRET (at least {MIN_JWT_SECRET_BYTES} \
                 bytes) or ENGAGE_JWT_JWKS_URL to listen there",
                self.bind
            );
        }
        Ok(())
    }

    pub fn is_production(&self) -> bool {
        self.environment == Environment::Production
    }

    /// The HS256 secret: the configured one; in development the development one when no
    /// issuer at all is configured; none otherwise.
    pub fn jwt_secret(&self) -> Option<&str> {
        match &self.jwt_secret {
            Some(secret) => Some(secret),
            None if self.uses_dev_secret() => Some(DEV_JWT_SECRET),
            None => None,
        }
    }

    /// Tokens are signed with the development secret (and `/dev/token` mints them).
    pub fn uses_dev_secret(&self) -> bool {
        self.jwt_secret.is_none() && self.jwt_jwks_url.is_none() && !self.is_production()
    }

    /// The audiences a token may name, from the comma-separated setting.
    pub fn jwt_audiences(&self) -> Vec<String> {
        comma_separated(self.jwt_audience.as_deref())
    }

    /// The issuers whose numeric subjects are engage ids, from the comma-separated setting.
    pub fn jwt_numeric_subject_issuers(&self) -> Vec<String> {
        comma_separated(self.jwt_numeric_subject_issuers.as_deref())
    }

    /// The playground at `/`: as set, else only in development.
    pub fn playground_enabled(&self) -> bool {
        self.playground.unwrap_or(!self.is_production())
    }

    /// `/metrics` on the public listener: as set, else only without an address of its own
    /// (production without one does not start, [`Config::check`]).
    pub fn metrics_public(&self) -> bool {
        self.metrics_public.unwrap_or(self.metrics_bind.is_none())
    }

    /// Introspection queries: as set, else only in development.
    pub fn introspection_enabled(&self) -> bool {
        self.introspection.unwrap_or(!self.is_production())
    }

    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace_seconds)
    }

    pub fn drain_window(&self) -> Duration {
        Duration::from_secs(self.drain_seconds)
    }
}

/// The entries of a comma-separated setting, trimmed, empty ones left out.
fn comma_separated(list: Option<&str>) -> Vec<String> {
    list.iter()
        .flat_map(|list| list.split(','))
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(str::to_string)
        .collect()
}

/// Whether `text` is an origin as browsers send it in `Origin`: `http` or `https`, a host
/// and an optional port, nothing after.
fn is_origin(text: &str) -> bool {
    let Some((scheme, rest)) = text.split_once("://") else {
        return false;
    };
    // An IPv6 host is bracketed (`[::1]`): its colons are not a port's.
    let host = match rest.rsplit_once(':') {
        Some((host, port)) if !rest.ends_with(']') => {
            if port.parse::<u16>().is_err() {
                return false;
            }
            host
        }
        _ => rest,
    };
    matches!(scheme, "http" | "https")
        && !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.[]:".contains(&b))
}
