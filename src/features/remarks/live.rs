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

use std::collections::HashSet;

use futures::{Stream, StreamExt};

use crate::{
    features::remarks::Remarks,
    infra::error::{AppError, AppResult},
};

/// Distinct remarks one subscription may watch.
pub const MAX_REMARKS: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountChange {
    pub remark_id: i64,
    pub like_count: i64,
}

impl Remarks {
    /// The current counts, then their changes (see [`crate::infra::live::counter_changes`]), of
    /// remarks that all exist (`NOT_FOUND` otherwise, and nothing is subscribed).
    pub async fn like_count_changes(
        &self,
        remark_ids: Vec<i64>,
    ) -> AppResult<impl Stream<Item = CountChange>> {
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
        let existing = self.existing(&remark_ids).await?;
        if let Some(missing) = remark_ids.iter().find(|id| !existing.contains(id)) {
            return Err(AppError::not_found(format!("no remark {missing}")));
        }
        let keys = self.infra.keys.clone();
        let shards = self.settings.shards;
        let reader = self.clone();
        let changes = crate::infra::live::counter_changes(
            &self.infra,
            remark_ids,
            move |id| keys.like_count_channel(id, shards),
            move |ids| {
                let ctx = reader.clone();
                async move {
                    let infos = ctx.like_infos(None, &ids).await?;
                    Ok(infos
                        .into_iter()
                        .map(|(id, info)| (id, info.count))
                        .collect())
                }
            },
        )
        .await?;
        Ok(changes.map(|(remark_id, like_count)| CountChange {
            remark_id,
            like_count,
        }))
    }
}
