//! What a Redis Cluster needs beyond the `redis` crate's cluster connection (which routes each
//! command by its keys' slot and follows MOVED, ASK, failovers and slot moves):
//! - pipelines whose commands live in different slots, split per slot and sent at the same
//!   time (the crate sends a pipeline to one node, and a page of remarks spans the like
//!   shards);
//! - the masters, for what runs on each of them (SCAN);
//! - a watchdog that replaces the connection should it wedge ([`ClusterLink`]).

use std::{
    collections::HashMap,
    sync::{atomic::AtomicU64, Arc, Weak},
    time::Duration,
};

use futures::future::try_join_all;
use redis::{
    aio::ConnectionLike,
    cluster_async::ClusterConnection,
    cluster_routing::{RoutingInfo, SingleNodeRoutingInfo, Slot},
    FromRedisValue, Pipeline, RedisResult, Value,
};

use super::{counting::CountedConnection, RedisTarget};

/// Sends a pipeline on a cluster: as it is when its commands share a slot (or it is a
/// transaction, which must), otherwise one pipeline per slot, at the same time; the replies
/// come back in the order of the commands.
pub async fn send_pipeline(
    conn: ClusterConnection,
    pipeline: &Pipeline,
    offset: usize,
    count: usize,
) -> RedisResult<Vec<Value>> {
    let routes: Vec<Option<Slot>> = pipeline.cmd_iter().map(route_of).collect();
    let single_slot = routes.windows(2).all(|pair| pair[0] == pair[1]);
    if pipeline.is_transaction() || single_slot {
        let mut conn = conn;
        return conn.req_packed_commands(pipeline, offset, count).await;
    }
    let mut parts: HashMap<Option<Slot>, (Pipeline, Vec<usize>)> = HashMap::new();
    for (index, (cmd, route)) in pipeline.cmd_iter().zip(&routes).enumerate() {
        let (part, indices) = parts
            .entry(*route)
            .or_insert_with(|| (redis::pipe(), Vec::new()));
        part.add_command(cmd.clone());
        indices.push(index);
    }
    let sent = parts.into_values().map(|(part, indices)| {
        let mut conn = conn.clone();
        async move {
            let replies = conn.req_packed_commands(&part, 0, part.len()).await?;
            RedisResult::Ok(indices.into_iter().zip(replies))
        }
    });
    let mut replies = vec![Value::Nil; routes.len()];
    for part in try_join_all(sent).await? {
        for (index, reply) in part {
            replies[index] = reply;
        }
    }
    Ok(replies.into_iter().skip(offset).take(count).collect())
}

/// The slot a command goes to, by its first key; `None` for a command without keys. (The
/// crate's own routing table is private: this knows the key positions of what engage
/// pipelines.)
fn route_of(cmd: &redis::Cmd) -> Option<Slot> {
    let args: Vec<&[u8]> = cmd
        .args_iter()
        .filter_map(|arg| match arg {
            redis::Arg::Simple(bytes) => Some(bytes),
            _ => None,
        })
        .collect();
    let name = args.first()?.to_ascii_uppercase();
    let key = match name.as_slice() {
        b"EVAL" | b"EVALSHA" | b"EVAL_RO" | b"EVALSHA_RO" | b"FCALL" | b"FCALL_RO" => {
            let keys: usize = std::str::from_utf8(args.get(2)?).ok()?.parse().ok()?;
            if keys == 0 {
                return None;
            }
            args.get(3)?
        }
        b"XREAD" | b"XREADGROUP" => {
            let at = args
                .iter()
                .position(|a| a.eq_ignore_ascii_case(b"STREAMS"))?;
            args.get(at + 1)?
        }
        b"PING" | b"INFO" | b"SCRIPT" | b"CLUSTER" | b"PUBSUB" | b"TIME" | b"DBSIZE" | b"WAIT"
        | b"MULTI" | b"EXEC" | b"CLIENT" | b"CONFIG" => return None,
        _ => args.get(1)?,
    };
    Some(Slot::for_key(key))
}

/// The masters' addresses (`host`, `port`), from `CLUSTER SHARDS`.
pub async fn masters(conn: &mut ClusterConnection) -> RedisResult<Vec<(String, u16)>> {
    let shards = conn
        .route_command(
            redis::cmd("CLUSTER").arg("SHARDS").clone(),
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
        )
        .await?;
    Ok(parse_masters(shards))
}

/// The masters of a `CLUSTER SHARDS` reply: each shard's node whose role is master and whose
/// health is online.
fn parse_masters(shards: Value) -> Vec<(String, u16)> {
    fn field<'a>(map: &'a Value, name: &str) -> Option<&'a Value> {
        let pairs: Vec<(&Value, &Value)> = match map {
            Value::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
            Value::Array(items) => items
                .chunks(2)
                .filter_map(|c| Some((c.first()?, c.get(1)?)))
                .collect(),
            _ => return None,
        };
        pairs.into_iter().find_map(|(key, value)| {
            (String::from_redis_value_ref(key).ok()? == name).then_some(value)
        })
    }
    let text = |value: Option<&Value>| value.and_then(|v| String::from_redis_value_ref(v).ok());
    let Value::Array(shards) = shards else {
        return Vec::new();
    };
    let mut masters = Vec::new();
    for shard in &shards {
        let Some(Value::Array(nodes)) = field(shard, "nodes") else {
            continue;
        };
        for node in nodes {
            let master = text(field(node, "role")).as_deref() == Some("master")
                && text(field(node, "health")).as_deref() == Some("online");
            let host = text(field(node, "ip")).or_else(|| text(field(node, "endpoint")));
            let port = field(node, "port")
                .or_else(|| field(node, "tls-port"))
                .and_then(|v| u16::from_redis_value_ref(v).ok());
            if let (true, Some(host), Some(port)) = (master, host, port) {
                masters.push((host, port));
            }
        }
    }
    masters
}

/// Sends `cmd` to one node by address.
pub async fn on_node(
    conn: &mut ClusterConnection,
    (host, port): &(String, u16),
    cmd: &redis::Cmd,
) -> RedisResult<Value> {
    conn.route_command(
        cmd.clone(),
        RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
            host: host.clone(),
            port: *port,
        }),
    )
    .await
}

/// The instance's connection to the cluster, replaced when it stops answering.
///
/// The `redis` crate's cluster connection can wedge for good: when a slot refresh (after
/// MOVED replies, as while slots are resharded) waits for its lock behind a request that
/// was granted the lock but is only polled once the refresh is done, every later command
/// waits for its response timeout. A watchdog sends a keyed read each second, routed by
/// slot as requests are, to each master in turn; after three in a row get no answer, it
/// connects afresh and swaps the new connection in (commands in flight on the old one fail
/// UNAVAILABLE; stream workers reconnect on their next error). A master that is merely
/// down does not trip it: its slots answer an error, or hang for only its share of the
/// probes.
pub struct ClusterLink {
    current: std::sync::RwLock<CountedConnection>,
}

/// How often the watchdog asks, how long it waits, and after how many silences it replaces.
const WATCH_EVERY: Duration = Duration::from_secs(1);
const WATCH_TIMEOUT: Duration = Duration::from_millis(1500);
const SILENCES: u32 = 3;
/// The watchdog's reads go round this many hash tags (spread over the slots, so over the
/// masters).
const PROBE_SLOTS: u32 = 16;

impl ClusterLink {
    /// Connects, and watches the connection for as long as the link lives.
    pub async fn connect(
        target: &RedisTarget,
        round_trips: Arc<AtomicU64>,
    ) -> anyhow::Result<Arc<Self>> {
        let conn = super::cluster_builder(target)
            .build()?
            .get_async_connection()
            .await?;
        let link = Arc::new(Self {
            current: std::sync::RwLock::new(CountedConnection::cluster(conn, round_trips.clone())),
        });
        tokio::spawn(watch(Arc::downgrade(&link), target.clone(), round_trips));
        Ok(link)
    }

    pub fn current(&self) -> CountedConnection {
        self.current.read().expect("poisoned").clone()
    }
}

async fn watch(link: Weak<ClusterLink>, target: RedisTarget, round_trips: Arc<AtomicU64>) {
    let mut silences = 0;
    let mut probe = 0;
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        let Some(current) = link.upgrade().map(|link| link.current()) else {
            return; // the instance is gone
        };
        let Some(mut conn) = current.as_cluster().cloned() else {
            return;
        };
        // A keyed read, routed by slot as requests are (a keyless PING to a random node
        // answered while every slot-routed command waited), over each master in turn.
        probe = (probe + 1) % PROBE_SLOTS;
        let mut exists = redis::cmd("EXISTS");
        exists.arg(format!("engage-watchdog{{{probe}}}"));
        let ping = exists.query_async::<i64>(&mut conn);
        match tokio::time::timeout(WATCH_TIMEOUT, ping).await {
            Err(_) => silences += 1,
            Ok(_) => silences = 0,
        }
        if silences < SILENCES {
            continue;
        }
        let fresh = async {
            let client = super::cluster_builder(&target).build()?;
            client.get_async_connection().await
        };
        match tokio::time::timeout(WATCH_TIMEOUT * 2, fresh).await {
            Ok(Ok(fresh)) => {
                let Some(link) = link.upgrade() else { return };
                *link.current.write().expect("poisoned") =
                    CountedConnection::cluster(fresh, round_trips.clone());
                metrics::counter!("engage_redis_cluster_reconnects_total").increment(1);
                tracing::warn!(
                    "the Redis Cluster connection stopped answering for {SILENCES} s: replaced"
                );
                silences = 0;
            }
            Ok(Err(error)) => tracing::warn!(%error, "the Redis Cluster cannot be reached"),
            Err(_) => tracing::warn!("the Redis Cluster does not answer a new connection"),
        }
    }
}
