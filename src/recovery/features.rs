//! Every feature that SQL can restore, and the runs of `engage verify` and `engage rebuild`
//! over them. It names the features' recovery modules; they name only the parent's toolkit,
//! so the toolkit never imports a feature.

use indicatif::{ProgressBar, ProgressStyle};

use super::{Rebuild, Report};
use crate::{app::AppState, error::AppResult};

/// Every feature with state in Redis that SQL can restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    Jobs,
    Likes,
    Calendars,
    Boards,
    DailyCaps,
    Follows,
    Feeds,
    Nearby,
    Vouchers,
}

impl Feature {
    /// In rebuild order.
    pub const ALL: [Feature; 9] = [
        Feature::Jobs,
        Feature::Likes,
        Feature::Calendars,
        Feature::Boards,
        Feature::DailyCaps,
        Feature::Follows,
        Feature::Feeds,
        Feature::Nearby,
        Feature::Vouchers,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Feature::Jobs => "delayed jobs",
            Feature::Likes => "likes",
            Feature::Calendars => "sign-in calendars",
            Feature::Boards => "season boards",
            Feature::DailyCaps => "daily caps",
            Feature::Follows => "follows",
            Feature::Feeds => "feeds",
            Feature::Nearby => "items near me",
            Feature::Vouchers => "vouchers and orders",
        }
    }

    async fn verify(self, state: &AppState) -> AppResult<Report> {
        match self {
            Feature::Jobs => crate::jobs::recovery::verify(state).await,
            Feature::Likes => crate::remarks::recovery::verify(state).await,
            Feature::Calendars => crate::signin::recovery::verify(state).await,
            Feature::Boards => crate::points::recovery::verify_boards(state).await,
            Feature::DailyCaps => crate::points::recovery::verify_daily(state).await,
            Feature::Follows => crate::feed::recovery::verify_follows(state).await,
            Feature::Feeds => crate::feed::recovery::verify_feeds(state).await,
            Feature::Nearby => crate::nearby::recovery::verify(state).await,
            Feature::Vouchers => crate::vouchers::recovery::verify(state).await,
        }
    }

    async fn rebuild(self, run: &Rebuild<'_>) -> AppResult<()> {
        match self {
            Feature::Jobs => crate::jobs::recovery::rebuild(run).await,
            Feature::Likes => crate::remarks::recovery::rebuild(run).await,
            Feature::Calendars => crate::signin::recovery::rebuild(run).await,
            // Boards, daily totals and make-up counters change together in one award, so
            // they are rebuilt together, under one hold.
            Feature::Boards => crate::points::recovery::rebuild(run).await,
            Feature::DailyCaps => Ok(()),
            Feature::Follows => crate::feed::recovery::rebuild_follows(run).await,
            Feature::Feeds => crate::feed::recovery::rebuild_feeds(run).await,
            Feature::Nearby => crate::nearby::recovery::rebuild(run).await,
            Feature::Vouchers => crate::vouchers::recovery::rebuild(run).await,
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

/// What one feature's rebuild wrote, and how long it took.
#[derive(Debug, Clone)]
pub struct Rebuilt {
    pub feature: &'static str,
    /// Rows, members or users written (what its bar counted).
    pub written: u64,
    pub took: std::time::Duration,
}

/// Rebuilds every feature from SQL, resuming a stopped run; with `show` a bar per feature.
pub async fn rebuild(state: &AppState, show: bool) -> AppResult<Vec<Rebuilt>> {
    let mut rebuilt = Vec::with_capacity(Feature::ALL.len());
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
        let started = std::time::Instant::now();
        feature.rebuild(&run).await?;
        run.bar.finish();
        rebuilt.push(Rebuilt {
            feature: feature.name(),
            written: run.bar.position(),
            took: started.elapsed(),
        });
    }
    // Every feature finished: the next run starts over.
    let mut conn = state.redis.get().await?;
    let () = redis::cmd("DEL")
        .arg(state.keys.recovery_cursors())
        .query_async(&mut *conn)
        .await?;
    Ok(rebuilt)
}
