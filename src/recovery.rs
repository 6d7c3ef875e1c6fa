//! `engage verify` and `engage rebuild`: SQL is the system of record, and Redis can be told
//! how far it has drifted from it, or be rebuilt from it, feature by feature.
//!
//! Each feature owns its part, next to its code: `verify(state) -> Report` compares what
//! Redis holds with what SQL says it must hold (a key Redis lost is drift, so an empty Redis
//! is never clean), and `rebuild(run)` writes what SQL says, idempotently, in chunks. A
//! rebuild records after each chunk how far it got (in Redis, under `{recovery}`), so one
//! that was stopped goes on from there; a finished one forgets its place, and the next
//! starts over.
//!
//! Verify compares with what the archive consumers have written: run it when their streams
//! are drained, or run it twice (drift in flight disappears, lasting drift does not).

use indicatif::{ProgressBar, ProgressStyle};

use crate::{app::AppState, error::AppResult};

/// Drift examples kept per feature (the rest is counted).
const EXAMPLES_KEPT: usize = 10;

/// What `verify` found for one feature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub feature: &'static str,
    /// Things compared (keys, members, rows).
    pub checked: u64,
    /// Of which differ.
    pub drifted: u64,
    /// The first few differences, said in words.
    pub examples: Vec<String>,
}

impl Report {
    pub fn new(feature: &'static str) -> Self {
        Self {
            feature,
            checked: 0,
            drifted: 0,
            examples: Vec::new(),
        }
    }

    /// Counts one comparison; `describe` says what differs when it is not `consistent`.
    pub fn check(&mut self, consistent: bool, describe: impl FnOnce() -> String) {
        self.checked += 1;
        if !consistent {
            self.drifted += 1;
            if self.examples.len() < EXAMPLES_KEPT {
                self.examples.push(describe());
            }
        }
    }

    pub fn is_clean(&self) -> bool {
        self.drifted == 0
    }
}

/// One feature's rebuild: where it resumes, and its progress on the terminal.
pub struct Rebuild<'a> {
    pub state: &'a AppState,
    feature: &'static str,
    bar: ProgressBar,
}

impl Rebuild<'_> {
    /// The cursor a stopped run of this feature reached (0 when it starts over): the last
    /// id of the last chunk it finished.
    pub async fn resume_from(&self) -> AppResult<i64> {
        let mut conn = self.state.redis.get().await?;
        let cursor: Option<i64> = redis::cmd("HGET")
            .arg(self.state.keys.recovery_cursors())
            .arg(self.feature)
            .query_async(&mut *conn)
            .await?;
        Ok(cursor.unwrap_or(0))
    }

    /// Records that everything up to `cursor` is rebuilt, and moves the bar by `done`.
    pub async fn finished_through(&self, cursor: i64, done: u64) -> AppResult<()> {
        let mut conn = self.state.redis.get().await?;
        let () = redis::cmd("HSET")
            .arg(self.state.keys.recovery_cursors())
            .arg(self.feature)
            .arg(cursor)
            .query_async(&mut *conn)
            .await?;
        self.bar.inc(done);
        Ok(())
    }

    /// How many things (rows, members) the rebuild will write, for the bar.
    pub fn expect(&self, total: u64) {
        self.bar.set_length(total);
    }

    /// Moves the bar for work that keeps no cursor.
    pub fn advance(&self, done: u64) {
        self.bar.inc(done);
    }
}

impl<'a> Rebuild<'a> {
    /// One feature's rebuild without a bar, driven on its own (tests do).
    pub fn hidden(state: &'a AppState, feature: &'static str) -> Self {
        Self {
            state,
            feature,
            bar: ProgressBar::hidden(),
        }
    }
}

/// Every feature with state in Redis that SQL can restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    Nearby,
}

impl Feature {
    /// In rebuild order.
    pub const ALL: [Feature; 1] = [Feature::Nearby];

    pub fn name(self) -> &'static str {
        match self {
            Feature::Nearby => "items near me",
        }
    }

    async fn verify(self, state: &AppState) -> AppResult<Report> {
        match self {
            Feature::Nearby => unimplemented!("wired in main"),
        }
    }

    async fn rebuild(self, run: &Rebuild<'_>) -> AppResult<()> {
        match self {
            Feature::Nearby => unimplemented!("wired in main"),
        }
    }
}

/// Verifies every feature; the reports come in the order of [`Feature::ALL`].
pub async fn verify(state: &AppState) -> AppResult<Vec<Report>> {
    let mut reports = Vec::with_capacity(Feature::ALL.len());
    for feature in Feature::ALL {
        reports.push(feature.verify(state).await?);
    }
    Ok(reports)
}

/// Rebuilds every feature from SQL, resuming a stopped run; with `show` a bar per feature.
pub async fn rebuild(state: &AppState, show: bool) -> AppResult<()> {
    for feature in Feature::ALL {
        let bar = if show {
            ProgressBar::new(0)
        } else {
            ProgressBar::hidden()
        };
        if let Ok(style) =
            ProgressStyle::with_template("{prefix:>22} [{bar:40}] {pos}/{len} {elapsed}")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(feature.name());
        let run = Rebuild {
            state,
            feature: feature.name(),
            bar,
        };
        feature.rebuild(&run).await?;
        run.bar.finish();
    }
    // Every feature finished: the next run starts over.
    let mut conn = state.redis.get().await?;
    let () = redis::cmd("DEL")
        .arg(state.keys.recovery_cursors())
        .query_async(&mut *conn)
        .await?;
    Ok(())
}

impl crate::redis::Keys {
    /// Where a stopped rebuild resumes: the cursor each feature reached.
    pub fn recovery_cursors(&self) -> String {
        self.tagged("recovery", "cursors")
    }
}
