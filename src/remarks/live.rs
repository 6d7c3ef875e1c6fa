//! `likeCountChanged`: the current counts first, then every change, coalesced to the
//! latest count per remark so that a burst of likes is one update.

use futures::{Stream, StreamExt};

use crate::{app::AppState, error::AppResult};

/// Remarks one subscription may watch.
pub const MAX_REMARKS: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountChange {
    pub remark_id: i64,
    pub like_count: i64,
}

/// The current counts, then their changes (see [`crate::live::counter_changes`]).
pub async fn like_count_changes(
    state: &AppState,
    remark_ids: Vec<i64>,
) -> AppResult<impl Stream<Item = CountChange>> {
    let keys = state.keys.clone();
    let changes = crate::live::counter_changes(
        state,
        remark_ids,
        move |id| keys.like_count_channel(id),
        |state, ids| async move {
            let infos = super::likes::like_infos(&state, None, &ids).await?;
            Ok(infos
                .into_iter()
                .map(|(id, info)| (id, info.count))
                .collect())
        },
    )
    .await?;
    Ok(changes.map(|(remark_id, like_count)| CountChange {
        remark_id,
        like_count,
    }))
}
