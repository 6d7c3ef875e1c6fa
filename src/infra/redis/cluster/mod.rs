//! engage's Redis Cluster client: one multiplexed connection per master, each command sent
//! to the master of its keys' slot.
//!
//! Why not the `redis` crate's cluster connection: in 1.8.1 it wedges during resharding and
//! failovers. A slot refresh waits for a lock that requests hold while they wait to be
//! polled after it, and then every command waits for its timeout (RELIABILITY.md has the
//! runs). Here no lock is ever held across an await: the slot table is read and written
//! under a plain mutex in passing, and a refresh runs beside the requests.
//!
//! What a request meets, and what it does:
//! - `MOVED`: the slot has moved. The table takes the new owner at once, a refresh of the
//!   whole table is started in the background, and the command goes to the new owner.
//! - `ASK`: the slot is being migrated and this key has left. The command goes to the
//!   target once, after `ASKING`.
//! - `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `READONLY` (a write to a demoted master),
//!   `LOADING`, or a master that does not accept a connection: the command did not run. It
//!   is sent again after 0.1, 0.2, 0.4, 0.8 and then every 1 s, about 10 s in all: the time a
//!   replica takes to be promoted. Then it fails, and the request answers UNAVAILABLE.
//! - A connection lost or silent (3 s) after the command left: it may have run, so it is not
//!   sent again; the request answers UNAVAILABLE and its client may retry (engage's writes
//!   are idempotent per request: a like, an order per buyer, an award per key).
//!
//! Also: pipelines whose commands live in different slots are split per slot and sent at
//! once, and MGET, DEL, UNLINK, EXISTS over several slots are split per slot and joined.

mod links;
mod pipelines;
mod routes;
mod topology;

use std::{
    collections::HashMap,
    sync::{atomic::AtomicBool, Arc, Mutex},
    time::{Duration, Instant},
};

use futures::future::join_all;
use redis::{
    aio::{ConnectionLike, MultiplexedConnection},
    AsyncConnectionConfig, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult,
    ServerErrorKind, Value,
};
use tokio::sync::OnceCell;

pub(crate) use routes::slot_of;
use routes::{route_of, split_by_slot, Route};
pub(crate) use topology::Addr;
use topology::{parse_shards, Topology};

use super::RedisTarget;

/// How often a command is sent before it fails, and the waits between (see the module).
const ATTEMPTS: u32 = 14;
const FIRST_WAIT: Duration = Duration::from_millis(100);
const LONGEST_WAIT: Duration = Duration::from_secs(1);
/// A node that refused a connection is not asked again for this long: the requests queued
/// for it wait their turn to retry instead of each trying in turn.
pub(super) const CONNECT_COOLDOWN: Duration = Duration::from_millis(100);
/// Refreshes of the slot table are at least this far apart.
const REFRESH_GAP: Duration = Duration::from_millis(100);
/// How long a node may take to answer `CLUSTER SHARDS`.
const REFRESH_TIMEOUT: Duration = Duration::from_secs(1);

/// A client of one Redis Cluster, shared by the instance (cloning shares it).
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
    lane: Lane,
}

/// The connections a clone of the client sends on: each lane has its own to every node
/// (the writes that `WAIT` for replicas have theirs, see `RedisPool`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Lane {
    Requests,
    Durable,
}

struct Inner {
    target: RedisTarget,
    config: AsyncConnectionConfig,
    topology: Mutex<Topology>,
    links: Mutex<HashMap<(Addr, Lane), Arc<NodeLink>>>,
    refreshing: AtomicBool,
}

/// The connection to one node, made by the first command that needs it.
#[derive(Default)]
struct NodeLink {
    conn: OnceCell<MultiplexedConnection>,
    refused_at: Mutex<Option<Instant>>,
}

/// What to do after an error.
enum Next {
    /// Send to this node (MOVED, or ASK when `asking`).
    Redirect { addr: Addr, asking: bool },
    /// Wait, then send again: the command did not run.
    Wait,
    /// Answer the error.
    Fail,
}

impl Cluster {
    /// Learns the slots from the first seed that answers.
    pub(crate) async fn connect(
        target: &RedisTarget,
        config: AsyncConnectionConfig,
    ) -> RedisResult<Self> {
        let cluster = Self {
            inner: Arc::new(Inner {
                target: target.clone(),
                config,
                topology: Mutex::new(Topology::new()),
                links: Mutex::new(HashMap::new()),
                refreshing: AtomicBool::new(false),
            }),
            lane: Lane::Requests,
        };
        cluster.refresh().await?;
        Ok(cluster)
    }

    /// The same client, sending on connections of its own, for the writes that wait for
    /// replicas.
    pub(crate) fn durable_lane(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            lane: Lane::Durable,
        }
    }

    /// Every master, as last learnt.
    pub(crate) fn masters(&self) -> Vec<Addr> {
        self.inner.topology.lock().expect("poisoned").masters()
    }

    /// Sends `cmd` to the master of `key`'s slot, whatever keys it names (WAIT after a write
    /// of that key, PUBSUB SHARDNUMSUB of a channel).
    pub async fn query_at_key(&self, key: &str, cmd: &Cmd) -> RedisResult<Value> {
        self.send(Route::Slot(slot_of(key.as_bytes())), cmd).await
    }

    /// The master of `key`'s slot, as last learnt.
    pub(crate) fn master_of_key(&self, key: &str) -> Option<Addr> {
        self.master_of(Some(slot_of(key.as_bytes()))).ok()
    }

    /// Sends `cmd` to one node (SCAN of each master).
    pub(crate) async fn query_on(&self, addr: &str, cmd: &Cmd) -> RedisResult<Value> {
        let (_, mut conn) = self.connection(addr).await?;
        reply_of(conn.req_packed_command(cmd).await)
    }

    /// Sends `cmd` where its keys live.
    async fn query(&self, cmd: &Cmd) -> RedisResult<Value> {
        if let Some((join, parts)) = split_by_slot(cmd) {
            return self.query_split(join, parts).await;
        }
        self.send(route_of(cmd), cmd).await
    }

    async fn send(&self, route: Route, cmd: &Cmd) -> RedisResult<Value> {
        let slot = match route {
            Route::Slot(slot) => Some(slot),
            Route::AnyMaster => None,
            Route::AllMasters => return self.send_to_all(cmd).await,
        };
        match self.send_to_slot(slot, Request::One(cmd), None).await? {
            Reply::One(value) => Ok(value),
            Reply::Many(_) => Err(unexpected("one command answered with many replies")),
        }
    }

    /// Sends `cmd` to every master and answers with the first reply.
    async fn send_to_all(&self, cmd: &Cmd) -> RedisResult<Value> {
        let masters = self.masters();
        let sent = masters.iter().map(|addr| self.query_on(addr, cmd));
        let mut first_error = None;
        let mut first_reply = None;
        for reply in join_all(sent).await {
            match reply {
                Ok(value) => first_reply = first_reply.or(Some(value)),
                Err(error) => first_error = first_error.or(Some(error)),
            }
        }
        // A master that is down does not need the script: the replica that takes its slots
        // over loads it on its first NOSCRIPT.
        first_reply.ok_or_else(|| first_error.unwrap_or_else(|| no_master(None)))
    }

    /// Sends a request to the master of `slot` (any master for `None`), following the
    /// cluster's redirections and waiting out failovers; `next` is where to start when an
    /// earlier reply already called for a redirection or a wait.
    async fn send_to_slot(
        &self,
        slot: Option<u16>,
        request: Request<'_>,
        mut next: Option<Next>,
    ) -> RedisResult<Reply> {
        let mut attempt = 0;
        loop {
            let target = match next.take() {
                Some(Next::Redirect { addr, asking }) => Ok((addr, asking)),
                Some(Next::Wait) => {
                    tokio::time::sleep(wait_before(attempt.max(1))).await;
                    self.master_of(slot).map(|addr| (addr, false))
                }
                Some(Next::Fail) | None => self.master_of(slot).map(|addr| (addr, false)),
            };
            let sent = match &target {
                Ok((addr, asking)) => self.send_once(addr, *asking, &request).await,
                Err(error) => Err(error.clone()),
            };
            let error = match sent {
                Ok(reply) => return Ok(reply),
                Err(error) => error,
            };
            attempt += 1;
            let addr = target.map(|(addr, _)| addr).unwrap_or_default();
            match self.next_after(&error, &addr) {
                Next::Fail => return Err(error),
                _ if attempt >= ATTEMPTS => return Err(error),
                step => next = Some(step),
            }
        }
    }

    /// Sends once to `addr`. A connection that cannot be made fails with
    /// `ClusterConnectionNotFound` (nothing was sent, it is retried); a connection lost after
    /// sending is dropped, so that the next command connects afresh.
    async fn send_once(
        &self,
        addr: &str,
        asking: bool,
        request: &Request<'_>,
    ) -> RedisResult<Reply> {
        let (link, mut conn) = self.connection(addr).await?;
        if asking {
            reply_of(conn.req_packed_command(&redis::cmd("ASKING")).await)?;
        }
        let sent = match request {
            Request::One(cmd) => reply_of(conn.req_packed_command(cmd).await).map(Reply::One),
            Request::Many(pipeline, offset, count) => conn
                .req_packed_commands(pipeline, *offset, *count)
                .await
                .map(Reply::Many),
        };
        if let Err(error) = &sent {
            if error.is_io_error() || error.is_unrecoverable_error() {
                self.forget(addr, &link);
                self.refresh_soon();
            }
        }
        sent
    }

    /// What an error calls for. Moves are taken into the slot table at once.
    fn next_after(&self, error: &RedisError, addr: &str) -> Next {
        match error.kind() {
            ErrorKind::Server(ServerErrorKind::Moved) | ErrorKind::Server(ServerErrorKind::Ask) => {
                let Some((to, slot)) = error.redirect_node() else {
                    return Next::Fail;
                };
                let to = with_host(to, addr);
                let asking = error.kind() == ErrorKind::Server(ServerErrorKind::Ask);
                if !asking {
                    self.inner.topology.lock().expect("poisoned").set(slot, &to);
                    self.refresh_soon();
                }
                Next::Redirect { addr: to, asking }
            }
            ErrorKind::Server(
                ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::ReadOnly
                | ServerErrorKind::BusyLoading,
            )
            | ErrorKind::ClusterConnectionNotFound => {
                self.refresh_soon();
                Next::Wait
            }
            _ => Next::Fail,
        }
    }
}

/// What is sent: one command, or a pipeline (its replies from `offset`, `count` of them).
enum Request<'a> {
    One(&'a Cmd),
    Many(&'a Pipeline, usize, usize),
}

enum Reply {
    One(Value),
    Many(Vec<Value>),
}

impl ConnectionLike for Cluster {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(self.query(cmd))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(self.query_pipeline(pipeline, offset, count))
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// The wait before attempt `attempt` (from 1): 0.1, 0.2, 0.4, 0.8, then 1 s.
fn wait_before(attempt: u32) -> Duration {
    FIRST_WAIT
        .saturating_mul(1 << attempt.saturating_sub(1).min(10))
        .min(LONGEST_WAIT)
}

/// A reply that is a server error, as an error.
fn reply_of(reply: RedisResult<Value>) -> RedisResult<Value> {
    match reply? {
        Value::ServerError(error) => Err(error.into()),
        value => Ok(value),
    }
}

/// `host:port` of a redirection, with the host of the node that sent it when the cluster
/// left it out (`:7004`).
fn with_host(to: &str, from: &str) -> Addr {
    match to.strip_prefix(':') {
        Some(port) => {
            let host = from.rsplit_once(':').map_or(from, |(host, _)| host);
            format!("{host}:{port}")
        }
        None => to.to_owned(),
    }
}

fn no_master(slot: Option<u16>) -> RedisError {
    let detail = match slot {
        Some(slot) => format!("no master is known for slot {slot}"),
        None => "no master is known".to_owned(),
    };
    RedisError::from((ErrorKind::ClusterConnectionNotFound, "cluster", detail))
}

fn not_connected(addr: &str, what: &str) -> RedisError {
    RedisError::from((
        ErrorKind::ClusterConnectionNotFound,
        "cluster node",
        format!("{addr} {what}"),
    ))
}

fn unexpected(what: &'static str) -> RedisError {
    RedisError::from((ErrorKind::UnexpectedReturnType, what))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_grow_to_a_second_and_add_up_to_about_ten() {
        assert_eq!(wait_before(1), Duration::from_millis(100));
        assert_eq!(wait_before(4), Duration::from_millis(800));
        assert_eq!(wait_before(9), Duration::from_secs(1));
        let total: Duration = (1..ATTEMPTS).map(wait_before).sum();
        assert!(total >= Duration::from_secs(9) && total <= Duration::from_secs(12));
    }

    #[test]
    fn a_redirection_without_a_host_is_to_the_node_that_sent_it() {
        assert_eq!(with_host(":7004", "127.0.0.1:7001"), "127.0.0.1:7004");
        assert_eq!(
            with_host("10.0.0.2:7002", "127.0.0.1:7001"),
            "10.0.0.2:7002"
        );
    }
}
