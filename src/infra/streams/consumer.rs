//! The stream consumer: moves a consumer group's entries out of its streams (into SQL, or
//! into other Redis state), losing nothing. One worker per group and instance reads all of
//! the group's streams (a feature's shards) together:
//! - reads in batches (one XREADGROUP over every stream) and handles each batch in **one SQL
//!   transaction**; after a short batch it lets entries gather for `linger`, so that a steady
//!   trickle is written in a few full transactions rather than many small ones;
//! - XACKs only **after the commit**: a crash in between replays the batch, which the
//!   handler absorbs because it is idempotent on the entry id;
//! - re-reads its own pending entries after a failure, and takes over entries a dead
//!   instance left pending for longer than `claim_idle` (XAUTOCLAIM);
//! - while SQL fails for reasons that are not the entry's fault (connection lost, table
//!   locked or missing), **backs off with jitter and keeps the circuit open**: entries stay
//!   pending, nothing is dropped, nothing counts as an attempt;
//! - isolates an entry that fails on its own (bad data, a constraint) by retrying the batch
//!   entry by entry, and after `max_attempts` moves it to the `dead_letters` table with the
//!   error, then acknowledges it;
//! - XTRIMs each stream only below the oldest entry some group still needs.
//!
//! Why one worker for all the streams of a group rather than one per stream: the shards of
//! a feature archive into the same tables, and SQLite writes every page a transaction
//! touches to its log again. A transaction per shard wrote the same index pages once per
//! shard; one transaction for all of them writes each page once (BENCHMARKS.md has what it
//! bought). The handlers never relied on a batch holding one stream: two instances already
//! archive neighbouring batches in any order.
//!
//! Every instance runs the same workers, and they divide each consumer's streams among
//! themselves by [`leases`](super::leases): a worker reads only the streams it holds.
//!
//! On a Redis Cluster the shards' streams live in different slots, which one XREADGROUP
//! cannot span: the worker reads each slot's streams with its own XREADGROUP, all at once,
//! over the instance's cluster connection, and polls rather than blocks (a blocking read
//! would hold up every other command on that node's connection).

use std::{collections::HashSet, time::Duration};

use redis::streams::{StreamInfoGroupsReply, StreamPendingReply};
use tracing::Instrument;

use super::{claimed_entries, leases, parse_id, HandleError, Handler, ReadReply, StreamEntry};
use crate::infra::{
    backoff::Backoff,
    redis::{
        cluster::slot_of,
        counting::{CountedConnection, Tally},
        own_connection,
    },
    telemetry, ConsumerTimings, Infra,
};

/// How often a worker on a cluster looks for new entries while its streams are empty.
const CLUSTER_POLL: Duration = Duration::from_millis(100);

#[derive(Clone)]
pub(crate) struct ConsumerSpec {
    /// For logs and metrics, e.g. `vote-archive`.
    pub(crate) name: &'static str,
    pub(crate) group: &'static str,
    /// Most entries read from each stream at a time.
    pub(crate) batch_size: usize,
    pub(crate) max_attempts: u32,
    /// Pending entries idle this long belong to a dead consumer and are taken over.
    pub(crate) claim_idle: Duration,
    /// How long one read waits for new entries.
    pub(crate) block: Duration,
    /// After a batch short of `batch_size`, how long entries gather before the next read. A
    /// full batch reads on at once, so a backlog drains at full speed.
    pub(crate) linger: Duration,
    /// The longest back-off while SQL fails.
    pub(crate) max_backoff: Duration,
}

impl ConsumerSpec {
    /// How a consumer running `handler` reads. One that works in Redis (awards, fan-out):
    /// small batches, read soon. One that writes SQL: large batches, gathered for
    /// `ENGAGE_ARCHIVE_LINGER_MS`. Each transaction makes SQLite write every page it touches
    /// (the random pages of each index) to its log, and later to the file: a like's archive
    /// cost less than half as much written twice a second as ten times (BENCHMARKS.md).
    fn new(
        timings: ConsumerTimings,
        name: &'static str,
        group: &'static str,
        handler: &Handler,
    ) -> Self {
        let (batch_size, linger) = match handler {
            Handler::Redis(handler) if !handler.writes_sql() => (200, Duration::from_millis(100)),
            Handler::Redis(_) | Handler::Archive(_) => (1000, timings.archive_linger),
        };
        Self {
            name,
            group,
            batch_size,
            max_attempts: 5,
            claim_idle: timings.claim_idle,
            block: Duration::from_millis(500),
            linger,
            max_backoff: timings.max_backoff,
        }
    }
}

/// Runs one worker of the consumer group `group` over `streams` until shutdown, and reports
/// its backlog at `/metrics`. `name` names it in logs and metrics (e.g. `vote-archive`).
pub(crate) fn spawn(
    infra: &Infra,
    name: &'static str,
    group: &'static str,
    streams: Vec<String>,
    handler: Handler,
) {
    let spec = ConsumerSpec::new(infra.instance.consumers, name, group, &handler);
    crate::infra::metrics::consumer_counted(name);
    infra.instance.scraped.add(super::backlog::Backlog {
        consumer: name,
        group: spec.group,
        streams: streams.clone(),
    });
    infra
        .instance
        .spawn(name, run(infra.clone(), spec, streams, handler));
}

struct Worker {
    infra: Infra,
    spec: ConsumerSpec,
    /// Every stream of the consumer, and those of them this instance holds the lease of.
    all_streams: Vec<String>,
    streams: Vec<String>,
    consumer: String,
    handler: Handler,
    /// Its own connection on one node (its reads block there), the instance's shared
    /// cluster connection on a cluster (which splits pipelines per slot).
    conn: Option<CountedConnection>,
    /// Whether entries may be pending for this consumer (at start, and after anything
    /// left some unacknowledged): they are read again before new ones.
    own_pending: bool,
}

async fn run(infra: Infra, spec: ConsumerSpec, streams: Vec<String>, handler: Handler) {
    let consumer = infra.instance.id.to_string();
    let mut worker = Worker {
        infra: infra.clone(),
        spec,
        all_streams: streams,
        streams: Vec::new(),
        consumer,
        handler,
        conn: None,
        own_pending: true,
    };
    serve(&infra, &mut worker).await;
    // Give the leases back for the other instances to take at once (a lease left behind
    // would wait out its time).
    let leave = worker.balance(true);
    if let Ok(Err(error)) = tokio::time::timeout(Duration::from_secs(1), leave).await {
        tracing::warn!(consumer = worker.spec.name, %error, "leases not given back");
    }
}

/// Reads, handles and acknowledges until shutdown.
async fn serve(infra: &Infra, worker: &mut Worker) {
    let mut backoff = Backoff::new(Duration::from_millis(100), worker.spec.max_backoff);
    let mut last_claim = tokio::time::Instant::now() - worker.spec.claim_idle;
    let mut last_trim = tokio::time::Instant::now();
    let mut last_balance: Option<tokio::time::Instant> = None;
    while !infra.instance.shutdown.is_cancelled() {
        if last_balance.is_none_or(|at| at.elapsed() >= leases::BALANCE_EVERY) {
            last_balance = Some(tokio::time::Instant::now());
            worker.rebalance().await;
        }
        let claim_due = last_claim.elapsed() >= worker.spec.claim_idle / 2;
        if claim_due {
            last_claim = tokio::time::Instant::now();
        }
        let outcome = async {
            let entries = worker.next_batch(claim_due).await?;
            let processed = worker.process(&entries).await?;
            if last_trim.elapsed() >= Duration::from_secs(10) {
                last_trim = tokio::time::Instant::now();
                worker.trim().await?;
            }
            anyhow::Ok((processed, worker.linger_after(&entries)))
        };
        // A batch once read is finished even when shutdown comes meanwhile (the grace
        // period bounds it): abandoned, its entries would stay pending under this
        // instance's name until another claims them, `claim_idle` later.
        let outcome = outcome.await;
        match outcome {
            Ok((Progress::Done, linger)) => {
                backoff.reset();
                if linger {
                    tokio::select! {
                        () = infra.instance.shutdown.cancelled() => return,
                        () = tokio::time::sleep(worker.spec.linger) => {}
                    }
                }
            }
            Ok((Progress::Stalled, _)) | Err(_) => {
                worker.own_pending = true;
                if let Err(error) = &outcome {
                    tracing::warn!(consumer = worker.spec.name, %error, "stream consumer error");
                    worker.conn = None;
                }
                metrics::counter!("engage_stream_consumer_stalls_total", "consumer" => worker.spec.name).increment(1);
                let delay = backoff.next_delay();
                tokio::select! {
                    () = infra.instance.shutdown.cancelled() => return,
                    () = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
}

enum Progress {
    /// The batch (possibly empty) was handled.
    Done,
    /// SQL is failing: the circuit is open, entries stay pending.
    Stalled,
}

impl Worker {
    /// Renews this instance's leases and takes or gives back streams. While Redis cannot
    /// say, the worker goes on with the streams it held.
    /// One round of balancing on the worker's connection (`leaving`: give everything back).
    async fn balance(&mut self, leaving: bool) -> anyhow::Result<Vec<String>> {
        let (infra, name, all) = (self.infra.clone(), self.spec.name, self.all_streams.clone());
        let conn = self.conn().await?;
        Ok(leases::balance(&infra, conn, name, &all, leaving).await?)
    }

    async fn rebalance(&mut self) {
        match self.balance(false).await {
            Ok(held) => {
                if held != self.streams {
                    tracing::info!(consumer = self.spec.name, streams = ?held, "stream leases changed");
                    // Entries of a stream taken back may be pending for this consumer.
                    self.own_pending = true;
                }
                self.streams = held;
            }
            Err(error) => {
                tracing::warn!(consumer = self.spec.name, %error, "stream leases not renewed");
            }
        }
    }

    async fn conn(&mut self) -> anyhow::Result<&mut CountedConnection> {
        if self.conn.is_none() {
            let mut conn = if self.infra.instance.redis.is_cluster() {
                // The instance's cluster connection, not counted with the requests' round
                // trips (the polls and lease renewals are the worker's own).
                let shared = self.infra.redis.get().await?.clone();
                let cluster = shared.as_cluster().expect("a cluster connection").clone();
                CountedConnection::cluster(cluster, Tally::default())
            } else {
                // Blocking reads wait up to `block`; the default response timeout is shorter.
                let timeout = self.spec.block + Duration::from_secs(5);
                own_connection(&self.infra.instance.redis, timeout).await?
            };
            for stream in &self.all_streams {
                let created: redis::RedisResult<()> = redis::cmd("XGROUP")
                    .arg("CREATE")
                    .arg(stream)
                    .arg(self.spec.group)
                    .arg("0")
                    .arg("MKSTREAM")
                    .query_async(&mut conn)
                    .await;
                if let Err(error) = created {
                    if error.code() != Some("BUSYGROUP") {
                        return Err(error.into());
                    }
                }
            }
            self.conn = Some(conn);
        }
        Ok(self.conn.as_mut().expect("just set"))
    }

    /// Whether to let entries gather before the next read: after a batch that was not empty
    /// and filled no stream's share (a full share means more may be waiting).
    fn linger_after(&self, batch: &[StreamEntry]) -> bool {
        !batch.is_empty()
            && ids_by_stream(batch)
                .iter()
                .all(|(_, ids)| ids.len() < self.spec.batch_size)
    }

    /// Own pending entries first (retries), then entries of dead consumers, then new ones.
    async fn next_batch(&mut self, claim: bool) -> anyhow::Result<Vec<StreamEntry>> {
        if self.streams.is_empty() {
            // Other instances hold every stream: wait for the next round of balancing.
            tokio::time::sleep(leases::BALANCE_EVERY.min(self.spec.block)).await;
            return Ok(Vec::new());
        }
        let mut batch = Vec::new();
        if self.own_pending {
            batch = self.read("0", None).await?;
            self.own_pending = !batch.is_empty();
        }
        // A due claim joins the own retries rather than waiting behind them: an entry held
        // back until an earlier one is written (an order waiting for its buyer's previous
        // order to settle) would otherwise wait for ever on an entry that a dead consumer
        // holds. One batch, in stream order, handles both.
        if claim {
            let claimed = self.claim().await?;
            if !claimed.is_empty() {
                let own: HashSet<(String, String)> = batch
                    .iter()
                    .map(|e| (e.stream.clone(), e.id.clone()))
                    .collect();
                batch.extend(
                    claimed
                        .into_iter()
                        .filter(|e| !own.contains(&(e.stream.clone(), e.id.clone()))),
                );
                batch.sort_by(|a, b| (&a.stream, a.id_parts()).cmp(&(&b.stream, b.id_parts())));
            }
        }
        if !batch.is_empty() {
            return Ok(batch);
        }
        let block = self.spec.block;
        self.read(">", Some(block)).await
    }

    /// One XREADGROUP over every stream: from `id` (`>` new entries, `0` own pending ones).
    /// On a cluster, one per slot, sent together; an empty read there waits `CLUSTER_POLL`
    /// instead of blocking.
    async fn read(
        &mut self,
        id: &str,
        block: Option<Duration>,
    ) -> anyhow::Result<Vec<StreamEntry>> {
        let (group, consumer, count) =
            (self.spec.group, self.consumer.clone(), self.spec.batch_size);
        let read = |streams: &[String], block: Option<Duration>| {
            let mut read = redis::cmd("XREADGROUP");
            read.arg("GROUP")
                .arg(group)
                .arg(&consumer)
                .arg("COUNT")
                .arg(count);
            if let Some(block) = block {
                read.arg("BLOCK").arg(block.as_millis() as u64);
            }
            read.arg("STREAMS").arg(streams);
            for _ in streams {
                read.arg(id);
            }
            read
        };
        let streams = self.streams.clone();
        let conn = self.conn().await?;
        if conn.as_cluster().is_none() {
            let ReadReply(entries) = read(&streams, block).query_async(conn).await?;
            return Ok(entries);
        }
        let mut by_slot: Vec<(u16, Vec<String>)> = Vec::new();
        for stream in streams {
            let slot = slot_of(stream.as_bytes());
            match by_slot.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, same)) => same.push(stream),
                None => by_slot.push((slot, vec![stream])),
            }
        }
        let mut reads = redis::pipe();
        for (_, streams) in &by_slot {
            reads.add_command(read(streams, None));
        }
        let replies: Vec<ReadReply> = reads.query_async(conn).await?;
        let entries: Vec<StreamEntry> = replies.into_iter().flat_map(|r| r.0).collect();
        if entries.is_empty() && block.is_some() {
            tokio::time::sleep(CLUSTER_POLL).await;
        }
        Ok(entries)
    }

    /// Takes over the entries of consumers silent for `claim_idle`, in every stream.
    async fn claim(&mut self) -> anyhow::Result<Vec<StreamEntry>> {
        let idle = self.spec.claim_idle.as_millis() as u64;
        let (group, consumer, count) =
            (self.spec.group, self.consumer.clone(), self.spec.batch_size);
        let mut taken = Vec::new();
        for stream in self.streams.clone() {
            let reply: redis::Value = redis::cmd("XAUTOCLAIM")
                .arg(&stream)
                .arg(group)
                .arg(&consumer)
                .arg(idle)
                .arg("0-0")
                .arg("COUNT")
                .arg(count)
                .query_async(self.conn().await?)
                .await?;
            let claimed = claimed_entries(&stream, reply)?;
            if !claimed.is_empty() {
                tracing::info!(
                    stream,
                    taken = claimed.len(),
                    "took over entries of a silent consumer"
                );
                taken.extend(claimed);
            }
        }
        Ok(taken)
    }

    /// Handles a batch in transactions of at most `batch_size` entries: a read takes up to
    /// that many from each stream, and a backlog in sixteen streams would otherwise be one
    /// statement binding more parameters than SQLite takes.
    async fn process(&mut self, entries: &[StreamEntry]) -> anyhow::Result<Progress> {
        for part in entries.chunks(self.spec.batch_size.max(1)) {
            if let Progress::Stalled = self.process_part(part).await? {
                return Ok(Progress::Stalled);
            }
        }
        Ok(Progress::Done)
    }

    async fn process_part(&mut self, entries: &[StreamEntry]) -> anyhow::Result<Progress> {
        if entries.is_empty() {
            return Ok(Progress::Done);
        }
        // A batch is a trace of its own: its transaction, statements and XACKs under it.
        let span = tracing::debug_span!(
            target: telemetry::STREAM,
            parent: None,
            "stream.batch",
            otel.name = %format_args!("{} batch", self.spec.name),
            otel.kind = "consumer",
            engage.consumer = self.spec.name,
            messaging.system = "redis",
            messaging.operation.type = "process",
            messaging.consumer.group.name = self.spec.group,
            messaging.batch.message_count = entries.len() as i64,
        );
        self.process_batch(entries).instrument(span).await
    }

    async fn process_batch(&mut self, entries: &[StreamEntry]) -> anyhow::Result<Progress> {
        match self.write(entries).await {
            Ok(()) => {
                self.ack(entries).await?;
                return Ok(Progress::Done);
            }
            Err(error) if !error.is_entry_fault() => {
                tracing::warn!(consumer = self.spec.name, %error, "SQL unavailable: holding entries");
                return Ok(Progress::Stalled);
            }
            Err(_) => {}
        }
        // Some entry is at fault: find it by writing one at a time. An entry that failed
        // but has attempts left stays pending, to be read again.
        self.own_pending = true;
        for entry in entries {
            match self.write(std::slice::from_ref(entry)).await {
                Ok(()) => self.ack(std::slice::from_ref(entry)).await?,
                Err(error) if !error.is_entry_fault() => return Ok(Progress::Stalled),
                Err(error) => self.count_failure(entry, &error).await?,
            }
        }
        Ok(Progress::Done)
    }

    /// Hands `entries` to the handler: an archive's in one transaction, a Redis handler's
    /// as they are.
    async fn write(&self, entries: &[StreamEntry]) -> Result<(), HandleError> {
        let handler = match &self.handler {
            Handler::Archive(handler) => handler,
            Handler::Redis(handler) => return handler.handle(entries).await,
        };
        let span = tracing::debug_span!(
            target: telemetry::SQL,
            "sql.transaction",
            otel.kind = "client",
            db.system.name = self.infra.db.backend.system_name(),
            engage.entries = entries.len() as i64,
        );
        async {
            let mut tx = self.infra.db.archive.begin().await?;
            handler.handle(&mut tx, entries).await?;
            tx.commit().await?;
            Ok(())
        }
        .instrument(span)
        .await
    }

    /// Acknowledges `entries`: one XACK per stream, in one round trip.
    async fn ack(&mut self, entries: &[StreamEntry]) -> anyhow::Result<()> {
        let group = self.spec.group;
        let mut acks = redis::pipe();
        for (stream, ids) in ids_by_stream(entries) {
            acks.cmd("XACK").arg(stream).arg(group).arg(ids).ignore();
        }
        let name = self.spec.name;
        let () = acks.query_async(self.conn().await?).await?;
        metrics::counter!("engage_stream_entries_archived_total", "consumer" => name)
            .increment(entries.len() as u64);
        Ok(())
    }

    /// Counts a failed attempt; at `max_attempts` the entry goes to `dead_letters`.
    async fn count_failure(
        &mut self,
        entry: &StreamEntry,
        error: &HandleError,
    ) -> anyhow::Result<()> {
        let attempts_key = format!("{}:attempts:{}", entry.stream, self.spec.group);
        let conn = self.conn().await?;
        let attempts: u32 = redis::cmd("HINCRBY")
            .arg(&attempts_key)
            .arg(&entry.id)
            .arg(1)
            .query_async(conn)
            .await?;
        tracing::warn!(consumer = self.spec.name, entry = entry.id, attempts, %error, "entry failed");
        if attempts < self.spec.max_attempts {
            return Ok(());
        }
        // A JSON object of the fields, as an operator reads it back.
        let fields: serde_json::Map<String, serde_json::Value> = entry
            .fields()
            .map(|(name, value)| (name.to_string(), value.into()))
            .collect();
        let payload = serde_json::to_string(&fields)?;
        sqlx::query(
            "INSERT INTO dead_letters (stream, entry_id, consumer_group, payload, error, attempts, failed_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (stream, entry_id, consumer_group) DO NOTHING",
        )
        .bind(&entry.stream)
        .bind(&entry.id)
        .bind(self.spec.group)
        .bind(payload)
        .bind(error.to_string())
        .bind(i64::from(attempts))
        .bind(self.infra.clock.now_ms())
        .execute(&self.infra.db.pool)
        .await?;
        self.ack(std::slice::from_ref(entry)).await?;
        let conn = self.conn().await?;
        let () = redis::cmd("HDEL")
            .arg(&attempts_key)
            .arg(&entry.id)
            .query_async(conn)
            .await?;
        metrics::counter!("engage_stream_dead_letters_total", "consumer" => self.spec.name)
            .increment(1);
        tracing::error!(consumer = self.spec.name, entry = entry.id, %error, "entry moved to dead_letters");
        Ok(())
    }

    /// Trims each stream below the oldest entry any group still needs: its oldest pending
    /// entry, or what it has not been delivered yet.
    async fn trim(&mut self) -> anyhow::Result<()> {
        for stream in self.streams.clone() {
            let conn = self.conn().await?;
            let groups: StreamInfoGroupsReply = redis::cmd("XINFO")
                .arg("GROUPS")
                .arg(&stream)
                .query_async(conn)
                .await?;
            let mut keep_from: Option<(u64, u64)> = None;
            for group in &groups.groups {
                let pending: StreamPendingReply = redis::cmd("XPENDING")
                    .arg(&stream)
                    .arg(&group.name)
                    .query_async(conn)
                    .await?;
                let needed = match pending {
                    StreamPendingReply::Data(data) => parse_id(&data.start_id),
                    _ => parse_id(&group.last_delivered_id).map(|(ms, seq)| (ms, seq + 1)),
                };
                if let Some(id) = needed {
                    keep_from = Some(keep_from.map_or(id, |k| k.min(id)));
                }
            }
            if let Some((ms, seq)) = keep_from {
                let () = redis::cmd("XTRIM")
                    .arg(&stream)
                    .arg("MINID")
                    .arg("~")
                    .arg(format!("{ms}-{seq}"))
                    .query_async(conn)
                    .await?;
            }
        }
        Ok(())
    }
}

/// The ids of `entries` per stream, streams in the order they first come. A read's entries
/// come stream by stream, so the stream of the entry before is tried first; a few streams
/// are compared where a hash set hashed every entry's stream name.
fn ids_by_stream(entries: &[StreamEntry]) -> Vec<(&str, Vec<&str>)> {
    let mut by_stream: Vec<(&str, Vec<&str>)> = Vec::new();
    let mut last = 0;
    for entry in entries {
        let stream = entry.stream.as_str();
        let at = match by_stream.get(last) {
            Some((name, _)) if *name == stream => last,
            _ => match by_stream.iter().position(|(name, _)| *name == stream) {
                Some(at) => at,
                None => {
                    by_stream.push((stream, Vec::new()));
                    by_stream.len() - 1
                }
            },
        };
        by_stream[at].1.push(entry.id.as_str());
        last = at;
    }
    by_stream
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(stream: &str, id: &str) -> StreamEntry {
        StreamEntry::new(stream, id.to_string(), vec![("f".into(), "v".into())])
    }

    #[test]
    fn ids_are_grouped_by_stream_in_the_order_streams_first_come() {
        let entries = [
            entry("a", "1-0"),
            entry("a", "2-0"),
            entry("b", "1-0"),
            entry("a", "3-0"),
            entry("c", "5-0"),
            entry("b", "2-0"),
        ];
        assert_eq!(
            ids_by_stream(&entries),
            vec![
                ("a", vec!["1-0", "2-0", "3-0"]),
                ("b", vec!["1-0", "2-0"]),
                ("c", vec!["5-0"]),
            ]
        );
        assert!(ids_by_stream(&[]).is_empty());
    }
}
