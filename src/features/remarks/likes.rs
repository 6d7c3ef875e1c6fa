//! Likes: one atomic Lua script per vote, a like counted once per user per remark for ever,
//! and the like info of a page merged in one Redis round trip.

use std::{collections::HashMap, sync::Mutex};

use async_graphql::dataloader::Loader;
use sqlx::Row;

use crate::infra::redis::durability::DurableWrite;

use crate::{
    features::remarks::{lifecycle::Withdrawal, Remarks},
    infra::{
        db,
        error::{AppError, AppResult},
        ids,
        redis::{
            scripts::{RemarksLike, RemarksLikeArgs, RemarksUnlike, Replies, Reply},
            status::Status,
        },
    },
};

/// Earliest likers kept per remark in Redis; `likers(first)` serves at most this many.
pub const LIKERS_KEPT: usize = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vote {
    Like,
    Unlike,
}

/// What a like or an unlike answers: `{ status, likes, liked, changed }`.
pub(crate) struct VoteReply {
    status: Status,
    likes: i64,
    liked: bool,
    changed: bool,
}

impl redis::FromRedisValue for VoteReply {
    fn from_redis_value(value: redis::Value) -> Result<Self, redis::ParsingError> {
        let (status, likes, liked, changed): (Status, i64, i64, i64) =
            redis::FromRedisValue::from_redis_value(value)?;
        Ok(Self {
            status,
            likes,
            liked: liked == 1,
            changed: changed == 1,
        })
    }
}

impl Reply for VoteReply {
    fn status(&self) -> Status {
        self.status
    }

    /// Only a changed vote waits for replicas.
    fn wrote(&self) -> bool {
        self.status == Status::Ok && self.changed
    }
}

impl Replies for RemarksLike {
    type Reply = VoteReply;
}

impl Replies for RemarksUnlike {
    type Reply = VoteReply;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VoteOutcome {
    pub(crate) remark_id: i64,
    pub(crate) like_count: i64,
    pub(crate) liked: bool,
    pub(crate) changed: bool,
}

/// What the archive says of a voter's relation to a remark when Redis no longer knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Known {
    /// Younger than the relation TTL: a missing key means no vote (the script double-checks
    /// that the counter was not rebuilt after a Redis loss).
    Young,
    Unknown,
    Liked,
    Unliked,
    /// The archive holds no vote of the voter on the remark.
    Never,
}

impl Known {
    fn as_arg(self) -> &'static str {
        match self {
            Known::Young => "young",
            Known::Unknown => "unknown",
            Known::Liked => "liked",
            Known::Unliked => "unliked",
            Known::Never => "none",
        }
    }
}

/// The condition on a row `v` of `vote_log` that makes it a current like: the voter's latest
/// vote on the remark (the log is insert-only: a later unlike follows a like), and a like.
pub(super) const CURRENT_LIKE: &str = "v.voting = 1 AND v.event_order = \
    (SELECT MAX(w.event_order) FROM vote_log w \
     WHERE w.remark_id = v.remark_id AND w.voter_id = v.voter_id)";

/// The like count of a remark and whether the viewer likes it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LikeInfo {
    pub(crate) count: i64,
    pub(crate) liked_by_viewer: bool,
}

/// Batches the like info of one GraphQL response: every `likeCount` and `likedByMe` of a
/// page becomes one call of [`Remarks::like_infos`], so one Redis round trip.
pub(crate) struct LikeInfoLoader(pub Remarks);

/// A remark seen by a viewer (or anonymously).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct LikeInfoKey {
    pub(crate) remark_id: i64,
    pub(crate) viewer: Option<i64>,
}

impl Loader<LikeInfoKey> for LikeInfoLoader {
    type Value = LikeInfo;
    type Error = std::sync::Arc<AppError>;

    async fn load(
        &self,
        keys: &[LikeInfoKey],
    ) -> Result<HashMap<LikeInfoKey, LikeInfo>, Self::Error> {
        let mut by_viewer: HashMap<Option<i64>, Vec<i64>> = HashMap::new();
        for key in keys {
            by_viewer.entry(key.viewer).or_default().push(key.remark_id);
        }
        let mut out = HashMap::new();
        for (viewer, ids) in by_viewer {
            let infos = self
                .0
                .like_infos(viewer, &ids)
                .await
                .map_err(std::sync::Arc::new)?;
            for (remark_id, info) in infos {
                out.insert(LikeInfoKey { remark_id, viewer }, info);
            }
        }
        Ok(out)
    }
}

impl Remarks {
    /// Likes or unlikes a remark. Idempotent: repeating a vote changes nothing.
    pub async fn vote(&self, voter_id: i64, remark_id: i64, vote: Vote) -> AppResult<VoteOutcome> {
        let settings = &self.settings;
        let age_ms = self.infra.clock.now_ms() - ids::timestamp_of(remark_id).timestamp_millis();
        let known = if age_ms < (settings.relation_ttl_seconds() as i64 - 3600) * 1000 {
            Known::Young
        } else {
            Known::Unknown
        };
        // At most: rebuild the counter, then ask the archive, then vote.
        // Asked of the archive between calls: shared by the call and the recovery.
        let known = &Mutex::new(known);
        let keys = &self.infra.keys;
        let likes = self.infra.durable_scripts(DurableWrite::Likes);
        let vote_call = || {
            let remark = RemarksLike {
                info: keys.remark_info(remark_id, settings.shards()),
                relation: keys.like_relation(remark_id, voter_id, settings.shards()),
                likers: keys.remark_likers(remark_id, settings.shards()),
                events: keys.vote_stream_of(remark_id, settings.shards()),
            };
            let args = RemarksLikeArgs {
                voter: voter_id,
                remark: remark_id,
                now_ms: self.infra.clock.now_ms(),
                relation_ttl_seconds: settings.relation_ttl_seconds(),
                known: known.lock().expect("poisoned").as_arg(),
                channel: keys.like_count_channel(remark_id, settings.shards()),
                likers_kept: LIKERS_KEPT,
                publish: keys.publish_command(),
            };
            (remark, args)
        };
        let recover = |status| async move {
            match status {
                Status::Missing => self.rebuild_counter(remark_id).await,
                _ => {
                    let archived = self.archived_relation(voter_id, remark_id).await?;
                    *known.lock().expect("poisoned") = archived;
                    Ok(())
                }
            }
        };
        let reply = match vote {
            Vote::Like => likes.run(vote_call, recover).await?,
            Vote::Unlike => {
                let unlike = || {
                    let (remark, args) = vote_call();
                    (RemarksUnlike(remark), args)
                };
                likes.run(unlike, recover).await?
            }
        };
        match reply.status {
            Status::Ok => Ok(VoteOutcome {
                remark_id,
                like_count: reply.likes,
                liked: reply.liked,
                changed: reply.changed,
            }),
            Status::NotFound => Err(AppError::not_found(format!("no remark {remark_id}"))),
            other => Err(AppError::internal(anyhow::anyhow!(
                "a vote answered {other:?}"
            ))),
        }
    }

    /// Creates the counter of a new remark (zero likes).
    pub(crate) async fn prepare_counter(&self, remark_id: i64, author_id: i64) -> AppResult<()> {
        let mut conn = self.infra.redis.get().await?;
        let () = redis::cmd("HSET")
            .arg(
                self.infra
                    .keys
                    .remark_info(remark_id, self.settings.shards()),
            )
            .arg("likes")
            .arg(0)
            .arg("author")
            .arg(author_id)
            .query_async(&mut *conn)
            .await?;
        Ok(())
    }

    /// Rebuilds a remark's counter from the archive after Redis lost it (or never had it);
    /// `NOT_FOUND` when the remark does not exist. Marked `hydrated`, so that missing relation
    /// keys of this remark are from now on checked against the archive.
    async fn rebuild_counter(&self, remark_id: i64) -> AppResult<()> {
        let remark = self
            .find(remark_id)
            .await?
            .ok_or_else(|| AppError::not_found(format!("no remark {remark_id}")))?;
        // A deleted or hidden remark is withdrawn again (a withdrawal Redis missed, or a
        // counter lost with Redis) and refused.
        if remark.deleted || remark.hidden {
            let how = if remark.deleted {
                Withdrawal::Deleted
            } else {
                Withdrawal::Hidden
            };
            self.withdraw(remark_id, how).await?;
            return Err(AppError::not_found(format!("no remark {remark_id}")));
        }
        let likes: i64 = sqlx::query(&format!(
            "SELECT COUNT(*) AS likes FROM vote_log v WHERE v.remark_id = $1 AND {CURRENT_LIKE}"
        ))
        .bind(remark_id)
        .fetch_one(&self.infra.db.pool)
        .await?
        .try_get("likes")?;
        let mut conn = self.infra.redis.get().await?;
        // HSETNX: a concurrent rebuild or a vote that got there first wins.
        let key = self
            .infra
            .keys
            .remark_info(remark_id, self.settings.shards());
        let () = redis::pipe()
            .cmd("HSETNX")
            .arg(&key)
            .arg("likes")
            .arg(likes)
            .ignore()
            .cmd("HSET")
            .arg(&key)
            .arg("author")
            .arg(remark.author_id)
            .arg("hydrated")
            .arg(1)
            .ignore()
            .query_async(&mut *conn)
            .await?;
        Ok(())
    }

    /// The archive's word on whether a voter currently likes a remark.
    async fn archived_relation(&self, voter_id: i64, remark_id: i64) -> AppResult<Known> {
        let latest = sqlx::query(
            "SELECT voting FROM vote_log WHERE remark_id = $1 AND voter_id = $2 \
             ORDER BY event_order DESC LIMIT 1",
        )
        .bind(remark_id)
        .bind(voter_id)
        .fetch_optional(&self.infra.db.pool)
        .await?;
        Ok(match latest {
            Some(row) if row.try_get::<i32, _>("voting")? == 1 => Known::Liked,
            Some(_) => Known::Unliked,
            None => Known::Never,
        })
    }

    /// Like info of many remarks for one viewer (or none): one Redis pipeline, whatever the
    /// count. Remarks whose Redis state is missing fall back to SQL (the rolled-up count, the
    /// archive for the viewer's relation), which costs no further Redis round trip.
    pub(crate) async fn like_infos(
        &self,
        viewer: Option<i64>,
        remark_ids: &[i64],
    ) -> AppResult<HashMap<i64, LikeInfo>> {
        if remark_ids.is_empty() {
            return Ok(HashMap::new());
        }
        let (keys, shards) = (&self.infra.keys, self.settings.shards());
        let mut pipe = redis::pipe();
        for &id in remark_ids {
            pipe.cmd("HMGET")
                .arg(keys.remark_info(id, shards))
                .arg("likes")
                .arg("hydrated");
            if let Some(viewer) = viewer {
                pipe.cmd("GET").arg(keys.like_relation(id, viewer, shards));
            }
        }
        let mut conn = self.infra.redis.get().await?;
        let replies: Vec<redis::Value> = pipe.query_async(&mut *conn).await?;
        drop(conn);

        let mut infos = HashMap::new();
        let mut missing_counts = Vec::new();
        let mut ask_archive = Vec::new();
        let mut replies = replies.into_iter();
        let ttl_ms = self.settings.relation_ttl_seconds() as i64 * 1000;
        for &id in remark_ids {
            let (likes, hydrated): (Option<i64>, Option<i64>) =
                redis::FromRedisValue::from_redis_value(
                    replies.next().unwrap_or(redis::Value::Nil),
                )
                .unwrap_or((None, None));
            let relation: Option<String> = if viewer.is_some() {
                redis::FromRedisValue::from_redis_value(replies.next().unwrap_or(redis::Value::Nil))
                    .unwrap_or(None)
            } else {
                None
            };
            if likes.is_none() {
                missing_counts.push(id);
            }
            let young = self.infra.clock.now_ms() - ids::timestamp_of(id).timestamp_millis()
                < ttl_ms - 3_600_000;
            let liked = match relation.as_deref() {
                Some(value) => value == "1",
                None if viewer.is_some() && (likes.is_none() || hydrated.is_some() || !young) => {
                    ask_archive.push(id);
                    false
                }
                None => false,
            };
            infos.insert(
                id,
                LikeInfo {
                    count: likes.unwrap_or(0),
                    liked_by_viewer: liked,
                },
            );
        }
        if !missing_counts.is_empty() {
            for (id, count) in self.rolled_up_counts(&missing_counts).await? {
                infos.entry(id).or_default().count = count;
            }
        }
        if let (Some(viewer), false) = (viewer, ask_archive.is_empty()) {
            for id in self.archived_likes(viewer, &ask_archive).await? {
                infos.entry(id).or_default().liked_by_viewer = true;
            }
        }
        Ok(infos)
    }

    async fn rolled_up_counts(&self, ids: &[i64]) -> AppResult<Vec<(i64, i64)>> {
        let select = "SELECT id, like_count FROM remarks";
        self.infra
            .db
            .find_by_ids(select, ids, |row| {
                Ok((row.try_get("id")?, row.try_get("like_count")?))
            })
            .await
    }

    /// Which of `remark_ids` the voter likes according to the archive.
    async fn archived_likes(&self, voter_id: i64, remark_ids: &[i64]) -> AppResult<Vec<i64>> {
        let backend = self.infra.db.backend;
        let mut liked = Vec::new();
        for list in db::in_lists(remark_ids) {
            let sql = format!(
                "SELECT v.remark_id FROM vote_log v WHERE v.voter_id = {} \
                 AND v.remark_id IN ({}) AND {CURRENT_LIKE}",
                backend.param(1),
                db::params(backend, 2, list.len())
            );
            let mut query = sqlx::query(&sql).bind(voter_id);
            for remark in list {
                query = query.bind(*remark);
            }
            for row in query.fetch_all(&self.infra.db.pool).await? {
                liked.push(row.try_get("remark_id")?);
            }
        }
        Ok(liked)
    }

    /// The earliest current likers of a remark, oldest first. Redis keeps the first
    /// [`LIKERS_KEPT`]; when unlikes thinned that set below what is asked, it is refilled from
    /// the archive.
    pub(crate) async fn earliest_likers(
        &self,
        remark_id: i64,
        first: usize,
    ) -> AppResult<Vec<i64>> {
        let first = first.min(LIKERS_KEPT);
        let key = self
            .infra
            .keys
            .remark_likers(remark_id, self.settings.shards());
        let mut conn = self.infra.redis.get().await?;
        let (likers, count): (Vec<i64>, Option<i64>) = redis::pipe()
            .cmd("ZRANGE")
            .arg(&key)
            .arg(0)
            .arg(first as i64 - 1)
            .cmd("HGET")
            .arg(
                self.infra
                    .keys
                    .remark_info(remark_id, self.settings.shards()),
            )
            .arg("likes")
            .query_async(&mut *conn)
            .await?;
        drop(conn);
        let wanted = first.min(count.unwrap_or(0).max(0) as usize);
        if likers.len() >= wanted {
            return Ok(likers);
        }
        let rows = sqlx::query(&format!(
            "SELECT v.voter_id, v.voted_at_ms FROM vote_log v WHERE v.remark_id = $1 \
             AND {CURRENT_LIKE} ORDER BY v.event_order LIMIT $2"
        ))
        .bind(remark_id)
        // Twice as many as kept: room for voters whose unlike the archive does not hold yet.
        .bind(2 * LIKERS_KEPT as i64)
        .fetch_all(&self.infra.db.pool)
        .await?;
        let archived: Vec<(i64, i64)> = rows
            .iter()
            .map(|r| Ok((r.try_get("voter_id")?, r.try_get("voted_at_ms")?)))
            .collect::<Result<_, sqlx::Error>>()?;
        if archived.is_empty() {
            return Ok(likers);
        }
        // The archive lags: a voter it still lists may have unliked since. Redis's relation key
        // is the truth while it lives ("0": no longer liked); without one the archive decides.
        let relations: Vec<Option<String>> = {
            let keys: Vec<String> = archived
                .iter()
                .map(|(voter, _)| {
                    self.infra
                        .keys
                        .like_relation(remark_id, *voter, self.settings.shards())
                })
                .collect();
            let mut conn = self.infra.redis.get().await?;
            redis::cmd("MGET").arg(keys).query_async(&mut *conn).await?
        };
        let archived: Vec<(i64, i64)> = archived
            .into_iter()
            .zip(relations)
            .filter(|(_, relation)| relation.as_deref() != Some("0"))
            .map(|(liker, _)| liker)
            .collect();
        let mut refill = redis::pipe();
        for (voter, at) in &archived {
            refill
                .cmd("ZADD")
                .arg(&key)
                .arg("NX")
                .arg(at)
                .arg(voter)
                .ignore();
        }
        refill
            .cmd("ZREMRANGEBYRANK")
            .arg(&key)
            .arg(LIKERS_KEPT)
            .arg(-1)
            .ignore();
        refill.cmd("ZRANGE").arg(&key).arg(0).arg(first as i64 - 1);
        let mut conn = self.infra.redis.get().await?;
        let (likers,): (Vec<i64>,) = refill.query_async(&mut *conn).await?;
        Ok(likers)
    }
}
