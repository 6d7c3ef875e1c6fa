//! `leaderboardChanged` and `myRankChanged`: every award PUBLISHes on its season's board
//! channel; subscribers re-read what they show at most every [`COALESCE`] and send it only
//! when it changed, so a burst of sign-ins costs a few reads, not one per award.

use std::time::Duration;

use futures::Stream;
use tokio::sync::mpsc;

use super::{board, RankEntry};
use crate::{app::AppState, clock::Month, error::AppResult};

pub const COALESCE: Duration = Duration::from_millis(250);

/// Snapshots of a season's top `top`: the current one first, then each different one.
pub async fn top_changes(
    state: &AppState,
    season: Month,
    top: usize,
) -> AppResult<impl Stream<Item = Vec<RankEntry>>> {
    let read = move |state: AppState| async move {
        board(&state, season, None, top, 0).await.map(|b| b.entries)
    };
    watch(state, season, read).await
}

/// The viewer's entry: the current one first (when ranked), then each change.
pub async fn my_rank_changes(
    state: &AppState,
    season: Month,
    user_id: i64,
) -> AppResult<impl Stream<Item = RankEntry>> {
    let read = move |state: AppState| async move {
        board(&state, season, Some(user_id), 1, 0)
            .await
            .map(|b| b.me)
    };
    let changes = watch(state, season, read).await?;
    Ok(futures::StreamExt::filter_map(
        changes,
        |me| async move { me },
    ))
}

/// Subscribes to the board channel, then reads; re-reads after changes, coalesced, and
/// yields what differs from the last value sent.
async fn watch<T, F, Fut>(
    state: &AppState,
    season: Month,
    read: F,
) -> AppResult<impl Stream<Item = T>>
where
    T: PartialEq + Clone + Send + 'static,
    F: Fn(AppState) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = AppResult<T>> + Send,
{
    let mut subscription = state.live.subscribe(state.keys.board_channel(season)).await;
    let first = read(state.clone()).await?;
    let (sender, mut receiver) = mpsc::channel::<T>(8);
    let _ = sender.try_send(first.clone());
    let state = state.clone();
    tokio::spawn(async move {
        let mut last = first;
        let now = tokio::time::Instant::now();
        let mut last_read = now.checked_sub(COALESCE).unwrap_or(now);
        loop {
            tokio::select! {
                () = state.shutdown.cancelled() => return,
                () = sender.closed() => return,
                message = subscription.recv() => if message.is_none() { return },
            }
            // At most one read per window: the first change after a quiet window is read at
            // once; a burst waits for the window's end, and one read covers what queued.
            tokio::time::sleep_until(last_read + COALESCE).await;
            while let Ok(Some(_)) = tokio::time::timeout(Duration::ZERO, subscription.recv()).await
            {
            }
            last_read = tokio::time::Instant::now();
            let Ok(now) = read(state.clone()).await else {
                continue;
            };
            if now != last {
                if sender.send(now.clone()).await.is_err() {
                    return;
                }
                last = now;
            }
        }
    });
    Ok(futures::stream::poll_fn(move |cx| receiver.poll_recv(cx)))
}
