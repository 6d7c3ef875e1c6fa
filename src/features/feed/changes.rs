//! Follows and unfollows made safe to acknowledge and to retry: an outbox of follow changes
//! (`follow_changes`, emptied as `infra::outbox` says).
//!
//! A follow writes `follows` in SQL, then three things in Redis: the follower's following
//! set, the followee's follower count, and (unless the followee is pulled) their recent
//! remarks in the follower's inbox; an unfollow undoes them. Written one after the other,
//! a Redis that failed after SQL left the count behind for good: the client's retry found
//! the follow in SQL and took the "already following" path, which moves no count. So:
//!
//! - the change of `follows` and its row in `follow_changes` are one transaction, and a
//!   follow or unfollow that changes nothing writes no change;
//! - after its commit, the request delivers every pending change of its relation (its own,
//!   and any a failed request left, so a client's retry mends at once); when Redis refuses,
//!   the request is acknowledged all the same and the retrier delivers later;
//! - a delivery counts each change once, by its id (`lua/feed_count_follows.lua` keeps a
//!   marker per change next to the counts), and writes the following set and the inbox as
//!   `follows` holds the relation now, so a late delivery of an old change writes the
//!   present, not the past.
//!
//! The count is exact whatever the interleaving. The set and the inbox are written as SQL
//! was when the delivery read it: a follow and an unfollow of one relation racing each
//! other can leave them one step behind SQL until the relation's next change or a rebuild
//! (`engage verify` names it).
//!
//! Rejected: a count kept idempotent by the relation alone (a marker per follow in the
//! counts' slot) would hold every follow of the platform on one Redis node, forever; and
//! counting `follows` in SQL at each change costs a big author's whole index per follow,
//! and two such counts written in the wrong order leave the smaller one.

use std::collections::BTreeSet;

use sqlx::{any::AnyRow, Row};

use super::Feed;
use crate::infra::{
    error::AppResult,
    outbox::{self, Outbox},
    redis::{
        scripts::{FeedCountFollows, FeedCountFollowsArgs, Replies},
        Keys,
    },
    Infra,
};

/// How long a change's marker says it was counted, from its counting: long enough for a
/// row whose delete failed (SQL down after Redis took the change) to be delivered again
/// without being counted twice.
const COUNTED_TTL_SECONDS: u64 = 7 * 24 * 3600;

/// How long the marker stays once its row is deleted: long enough for a delivery that read
/// the row before (a retrier and a request at once) to find it, and no longer, so markers
/// cost memory only while their changes are in flight.
const FORGOTTEN_TTL_SECONDS: u64 = 60;

impl Keys {
    /// The marker of a follow change counted in the follower counts (in their slot).
    pub(crate) fn follow_counted(&self, change_id: i64) -> String {
        self.tagged("feed", ("counted:", change_id))
    }
}

/// A change of `follows`: a follow (`delta` 1) or an unfollow (-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowChange {
    pub id: i64,
    pub follower: i64,
    pub followee: i64,
    pub delta: i64,
}

/// The outbox of follow changes.
#[derive(Clone)]
pub struct FollowChanges(pub Feed);

#[async_trait::async_trait]
impl Outbox for FollowChanges {
    type Entry = FollowChange;
    const NAME: &'static str = "follow-changes";
    const TABLE: &'static str = "follow_changes";
    const ID: &'static str = "id";
    const COLUMNS: &'static str = "id, follower_id, followee_id, delta";

    fn infra(&self) -> &Infra {
        &self.0.infra
    }

    fn entry_of(row: &AnyRow) -> Result<FollowChange, sqlx::Error> {
        Ok(FollowChange {
            id: row.try_get("id")?,
            follower: row.try_get("follower_id")?,
            followee: row.try_get("followee_id")?,
            delta: row.try_get("delta")?,
        })
    }

    fn id_of(change: &FollowChange) -> i64 {
        change.id
    }

    /// Counts each change once (one script call), then writes each relation's following
    /// set and inbox as SQL holds it now.
    async fn deliver(&self, changes: &[FollowChange]) -> AppResult<()> {
        let feed = &self.0;
        let keys = &feed.infra.keys;
        let counts = FeedCountFollows {
            counts: keys.follower_counts(),
            events: keys.follow_events(),
            markers: changes.iter().map(|c| keys.follow_counted(c.id)).collect(),
        };
        let args = FeedCountFollowsArgs {
            marker_ttl_seconds: COUNTED_TTL_SECONDS,
            now_ms: feed.infra.clock.now_ms(),
            changes: changes
                .iter()
                .map(|c| (c.followee, c.delta, c.follower, c.id))
                .collect::<Vec<_>>(),
        };
        let _counted = feed.infra.scripts().call(&counts, &args).await?;
        let relations: BTreeSet<(i64, i64)> = changes
            .iter()
            .map(|change| (change.follower, change.followee))
            .collect();
        let following = feed.followed_in_sql(&relations).await?;
        for &(follower, followee) in &relations {
            if following.contains(&(follower, followee)) {
                feed.show_followee(follower, followee).await?;
            } else {
                feed.hide_followee(follower, followee).await?;
            }
        }
        Ok(())
    }

    /// Shortens the markers of the changes delivered (best effort: they expire anyway).
    async fn forgotten(&self, changes: &[FollowChange]) {
        let infra = &self.0.infra;
        let mut pipe = redis::pipe();
        for change in changes {
            pipe.cmd("EXPIRE")
                .arg(infra.keys.follow_counted(change.id))
                .arg(FORGOTTEN_TTL_SECONDS)
                .ignore();
        }
        let shortened: AppResult<()> = async {
            let mut conn = infra.redis.get().await?;
            let () = pipe.query_async(&mut *conn).await?;
            Ok(())
        }
        .await;
        if let Err(error) = shortened {
            tracing::debug!(%error, "markers of counted follow changes left to expire");
        }
    }
}

impl Feed {
    /// The outbox of this feature's follow changes.
    pub fn follow_changes(&self) -> FollowChanges {
        FollowChanges(self.clone())
    }

    /// Writes a follow (`delta` 1) or an unfollow (-1) with its change in one transaction,
    /// then delivers the pending changes of the relation: `true` when this call changed
    /// `follows`. Fails only when nothing was written.
    pub(super) async fn change_follow(
        &self,
        follower: i64,
        followee: i64,
        delta: i64,
    ) -> AppResult<bool> {
        let id = self.infra.ids.next_id().await?;
        let now_ms = self.infra.clock.now_ms();
        let mut tx = self.infra.db.pool.begin().await?;
        let write = if delta > 0 {
            sqlx::query(
                "INSERT INTO follows (follower_id, followee_id, created_at_ms) \
                 VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            )
            .bind(follower)
            .bind(followee)
            .bind(now_ms)
        } else {
            sqlx::query("DELETE FROM follows WHERE follower_id = $1 AND followee_id = $2")
                .bind(follower)
                .bind(followee)
        };
        let changed = write.execute(&mut *tx).await?.rows_affected() == 1;
        if changed {
            sqlx::query(
                "INSERT INTO follow_changes (id, follower_id, followee_id, delta, created_at_ms) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(id)
            .bind(follower)
            .bind(followee)
            .bind(delta)
            .bind(now_ms)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        // This change, and any of the relation an earlier request left undelivered: a client
        // retrying after an error finds the follow made, and its Redis side made now.
        let changes = self.follow_changes();
        match outbox::pending(
            &changes,
            "follower_id = $1 AND followee_id = $2",
            &[follower, followee],
        )
        .await
        {
            Ok(pending) => outbox::deliver_or_leave(&changes, &pending).await,
            Err(error) => {
                tracing::warn!(%error, "follow changes not read back; the retrier delivers them")
            }
        }
        Ok(changed)
    }

    /// Which of these (follower, followee) relations `follows` holds: one query.
    async fn followed_in_sql(
        &self,
        relations: &BTreeSet<(i64, i64)>,
    ) -> AppResult<BTreeSet<(i64, i64)>> {
        if relations.is_empty() {
            return Ok(BTreeSet::new());
        }
        // Numbers only, written by this code.
        let pairs: Vec<String> = relations
            .iter()
            .map(|(follower, followee)| {
                format!("(follower_id = {follower} AND followee_id = {followee})")
            })
            .collect();
        let rows = sqlx::query(&format!(
            "SELECT follower_id, followee_id FROM follows WHERE {}",
            pairs.join(" OR ")
        ))
        .fetch_all(&self.infra.db.pool)
        .await?;
        rows.iter()
            .map(|row| Ok((row.try_get("follower_id")?, row.try_get("followee_id")?)))
            .collect()
    }
}

/// How many of the changes were counted now (the others had been before).
impl Replies for FeedCountFollows {
    type Reply = i64;
}
