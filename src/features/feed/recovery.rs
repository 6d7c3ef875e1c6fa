//! Follows and feeds, from `follows` and `remarks`: following sets and follower counts
//! (`follows`), then each author's outbox and, for authors under the push limit, their
//! followers' inboxes (`feed`).
//!
//! Follow and unfollow write SQL, then Redis, without holding anything back; a follow of
//! one user that lands while the rebuild of that same user runs can leave their count or
//! set one off, which the next `verify` shows and the next `rebuild` mends.
//!
//! A follow change still in the outbox ([`super::changes`]) is drift in flight to `verify`
//! (a second run, once Redis answers, no longer shows it). A rebuild delivers every pending
//! change first: the counts it then writes from `follows` include those changes, and a
//! change delivered after them would be counted twice.

use std::collections::{BTreeMap, BTreeSet};

use sqlx::Row;

use crate::{
    features::{feed::Feed, remarks::LISTED},
    infra::{
        error::AppResult,
        outbox,
        recovery::{next_ids, within, Rebuild, Report},
    },
};

/// Users read per round trip.
const CHUNK: usize = 500;

impl Feed {
    /// Whom each of `followers` follows, in SQL.
    async fn followees_of(&self, followers: &[i64]) -> AppResult<BTreeMap<i64, BTreeSet<i64>>> {
        let rows = sqlx::query(&format!(
            "SELECT follower_id, followee_id FROM follows WHERE {}",
            within("follower_id", followers)
        ))
        .fetch_all(&self.infra.db.pool)
        .await?;
        let mut sets: BTreeMap<i64, BTreeSet<i64>> = BTreeMap::new();
        for row in &rows {
            sets.entry(row.try_get("follower_id")?)
                .or_default()
                .insert(row.try_get("followee_id")?);
        }
        Ok(sets)
    }

    /// How many follow each of `followees`, in SQL.
    async fn follower_counts(&self, followees: &[i64]) -> AppResult<BTreeMap<i64, i64>> {
        let rows = sqlx::query(&format!(
            "SELECT followee_id, COUNT(*) AS n FROM follows WHERE {} GROUP BY followee_id",
            within("followee_id", followees)
        ))
        .fetch_all(&self.infra.db.pool)
        .await?;
        let mut counts = BTreeMap::new();
        for row in &rows {
            counts.insert(row.try_get("followee_id")?, row.try_get("n")?);
        }
        Ok(counts)
    }

    /// Redis's following sets of `followers`.
    async fn redis_sets(&self, followers: &[i64]) -> AppResult<Vec<BTreeSet<i64>>> {
        let mut pipe = redis::pipe();
        for &follower in followers {
            pipe.cmd("SMEMBERS")
                .arg(self.infra.keys.following(follower));
        }
        let mut conn = self.infra.redis.get().await?;
        Ok(pipe.query_async(&mut *conn).await?)
    }

    /// Redis's follower counts of `followees` (missing: 0).
    async fn redis_counts(&self, followees: &[i64]) -> AppResult<Vec<i64>> {
        let mut conn = self.infra.redis.get().await?;
        let counts: Vec<Option<i64>> = redis::cmd("HMGET")
            .arg(self.infra.keys.follower_counts())
            .arg(followees)
            .query_async(&mut *conn)
            .await?;
        Ok(counts.into_iter().map(|c| c.unwrap_or(0)).collect())
    }

    /// Following sets and follower counts agree with `follows`.
    pub async fn verify_follows(&self) -> AppResult<Report> {
        let mut report = Report::new("follows");
        let mut after = 0;
        loop {
            let followers =
                next_ids(&self.infra, "follows", "follower_id", "TRUE", after, CHUNK).await?;
            let Some(&last) = followers.last() else { break };
            let sql = self.followees_of(&followers).await?;
            for (follower, redis) in followers.iter().zip(self.redis_sets(&followers).await?) {
                let expected = sql.get(follower).cloned().unwrap_or_default();
                report.check(redis == expected, || {
                    format!("user {follower} follows {expected:?} in SQL, {redis:?} in Redis")
                });
            }
            after = last;
        }
        let mut after = 0;
        loop {
            let followees =
                next_ids(&self.infra, "follows", "followee_id", "TRUE", after, CHUNK).await?;
            let Some(&last) = followees.last() else { break };
            let sql = self.follower_counts(&followees).await?;
            for (followee, redis) in followees.iter().zip(self.redis_counts(&followees).await?) {
                let expected = sql.get(followee).copied().unwrap_or(0);
                report.check(redis == expected, || {
                    format!("user {followee} has {expected} followers in SQL, {redis} in Redis")
                });
            }
            after = last;
        }
        Ok(report)
    }

    /// Delivers the pending follow changes, then writes each follower's set (adding what SQL
    /// has, removing what SQL no longer has) and each followee's count.
    pub(crate) async fn rebuild_follows(&self, run: &Rebuild<'_>) -> AppResult<()> {
        outbox::drain(&self.follow_changes()).await?;
        run.expect_count("SELECT COUNT(DISTINCT follower_id) AS n FROM follows")
            .await?;
        let mut after = run.resume_from().await?;
        loop {
            let followers =
                next_ids(&self.infra, "follows", "follower_id", "TRUE", after, CHUNK).await?;
            let Some(&last) = followers.last() else { break };
            let sql = self.followees_of(&followers).await?;
            let redis = self.redis_sets(&followers).await?;
            let mut pipe = redis::pipe();
            for (follower, in_redis) in followers.iter().zip(redis) {
                let expected = sql.get(follower).cloned().unwrap_or_default();
                let key = self.infra.keys.following(*follower);
                if !expected.is_empty() {
                    pipe.cmd("SADD").arg(&key).arg(&expected).ignore();
                }
                let stale: Vec<i64> = in_redis.difference(&expected).copied().collect();
                if !stale.is_empty() {
                    pipe.cmd("SREM").arg(&key).arg(stale).ignore();
                }
            }
            crate::infra::recovery::write(&self.infra, &pipe).await?;
            run.finished_through(last, followers.len() as u64).await?;
            after = last;
        }
        // Counts: small next to the sets, so they keep no cursor.
        let mut after = 0;
        loop {
            let followees =
                next_ids(&self.infra, "follows", "followee_id", "TRUE", after, CHUNK).await?;
            let Some(&last) = followees.last() else { break };
            let counts = self.follower_counts(&followees).await?;
            let mut set = redis::cmd("HSET");
            set.arg(self.infra.keys.follower_counts());
            for followee in &followees {
                set.arg(followee)
                    .arg(counts.get(followee).copied().unwrap_or(0));
            }
            let mut conn = self.infra.redis.get().await?;
            let _: i64 = set.query_async(&mut *conn).await?;
            after = last;
        }
        Ok(())
    }

    /// Each author's outbox holds their newest remark.
    pub(crate) async fn verify_feeds(&self) -> AppResult<Report> {
        let mut report = Report::new("feeds");
        let mut after = 0;
        loop {
            let authors =
                next_ids(&self.infra, "remarks", "author_id", LISTED, after, CHUNK).await?;
            let Some(&last) = authors.last() else { break };
            let newest = sqlx::query(&format!(
                "SELECT author_id, MAX(id) AS newest FROM remarks WHERE {} AND {LISTED} \
                 GROUP BY author_id ORDER BY author_id",
                within("author_id", &authors)
            ))
            .fetch_all(&self.infra.db.pool)
            .await?;
            let mut pipe = redis::pipe();
            for &author in &authors {
                pipe.cmd("ZREVRANGE")
                    .arg(self.infra.keys.feed_outbox(author))
                    .arg(0)
                    .arg(0);
            }
            let mut conn = self.infra.redis.get().await?;
            let outboxes: Vec<Vec<String>> = pipe.query_async(&mut *conn).await?;
            drop(conn);
            for (row, outbox) in newest.iter().zip(outboxes) {
                let (author, newest): (i64, i64) =
                    (row.try_get("author_id")?, row.try_get("newest")?);
                let head = outbox.first().and_then(|m| super::parse_member(m));
                report.check(head.map(|(remark, _)| remark) == Some(newest), || {
                    format!("author {author}: newest remark {newest}, outbox begins with {head:?}")
                });
            }
            after = last;
        }
        Ok(report)
    }

    /// Each author's newest remarks into their outbox and, unless their followers pull it
    /// (above the push limit), into each follower's inbox. Adding is idempotent and the
    /// inboxes stay capped, so fan-out running meanwhile is not held back.
    pub(crate) async fn rebuild_feeds(&self, run: &Rebuild<'_>) -> AppResult<()> {
        run.expect_count(&format!(
            "SELECT COUNT(DISTINCT author_id) AS n FROM remarks WHERE {LISTED}"
        ))
        .await?;
        let limit = self.settings.push_limit();
        let mut after = run.resume_from().await?;
        loop {
            let authors =
                next_ids(&self.infra, "remarks", "author_id", LISTED, after, CHUNK).await?;
            let Some(&last) = authors.last() else { break };
            let counts = self.follower_counts(&authors).await?;
            for &author in &authors {
                let remarks = self.latest_remarks(author).await?;
                let big = counts.get(&author).copied().unwrap_or(0) > limit;
                self.fan_out(author, big, &remarks).await?;
            }
            run.finished_through(last, authors.len() as u64).await?;
            after = last;
        }
        Ok(())
    }
}
