//! `likeCountChanged`: the current counts first, then every change, coalesced to the
//! latest count per remark so that a burst of likes is one update.
//!
//! Every watched remark is a channel of the instance's live hub, so what one connection can
//! make the hub (and Redis) hold is bounded: a subscription watches at most [`MAX_REMARKS`]
//! distinct remarks, a connection holds at most `ENGAGE_MAX_SUBSCRIPTIONS` subscriptions
//! (2,000 channels with the defaults), and only remarks that exist are watched (a missing
//! one is `NOT_FOUND` before anything is subscribed), so all connections together hold at
//! most one channel per remark. The other subscriptions hold one channel each
//! (`voucherStockChanged`, of an existing voucher; `leaderboardChanged` and `myRankChanged`,
//! of a season's board) or none (`serverTime`).

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use futures::{future::BoxFuture, Stream, StreamExt};

use crate::{
    features::remarks::Remarks,
    infra::{
        error::{AppError, AppResult},
        live::{CounterWatcher, Watch},
    },
};

/// Distinct remarks one subscription may watch.
pub(crate) const MAX_REMARKS: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CountChange {
    pub(crate) remark_id: i64,
    pub(crate) like_count: i64,
}

impl Remarks {
    /// The current counts, then their changes (see [`crate::infra::live::counter_changes`]), of
    /// remarks that all exist (`NOT_FOUND` otherwise, and nothing is subscribed).
    pub(crate) async fn like_count_changes(
        &self,
        remark_ids: Vec<i64>,
    ) -> AppResult<impl Stream<Item = CountChange>> {
        let remark_ids = self.watchable(remark_ids, &HashSet::new()).await?;
        let changes = crate::infra::live::counter_changes(
            &self.infra,
            remark_ids,
            self.like_count_channel(),
            self.like_count_reader(),
        )
        .await?;
        Ok(changes.map(|(remark_id, like_count)| CountChange {
            remark_id,
            like_count,
        }))
    }

    /// The same as [`Self::like_count_changes`], handed to `watcher` by the instance's one
    /// follower of each remark's count ([`crate::infra::live::SharedCounters`]) for as long as the watch is kept.
    pub(crate) async fn watch_like_counts(
        &self,
        remark_ids: Vec<i64>,
        watcher: Arc<dyn CounterWatcher>,
    ) -> AppResult<Watch> {
        // A remark followed here exists: it was found when first watched, and remarks are
        // never deleted. Subscribers of a busy remark skip the SQL query.
        let known = self.like_counts.followed_among(&remark_ids).await;
        let remark_ids = self.watchable(remark_ids, &known).await?;
        self.like_counts
            .watch(
                &self.infra,
                &remark_ids,
                self.like_count_channel(),
                self.like_count_reader(),
                watcher,
            )
            .await
    }

    /// Distinct remark ids, 1 to [`MAX_REMARKS`], that all exist (those in `known` do).
    async fn watchable(&self, remark_ids: Vec<i64>, known: &HashSet<i64>) -> AppResult<Vec<i64>> {
        let mut seen = HashSet::new();
        let remark_ids: Vec<i64> = remark_ids
            .into_iter()
            .filter(|id| seen.insert(*id))
            .collect();
        if remark_ids.is_empty() || remark_ids.len() > MAX_REMARKS {
            return Err(AppError::bad_input(format!(
                "watch 1 to {MAX_REMARKS} remarks"
            )));
        }
        let unknown: Vec<i64> = remark_ids
            .iter()
            .copied()
            .filter(|id| !known.contains(id))
            .collect();
        let existing = if unknown.is_empty() {
            HashSet::new()
        } else {
            self.existing(&unknown).await?
        };
        if let Some(missing) = unknown.iter().find(|id| !existing.contains(id)) {
            return Err(AppError::not_found(format!("no remark {missing}")));
        }
        Ok(remark_ids)
    }

    fn like_count_channel(&self) -> impl Fn(i64) -> String {
        let keys = self.infra.keys.clone();
        let shards = self.settings.shards();
        move |id| keys.like_count_channel(id, shards)
    }

    fn like_count_reader(
        &self,
    ) -> impl Fn(Vec<i64>) -> BoxFuture<'static, AppResult<HashMap<i64, i64>>> + Clone + Send + Sync
    {
        let reader = self.clone();
        move |ids| {
            let remarks = reader.clone();
            Box::pin(async move {
                let infos = remarks.like_infos(None, &ids).await?;
                Ok(infos
                    .into_iter()
                    .map(|(id, info)| (id, info.count))
                    .collect())
            })
        }
    }
}
