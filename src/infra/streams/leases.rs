//! Leases that divide a consumer's streams (a feature's shards) among the instances that
//! run it, the way a Kafka consumer group divides partitions (`lua/streams_lease.lua`):
//! every [`BALANCE_EVERY`] each instance renews its leases and, against the instances alive
//! now, takes free ones up to its share or gives back what is above it. An instance that
//! joins gets its share within two rounds; one that stops gives its leases back as it
//! goes, and one that dies loses them when they expire ([`LEASE_TIME`]).
//!
//! Leases divide the work; they are not what keeps an entry from being handled twice. The
//! consumer group delivers each entry to one reader, whoever holds the lease, and entries a
//! previous holder left pending are taken over after `claim_idle` as before. So a lease
//! that lapses under a slow instance, or two instances that briefly read the same stream
//! while a lease changes hands, cost nothing but order, which the handlers never relied on.

use std::{collections::HashMap, time::Duration};

use crate::infra::{
    error::AppResult,
    redis::{
        counting::CountedConnection,
        scripts::{self, Replies, StreamsLease, StreamsLeaseArgs},
        Keys,
    },
    Infra,
};

/// How long a lease lasts unless renewed.
pub(crate) const LEASE_TIME: Duration = Duration::from_secs(10);
/// How often an instance renews its leases and rebalances.
pub(crate) const BALANCE_EVERY: Duration = Duration::from_secs(2);

impl Keys {
    /// The instances that run a consumer, with when each is presumed gone.
    pub fn lease_members(&self, consumer: &str) -> String {
        self.tagged(("leases:", consumer), "members")
    }

    /// Which instance holds each of a consumer's streams, and until when.
    pub fn lease_holders(&self, consumer: &str) -> String {
        self.tagged(("leases:", consumer), "holders")
    }
}

/// The streams of `all` this instance holds for `consumer` after a round of balancing;
/// `leaving` gives every lease back. Sent on the worker's connection `conn`, with its
/// reads (not counted with the requests' round trips).
pub(crate) async fn balance(
    infra: &Infra,
    conn: &mut CountedConnection,
    consumer: &str,
    all: &[String],
    leaving: bool,
) -> AppResult<Vec<String>> {
    let keys = &infra.keys;
    let leases = StreamsLease {
        members: keys.lease_members(consumer),
        holders: keys.lease_holders(consumer),
    };
    let args = StreamsLeaseArgs {
        instance: &*infra.instance.id,
        now_ms: infra.clock.now_ms(),
        lease_ms: LEASE_TIME.as_millis() as u64,
        leaving: i64::from(leaving),
        streams: all,
    };
    scripts::invoke(conn, &leases, &args).await
}

/// The streams this instance holds now.
impl Replies for StreamsLease {
    type Reply = Vec<String>;
}

/// Which instance holds each of a consumer's streams (leases that lapsed included).
pub async fn holders(infra: &Infra, consumer: &str) -> AppResult<HashMap<String, String>> {
    let mut conn = infra.redis.get().await?;
    let leases: HashMap<String, String> = redis::cmd("HGETALL")
        .arg(infra.keys.lease_holders(consumer))
        .query_async(&mut *conn)
        .await?;
    Ok(leases
        .into_iter()
        .map(|(stream, lease)| {
            let holder = lease.split(' ').next().unwrap_or_default().to_string();
            (stream, holder)
        })
        .collect())
}
