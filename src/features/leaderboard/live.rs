//! `leaderboardChanged` and `myRankChanged`: every award PUBLISHes on its season's board
//! channel; a reader re-reads what subscribers show at most every [`COALESCE`] and passes it
//! on only when it changed, so a burst of sign-ins costs a few reads, not one per award.
//!
//! Subscribers of the same season's top N on an instance share one reader ([`SharedBoards`]):
//! a change costs one read of the board whether ten or ten thousand dashboards show it (one
//! reader per subscriber made every change cost a read per subscriber). The reader starts
//! with the first subscriber and stops with the last.
//!
//! `myRankChanged` shows each viewer their own entry, and its viewers of a season share
//! one reader too ([`SharedRanks`]): it moves every viewer's rank by each change the board's
//! scripts publish, reading only the entries it cannot be sure of (see [`super::ranks`]),
//! and hands each viewer theirs when it differs, coalesced like the top N. A reader per
//! subscriber made each award cost every subscriber's read: 3,000 of them multiplied an
//! award's Redis commands by more than 200. Subscriptions of one user share their entry.
//!
//! Values travel through a `watch` channel: a subscriber that reads slowly skips to the
//! latest snapshot instead of having older ones buffered for it.
//!
//! A subscription that names no season follows the current one ([`Leaderboards::following_the_season`]):
//! when the month turns it moves to the new season's board, so a wall dashboard never stays
//! on last month's frozen board. One task per instance ([`watch_seasons`]) notices the turn.

use std::{
    collections::{HashMap, HashSet},
    future::Future,
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use futures::{stream::BoxStream, FutureExt, Stream, StreamExt};
use tokio::sync::{mpsc, oneshot, watch, OnceCell};
use tokio_util::task::AbortOnDropHandle;

use super::{
    ranks::{Applied, Change, Standing},
    RankEntry,
};
use crate::{
    features::leaderboard::Leaderboards,
    infra::{
        clock::Month,
        error::{AppError, AppResult},
        live::{watched, LiveMessage, LiveSubscription},
    },
};

pub(crate) const COALESCE: Duration = Duration::from_millis(250);

/// The channels of every part of a board (in bucket order), heard as one.
struct BoardSubscription(Vec<LiveSubscription>);

impl BoardSubscription {
    /// The next message on any of the channels, with its part; `None` when the hub is gone.
    async fn recv(&mut self) -> Option<(usize, LiveMessage)> {
        let receiving = self.0.iter_mut().map(|part| Box::pin(part.recv()));
        let (message, part, _) = futures::future::select_all(receiving).await;
        message.map(|message| (part, message))
    }
}

/// Waits for the next change of the board, coalesced: the first change after a quiet window
/// is seen at once; a burst waits for the window's end, and one read covers what queued.
/// `false` at shutdown or when the hub is gone.
async fn next_change(
    ctx: &Leaderboards,
    subscription: &mut BoardSubscription,
    last_read: &mut tokio::time::Instant,
) -> bool {
    tokio::select! {
        () = ctx.infra.instance.shutdown.cancelled() => return false,
        message = subscription.recv() => if message.is_none() { return false },
    }
    tokio::time::sleep_until(*last_read + COALESCE).await;
    while let Ok(Some(_)) = tokio::time::timeout(Duration::ZERO, subscription.recv()).await {}
    *last_read = tokio::time::Instant::now();
    true
}

/// The instant a reader last read, such that its first change is read at once.
fn never_read() -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now.checked_sub(COALESCE).unwrap_or(now)
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
    let mut last_read = never_read();
    loop {
        tokio::select! {
            () = sender.closed() => return,
            changed = next_change(&ctx, &mut subscription, &mut last_read) => if !changed { return },
        }
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

/// The viewers of a season's board and each one's entry, by user: what its [`SharedRanks`]
/// reader keeps current.
type Viewers = Arc<Mutex<HashMap<i64, watch::Sender<Option<RankEntry>>>>>;

/// A viewer that asks the reader for its entry, and where the reader answers (`None`: the
/// entry could not be read).
type Join = (
    i64,
    oneshot::Sender<Option<watch::Receiver<Option<RankEntry>>>>,
);

/// The reader of a season's viewers: each viewer's standing, moved by every change of the
/// board as it arrives ([`Standing::apply`]); the viewers it cannot be sure of, read again
/// together; and, coalesced, each viewer's entry handed over when it changed.
struct RankKeeper {
    ctx: Leaderboards,
    season: Month,
    viewers: Viewers,
    standings: HashMap<i64, Standing>,
    /// Viewers to read again before their entries are handed over.
    unsure: HashSet<i64>,
    /// When the entries are next handed over (`None`: nothing changed).
    due: Option<tokio::time::Instant>,
    last_handed: tokio::time::Instant,
}

impl RankKeeper {
    /// Applies a message of the board's part `part`: a change moves the standings, anything
    /// else (a rebuild, a message of an older script, a gap the hub reports) makes every
    /// viewer unsure.
    fn hear(&mut self, part: usize, message: LiveMessage) {
        let change = match &message {
            LiveMessage::Payload(payload) => Change::parse(part, payload),
            LiveMessage::Resync => None,
        };
        let mut moved = false;
        match change {
            Some(change) => {
                for (&user, standing) in &mut self.standings {
                    if self.unsure.contains(&user) {
                        continue;
                    }
                    match standing.apply(user, &change) {
                        Applied::Unchanged => {}
                        Applied::Moved => moved = true,
                        Applied::Unsure => {
                            self.unsure.insert(user);
                        }
                    }
                }
            }
            None => self.unsure.extend(self.standings.keys().copied()),
        }
        if self.due.is_none() && (moved || !self.unsure.is_empty()) {
            // Leading edge: the first change after a quiet window goes out at once.
            self.due = Some(self.last_handed + COALESCE);
        }
    }

    /// Reads the viewers it is unsure of (nothing else happens meanwhile, so that every
    /// change above the numbers read arrives after), then hands every viewer its entry when
    /// it changed. Viewers whose subscriptions all ended are dropped first. A failed read
    /// leaves them unsure, to be read at the next window.
    async fn hand_over(&mut self) {
        self.due = None;
        self.last_handed = tokio::time::Instant::now();
        {
            let mut viewers = self.viewers.lock().expect("poisoned");
            viewers.retain(|_, entry| entry.receiver_count() > 0);
            self.standings.retain(|user, _| viewers.contains_key(user));
        }
        self.unsure.retain(|user| self.standings.contains_key(user));
        if !self.unsure.is_empty() {
            let users: Vec<i64> = self.unsure.iter().copied().collect();
            match self.ctx.standings_of(self.season, &users).await {
                Ok(read) => {
                    self.unsure.clear();
                    self.standings.extend(users.into_iter().zip(read));
                }
                Err(_) => self.due = Some(self.last_handed + COALESCE),
            }
        }
        let viewers = self.viewers.lock().expect("poisoned");
        for (user, standing) in &self.standings {
            if self.unsure.contains(user) {
                continue;
            }
            if let Some(sender) = viewers.get(user) {
                let entry = standing.entry(*user);
                sender.send_if_modified(|current| {
                    let changed = *current != entry;
                    if changed {
                        *current = entry;
                    }
                    changed
                });
            }
        }
    }

    /// Reads the entries of viewers that joined, together, and answers each.
    async fn admit(&mut self, joins: Vec<Join>) {
        let mut users: Vec<i64> = joins
            .iter()
            .map(|(user, _)| *user)
            .filter(|user| !self.standings.contains_key(user))
            .collect();
        users.sort_unstable();
        users.dedup();
        if !users.is_empty() {
            if let Ok(read) = self.ctx.standings_of(self.season, &users).await {
                let mut viewers = self.viewers.lock().expect("poisoned");
                for (user, standing) in users.into_iter().zip(read) {
                    viewers
                        .entry(user)
                        .or_insert_with(|| watch::Sender::new(standing.entry(user)));
                    self.standings.insert(user, standing);
                }
            }
        }
        let viewers = self.viewers.lock().expect("poisoned");
        for (user, answer) in joins {
            let entry = viewers
                .get(&user)
                .filter(|_| self.standings.contains_key(&user))
                .map(watch::Sender::subscribe);
            let _ = answer.send(entry);
        }
    }
}

/// Keeps the entries of a season's viewers current (see [`RankKeeper`]): admits viewers as
/// they join, applies each change of the board as it arrives, and hands the entries over
/// at most every [`COALESCE`]. Ends at shutdown or when the hub goes; its [`SharedRanks`]
/// aborts it when the last viewer goes.
async fn keep_ranks(
    ctx: Leaderboards,
    season: Month,
    mut subscription: BoardSubscription,
    viewers: Viewers,
    mut joins: mpsc::UnboundedReceiver<Join>,
) {
    let mut keeper = RankKeeper {
        ctx: ctx.clone(),
        season,
        viewers,
        standings: HashMap::new(),
        unsure: HashSet::new(),
        due: None,
        last_handed: never_read(),
    };
    loop {
        let due = keeper.due;
        tokio::select! {
            () = ctx.infra.instance.shutdown.cancelled() => return,
            message = subscription.recv() => {
                let Some((part, message)) = message else { return };
                keeper.hear(part, message);
            }
            Some(join) = joins.recv() => {
                let mut batch = vec![join];
                while let Ok(join) = joins.try_recv() {
                    batch.push(join);
                }
                keeper.admit(batch).await;
            }
            () = async { tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)).await }, if due.is_some() => {
                // What queued meanwhile goes into this hand-over.
                while let Some(Some((part, message))) = subscription.recv().now_or_never() {
                    keeper.hear(part, message);
                }
                keeper.hand_over().await;
            }
        }
    }
}

/// Keeps [`SharedBoards`]' current season up to date: a look at the clock every second,
/// one task per instance however many subscriptions follow the season.
pub(crate) async fn watch_seasons(ctx: Leaderboards) {
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

/// The viewers of a season's board on this instance and their one reader: started by the
/// first viewer, dropped with the last subscription.
struct SharedRanks {
    viewers: Viewers,
    /// Where viewers ask the reader for their entry.
    joins: mpsc::UnboundedSender<Join>,
    /// The reader's end of `joins`, until it starts.
    admissions: Mutex<Option<mpsc::UnboundedReceiver<Join>>>,
    /// The reader, once its channels are subscribed to (the others wait for it).
    reader: OnceCell<AbortOnDropHandle<()>>,
}

impl SharedRanks {
    fn new() -> Self {
        let (joins, admissions) = mpsc::unbounded_channel();
        Self {
            viewers: Viewers::default(),
            joins,
            admissions: Mutex::new(Some(admissions)),
            reader: OnceCell::new(),
        }
    }

    /// `user`'s entry and its changes: shared with the user's other subscriptions, or read
    /// by the reader, between two changes of the board, so that its standing and the
    /// changes it applies agree.
    async fn watch(&self, user: i64) -> AppResult<watch::Receiver<Option<RankEntry>>> {
        if let Some(entry) = self.viewers.lock().expect("poisoned").get(&user) {
            return Ok(entry.subscribe());
        }
        let (answer, answered) = oneshot::channel();
        let unread = || AppError::Unavailable("the leaderboard could not be read".into());
        self.joins.send((user, answer)).map_err(|_| unread())?;
        answered.await.ok().flatten().ok_or_else(unread)
    }
}

/// The shared readers of this instance: top N by season and size, viewers' entries by
/// season; and the current season.
pub struct SharedBoards {
    tops: Mutex<HashMap<(Month, usize), Weak<SharedTop>>>,
    ranks: Mutex<HashMap<Month, Weak<SharedRanks>>>,
    /// The season as [`watch_seasons`] last saw it (`None` before it first looks).
    current: watch::Sender<Option<Month>>,
}

impl Default for SharedBoards {
    fn default() -> Self {
        Self {
            tops: Mutex::default(),
            ranks: Mutex::default(),
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

    /// The viewers' reader of a season's board, started if nobody on this instance views it.
    async fn ranks(&self, ctx: &Leaderboards, season: Month) -> AppResult<Arc<SharedRanks>> {
        let shared = {
            let mut ranks = self.ranks.lock().expect("poisoned");
            match ranks.get(&season).and_then(Weak::upgrade) {
                Some(shared) => shared,
                None => {
                    ranks.retain(|_, shared| shared.strong_count() > 0);
                    let shared = Arc::new(SharedRanks::new());
                    ranks.insert(season, Arc::downgrade(&shared));
                    shared
                }
            }
        };
        // A failed start leaves the cell empty: the next subscriber tries again.
        shared
            .reader
            .get_or_try_init(|| async {
                let subscription = ctx.board_subscription(season).await;
                let admissions = shared.admissions.lock().expect("poisoned").take();
                let Some(admissions) = admissions else {
                    return Err(AppError::internal(anyhow::anyhow!(
                        "a board's rank reader started twice"
                    )));
                };
                let reader = keep_ranks(
                    ctx.clone(),
                    season,
                    subscription,
                    shared.viewers.clone(),
                    admissions,
                );
                Ok::<_, AppError>(AbortOnDropHandle::new(tokio::spawn(reader)))
            })
            .await?;
        Ok(shared)
    }

    /// Readers running on this instance, of tops and of viewers' entries (tests and metrics).
    pub fn readers(&self) -> usize {
        let tops = self
            .tops
            .lock()
            .expect("poisoned")
            .values()
            .filter(|shared| shared.strong_count() > 0)
            .count();
        let ranks = self
            .ranks
            .lock()
            .expect("poisoned")
            .values()
            .filter(|shared| shared.strong_count() > 0)
            .count();
        tops + ranks
    }
}

impl Leaderboards {
    /// Snapshots of a season's top `top`: the current one first, then each different one.
    pub(crate) async fn top_changes(
        &self,
        season: Month,
        top: usize,
    ) -> AppResult<impl Stream<Item = Vec<RankEntry>>> {
        let shared = self.boards.top(self, season, top).await?;
        let receiver = shared.snapshots().clone();
        Ok(watched(receiver, shared))
    }

    /// Snapshots of a season's top `top` with their season: of `season` when one is named, of
    /// the current season otherwise, moving to the new one when the month turns.
    pub(crate) async fn board_changes(
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
    pub(crate) async fn my_current_rank_changes(
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
        let subscription = self.board_subscription(season).await;
        let first = read(self.clone()).await?;
        let (sender, receiver) = watch::channel(first);
        let reader = tokio::spawn(reread_on_change(self.clone(), subscription, sender, read));
        Ok((receiver, reader))
    }

    /// The channels of every part of a season's board, once Redis confirmed them.
    async fn board_subscription(&self, season: Month) -> BoardSubscription {
        let mut subscriptions = Vec::new();
        for channel in self.infra.keys.board_channels(season) {
            subscriptions.push(self.infra.live.subscribe(channel).await);
        }
        BoardSubscription(subscriptions)
    }

    /// The viewer's entry: the current one first (when ranked), then each change, from the
    /// season's shared reader.
    async fn my_rank_changes(
        &self,
        season: Month,
        user_id: i64,
    ) -> AppResult<impl Stream<Item = RankEntry>> {
        let shared = self.boards.ranks(self, season).await?;
        let receiver = shared.watch(user_id).await?;
        Ok(watched(receiver, shared).filter_map(|me| async move { me }))
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
