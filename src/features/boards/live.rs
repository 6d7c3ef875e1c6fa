//! `boardChanged` and `myBoardRankChanged`: every submission or removal publishes on the
//! channel of its part; a reader per board period on each instance hears the parts' channels
//! and reads again at most once per [`COALESCE`], however many changes arrived meanwhile.
//!
//! - **One read per change, shared**: the subscribers of a board's top N on an instance
//!   share one reader (started by the first, stopped with the last), as do the viewers of a
//!   board: a change costs one read of the top, and one read of the viewers' records, whether
//!   one or thousands watch.
//! - **Only what moved**: a snapshot is passed on only when it differs; a viewer's record
//!   only when its rank moved (or it appeared or left).
//! - Values travel through `watch` channels: a slow subscriber skips to the latest.
//! - A subscription follows the current period: when it turns (a reset, a period closed
//!   early), its reader moves to the new one within [`PERIOD_CHECK`].

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::Stream;
use tokio::sync::{watch, OnceCell};
use tokio_util::task::AbortOnDropHandle;

use super::{BoardDef, BoardRecord, Boards, SEASON_KEY};
use crate::infra::{
    clock::Month,
    error::AppResult,
    live::{watched, LiveMessage, LiveSubscription},
    weak_map::WeakMap,
};

/// At most one read, and one snapshot, per board a second.
pub(crate) const COALESCE: Duration = Duration::from_secs(1);
/// How often a reader looks whether its board's period turned.
const PERIOD_CHECK: Duration = Duration::from_secs(2);

/// A snapshot of a board's top: its period, size and records.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Top {
    pub(crate) period: String,
    pub(crate) total: i64,
    pub(crate) records: Vec<BoardRecord>,
}

/// The viewers of a board and each one's record.
type Viewers = Arc<Mutex<HashMap<i64, watch::Sender<Option<BoardRecord>>>>>;

/// A shared reader: its values, and the task that keeps them current.
struct Reader<T> {
    values: watch::Receiver<T>,
    _task: AbortOnDropHandle<()>,
}

/// A shared top: started by its first subscriber, dropped with its last.
type SharedTop = OnceCell<Reader<Top>>;

/// The viewers of a board's period: their records, and the reader that keeps them current.
#[derive(Default)]
struct SharedViewers {
    viewers: Viewers,
    reader: OnceCell<AbortOnDropHandle<()>>,
}

/// The shared readers of this instance, by board and period.
#[derive(Default)]
pub struct BoardWatchers {
    tops: Mutex<WeakMap<(String, usize), SharedTop>>,
    viewers: Mutex<WeakMap<String, SharedViewers>>,
}

/// The channels of every part of a board's period, heard as one.
struct Parts(Vec<LiveSubscription>);

impl Parts {
    async fn recv(&mut self) -> Option<LiveMessage> {
        let receiving = self.0.iter_mut().map(|part| Box::pin(part.recv()));
        futures::future::select_all(receiving).await.0
    }

    /// After a change: waits out the rest of the second since the last read, and takes what
    /// queued meanwhile, so that one read covers a burst.
    async fn coalesce(&mut self, last_read: &mut tokio::time::Instant) {
        tokio::time::sleep_until(*last_read + COALESCE).await;
        while let Ok(Some(_)) = tokio::time::timeout(Duration::ZERO, self.recv()).await {}
        *last_read = tokio::time::Instant::now();
    }
}

/// What wakes a reader.
enum Wake {
    /// A change of the board: read again.
    Change,
    /// The board's period turned: follow it.
    Turned(String),
    /// Nothing to do.
    Nothing,
    /// Shutdown, or the hub is gone.
    Stop,
}

impl Boards {
    /// Waits for a change of the period's parts, or for the period to turn (looked at every
    /// [`PERIOD_CHECK`]).
    async fn wake(
        &self,
        def: &BoardDef,
        period: &str,
        parts: &mut Parts,
        check: &mut tokio::time::Interval,
    ) -> Wake {
        tokio::select! {
            () = self.infra.instance.shutdown.cancelled() => Wake::Stop,
            message = parts.recv() => match message {
                Some(_) => Wake::Change,
                None => Wake::Stop,
            },
            _ = check.tick() => match self.current_period(def).await {
                Ok(now) if now != period => Wake::Turned(now),
                _ => Wake::Nothing,
            },
        }
    }
}

fn never_read() -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now.checked_sub(COALESCE).unwrap_or(now)
}

impl Boards {
    async fn parts(&self, def: &BoardDef, period: &str) -> Parts {
        let keys = &self.infra.keys;
        let channels: Vec<String> = match Month::parse_dashed(period) {
            // The season board's parts publish on the season's channels.
            Some(month) if def.key == SEASON_KEY => keys.board_channels(month),
            _ => (0..keys.points_buckets())
                .map(|bucket| keys.board_part_channel(&def.key, period, bucket))
                .collect(),
        };
        let mut subscriptions = Vec::new();
        for channel in channels {
            subscriptions.push(self.infra.live.subscribe(channel).await);
        }
        Parts(subscriptions)
    }

    async fn read_top(&self, def: &BoardDef, period: &str, top: usize) -> AppResult<Top> {
        let page = self
            .page(&def.key, Some(period), None, top, 0, false)
            .await?;
        Ok(Top {
            period: page.period,
            total: page.total,
            records: page.records,
        })
    }

    /// The board's top `top` now, then each different one, at most one a second.
    pub(crate) async fn top_changes(
        &self,
        key: &str,
        top: usize,
    ) -> AppResult<impl Stream<Item = Top>> {
        let def = self.get(key).await?;
        let period = self.current_period(&def).await?;
        let shared = (self.watchers.tops.lock().expect("poisoned"))
            .get_or_insert_with((def.key.clone(), top), || Arc::new(SharedTop::new()));
        let reader = shared
            .get_or_try_init(|| async {
                // Subscribed before the first read: no change after it is missed.
                let mut parts = self.parts(&def, &period).await;
                let first = self.read_top(&def, &period, top).await?;
                let (sender, values) = watch::channel(first);
                let (boards, def, period) = (self.clone(), def.clone(), period.clone());
                let task = tokio::spawn(async move {
                    let mut period = period;
                    let mut last_read = never_read();
                    let mut check = tokio::time::interval(PERIOD_CHECK);
                    loop {
                        let wake = tokio::select! {
                            () = sender.closed() => return,
                            wake = boards.wake(&def, &period, &mut parts, &mut check) => wake,
                        };
                        match wake {
                            Wake::Stop => return,
                            Wake::Nothing => continue,
                            Wake::Change => parts.coalesce(&mut last_read).await,
                            Wake::Turned(now) => {
                                period = now;
                                parts = boards.parts(&def, &period).await;
                            }
                        }
                        let Ok(top) = boards.read_top(&def, &period, top).await else {
                            continue;
                        };
                        sender.send_if_modified(|current| {
                            let changed = *current != top;
                            if changed {
                                *current = top;
                            }
                            changed
                        });
                    }
                });
                Ok::<_, crate::infra::error::AppError>(Reader {
                    values,
                    _task: AbortOnDropHandle::new(task),
                })
            })
            .await?;
        let receiver = reader.values.clone();
        Ok(watched(receiver, shared))
    }

    /// The viewer's record now (`None`: no record), then each time its rank moves.
    pub(crate) async fn my_rank_changes(
        &self,
        key: &str,
        user: i64,
    ) -> AppResult<impl Stream<Item = Option<BoardRecord>>> {
        let def = self.get(key).await?;
        let period = self.current_period(&def).await?;
        let shared = (self.watchers.viewers.lock().expect("poisoned"))
            .get_or_insert_with(def.key.clone(), Arc::default);
        shared
            .reader
            .get_or_try_init(|| async {
                let parts = self.parts(&def, &period).await;
                let task = tokio::spawn(keep_viewers(
                    self.clone(),
                    def.clone(),
                    period.clone(),
                    parts,
                    shared.viewers.clone(),
                ));
                Ok::<_, crate::infra::error::AppError>(AbortOnDropHandle::new(task))
            })
            .await?;
        let existing = shared
            .viewers
            .lock()
            .expect("poisoned")
            .get(&user)
            .map(watch::Sender::subscribe);
        let receiver = match existing {
            Some(receiver) => receiver,
            None => {
                // Read after the reader subscribed: a change after this read reaches it.
                let record = self.record_of(&def, &period, user).await?;
                let mut viewers = shared.viewers.lock().expect("poisoned");
                viewers
                    .entry(user)
                    .or_insert_with(|| watch::Sender::new(record))
                    .subscribe()
            }
        };
        Ok(watched(receiver, shared))
    }
}

/// Reads every viewer's record after each (coalesced) change, and hands over those whose
/// rank moved (on a new period, their records there). Viewers nobody watches any more are
/// dropped.
async fn keep_viewers(
    boards: Boards,
    def: Arc<BoardDef>,
    period: String,
    mut parts: Parts,
    viewers: Viewers,
) {
    let mut period = period;
    let mut last_read = never_read();
    let mut check = tokio::time::interval(PERIOD_CHECK);
    loop {
        match boards.wake(&def, &period, &mut parts, &mut check).await {
            Wake::Stop => return,
            Wake::Nothing => continue,
            Wake::Change => parts.coalesce(&mut last_read).await,
            Wake::Turned(now) => {
                period = now;
                parts = boards.parts(&def, &period).await;
            }
        }
        let users: Vec<i64> = {
            let mut viewers = viewers.lock().expect("poisoned");
            viewers.retain(|_, sender| sender.receiver_count() > 0);
            viewers.keys().copied().collect()
        };
        let Ok(records) = boards.records_of(&def, &period, &users).await else {
            continue;
        };
        let viewers = viewers.lock().expect("poisoned");
        for (user, record) in users.iter().zip(records) {
            if let Some(sender) = viewers.get(user) {
                sender.send_if_modified(|current| {
                    let moved = current.as_ref().map(|r| r.rank) != record.as_ref().map(|r| r.rank);
                    if moved {
                        *current = record;
                    }
                    moved
                });
            }
        }
    }
}
