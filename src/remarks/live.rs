//! `likeCountChanged`: the current counts first, then every change, coalesced to the
//! latest count per remark within [`COALESCE`] so that a burst of likes is one update.

use std::{collections::HashMap, time::Duration};

use futures::{stream::select_all, Stream, StreamExt};
use tokio::sync::mpsc;

use crate::{app::AppState, error::AppResult, live::LiveMessage};

pub const COALESCE: Duration = Duration::from_millis(100);
/// Remarks one subscription may watch.
pub const MAX_REMARKS: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountChange {
    pub remark_id: i64,
    pub like_count: i64,
}

/// Subscribes (confirmed by Redis before the first read, so no change slips between the
/// read and the subscription) and returns the stream of counts.
pub async fn like_count_changes(
    state: &AppState,
    remark_ids: Vec<i64>,
) -> AppResult<impl Stream<Item = CountChange>> {
    let mut subscriptions = Vec::with_capacity(remark_ids.len());
    for &id in &remark_ids {
        subscriptions.push((
            id,
            state
                .live
                .subscribe(state.keys.like_count_channel(id))
                .await,
        ));
    }
    let initial = super::likes::like_infos(state, None, &remark_ids).await?;

    let (sender, mut receiver) = mpsc::channel::<CountChange>(MAX_REMARKS * 2);
    for &id in &remark_ids {
        let like_count = initial.get(&id).map_or(0, |info| info.count);
        let _ = sender.try_send(CountChange {
            remark_id: id,
            like_count,
        });
    }
    let state = state.clone();
    tokio::spawn(async move {
        let streams = subscriptions.into_iter().map(|(id, subscription)| {
            futures::stream::unfold(subscription, move |mut subscription| async move {
                subscription
                    .recv()
                    .await
                    .map(|message| ((id, message), subscription))
            })
            .boxed()
        });
        let mut messages = select_all(streams);
        let mut pending: HashMap<i64, i64> = HashMap::new();
        let mut flush_at: Option<tokio::time::Instant> = None;
        loop {
            let flush = async {
                match flush_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = state.shutdown.cancelled() => return,
                () = sender.closed() => return,
                () = flush => {
                    for (remark_id, like_count) in pending.drain() {
                        if sender.send(CountChange { remark_id, like_count }).await.is_err() {
                            return;
                        }
                    }
                    flush_at = None;
                }
                message = messages.next() => {
                    let Some((remark_id, message)) = message else { return };
                    match message {
                        LiveMessage::Payload(count) => {
                            if let Ok(count) = count.parse() {
                                pending.insert(remark_id, count);
                            }
                        }
                        LiveMessage::Resync => {
                            if let Ok(counts) = super::likes::like_infos(&state, None, &[remark_id]).await {
                                for (id, info) in counts {
                                    pending.insert(id, info.count);
                                }
                            }
                        }
                    }
                    flush_at.get_or_insert_with(|| tokio::time::Instant::now() + COALESCE);
                }
            }
        }
    });
    Ok(futures::stream::poll_fn(move |cx| receiver.poll_recv(cx)))
}
