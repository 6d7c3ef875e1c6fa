//! Redis Streams between the hot path and SQL: the events features XADD, and the
//! [`consumer`] that moves them into SQL, losing nothing, and reports its [`backlog`].
//!
//! A feature's Lua script XADDs its event in the same script that changes state, so an
//! acknowledged write is always in a stream. An event has one type ([`Event`]) that writes
//! its field names once, for the script's XADD and the consumers that read it.
//!
//! The scripts of the busiest streams (a vote, an award) XADD their event *packed*: one field
//! whose name is the event's field names and whose value is their values, each joined by a
//! space (`remark voter author …` → `12 34 5 …`); the last value takes the rest of the text,
//! so it may hold spaces (an award's idempotency key is the caller's free text). Redis's reply
//! carries each field name and each value as a value of its own, which the client parses one
//! at a time, and a like's events are read five times (its vote by the archive, the points
//! and the notifications, its award by the points archive and the notifications): one field
//! instead of seven took most of the parsing out of a like. [`StreamEntry::fields`]
//! reads them in place, so consumers, dead letters and tools see the fields either way.

mod backlog;
mod consumer;
pub mod leases;

use std::{
    ops::Range,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
};

use redis::{
    streams::{StreamInfoGroupsReply, StreamPendingReply},
    FromRedisValue, ParsingError, Value,
};
use sqlx::{Any, Transaction};

pub(crate) use consumer::spawn;

use crate::infra::{error::AppResult, Infra};

/// One stream entry, its fields decoded as strings.
#[derive(Debug)]
pub struct StreamEntry {
    pub(crate) stream: String,
    pub(crate) id: String,
    /// The field/value pairs as XADD wrote them (one for a packed entry). A list, not a map:
    /// an event has a handful of fields, and building, hashing and dropping a map for each
    /// entry read by every consumer cost more than comparing a few short names.
    pairs: Vec<(String, String)>,
    /// Where each field lies in `pairs`, found once when the entry is read: splitting a
    /// packed entry again for every field an event reads (a points award reads a dozen) was
    /// 6 % of a sign-in's CPU samples in `perf`.
    spans: Vec<Span>,
    /// The span after the field found last, where [`StreamEntry::get`] looks first: an
    /// event reads its fields in about the order it wrote them, so a dozen reads cost a dozen
    /// comparisons rather than one per field passed over each time.
    next: AtomicUsize,
}

/// One field of an entry: its pair in `pairs`, and the bytes of its name and value there.
#[derive(Debug, Clone)]
struct Span {
    pair: usize,
    name: Range<usize>,
    value: Range<usize>,
}

impl StreamEntry {
    /// An entry of `stream` with the field/value pairs XADD was given.
    fn new(stream: &str, id: String, pairs: Vec<(String, String)>) -> Self {
        let spans = spans_of(&pairs);
        Self {
            stream: stream.to_string(),
            id,
            pairs,
            spans,
            next: AtomicUsize::new(0),
        }
    }

    /// The fields in the order XADD wrote them.
    pub(crate) fn fields(&self) -> impl Iterator<Item = (&str, &str)> {
        self.spans.iter().map(|span| {
            let (names, values) = &self.pairs[span.pair];
            (&names[span.name.clone()], &values[span.value.clone()])
        })
    }

    /// A field, if the entry has it.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        let start = self.next.load(Ordering::Relaxed);
        let found = (start..self.spans.len())
            .chain(0..start.min(self.spans.len()))
            .find(|&at| self.name(at) == name)?;
        self.next.store(found + 1, Ordering::Relaxed);
        let span = &self.spans[found];
        Some(&self.pairs[span.pair].1[span.value.clone()])
    }

    /// The name of the `at`th field.
    fn name(&self, at: usize) -> &str {
        let span = &self.spans[at];
        &self.pairs[span.pair].0[span.name.clone()]
    }

    /// The values of the fields `names`, found in one pass over the entry. For an event of
    /// many fields, most of them absent from most entries (an award has twenty, a like's
    /// award eight): each [`StreamEntry::get`] of an absent field compares every name, and an
    /// award read that way cost 14,000 instructions, read twice per like and per sign-in.
    /// Listed in the order the event writes them, each field is found at the first name tried.
    pub(crate) fn values<const N: usize>(&self, names: [&str; N]) -> [Option<&str>; N] {
        let mut values = [None; N];
        let mut next = 0;
        for (name, value) in self.fields() {
            if let Some(at) = (next..N).chain(0..next).find(|&at| names[at] == name) {
                values[at] = Some(value);
                next = at + 1;
            }
        }
        values
    }

    /// A field, or a poison error naming it.
    pub(crate) fn field(&self, name: &str) -> Result<&str, HandleError> {
        self.required(name, self.get(name))
    }

    /// A numeric field, or a poison error.
    pub(crate) fn number(&self, name: &str) -> Result<i64, HandleError> {
        self.number_of(name, self.get(name))
    }

    /// The `value` of the field `name` (found by [`StreamEntry::values`]), or a poison error
    /// naming it.
    pub(crate) fn required<'a>(
        &self,
        name: &str,
        value: Option<&'a str>,
    ) -> Result<&'a str, HandleError> {
        value.ok_or_else(|| {
            HandleError::Poison(format!("entry {} lacks the field {name:?}", self.id))
        })
    }

    /// The `value` of the field `name` as a number, or a poison error.
    pub(crate) fn number_of(&self, name: &str, value: Option<&str>) -> Result<i64, HandleError> {
        let text = self.required(name, value)?;
        text.parse().map_err(|_| {
            HandleError::Poison(format!(
                "entry {}: {name} is not a number: {text:?}",
                self.id
            ))
        })
    }

    /// The `value` of an optional field `name` as a number: `None` when the entry lacks it,
    /// a poison error when it is not a number.
    pub(crate) fn optional_number_of(
        &self,
        name: &str,
        value: Option<&str>,
    ) -> Result<Option<i64>, HandleError> {
        value.map(|_| self.number_of(name, value)).transpose()
    }

    /// `<ms>-<seq>` as numbers, for ordering entries of one stream in SQL.
    pub(crate) fn id_parts(&self) -> (i64, i64) {
        let (ms, seq) = self.id.split_once('-').unwrap_or((&self.id, "0"));
        (ms.parse().unwrap_or(0), seq.parse().unwrap_or(0))
    }

    /// The entry's place in its stream as one number, as SQL stores it (`event_order`).
    pub(crate) fn event_order(&self) -> i64 {
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
    #[cfg(test)]
    pub(crate) fn of_event(stream: &str, id: &str, event: &impl Event) -> Self {
        let pairs = event
            .to_fields()
            .into_iter()
            .map(|(name, value)| (name.to_string(), value))
            .collect();
        Self::new(stream, id.to_string(), pairs)
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

/// XADDs `events` to `stream` in order, in one round trip.
pub(crate) async fn publish_all<E: Event>(
    infra: &Infra,
    stream: &str,
    events: &[E],
) -> AppResult<()> {
    let mut pipe = redis::pipe();
    for event in events {
        pipe.cmd("XADD")
            .arg(stream)
            .arg("*")
            .arg(event.to_fields())
            .ignore();
    }
    let mut conn = infra.redis.get().await?;
    let () = pipe.query_async(&mut *conn).await?;
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
    pub(crate) fn is_entry_fault(&self) -> bool {
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

/// What a feature provides to archive its stream into SQL.
#[async_trait::async_trait]
pub(crate) trait StreamHandler: Send + Sync + 'static {
    /// Writes the entries inside `tx` (committed by the caller). Must be idempotent on
    /// `StreamEntry::id`: the same entry may come again after a crash.
    async fn handle(
        &self,
        tx: &mut Transaction<'static, Any>,
        entries: &[StreamEntry],
    ) -> Result<(), HandleError>;
}

/// What a feature provides to act on its stream in Redis alone (awards, fan-out).
#[async_trait::async_trait]
pub(crate) trait RedisHandler: Send + Sync + 'static {
    /// Acts on the entries. Must be idempotent on `StreamEntry::id`, as above.
    async fn handle(&self, entries: &[StreamEntry]) -> Result<(), HandleError>;

    /// Whether it also writes SQL, in a transaction of its own per batch (notifications):
    /// then it reads as an archive does, in large batches gathered for
    /// `ENGAGE_ARCHIVE_LINGER_MS`, since every transaction costs SQLite the pages it touches.
    fn writes_sql(&self) -> bool {
        false
    }
}

/// A consumer's handler. One that writes SQL gets a transaction per batch on the archive's
/// connection; one that works in Redis alone gets none, so that it neither holds that
/// connection while it waits on Redis nor costs the database a transaction per batch.
#[derive(Clone)]
pub(crate) enum Handler {
    Archive(Arc<dyn StreamHandler>),
    Redis(Arc<dyn RedisHandler>),
}

/// A stream position `(ms, seq)` as one number that orders like it: `ms * 10^6 + seq`
/// (a millisecond never holds a million entries; a larger seq stands for "the whole ms").
pub(crate) fn event_order((ms, seq): (u64, u64)) -> i64 {
    ms as i64 * 1_000_000 + seq.min(999_999) as i64
}

/// A stream position no entry added from now on can precede: Redis's clock as an entry id
/// (ids are Redis's time in ms, never below the last one).
pub(crate) async fn position_now(infra: &Infra) -> AppResult<(u64, u64)> {
    let mut conn = infra.redis.get().await?;
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut *conn).await?;
    Ok((seconds * 1000 + micros / 1000, u64::MAX))
}

/// Whether `group` has handled (its handler committed and acknowledged) every entry of
/// `stream` up to `through`. A stream or group that does not exist has nothing waiting.
pub(crate) async fn handled_through(
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

/// The entries of an XREADGROUP or XREAD reply, each with its stream, read straight from
/// Redis's reply (XAUTOCLAIM's are read the same way, [`claimed_entries`]). `redis::streams::StreamReadReply` first copies the whole reply (it tries
/// two formats) and then builds a map per stream and per entry: for a consumer's batch of a
/// thousand entries that was most of what reading it cost.
///
/// A reply is nil when nothing came; each stream is `[name, entries]` (a map of names to
/// entries over RESP3).
pub(crate) struct ReadReply(pub Vec<StreamEntry>);

impl FromRedisValue for ReadReply {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        let streams = match value {
            Value::Nil => return Ok(Self(Vec::new())),
            Value::Map(streams) => streams,
            Value::Array(streams) => streams
                .into_iter()
                .map(|stream| match stream {
                    Value::Array(pair) if pair.len() == 2 => {
                        let mut pair = pair.into_iter();
                        Ok((
                            pair.next().unwrap_or(Value::Nil),
                            pair.next().unwrap_or(Value::Nil),
                        ))
                    }
                    other => Err(unexpected("a stream", &other)),
                })
                .collect::<Result<_, _>>()?,
            other => return Err(unexpected("a stream read", &other)),
        };
        let mut entries = Vec::new();
        for (name, ids) in streams {
            entries_of(&text(name)?, ids, &mut entries)?;
        }
        Ok(Self(entries))
    }
}

/// Every entry of `stream`, oldest first, as the consumers read them (for tools and tests).
pub async fn range(infra: &Infra, stream: &str) -> AppResult<Vec<StreamEntry>> {
    let mut conn = infra.redis.get().await?;
    let reply: Value = redis::cmd("XRANGE")
        .arg(stream)
        .arg("-")
        .arg("+")
        .query_async(&mut *conn)
        .await?;
    let mut entries = Vec::new();
    entries_of(stream, reply, &mut entries).map_err(redis::RedisError::from)?;
    Ok(entries)
}

/// The entries an XAUTOCLAIM of `stream` took over: its reply is `[next id, entries, …]`.
pub(crate) fn claimed_entries(
    stream: &str,
    reply: Value,
) -> Result<Vec<StreamEntry>, ParsingError> {
    let Value::Array(parts) = reply else {
        return Err(unexpected("a claim", &reply));
    };
    let mut entries = Vec::new();
    if let Some(ids) = parts.into_iter().nth(1) {
        entries_of(stream, ids, &mut entries)?;
    }
    Ok(entries)
}

/// Appends the entries `[[id, [field, value, …]], …]` of `stream` to `into`. An entry trimmed
/// while pending has nil fields and comes out without any.
fn entries_of(stream: &str, ids: Value, into: &mut Vec<StreamEntry>) -> Result<(), ParsingError> {
    let Value::Array(ids) = ids else {
        return Err(unexpected("a stream's entries", &ids));
    };
    into.reserve(ids.len());
    for entry in ids {
        let Value::Array(entry) = entry else {
            return Err(unexpected("a stream entry", &entry));
        };
        let mut entry = entry.into_iter();
        let id = text(entry.next().unwrap_or(Value::Nil))?;
        let pairs = match entry.next() {
            Some(Value::Array(pairs)) => {
                let mut fields = Vec::with_capacity(pairs.len() / 2);
                let mut pairs = pairs.into_iter();
                while let (Some(name), Some(value)) = (pairs.next(), pairs.next()) {
                    fields.push((text(name)?, text(value)?));
                }
                fields
            }
            Some(Value::Map(pairs)) => pairs
                .into_iter()
                .map(|(name, value)| Ok((text(name)?, text(value)?)))
                .collect::<Result<_, ParsingError>>()?,
            _ => Vec::new(),
        };
        into.push(StreamEntry::new(stream, id, pairs));
    }
    Ok(())
}

/// The fields of an entry's pairs, a packed entry's read in place: its names split at each
/// space, its values at as many spaces less one, so the last value keeps its own. A value
/// short is a field missing, which the event's reader reports.
fn spans_of(pairs: &[(String, String)]) -> Vec<Span> {
    match pairs {
        [(names, values)] if names.as_bytes().contains(&b' ') => packed_spans(names, values),
        pairs => pairs
            .iter()
            .enumerate()
            .map(|(pair, (name, value))| Span {
                pair,
                name: 0..name.len(),
                value: 0..value.len(),
            })
            .collect(),
    }
}

/// The spans of a packed entry, in one pass over its names and one over its values. Names
/// and numbers are a few bytes each, so a plain loop to the next space costs less than a
/// search per space (`split`, `splitn` and counting the names first were 3 % of a like's
/// instructions, its events being read five times).
fn packed_spans(names: &str, values: &str) -> Vec<Span> {
    let (names, values) = (names.as_bytes(), values.as_bytes());
    let space_from = |text: &[u8], at: usize| {
        text[at..]
            .iter()
            .position(|&byte| byte == b' ')
            .map_or(text.len(), |offset| at + offset)
    };
    let mut spans = Vec::with_capacity(8);
    let (mut name_at, mut value_at) = (0, 0);
    loop {
        let name_end = space_from(names, name_at);
        let last_name = name_end == names.len();
        // The last name's value is the rest of the text, spaces and all.
        let value_end = if last_name {
            values.len()
        } else {
            space_from(values, value_at)
        };
        spans.push(Span {
            pair: 0,
            name: name_at..name_end,
            value: value_at..value_end,
        });
        if last_name || value_end == values.len() {
            return spans;
        }
        (name_at, value_at) = (name_end + 1, value_end + 1);
    }
}

/// A string of a reply, taken over without a copy.
fn text(value: Value) -> Result<String, ParsingError> {
    match value {
        Value::BulkString(bytes) => Ok(String::from_utf8(bytes)?),
        Value::SimpleString(text) => Ok(text),
        other => Err(unexpected("a string", &other)),
    }
}

fn unexpected(what: &str, value: &Value) -> ParsingError {
    ParsingError::from(format!("expected {what} in a stream read, got {value:?}"))
}

pub(crate) fn parse_id(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn a_read_reply_is_read_in_both_protocols_with_trimmed_entries_empty() {
        let entries = |fields: Value| {
            Value::Array(vec![
                Value::Array(vec![bulk("1-0"), fields]),
                Value::Array(vec![bulk("2-0"), Value::Nil]),
            ])
        };
        let resp2 = Value::Array(vec![Value::Array(vec![
            bulk("s"),
            entries(Value::Array(vec![
                bulk("a"),
                bulk("1"),
                bulk("b"),
                bulk("x"),
            ])),
        ])]);
        let resp3 = Value::Map(vec![(
            bulk("s"),
            entries(Value::Map(vec![
                (bulk("a"), bulk("1")),
                (bulk("b"), bulk("x")),
            ])),
        )]);
        for reply in [resp2, resp3] {
            let ReadReply(read) = ReadReply::from_redis_value(reply).unwrap();
            assert_eq!(read.len(), 2);
            assert_eq!((read[0].stream.as_str(), read[0].id.as_str()), ("s", "1-0"));
            assert_eq!(read[0].number("a").unwrap(), 1);
            assert_eq!(read[0].field("b").unwrap(), "x");
            assert_eq!(read[1].fields().count(), 0);
        }
        assert!(ReadReply::from_redis_value(Value::Nil)
            .unwrap()
            .0
            .is_empty());
        assert!(ReadReply::from_redis_value(Value::Int(3)).is_err());
    }

    #[test]
    fn a_packed_entry_is_read_as_its_fields_the_last_value_keeping_its_spaces() {
        let entry = |fields: Vec<Value>| {
            Value::Array(vec![
                bulk("s"),
                Value::Array(vec![Value::Array(vec![bulk("1-0"), Value::Array(fields)])]),
            ])
        };
        let reply = Value::Array(vec![entry(vec![
            bulk("user points key"),
            bulk("7 3 a key = with spaces"),
        ])]);
        let ReadReply(read) = ReadReply::from_redis_value(reply).unwrap();
        assert_eq!(
            read[0].fields().collect::<Vec<_>>(),
            [
                ("user", "7"),
                ("points", "3"),
                ("key", "a key = with spaces")
            ]
        );

        // A value short: the field is missing, and the event's reader says so.
        let reply = Value::Array(vec![entry(vec![bulk("user points key"), bulk("7 3")])]);
        let ReadReply(read) = ReadReply::from_redis_value(reply).unwrap();
        assert_eq!(read[0].number("points").unwrap(), 3);
        assert!(matches!(read[0].field("key"), Err(HandleError::Poison(_))));

        // An empty value keeps its place, and letters of any script are read whole.
        let reply = Value::Array(vec![entry(vec![
            bulk("user points key"),
            bulk(" 3 ключ é"),
        ])]);
        let ReadReply(read) = ReadReply::from_redis_value(reply).unwrap();
        assert_eq!(
            read[0].fields().collect::<Vec<_>>(),
            [("user", ""), ("points", "3"), ("key", "ключ é")]
        );

        // One field without a space in its name is an ordinary field.
        let reply = Value::Array(vec![entry(vec![bulk("note"), bulk("a b")])]);
        let ReadReply(read) = ReadReply::from_redis_value(reply).unwrap();
        assert_eq!(read[0].field("note").unwrap(), "a b");
    }

    #[test]
    fn fields_are_found_in_any_order_and_again() {
        let entry = StreamEntry::new(
            "s",
            "1-0".into(),
            vec![
                ("a".into(), "1".into()),
                ("b".into(), "2".into()),
                ("c".into(), "3".into()),
            ],
        );
        // In order, then back to an earlier one (the search wraps round), twice over.
        for name in ["a", "b", "c", "b", "a", "c", "c"] {
            let expected = (name.as_bytes()[0] - b'a' + 1).to_string();
            assert_eq!(entry.get(name), Some(expected.as_str()), "{name}");
        }
        assert_eq!(entry.get("d"), None);
        assert_eq!(
            entry.get("a"),
            Some("1"),
            "a miss leaves the entry readable"
        );
    }

    #[test]
    fn values_are_found_in_one_pass_whatever_their_order_and_absent_ones_are_none() {
        let entry = StreamEntry::new(
            "s",
            "1-0".into(),
            vec![(
                "user points reason unknown key".into(),
                "7 x gift ? a key".into(),
            )],
        );
        // Listed out of the written order, with a name the entry lacks.
        let [key, missing, user, reason, points] =
            entry.values(["key", "day", "user", "reason", "points"]);
        assert_eq!(
            (key, missing, user, reason),
            (Some("a key"), None, Some("7"), Some("gift"))
        );
        assert_eq!(entry.number_of("user", user).unwrap(), 7);
        assert_eq!(entry.optional_number_of("day", missing).unwrap(), None);
        assert!(matches!(
            entry.number_of("day", missing),
            Err(HandleError::Poison(_))
        ));
        assert!(matches!(
            entry.optional_number_of("points", points),
            Err(HandleError::Poison(_))
        ));
    }

    #[test]
    fn a_claim_reply_gives_its_entries_of_the_stream() {
        let reply = Value::Array(vec![
            bulk("0-0"),
            Value::Array(vec![Value::Array(vec![
                bulk("3-1"),
                Value::Array(vec![bulk("a"), bulk("7")]),
            ])]),
            Value::Array(vec![]),
        ]);
        let claimed = claimed_entries("s", reply).unwrap();
        assert_eq!(claimed.len(), 1);
        assert_eq!(
            (claimed[0].stream.as_str(), claimed[0].id.as_str()),
            ("s", "3-1")
        );
        assert_eq!(claimed[0].number("a").unwrap(), 7);
        assert!(claimed_entries("s", Value::Nil).is_err());
    }
}
