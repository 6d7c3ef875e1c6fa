//! The stream consumer: moves events from Redis Streams into SQL, losing nothing.
//!
//! A feature's Lua script XADDs its event in the same script that changes state, so an
//! acknowledged write is always in a stream. This worker then, per stream and consumer group:
//! - reads in batches (XREADGROUP) and writes each batch in **one SQL transaction**; after a
//!   short batch it lets entries gather for `linger` (100 ms), so that a steady trickle is
//!   written in a few full transactions rather than many small ones;
//! - XACKs only **after the commit**: a crash in between replays the batch, which the
//!   handler absorbs because it is idempotent on the entry id;
//! - first re-reads its own pending entries, and takes over entries a dead instance left
//!   pending for longer than `claim_idle` (XAUTOCLAIM);
//! - while SQL fails for reasons that are not the entry's fault (connection lost, table
//!   locked or missing), **backs off with jitter and keeps the circuit open**: entries stay
//!   pending, nothing is dropped, nothing counts as an attempt;
//! - isolates an entry that fails on its own (bad data, a constraint) by retrying the batch
//!   entry by entry, and after `max_attempts` moves it to the `dead_letters` table with the
//!   error, then acknowledges it;
//! - XTRIMs the stream only below the oldest entry some group still needs.
//!
//! Every instance runs the same workers: the consumer group spreads the entries.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use redis::{
    aio::MultiplexedConnection,
    streams::{
        StreamAutoClaimReply, StreamId, StreamInfoGroupsReply, StreamPendingReply, StreamReadReply,
    },
    AsyncConnectionConfig, FromRedisValue,
};
use sqlx::{Any, Transaction};

use crate::infra::{backoff::Backoff, error::AppResult, ConsumerTimings, Infra};

/// One stream entry, its fields decoded as strings.
#[derive(Debug, Clone)]
pub struct StreamEntry {
    pub stream: String,
    pub id: String,
    pub fields: HashMap<String, String>,
}

impl StreamEntry {
    fn from_redis(stream: &str, entry: StreamId) -> Self {
        let fields = entry
            .map
            .into_iter()
            .map(|(key, value)| (key, String::from_redis_value(value).unwrap_or_default()))
            .collect();
        Self {
            stream: stream.to_string(),
            id: entry.id,
            fields,
        }
    }

    /// A field, or a poison error naming it.
    pub fn field(&self, name: &str) -> Result<&str, HandleError> {
        self.fields.get(name).map(String::as_str).ok_or_else(|| {
            HandleError::Poison(format!("entry {} lacks the field {name:?}", self.id))
        })
    }

    /// A numeric field, or a poison error.
    pub fn number(&self, name: &str) -> Result<i64, HandleError> {
        let text = self.field(name)?;
        text.parse().map_err(|_| {
            HandleError::Poison(format!(
                "entry {}: {name} is not a number: {text:?}",
                self.id
            ))
        })
    }

    /// `<ms>-<seq>` as numbers, for ordering entries of one stream in SQL.
    pub fn id_parts(&self) -> (i64, i64) {
        let (ms, seq) = self.id.split_once('-').unwrap_or((&self.id, "0"));
        (ms.parse().unwrap_or(0), seq.parse().unwrap_or(0))
    }

    /// The entry's place in its stream as one number, as SQL stores it (`event_order`).
    pub fn event_order(&self) -> i64 {
        let (ms, seq) = self.id_parts();
        event_order((ms as u64, seq as u64))
    }
}

/// An event as a stream entry carries it. Its type writes its field names once: the code
/// that XADDs it ([`Event::to_fields`]) and the consumers that read it
/// ([`Event::from_entry`]) share them, and a Lua script that XADDs it names the type in its
/// header.
pub trait Event: Sized {
    /// Reads an entry; one that is not this event is poison (kept apart), not an outage.
    fn from_entry(entry: &StreamEntry) -> Result<Self, HandleError>;
    /// The field/value pairs of the entry, in the order XADD writes them.
    fn to_fields(&self) -> Vec<(&'static str, String)>;
}

impl StreamEntry {
    /// The entry XADD would make of `event` (for tests and tools that read events back).
    pub fn of_event(stream: &str, id: &str, event: &impl Event) -> Self {
        Self {
            stream: stream.to_string(),
            id: id.to_string(),
            fields: event
                .to_fields()
                .into_iter()
                .map(|(name, value)| (name.to_string(), value))
                .collect(),
        }
    }
}

/// XADDs `event` to `stream`.
pub async fn publish(infra: &Infra, stream: &str, event: &impl Event) -> AppResult<()> {
    let mut conn = infra.redis.get().await?;
    let _: String = redis::cmd("XADD")
        .arg(stream)
        .arg("*")
        .arg(event.to_fields())
        .query_async(&mut *conn)
        .await?;
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum HandleError {
    /// The entry itself can never be written (malformed, violates a rule).
    #[error("{0}")]
    Poison(String),
    #[error(transparent)]
    Sql(#[from] sqlx::Error),
    /// Something the entry needs is down (Redis, another service): wait and retry.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl HandleError {
    /// Whether the failure belongs to the entry (retry a few times, then dead-letter) rather
    /// than to the database (wait and retry for as long as it takes).
    fn is_entry_fault(&self) -> bool {
        match self {
            Self::Poison(_) => true,
            Self::Sql(sqlx::Error::Database(db)) => match db.code().as_deref() {
                // PostgreSQL: data exception (22…) and integrity constraint violation (23…).
                Some(code) if code.len() == 5 => code.starts_with("22") || code.starts_with("23"),
                // SQLite: CONSTRAINT, MISMATCH, RANGE (primary result codes).
                Some(code) => matches!(code.parse::<i32>().map(|c| c & 0xff), Ok(19 | 20 | 25)),
                None => false,
            },
            Self::Sql(sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_)) => true,
            Self::Sql(_) | Self::Unavailable(_) => false,
        }
    }
}

/// What a feature provides to archive its stream.
#[async_trait::async_trait]
pub trait StreamHandler: Send + Sync + 'static {
    /// Writes the entries inside `tx` (committed by the caller). Must be idempotent on
    /// `StreamEntry::id`: the same entry may come again after a crash.
    async fn handle(
        &self,
        tx: &mut Transaction<'static, Any>,
        entries: &[StreamEntry],
    ) -> Result<(), HandleError>;
}

#[derive(Clone)]
pub struct ConsumerSpec {
    /// For logs and metrics, e.g. `vote-archive`.
    pub name: &'static str,
    pub group: &'static str,
    pub batch_size: usize,
    pub max_attempts: u32,
    /// Pending entries idle this long belong to a dead consumer and are taken over.
    pub claim_idle: Duration,
    /// How long one read waits for new entries.
    pub block: Duration,
    /// After a batch short of `batch_size`, how long entries gather before the next read.
    /// Each transaction makes SQLite write every page it touches to its log again, so a
    /// steady trickle read as it comes (a transaction per handful of entries) rewrote the
    /// same pages over and over; fuller batches write each page once. A full batch reads on
    /// at once, so a backlog drains at full speed.
    pub linger: Duration,
    /// The longest back-off while SQL fails.
    pub max_backoff: Duration,
}

impl ConsumerSpec {
    /// A consumer with the configured back-off and take-over times.
    pub fn new(timings: ConsumerTimings, name: &'static str, group: &'static str) -> Self {
        Self {
            name,
            group,
            batch_size: 200,
            max_attempts: 5,
            claim_idle: timings.claim_idle,
            block: Duration::from_millis(500),
            linger: Duration::from_millis(100),
            max_backoff: timings.max_backoff,
        }
    }
}

/// Runs one worker per stream until shutdown.
pub fn spawn(
    infra: &Infra,
    spec: ConsumerSpec,
    streams: Vec<String>,
    handler: Arc<dyn StreamHandler>,
) {
    for stream in streams {
        let (spec, handler) = (spec.clone(), handler.clone());
        infra
            .instance
            .spawn(spec.name, run(infra.clone(), spec, stream, handler));
    }
}

struct Worker {
    infra: Infra,
    spec: ConsumerSpec,
    stream: String,
    consumer: String,
    handler: Arc<dyn StreamHandler>,
    conn: Option<MultiplexedConnection>,
}

async fn run(infra: Infra, spec: ConsumerSpec, stream: String, handler: Arc<dyn StreamHandler>) {
    let consumer = infra.instance.id.to_string();
    let mut worker = Worker {
        infra: infra.clone(),
        spec,
        stream,
        consumer,
        handler,
        conn: None,
    };
    let mut backoff = Backoff::new(Duration::from_millis(100), worker.spec.max_backoff);
    let mut last_claim = tokio::time::Instant::now() - worker.spec.claim_idle;
    let mut last_trim = tokio::time::Instant::now();
    while !infra.instance.shutdown.is_cancelled() {
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
            anyhow::Ok((processed, entries.len()))
        };
        let outcome = tokio::select! {
            () = infra.instance.shutdown.cancelled() => return,
            outcome = outcome => outcome,
        };
        match outcome {
            Ok((Progress::Done, read)) => {
                backoff.reset();
                if (1..worker.spec.batch_size).contains(&read) {
                    tokio::select! {
                        () = infra.instance.shutdown.cancelled() => return,
                        () = tokio::time::sleep(worker.spec.linger) => {}
                    }
                }
            }
            Ok((Progress::Stalled, _)) | Err(_) => {
                if let Err(error) = &outcome {
                    tracing::warn!(consumer = worker.spec.name, stream = worker.stream, %error, "stream consumer error");
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
    async fn conn(&mut self) -> anyhow::Result<&mut MultiplexedConnection> {
        if self.conn.is_none() {
            let client = redis::Client::open(self.infra.instance.redis_url.as_ref())?;
            // Blocking reads wait up to `block`; the default response timeout is shorter.
            let config = AsyncConnectionConfig::new()
                .set_response_timeout(Some(self.spec.block + Duration::from_secs(5)));
            let mut conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            let created: redis::RedisResult<()> = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(&self.stream)
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
            self.conn = Some(conn);
        }
        Ok(self.conn.as_mut().expect("just set"))
    }

    /// Own pending entries first (retries), then entries of dead consumers, then new ones.
    async fn next_batch(&mut self, claim: bool) -> anyhow::Result<Vec<StreamEntry>> {
        let (stream, group, consumer, count) = (
            self.stream.clone(),
            self.spec.group,
            self.consumer.clone(),
            self.spec.batch_size,
        );
        let claim_idle = self.spec.claim_idle.as_millis() as u64;
        let block = self.spec.block.as_millis() as u64;
        let conn = self.conn().await?;

        let own: StreamReadReply = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(group)
            .arg(&consumer)
            .arg("COUNT")
            .arg(count)
            .arg("STREAMS")
            .arg(&stream)
            .arg("0")
            .query_async(conn)
            .await?;
        let mut batch = entries_of(&stream, own);
        // A due claim joins the own retries rather than waiting behind them: an entry held
        // back until an earlier one is written (an order waiting for its buyer's previous
        // order to settle) would otherwise wait for ever on an entry that a dead consumer
        // holds. One batch, in stream order, handles both.
        if claim {
            let claimed: StreamAutoClaimReply = redis::cmd("XAUTOCLAIM")
                .arg(&stream)
                .arg(group)
                .arg(&consumer)
                .arg(claim_idle)
                .arg("0-0")
                .arg("COUNT")
                .arg(count)
                .query_async(conn)
                .await?;
            if !claimed.claimed.is_empty() {
                tracing::info!(
                    stream,
                    taken = claimed.claimed.len(),
                    "took over entries of a silent consumer"
                );
                let own: HashSet<String> = batch.iter().map(|e| e.id.clone()).collect();
                batch.extend(
                    claimed
                        .claimed
                        .into_iter()
                        .map(|e| StreamEntry::from_redis(&stream, e))
                        .filter(|e| !own.contains(&e.id)),
                );
                batch.sort_by_key(StreamEntry::id_parts);
            }
        }
        if !batch.is_empty() {
            return Ok(batch);
        }
        let fresh: Option<StreamReadReply> = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(group)
            .arg(&consumer)
            .arg("COUNT")
            .arg(count)
            .arg("BLOCK")
            .arg(block)
            .arg("STREAMS")
            .arg(&stream)
            .arg(">")
            .query_async(conn)
            .await?;
        Ok(fresh
            .map(|reply| entries_of(&stream, reply))
            .unwrap_or_default())
    }

    async fn process(&mut self, entries: &[StreamEntry]) -> anyhow::Result<Progress> {
        if entries.is_empty() {
            return Ok(Progress::Done);
        }
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
        // Some entry is at fault: find it by writing one at a time.
        for entry in entries {
            match self.write(std::slice::from_ref(entry)).await {
                Ok(()) => self.ack(std::slice::from_ref(entry)).await?,
                Err(error) if !error.is_entry_fault() => return Ok(Progress::Stalled),
                Err(error) => self.count_failure(entry, &error).await?,
            }
        }
        Ok(Progress::Done)
    }

    async fn write(&self, entries: &[StreamEntry]) -> Result<(), HandleError> {
        let mut tx = self.infra.db.pool.begin().await?;
        self.handler.handle(&mut tx, entries).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn ack(&mut self, entries: &[StreamEntry]) -> anyhow::Result<()> {
        let ids: Vec<&str> = entries.iter().map(|e| e.id.as_str()).collect();
        let (stream, group) = (self.stream.clone(), self.spec.group);
        let name = self.spec.name;
        let conn = self.conn().await?;
        let () = redis::cmd("XACK")
            .arg(&stream)
            .arg(group)
            .arg(&ids)
            .query_async(conn)
            .await?;
        metrics::counter!("engage_stream_entries_archived_total", "consumer" => name)
            .increment(ids.len() as u64);
        Ok(())
    }

    /// Counts a failed attempt; at `max_attempts` the entry goes to `dead_letters`.
    async fn count_failure(
        &mut self,
        entry: &StreamEntry,
        error: &HandleError,
    ) -> anyhow::Result<()> {
        let attempts_key = format!("{}:attempts:{}", self.stream, self.spec.group);
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
        let payload = serde_json::to_string(&entry.fields)?;
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

    /// Trims below the oldest entry any group still needs: its oldest pending entry, or
    /// what it has not been delivered yet.
    async fn trim(&mut self) -> anyhow::Result<()> {
        let stream = self.stream.clone();
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
        Ok(())
    }
}

/// A stream position `(ms, seq)` as one number that orders like it: `ms * 10^6 + seq`
/// (a millisecond never holds a million entries; a larger seq stands for "the whole ms").
pub fn event_order((ms, seq): (u64, u64)) -> i64 {
    ms as i64 * 1_000_000 + seq.min(999_999) as i64
}

/// A stream position no entry added from now on can precede: Redis's clock as an entry id
/// (ids are Redis's time in ms, never below the last one).
pub async fn position_now(infra: &Infra) -> AppResult<(u64, u64)> {
    let mut conn = infra.redis.get().await?;
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut *conn).await?;
    Ok((seconds * 1000 + micros / 1000, u64::MAX))
}

/// Whether `group` has handled (its handler committed and acknowledged) every entry of
/// `stream` up to `through`. A stream or group that does not exist has nothing waiting.
pub async fn handled_through(
    infra: &Infra,
    stream: &str,
    group: &str,
    through: (u64, u64),
) -> AppResult<bool> {
    let mut conn = infra.redis.get().await?;
    let info: Option<redis::streams::StreamInfoStreamReply> = redis::cmd("XINFO")
        .arg("STREAM")
        .arg(stream)
        .query_async(&mut *conn)
        .await
        .ok();
    let Some(info) = info else {
        return Ok(true);
    };
    let groups: StreamInfoGroupsReply = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(stream)
        .query_async(&mut *conn)
        .await?;
    let Some(group) = groups.groups.iter().find(|g| g.name == group) else {
        return Ok(info.length == 0);
    };
    let last = parse_id(&info.last_generated_id).unwrap_or((0, 0));
    let delivered = parse_id(&group.last_delivered_id).unwrap_or((0, 0));
    if delivered < last.min(through) {
        return Ok(false);
    }
    let pending: StreamPendingReply = redis::cmd("XPENDING")
        .arg(stream)
        .arg(&group.name)
        .query_async(&mut *conn)
        .await?;
    Ok(match pending {
        StreamPendingReply::Data(data) => {
            parse_id(&data.start_id).is_none_or(|oldest| oldest > through)
        }
        _ => true,
    })
}

fn entries_of(stream: &str, reply: StreamReadReply) -> Vec<StreamEntry> {
    reply
        .keys
        .into_iter()
        .flat_map(|key| key.ids)
        .map(|entry| StreamEntry::from_redis(stream, entry))
        .collect()
}

fn parse_id(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}
