//! Redis access: the connection pool, the key builder and the embedded Lua scripts.

pub(crate) mod cluster;
pub mod counting;
pub mod durability;
pub(crate) mod keys;
mod node;
pub(crate) mod runner;
pub mod scripts;
pub(crate) mod spans;
pub(crate) mod status;
pub(crate) mod target;

use std::{net::ToSocketAddrs, process::Command, time::Duration};

use anyhow::{bail, Context};
use redis::AsyncCommands;

pub(crate) use keys::KeyPart;
pub use keys::Keys;
pub use target::RedisTarget;

/// How requests reach Redis (`ENGAGE_REDIS_MODE`):
/// - `Pool`: bb8 lends each request a connection of its own (up to 32);
/// - `Shared`: every request clones one auto-reconnecting multiplexed connection, so the
///   commands of concurrent requests leave pipelined on one socket and Redis reads many per
///   system call (engage's own over TCP, [`node`]; the crate's over TLS or a Unix socket);
/// - `Cluster`: the same over a Redis Cluster: one multiplexed connection per master, each
///   command sent to the master of its keys' slot (engage's own client, see [`cluster`]).
///
/// `bench/run` measures both on the like path; BENCHMARKS.md has the figures behind the
/// default.
///
/// The shared and cluster modes keep a second connection (per node) for the writes that
/// wait for replicas ([`durability`]): a `WAIT` holds up every command queued behind it on
/// its connection, and a slow replica must not hold up the likes and reads of the others.
#[derive(Clone)]
pub enum RedisPool {
    Pool(bb8::Pool<counting::CountingManager>),
    Shared {
        requests: counting::CountedConnection,
        durable: counting::CountedConnection,
    },
    Cluster {
        requests: counting::CountedConnection,
        durable: counting::CountedConnection,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RedisMode {
    Pool,
    Shared,
    Cluster,
}

impl RedisMode {
    /// A feature's number of shards or buckets by default: one value for one Redis node,
    /// another for a cluster, where each shard or bucket is a slot the cluster can place on
    /// any node: 16 spread a feature over the masters of any cluster up to 16 masters (4
    /// would leave a master of a 5-node cluster without it).
    pub fn spread(self, one_node: u32, cluster: u32) -> u32 {
        match self {
            RedisMode::Cluster => cluster,
            RedisMode::Pool | RedisMode::Shared => one_node,
        }
    }
}

/// How the live hub's cluster connection (the `redis` crate's, for sharded pub/sub) connects.
/// A subscription whose slot has no master (a failover under way) is retried with waits of
/// 0.1 to 1 s; MOVED and ASK are followed at once.
pub(crate) fn cluster_builder(target: &RedisTarget) -> redis::cluster::ClusterClientBuilder {
    target
        .cluster()
        .connection_timeout(CONNECTION_TIMEOUT)
        .response_timeout(RESPONSE_TIMEOUT)
        .retries(CLUSTER_RETRIES)
        .min_retry_wait(100)
        .max_retry_wait(1000)
}

/// Retries of a hub subscription (redirections and failovers): with waits of 0.1–1 s, about
/// the 5–10 s a replica takes to be promoted.
const CLUSTER_RETRIES: u32 = 10;

/// A Redis that does not accept a connection within this is down: fail the request.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);
/// The `redis` crate's default (500 ms) failed healthy commands on a busy 2-core machine
/// (Redis shares the cores with the server); a reply slower than this means Redis is in
/// trouble, and the request answers UNAVAILABLE.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);

/// How a connection to one node connects and waits for replies.
fn node_config() -> redis::AsyncConnectionConfig {
    redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECTION_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
}

/// A connection lent to one request.
pub enum RedisConn<'a> {
    Pooled(bb8::PooledConnection<'a, counting::CountingManager>),
    Shared(counting::CountedConnection),
}

impl std::ops::Deref for RedisConn<'_> {
    type Target = counting::CountedConnection;

    fn deref(&self) -> &Self::Target {
        match self {
            Self::Pooled(conn) => conn,
            Self::Shared(conn) => conn,
        }
    }
}

impl std::ops::DerefMut for RedisConn<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        match self {
            Self::Pooled(conn) => conn,
            Self::Shared(conn) => conn,
        }
    }
}

impl RedisPool {
    pub async fn get(&self) -> Result<RedisConn<'_>, bb8::RunError<redis::RedisError>> {
        match self {
            Self::Pool(pool) => pool.get().await.map(RedisConn::Pooled),
            Self::Shared { requests, .. } | Self::Cluster { requests, .. } => {
                Ok(RedisConn::Shared(requests.clone()))
            }
        }
    }

    /// The connection for writes that wait for replicas, and for their `WAIT`.
    pub(crate) async fn get_durable(
        &self,
    ) -> Result<RedisConn<'_>, bb8::RunError<redis::RedisError>> {
        match self {
            Self::Pool(_) => self.get().await,
            Self::Shared { durable, .. } | Self::Cluster { durable, .. } => {
                Ok(RedisConn::Shared(durable.clone()))
            }
        }
    }

    /// Every key matching `pattern`, on every master of a cluster. For maintenance and
    /// recovery, never for a request: SCAN walks the whole keyspace.
    pub async fn scan(&self, pattern: &str) -> redis::RedisResult<Vec<String>> {
        let mut conn = self.get().await.map_err(unavailable)?.clone();
        scan(&mut conn, pattern).await
    }

    /// Whether two sorted sets (in one slot) hold the same members with the same scores,
    /// compared `chunk` members at a time so that neither is read whole into memory.
    pub(crate) async fn same_sorted_sets(
        &self,
        a: &str,
        b: &str,
        chunk: usize,
    ) -> crate::infra::error::AppResult<bool> {
        let mut from = 0;
        loop {
            let mut conn = self.get().await?;
            type Members = Vec<(String, f64)>;
            let (left, right): (Members, Members) = redis::pipe()
                .cmd("ZRANGE")
                .arg(a)
                .arg(from)
                .arg(from + chunk - 1)
                .arg("WITHSCORES")
                .cmd("ZRANGE")
                .arg(b)
                .arg(from)
                .arg(from + chunk - 1)
                .arg("WITHSCORES")
                .query_async(&mut *conn)
                .await?;
            if left != right {
                return Ok(false);
            }
            if left.len() < chunk {
                return Ok(true);
            }
            from += chunk;
        }
    }
}

/// Every key matching `pattern` that `conn` reaches: its node's, or every master's.
pub(crate) async fn scan(
    conn: &mut counting::CountedConnection,
    pattern: &str,
) -> redis::RedisResult<Vec<String>> {
    let Some(cluster) = conn.as_cluster().cloned() else {
        return scan_node(conn, pattern).await;
    };
    let mut keys = Vec::new();
    for master in cluster.masters() {
        let mut node = NodeConn {
            cluster: cluster.clone(),
            master,
        };
        keys.extend(scan_node(&mut node, pattern).await?);
    }
    Ok(keys)
}

/// Removes every key matching `pattern` that `conn` reaches (a test's or a tool's key
/// prefix), in pipelines of 500 UNLINKs: one key each, since on a cluster they live in many
/// slots.
pub async fn unlink_matching(
    conn: &mut counting::CountedConnection,
    pattern: &str,
) -> redis::RedisResult<()> {
    for chunk in scan(conn, pattern).await?.chunks(500) {
        let mut unlink = redis::pipe();
        for key in chunk {
            unlink.cmd("UNLINK").arg(key).ignore();
        }
        unlink.query_async::<()>(&mut *conn).await?;
    }
    Ok(())
}

/// A pool that cannot lend a connection, as the Redis error a caller reports.
fn unavailable(error: bb8::RunError<redis::RedisError>) -> redis::RedisError {
    match error {
        bb8::RunError::User(error) => error,
        bb8::RunError::TimedOut => {
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut))
        }
    }
}

/// A cluster connection whose commands all go to one master.
struct NodeConn {
    cluster: cluster::Cluster,
    master: cluster::Addr,
}

impl redis::aio::ConnectionLike for NodeConn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        Box::pin(self.cluster.query_on(&self.master, cmd))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        Box::pin(async move {
            let mut replies = Vec::new();
            for cmd in pipeline.cmd_iter() {
                replies.push(self.cluster.query_on(&self.master, cmd).await?);
            }
            Ok(replies.into_iter().skip(offset).take(count).collect())
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// SCANs one node for `pattern`.
async fn scan_node(
    conn: &mut impl redis::aio::ConnectionLike,
    pattern: &str,
) -> redis::RedisResult<Vec<String>> {
    let mut keys = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, page): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await?;
        keys.extend(page);
        if next == 0 {
            return Ok(keys);
        }
        cursor = next;
    }
}

/// Connects the pool and checks that Redis answers; fails fast with a message that says how
/// to start one. When nothing listens on a loopback address and `redis-server` is on the
/// PATH, one is started (without persistence) so that the first command of the README
/// works on a fresh machine (one node only: a cluster is started by
/// `deploy/redis-cluster/start`).
/// `tally` counts every command and pipeline sent through the pool.
pub async fn connect(target: &RedisTarget, tally: counting::Tally) -> anyhow::Result<RedisPool> {
    let pool = match target.mode {
        RedisMode::Pool => {
            let manager = counting::CountingManager::new(target.client()?, node_config(), tally)?;
            RedisPool::Pool(
                bb8::Pool::builder()
                    .max_size(32)
                    .connection_timeout(Duration::from_secs(3))
                    .build_unchecked(manager),
            )
        }
        RedisMode::Shared => {
            // While Redis is away, requests fail within about a second (UNAVAILABLE) rather
            // than queueing behind long reconnection back-offs.
            let config = redis::aio::ConnectionManagerConfig::new()
                .set_connection_timeout(Some(CONNECTION_TIMEOUT))
                .set_response_timeout(Some(RESPONSE_TIMEOUT))
                .set_number_of_retries(1)
                .set_max_delay(Duration::from_millis(500));
            // Lazy: the first command connects, so a missing Redis can still be started below.
            let client = target.client()?;
            let shared = |tally| -> redis::RedisResult<counting::CountedConnection> {
                Ok(match node::NodeConnection::of(&client, RESPONSE_TIMEOUT) {
                    Some(node) => counting::CountedConnection::node(node, tally),
                    None => counting::CountedConnection::shared(
                        redis::aio::ConnectionManager::new_lazy_with_config(
                            client.clone(),
                            config.clone(),
                        )?,
                        tally,
                    ),
                })
            };
            RedisPool::Shared {
                requests: shared(tally.clone())?,
                durable: shared(tally)?,
            }
        }
        RedisMode::Cluster => {
            let cluster = cluster::Cluster::connect(target, node_config())
                .await
                .with_context(|| {
                    format!(
                        "Redis Cluster does not answer at {} (start a local one with \
                         deploy/redis-cluster/start)",
                        target.describe()
                    )
                })?;
            RedisPool::Cluster {
                requests: counting::CountedConnection::cluster(cluster.clone(), tally.clone()),
                durable: counting::CountedConnection::cluster(cluster.durable_lane(), tally),
            }
        }
    };
    let url = target.describe();
    if ping(&pool).await.is_err() {
        let mut started = false;
        if let Some(port) = local_port(&target.urls[0]).filter(|_| !target.is_cluster()) {
            if start_local_server(port)? {
                for _ in 0..50 {
                    if ping(&pool).await.is_ok() {
                        started = true;
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        if !started {
            if let Err(error) = ping(&pool).await {
                bail!(
                    "Redis does not answer at {url} ({error}).\n\
                     Start one with `redis-server --daemonize yes --save '' --appendonly no` \
                     or point REDIS_URL at a running Redis 7."
                );
            }
        }
    }
    warn_if_evicting(&pool).await;
    Ok(pool)
}

/// A connection of one worker's own to a single node (its blocking reads must not hold up
/// the requests' commands), not counted with the requests' round trips; a command fails
/// after `response_timeout` without a reply. engage's own over TCP ([`node`]), the crate's
/// over TLS or a Unix socket.
pub(crate) async fn own_connection(
    target: &RedisTarget,
    response_timeout: Duration,
) -> redis::RedisResult<counting::CountedConnection> {
    let client = target.client()?;
    let tally = counting::Tally::default();
    Ok(match node::NodeConnection::of(&client, response_timeout) {
        Some(node) => counting::CountedConnection::node(node, tally),
        None => {
            let config = node_config().set_response_timeout(Some(response_timeout));
            let conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            counting::CountedConnection::own(conn, tally)
        }
    })
}

/// A connection of its own to the same Redis (a node, or the whole cluster), not shared with
/// requests nor counted with them: for tools and tests that inspect or arrange state.
pub async fn dedicated(target: &RedisTarget) -> anyhow::Result<counting::CountedConnection> {
    let tally = counting::Tally::default();
    Ok(if target.is_cluster() {
        let cluster = cluster::Cluster::connect(target, node_config()).await?;
        counting::CountedConnection::cluster(cluster, tally)
    } else {
        let conn = target.client()?.get_multiplexed_async_connection().await?;
        counting::CountedConnection::own(conn, tally)
    })
}

/// Says loudly at start when Redis may evict keys. Like relations, buyer sets, jobs and
/// entries not yet archived are data, not cache: an evicted like relation lets the same
/// like count twice. (`INFO` rather than `CONFIG GET`, which managed Redis often refuses.)
async fn warn_if_evicting(pool: &RedisPool) {
    let Ok(mut conn) = pool.get().await else {
        return;
    };
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut *conn)
        .await
        .unwrap_or_default();
    if let Some(warning) = eviction_risk(&info) {
        tracing::warn!("!!! {warning} !!!");
    }
}

/// The warning an `INFO memory` reply calls for, if any.
fn eviction_risk(info: &str) -> Option<String> {
    let policy = info
        .lines()
        .find_map(|line| line.strip_prefix("maxmemory_policy:"))?
        .trim();
    (policy != "noeviction").then(|| {
        format!(
            "Redis maxmemory-policy is {policy}: under memory pressure it will evict like \
             relations, buyer sets, jobs and unarchived events, and a like may then count \
             twice. Set `maxmemory-policy noeviction` (see deploy/redis.conf)"
        )
    })
}

async fn ping(pool: &RedisPool) -> anyhow::Result<()> {
    let mut conn = pool.get().await?;
    let _: String = redis::cmd("PING").query_async(&mut *conn).await?;
    let version: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut *conn)
        .await
        .unwrap_or_default();
    if let Some(major) = version
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .and_then(|v| v.split('.').next())
        .and_then(|v| v.parse::<u32>().ok())
    {
        if major < 7 {
            bail!("Redis {major} is too old: engage needs Redis 7 or newer");
        }
    }
    Ok(())
}

/// The port of a `redis://` URL whose host is a loopback address.
fn local_port(url: &str) -> Option<u16> {
    let info: redis::ConnectionInfo = url.parse().ok()?;
    let redis::ConnectionAddr::Tcp(host, port) = info.addr().clone() else {
        return None;
    };
    let is_loopback = (host.as_str(), port)
        .to_socket_addrs()
        .ok()?
        .all(|address| address.ip().is_loopback());
    is_loopback.then_some(port)
}

/// Starts `redis-server` in the background if it is on the PATH. Returns whether it did.
fn start_local_server(port: u16) -> anyhow::Result<bool> {
    let started = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--daemonize",
            "yes",
        ])
        .args(["--save", "", "--appendonly", "no"])
        .status();
    match started {
        Ok(status) if status.success() => {
            tracing::warn!(
                port,
                "Redis was not running: started a local redis-server (no persistence)"
            );
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Pool usage, for `/metrics`.
pub(crate) fn pool_state(pool: &RedisPool) -> (u32, u32) {
    match pool {
        RedisPool::Pool(pool) => {
            let state = pool.state();
            (state.connections, state.idle_connections)
        }
        RedisPool::Shared { .. } | RedisPool::Cluster { .. } => (1, 1),
    }
}

/// Whether Redis answers now (readiness).
pub(crate) async fn is_ready(pool: &RedisPool) -> bool {
    let Ok(mut conn) = pool.get().await else {
        return false;
    };
    conn.ping::<String>().await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::eviction_risk;

    #[test]
    fn a_redis_that_may_evict_keys_is_warned_about() {
        let info = "# Memory\r\nused_memory:1000\r\nmaxmemory_policy:allkeys-lru\r\n";
        assert!(eviction_risk(info).is_some_and(|w| w.contains("allkeys-lru")));
        let info = "# Memory\r\nmaxmemory_policy:noeviction\r\n";
        assert_eq!(eviction_risk(info), None);
        assert_eq!(eviction_risk(""), None);
    }
}
