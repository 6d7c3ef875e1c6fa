//! The follow feed: push to followers' inboxes, pull from big authors' outboxes.
//!
//! - Follows live in SQL; Redis keeps each user's following set and everyone's follower
//!   count, which reads need. A follow or unfollow is acknowledged once SQL holds it, and
//!   reaches Redis exactly once through the outbox of [`changes`], however Redis fails and
//!   however often the client retries.
//! - A new remark is XADDed to `{feed}:remarks` by `createRemark`; the `feed-fanout` consumer,
//!   off the request path, adds it to the author's outbox and, unless the author has more
//!   than `ENGAGE_FEED_PUSH_LIMIT` followers, to each follower's inbox (both capped zsets).
//! - `feed` merges the inbox with the outboxes of the big authors the reader follows, and
//!   drops entries of authors no longer followed. Cost per page: three round trips (following
//!   set, follower counts, then inbox and outboxes in one pipeline), and one outbox range per
//!   followed big author: reads grow linearly with the big authors one follows, writes with
//!   the followers of small authors.
//!
//! Entries are `<remark id, 20 digits>:<author>` scored by creation time in ms; the cursor is
//! (score, member), so equal timestamps and remarks arriving between pages neither repeat
//! nor skip entries.

use std::{collections::HashSet, sync::Arc};

use sqlx::Row;

pub mod changes;
pub mod events;
pub mod follows;
pub mod recovery;
pub mod settings;

use crate::infra::page::PageArgs;
use crate::{
    features::{
        remarks::{events::RemarkCreated, LISTED},
        users::UserDirectory,
    },
    infra::{
        error::{AppError, AppResult},
        redis::Keys,
        streams::{self, Event, HandleError, Handler, RedisHandler, StreamEntry},
        Infra,
    },
};

/// What the follow feed works with: follows name known users.
#[derive(Clone)]
pub struct Feed {
    pub(crate) infra: Infra,
    pub(crate) users: Arc<UserDirectory>,
    pub(crate) settings: FeedSettings,
}

pub use settings::FeedSettings;

impl Keys {
    pub fn feed_inbox(&self, user_id: i64) -> String {
        self.tagged(("feed:", user_id), "inbox")
    }

    pub fn feed_outbox(&self, user_id: i64) -> String {
        self.tagged(("feed:", user_id), "outbox")
    }

    pub(crate) fn following(&self, user_id: i64) -> String {
        self.tagged(("feed:", user_id), "following")
    }

    pub fn follower_counts(&self) -> String {
        self.tagged("feed", "follower-counts")
    }

    /// The follow events (`lua/feed_count_follows.lua`), in the counts' slot.
    pub fn follow_events(&self) -> String {
        self.tagged("feed", "follow-events")
    }

    /// Authors whose followers pull their outbox: every author who ever had more than
    /// `ENGAGE_FEED_PUSH_LIMIT` followers. Once pulled, always pulled: what they posted
    /// while big is only in their outbox, so falling back under the limit must not hide it.
    pub(crate) fn pulled_authors(&self) -> String {
        self.tagged("feed", "pulled")
    }
}

fn member(remark_id: i64, author_id: i64) -> String {
    format!("{remark_id:020}:{author_id}")
}

fn parse_member(member: &str) -> Option<(i64, i64)> {
    let (remark, author) = member.split_once(':')?;
    Some((remark.parse().ok()?, author.parse().ok()?))
}

struct FanOut(Feed);

#[async_trait::async_trait]
impl RedisHandler for FanOut {
    async fn handle(&self, entries: &[StreamEntry]) -> Result<(), HandleError> {
        let ctx = &self.0;
        for entry in entries {
            let RemarkCreated {
                remark_id: remark,
                author_id: author,
                created_at_ms: created,
            } = RemarkCreated::from_entry(entry)?;
            let big = ctx.is_big(author).await.map_err(unavailable)?;
            ctx.fan_out(author, big, &[(remark, created)])
                .await
                .map_err(unavailable)?;
        }
        Ok(())
    }
}

fn unavailable(error: AppError) -> HandleError {
    HandleError::Unavailable(error.to_string())
}

/// An entry's place in the feed, its score and member: the cursor of its edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FeedCursor {
    pub(crate) score: i64,
    pub(crate) member: String,
}

/// Where a page of the feed lies: the entries below `after` and above `before` (either may
/// be absent), read from `after` down, or from `before` up when `backward` (a `last` page).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FeedRange {
    pub(crate) after: Option<FeedCursor>,
    pub(crate) before: Option<FeedCursor>,
    pub(crate) backward: bool,
}

impl FeedRange {
    /// Whether the entry `member` at `score` lies strictly between the cursors.
    fn holds(&self, score: i64, member: &str) -> bool {
        let entry = (score, member);
        self.after
            .as_ref()
            .is_none_or(|c| entry < (c.score, c.member.as_str()))
            && self
                .before
                .as_ref()
                .is_none_or(|c| entry > (c.score, c.member.as_str()))
    }
}

impl FeedCursor {
    pub(crate) fn encode(&self) -> String {
        format!("{}|{}", self.score, self.member)
    }

    pub(crate) fn decode(text: &str) -> AppResult<Self> {
        let bad = || AppError::bad_input("not a cursor of the feed");
        let (score, member) = text.split_once('|').ok_or_else(bad)?;
        parse_member(member).ok_or_else(bad)?;
        Ok(Self {
            score: score.parse().map_err(|_| bad())?,
            member: member.to_string(),
        })
    }
}

impl Feed {
    /// Follows `followee`; `true` when this call created the follow. Acknowledged once SQL
    /// holds it: its Redis side follows, at once or from the retrier ([`changes`]).
    pub(crate) async fn follow(&self, follower: i64, followee: i64) -> AppResult<bool> {
        if follower == followee {
            return Err(AppError::bad_input("you cannot follow yourself"));
        }
        if self.users.find(followee).await?.is_none() {
            return Err(AppError::not_found(format!("no user {followee}")));
        }
        self.change_follow(follower, followee, 1).await
    }

    /// Redis's side of a follow SQL holds: the followee in the follower's following set and,
    /// unless the followee is pulled, their recent remarks in the follower's inbox (as if
    /// they had followed all along). Idempotent.
    async fn show_followee(&self, follower: i64, followee: i64) -> AppResult<()> {
        let mut conn = self.infra.redis.get().await?;
        let _: i64 = redis::cmd("SADD")
            .arg(self.infra.keys.following(follower))
            .arg(followee)
            .query_async(&mut *conn)
            .await?;
        // A pulled author's remarks reach the reader from their outbox.
        if self.pulled_among(&mut conn, &[followee]).await?.is_empty() {
            drop(conn);
            let recent = self.latest_remarks(followee).await?;
            self.push_into_inbox(follower, followee, &recent).await?;
        }
        Ok(())
    }

    /// An author's newest remarks, as many as an inbox keeps: `(remark id, created at ms)`.
    async fn latest_remarks(&self, author: i64) -> AppResult<Vec<(i64, i64)>> {
        let rows = sqlx::query(&format!(
            "SELECT id, created_at_ms FROM remarks WHERE author_id = $1 AND {LISTED} \
                 ORDER BY id DESC LIMIT $2"
        ))
        .bind(author)
        .bind(self.settings.inbox_size())
        .fetch_all(&self.infra.db.pool)
        .await?;
        let mut remarks = Vec::with_capacity(rows.len());
        for row in &rows {
            remarks.push((row.try_get("id")?, row.try_get("created_at_ms")?));
        }
        Ok(remarks)
    }

    /// Adds an author's remarks to a reader's inbox.
    async fn push_into_inbox(
        &self,
        reader: i64,
        author: i64,
        remarks: &[(i64, i64)],
    ) -> AppResult<()> {
        if remarks.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        self.push(
            &mut pipe,
            &self.infra.keys.feed_inbox(reader),
            author,
            remarks,
        );
        let mut conn = self.infra.redis.get().await?;
        let () = pipe.query_async(&mut *conn).await?;
        Ok(())
    }

    /// Queues the adding of an author's remarks `(id, created at ms)` to an inbox or outbox,
    /// which keeps its `ENGAGE_FEED_INBOX_SIZE` newest entries.
    fn push(&self, pipe: &mut redis::Pipeline, key: &str, author: i64, remarks: &[(i64, i64)]) {
        if remarks.is_empty() {
            return;
        }
        let keep = self.settings.inbox_size();
        let add = pipe.cmd("ZADD").arg(key);
        for &(remark, created) in remarks {
            add.arg(created).arg(member(remark, author));
        }
        add.ignore();
        pipe.cmd("ZREMRANGEBYRANK")
            .arg(key)
            .arg(0)
            .arg(-keep - 1)
            .ignore();
    }

    /// Stops following; the author's entries leave the inbox. `true` when a follow ended.
    /// Acknowledged once SQL holds it, as [`Feed::follow`].
    pub(crate) async fn unfollow(&self, follower: i64, followee: i64) -> AppResult<bool> {
        if follower == followee {
            return Err(AppError::bad_input("you cannot unfollow yourself"));
        }
        self.change_follow(follower, followee, -1).await
    }

    /// Redis's side of a follow SQL no longer holds: the followee out of the following set,
    /// their entries out of the inbox. Idempotent.
    async fn hide_followee(&self, follower: i64, followee: i64) -> AppResult<()> {
        let inbox = self.infra.keys.feed_inbox(follower);
        let mut conn = self.infra.redis.get().await?;
        let entries: Vec<String> = redis::cmd("ZRANGE")
            .arg(&inbox)
            .arg(0)
            .arg(-1)
            .query_async(&mut *conn)
            .await?;
        let theirs: Vec<&String> = entries
            .iter()
            .filter(|m| parse_member(m).is_some_and(|(_, author)| author == followee))
            .collect();
        let mut pipe = redis::pipe();
        pipe.cmd("SREM")
            .arg(self.infra.keys.following(follower))
            .arg(followee)
            .ignore();
        if !theirs.is_empty() {
            pipe.cmd("ZREM").arg(&inbox).arg(theirs).ignore();
        }
        let () = pipe.query_async(&mut *conn).await?;
        Ok(())
    }

    /// Takes a deleted or hidden remark out of its author's outbox and their followers'
    /// inboxes. A fan-out that lands later puts it back in some inbox, where a feed page
    /// drops it (it shows only what remarks show), and the inbox's cap ages it out.
    pub(crate) async fn forget_remark(&self, author: i64, remark: i64) -> AppResult<()> {
        let followers: Vec<i64> =
            sqlx::query("SELECT follower_id FROM follows WHERE followee_id = $1")
                .bind(author)
                .fetch_all(&self.infra.db.pool)
                .await?
                .iter()
                .map(|row| row.try_get("follower_id"))
                .collect::<Result<_, _>>()?;
        let entry = member(remark, author);
        let mut pipe = redis::pipe();
        for key in std::iter::once(self.infra.keys.feed_outbox(author))
            .chain(followers.iter().map(|f| self.infra.keys.feed_inbox(*f)))
        {
            pipe.cmd("ZREM").arg(key).arg(&entry).ignore();
        }
        let mut conn = self.infra.redis.get().await?;
        let () = pipe.query_async(&mut *conn).await?;
        Ok(())
    }

    /// How many users follow `user_id`.
    pub(crate) async fn follower_count(&self, user_id: i64) -> AppResult<i64> {
        let mut conn = self.infra.redis.get().await?;
        let count: Option<i64> = redis::cmd("HGET")
            .arg(self.infra.keys.follower_counts())
            .arg(user_id)
            .query_async(&mut *conn)
            .await?;
        Ok(count.unwrap_or(0).max(0))
    }

    pub(crate) fn spawn_fan_out(&self) {
        streams::spawn(
            &self.infra,
            "feed-fanout",
            "fanout",
            vec![self.infra.keys.remark_stream()],
            Handler::Redis(Arc::new(FanOut(self.clone()))),
        );
    }

    /// Adds an author's remarks `(id, created at ms)` to their outbox and, unless they are
    /// `big` (their followers pull the outbox, and they stay pulled), to each follower's inbox.
    pub(crate) async fn fan_out(
        &self,
        author: i64,
        big: bool,
        remarks: &[(i64, i64)],
    ) -> AppResult<()> {
        let followers: Vec<i64> = if big {
            Vec::new()
        } else {
            sqlx::query("SELECT follower_id FROM follows WHERE followee_id = $1")
                .bind(author)
                .fetch_all(&self.infra.db.pool)
                .await?
                .iter()
                .map(|row| row.try_get("follower_id"))
                .collect::<Result<_, _>>()?
        };
        let mut pipe = redis::pipe();
        if big {
            pipe.cmd("SADD")
                .arg(self.infra.keys.pulled_authors())
                .arg(author)
                .ignore();
        }
        for key in std::iter::once(self.infra.keys.feed_outbox(author))
            .chain(followers.iter().map(|f| self.infra.keys.feed_inbox(*f)))
        {
            self.push(&mut pipe, &key, author, remarks);
        }
        let mut conn = self.infra.redis.get().await?;
        let () = pipe.query_async(&mut *conn).await?;
        Ok(())
    }

    async fn is_big(&self, author: i64) -> AppResult<bool> {
        let mut conn = self.infra.redis.get().await?;
        let followers: Option<i64> = redis::cmd("HGET")
            .arg(self.infra.keys.follower_counts())
            .arg(author)
            .query_async(&mut *conn)
            .await?;
        Ok(followers.unwrap_or(0) > self.settings.push_limit())
    }

    /// Of the followed authors, those whose outbox the reader pulls: above the push limit now,
    /// or ever before (see [`Keys::pulled_authors`]).
    async fn pulled_among(
        &self,
        conn: &mut crate::infra::redis::RedisConn<'_>,
        authors: &[i64],
    ) -> AppResult<Vec<i64>> {
        if authors.is_empty() {
            return Ok(Vec::new());
        }
        let (counts, pulled): (Vec<Option<i64>>, Vec<bool>) = redis::pipe()
            .cmd("HMGET")
            .arg(self.infra.keys.follower_counts())
            .arg(authors)
            .cmd("SMISMEMBER")
            .arg(self.infra.keys.pulled_authors())
            .arg(authors)
            .query_async(&mut **conn)
            .await?;
        let limit = self.settings.push_limit();
        Ok(authors
            .iter()
            .zip(counts.iter().zip(pulled))
            .filter(|(_, (count, pulled))| *pulled || count.unwrap_or(0) > limit)
            .map(|(author, _)| *author)
            .collect())
    }

    /// A page of the reader's feed, newest first: remark ids with their cursors. A page lies
    /// below `after` and above `before` (in the order of score, then member), read from
    /// `after` down, or from `before` up when backward.
    pub(crate) async fn page(
        &self,
        reader: i64,
        page: PageArgs<FeedRange>,
    ) -> AppResult<(Vec<(i64, FeedCursor)>, bool)> {
        let PageArgs {
            first,
            after: range,
        } = page;
        let FeedRange {
            after,
            before,
            backward,
        } = &range;
        let keys = &self.infra.keys;
        let mut conn = self.infra.redis.get().await?;
        let following: Vec<i64> = redis::cmd("SMEMBERS")
            .arg(keys.following(reader))
            .query_async(&mut *conn)
            .await?;
        let pulled = self.pulled_among(&mut conn, &following).await?;
        let followed: HashSet<i64> = following.into_iter().collect();

        // Each source contributes its `first + 1` entries nearest the cursor the page is read
        // from (newest first from `after`, oldest first from `before`), bounded by the other
        // cursor's score, and every entry tied with the cursor read from (the member decides
        // among those): a source is a capped zset, so the ties are bounded, and a page never
        // ends early however many remarks share one millisecond.
        let (near, far) = if *backward {
            (before, after)
        } else {
            (after, before)
        };
        let mut pipe = redis::pipe();
        for source in std::iter::once(keys.feed_inbox(reader))
            .chain(pulled.iter().map(|a| keys.feed_outbox(*a)))
        {
            if let Some(cursor) = near {
                pipe.cmd("ZRANGEBYSCORE")
                    .arg(&source)
                    .arg(cursor.score)
                    .arg(cursor.score)
                    .arg("WITHSCORES");
            }
            let from = near
                .as_ref()
                .map_or(if *backward { "-inf" } else { "+inf" }.to_string(), |c| {
                    format!("({}", c.score)
                });
            let to = far
                .as_ref()
                .map_or(if *backward { "+inf" } else { "-inf" }.to_string(), |c| {
                    c.score.to_string()
                });
            pipe.cmd(if *backward {
                "ZRANGEBYSCORE"
            } else {
                "ZREVRANGEBYSCORE"
            })
            .arg(&source)
            .arg(from)
            .arg(to)
            .arg("WITHSCORES")
            .arg("LIMIT")
            .arg(0)
            .arg(first + 1);
        }
        let sources: Vec<Vec<(String, i64)>> = pipe.query_async(&mut *conn).await?;
        drop(conn);

        let mut seen = HashSet::new();
        let mut entries: Vec<(i64, String)> = sources
            .into_iter()
            .flatten()
            .filter(|(member, score)| range.holds(*score, member))
            .filter(|(member, _)| {
                parse_member(member).is_some_and(|(_, author)| followed.contains(&author))
            })
            .filter(|(member, _)| seen.insert(member.clone()))
            .map(|(member, score)| (score, member))
            .collect();
        if *backward {
            entries.sort();
        } else {
            entries.sort_by(|a, b| b.cmp(a));
        }
        let (mut entries, more) = crate::infra::page::split_page(entries, first);
        if *backward {
            entries.reverse();
        }
        Ok((
            entries
                .into_iter()
                .filter_map(|(score, member)| {
                    parse_member(&member).map(|(remark, _)| (remark, FeedCursor { score, member }))
                })
                .collect(),
            more,
        ))
    }
}
