//! `leaderboardChanged` and `myRankChanged`: every award PUBLISHes on its season's board
//! channel; a reader re-reads what subscribers show at most every [`COALESCE`] and passes it
//! on only when it changed, so a burst of sign-ins costs a few reads, not one per award.
//!
//! Subscribers of the same season's top N on an instance share one reader ([`SharedBoards`]):
//! a change costs one read of the board whether ten or ten thousand dashboards show it (one
//! reader per subscriber made every change cost a read per subscriber). The reader starts
//! with the first subscriber and stops with the last. `myRankChanged` shows each viewer
//! their own entry, so it keeps a reader per subscriber.
//!
//! Values travel through a `watch` channel: a subscriber that reads slowly skips to the
//! latest snapshot instead of having older ones buffered for it.
//!
//! A subscription that names no season follows the current one ([`Leaderboards::following_the_season`]):
//! when the month turns it moves to the new season's board, so a wall dashboard never stays
//! on last month's frozen board. One task per instance ([`watch_seasons`]) notices the turn.

use std::{
    collections::HashMap,
    future::Future,
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use futures::{stream::BoxStream, Stream, StreamExt};
use tokio::sync::{watch, OnceCell};
use tokio_util::task::AbortOnDropHandle;

use super::RankEntry;
use crate::{
    features::leaderboard::Leaderboards,
    infra::{
        clock::Month,
        error::AppResult,
        live::{LiveMessage, LiveSubscription},
    },
};

pub const COALESCE: Duration = Duration::from_millis(250);

/// The current value of a channel, then each new one, holding `guard` while it lasts.
fn snapshots<T, G>(mut receiver: watch::Receiver<T>, guard: G) -> impl Stream<Item = T>
where
    T: Clone + Send + Sync + 'static,
    G: Send + 'static,
{
    let first = receiver.borrow_and_update().clone();
    let changes = futures::stream::unfold((receiver, guard), |(mut receiver, guard)| async {
        receiver.changed().await.ok()?;
        let value = receiver.borrow_and_update().clone();
        Some((value, (receiver, guard)))
    });
    futures::stream::once(async { first }).chain(changes)
}

/// The channels of every part of a board, heard as one.
struct BoardSubscription(Vec<LiveSubscription>);

impl BoardSubscription {
    /// The next message on any of the channels; `None` when the hub is gone.
    async fn recv(&mut self) -> Option<LiveMessage> {
        let receiving = self.0.iter_mut().map(|part| Box::pin(part.recv()));
        futures::future::select_all(receiving).await.0
    }
}

/// Re-reads after changes of the board, coalesced, and sends what differs from the value
/// the channel holds. Ends at shutdown, when the hub goes, or when nobody receives.
async fn reread_on_change<T, F, Fut>(
    ctx: Leaderboards,
    mut subscription: BoardSubscription,
    sender: watch::Sender<T>,
    read: F,
) where
    T: PartialEq,
    F: Fn(Leaderboards) -> Fut,
    Fut: Future<Output = AppResult<T>>,
{
    let now = tokio::time::Instant::now();
    let mut last_read = now.checked_sub(COALESCE).unwrap_or(now);
    loop {
        tokio::select! {
            () = ctx.infra.instance.shutdown.cancelled() => return,
            () = sender.closed() => return,
            message = subscription.recv() => if message.is_none() { return },
        }
        // At most one read per window: the first change after a quiet window is read at
        // once; a burst waits for the window's end, and one read covers what queued.
        tokio::time::sleep_until(last_read + COALESCE).await;
        while let Ok(Some(_)) = tokio::time::timeout(Duration::ZERO, subscription.recv()).await {}
        last_read = tokio::time::Instant::now();
        let Ok(value) = read(ctx.clone()).await else {
            continue;
        };
        sender.send_if_modified(|current| {
            let changed = *current != value;
            if changed {
                *current = value;
            }
            changed
        });
    }
}

/// Keeps [`SharedBoards`]' current season up to date: a look at the clock every second,
/// one task per instance however many subscriptions follow the season.
pub async fn watch_seasons(ctx: Leaderboards) {
    let mut every_second = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            () = ctx.infra.instance.shutdown.cancelled() => return,
            _ = every_second.tick() => {
                let month = ctx.infra.clock.current_month();
                ctx.boards.current.send_if_modified(|current| {
                    let turned = *current != Some(month);
                    *current = Some(month);
                    turned
                });
            }
        }
    }
}

/// One reader of a season's top N and the snapshots it keeps current.
struct TopReader {
    snapshots: watch::Receiver<Vec<RankEntry>>,
    /// Stops the reader (and releases its channel) when the last subscriber goes.
    _reader: AbortOnDropHandle<()>,
}

/// A shared top-N board: started by its first subscriber (the others wait for it), dropped
/// with its last.
#[derive(Default)]
struct SharedTop(OnceCell<TopReader>);

impl SharedTop {
    fn snapshots(&self) -> &watch::Receiver<Vec<RankEntry>> {
        &self
            .0
            .get()
            .expect("handed out only once started")
            .snapshots
    }
}

/// The shared top-N readers of this instance, by season and size, and the current season.
pub struct SharedBoards {
    tops: Mutex<HashMap<(Month, usize), Weak<SharedTop>>>,
    /// The season as [`watch_seasons`] last saw it (`None` before it first looks).
    current: watch::Sender<Option<Month>>,
}

impl Default for SharedBoards {
    fn default() -> Self {
        Self {
            tops: Mutex::default(),
            current: watch::Sender::new(None),
        }
    }
}

impl SharedBoards {
    /// Resolves with the new season once the current one is no longer `season`.
    async fn season_after(&self, season: Month) -> Month {
        let mut current = self.current.subscribe();
        let turned = current
            .wait_for(|month| month.is_some_and(|month| month != season))
            .await
            .map(|month| month.unwrap_or(season));
        match turned {
            Ok(month) => month,
            // The sender lives as long as the instance: never reached while it serves.
            Err(_) => std::future::pending().await,
        }
    }

    /// The reader of a season's top `top`, started if nobody on this instance watches it.
    async fn top(
        &self,
        ctx: &Leaderboards,
        season: Month,
        top: usize,
    ) -> AppResult<Arc<SharedTop>> {
        let shared = {
            let mut tops = self.tops.lock().expect("poisoned");
            match tops.get(&(season, top)).and_then(Weak::upgrade) {
                Some(shared) => shared,
                None => {
                    tops.retain(|_, shared| shared.strong_count() > 0);
                    let shared = Arc::new(SharedTop::default());
                    tops.insert((season, top), Arc::downgrade(&shared));
                    shared
                }
            }
        };
        // A failed start leaves the cell empty: the next subscriber tries again.
        shared
            .0
            .get_or_try_init(|| ctx.start_top_reader(season, top))
            .await?;
        Ok(shared)
    }

    /// Readers running on this instance (tests and metrics).
    pub fn readers(&self) -> usize {
        self.tops
            .lock()
            .expect("poisoned")
            .values()
            .filter(|shared| shared.strong_count() > 0)
            .count()
    }
}

impl Leaderboards {
    /// Snapshots of a season's top `top`: the current one first, then each different one.
    pub async fn top_changes(
        &self,
        season: Month,
        top: usize,
    ) -> AppResult<impl Stream<Item = Vec<RankEntry>>> {
        let shared = self.boards.top(self, season, top).await?;
        let receiver = shared.snapshots().clone();
        Ok(snapshots(receiver, shared))
    }

    /// Snapshots of a season's top `top` with their season: of `season` when one is named, of
    /// the current season otherwise, moving to the new one when the month turns.
    pub async fn board_changes(
        &self,
        season: Option<Month>,
        top: usize,
    ) -> AppResult<BoxStream<'static, (Month, Vec<RankEntry>)>> {
        Ok(match season {
            Some(season) => self
                .top_changes(season, top)
                .await?
                .map(move |entries| (season, entries))
                .boxed(),
            None => self
                .following_the_season(move |ctx, season| async move {
                    ctx.top_changes(season, top).await
                })
                .await?
                .boxed(),
        })
    }

    /// The viewer's entry in the current season (when ranked), then each change, moving to the
    /// new season when the month turns.
    pub async fn my_current_rank_changes(
        &self,
        user_id: i64,
    ) -> AppResult<impl Stream<Item = RankEntry>> {
        let changes = self
            .following_the_season(move |ctx, season| async move {
                ctx.my_rank_changes(season, user_id).await
            })
            .await?;
        Ok(changes.map(|(_, entry)| entry))
    }

    /// What `read` reads of a season's board, kept current: subscribes to the board's
    /// channel, then reads (so no change slips between the two), and rereads on each change
    /// until every receiver is gone.
    async fn watch_board<T, F, Fut>(
        &self,
        season: Month,
        read: F,
    ) -> AppResult<(watch::Receiver<T>, tokio::task::JoinHandle<()>)>
    where
        T: PartialEq + Send + Sync + 'static,
        F: Fn(Leaderboards) -> Fut + Send + 'static,
        Fut: Future<Output = AppResult<T>> + Send + 'static,
    {
        let mut subscriptions = Vec::new();
        for channel in self.infra.keys.board_channels(season) {
            subscriptions.push(self.infra.live.subscribe(channel).await);
        }
        let subscription = BoardSubscription(subscriptions);
        let first = read(self.clone()).await?;
        let (sender, receiver) = watch::channel(first);
        let reader = tokio::spawn(reread_on_change(self.clone(), subscription, sender, read));
        Ok((receiver, reader))
    }

    /// The viewer's entry: the current one first (when ranked), then each change.
    async fn my_rank_changes(
        &self,
        season: Month,
        user_id: i64,
    ) -> AppResult<impl Stream<Item = RankEntry>> {
        // Detached: the reader ends by itself when the subscriber goes (its receiver is
        // dropped).
        let (receiver, _detached) = self
            .watch_board(season, move |ctx| async move {
                ctx.board(season, Some(user_id), 1, 0).await.map(|b| b.me)
            })
            .await?;
        Ok(snapshots(receiver, ()).filter_map(|me| async move { me }))
    }

    /// The stream `open` gives for the current season, then, each time the month turns, the
    /// one it gives for the new season; items carry their season. A failure to open the new
    /// season's stream ends the subscription (the client resubscribes).
    async fn following_the_season<T, S, F, Fut>(
        &self,
        open: F,
    ) -> AppResult<impl Stream<Item = (Month, T)>>
    where
        T: Send + 'static,
        S: Stream<Item = T> + Send + 'static,
        F: Fn(Leaderboards, Month) -> Fut + Send + 'static,
        Fut: Future<Output = AppResult<S>> + Send,
    {
        let season = self.infra.clock.current_month();
        let first = open(self.clone(), season).await?.boxed();
        let start = (self.clone(), open, season, first);
        Ok(futures::stream::unfold(
            start,
            |(ctx, open, mut season, mut stream)| async move {
                loop {
                    tokio::select! {
                        item = stream.next() => {
                            let item = item?;
                            return Some(((season, item), (ctx, open, season, stream)));
                        }
                        next = ctx.boards.season_after(season) => {
                            stream = open(ctx.clone(), next).await.ok()?.boxed();
                            season = next;
                        }
                    }
                }
            },
        ))
    }

    /// Subscribes to the board's channel, then reads it (so no change slips between the two),
    /// and keeps the snapshot current.
    async fn start_top_reader(&self, season: Month, top: usize) -> AppResult<TopReader> {
        let (snapshots, reader) = self
            .watch_board(season, move |ctx| async move {
                ctx.board(season, None, top, 0).await.map(|b| b.entries)
            })
            .await?;
        Ok(TopReader {
            snapshots,
            _reader: AbortOnDropHandle::new(reader),
        })
    }
}
