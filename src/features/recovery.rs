//! Every feature that SQL can restore, and the runs of `engage verify` and `engage rebuild`
//! over them. It names the features' recovery modules; they use the toolkit of
//! `infra::recovery`, which imports no feature.

use indicatif::{ProgressBar, ProgressStyle};

use crate::infra::recovery::{Rebuild, Report};
use crate::{
    features::Features,
    infra::{error::AppResult, Infra},
};

/// Every feature with state in Redis that SQL can restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Feature {
    Jobs,
    Likes,
    Calendars,
    Boards,
    ManyBoards,
    DailyCaps,
    Balances,
    Follows,
    Feeds,
    Nearby,
    Vouchers,
    Ratings,
    Notifications,
}

impl Feature {
    /// In rebuild order.
    pub(crate) const ALL: [Feature; 13] = [
        Feature::Jobs,
        Feature::Likes,
        Feature::Calendars,
        Feature::Boards,
        Feature::ManyBoards,
        Feature::DailyCaps,
        Feature::Balances,
        Feature::Follows,
        Feature::Feeds,
        Feature::Nearby,
        Feature::Vouchers,
        Feature::Ratings,
        Feature::Notifications,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Feature::Jobs => "delayed jobs",
            Feature::Likes => "likes",
            Feature::Calendars => "sign-in calendars",
            Feature::Boards => "season boards",
            Feature::ManyBoards => "boards",
            Feature::DailyCaps => "daily caps",
            Feature::Balances => "points balances",
            Feature::Follows => "follows",
            Feature::Feeds => "feeds",
            Feature::Nearby => "items near me",
            Feature::Vouchers => "vouchers and orders",
            Feature::Ratings => "ratings",
            Feature::Notifications => "notifications",
        }
    }

    async fn verify(self, features: &Features) -> AppResult<Report> {
        match self {
            Feature::Jobs => features.jobs.verify().await,
            Feature::Likes => features.remarks.verify().await,
            Feature::Calendars => features.signin.verify().await,
            Feature::Boards => features.points.verify_boards().await,
            Feature::ManyBoards => features.boards.verify().await,
            Feature::DailyCaps => features.points.verify_daily().await,
            Feature::Balances => features.points.verify_balances().await,
            Feature::Follows => features.feed.verify_follows().await,
            Feature::Feeds => features.feed.verify_feeds().await,
            Feature::Nearby => features.nearby.verify().await,
            Feature::Vouchers => features.vouchers.verify().await,
            Feature::Ratings => features.items.verify_ratings().await,
            Feature::Notifications => features.notifications.verify().await,
        }
    }

    async fn rebuild(self, features: &Features, run: &Rebuild<'_>) -> AppResult<()> {
        match self {
            Feature::Jobs => features.jobs.rebuild(run).await,
            Feature::Likes => features.remarks.rebuild(run).await,
            Feature::Calendars => features.signin.rebuild(run).await,
            // Boards, daily totals, balances and make-up counters change together in one
            // award, so they are rebuilt together, under one hold.
            Feature::Boards => features.points.rebuild(run).await,
            // After points: an unpaid reward is an award.
            Feature::ManyBoards => features.boards.rebuild(run).await,
            Feature::DailyCaps | Feature::Balances => Ok(()),
            Feature::Follows => features.feed.rebuild_follows(run).await,
            Feature::Feeds => features.feed.rebuild_feeds(run).await,
            Feature::Nearby => features.nearby.rebuild(run).await,
            Feature::Vouchers => features.vouchers.rebuild(run).await,
            Feature::Ratings => features.items.rebuild_ratings(run).await,
            Feature::Notifications => features.notifications.rebuild(run).await,
        }
    }
}

impl Features {
    /// Verifies every feature; the reports come in the order of [`Feature::ALL`].
    pub async fn verify(&self) -> AppResult<Vec<Report>> {
        let mut reports = Vec::with_capacity(Feature::ALL.len());
        for feature in Feature::ALL {
            reports.push(feature.verify(self).await?);
        }
        Ok(reports)
    }

    /// Rebuilds every feature from SQL, resuming a stopped run; with `show` a bar per
    /// feature.
    pub async fn rebuild(&self, infra: &Infra, show: bool) -> AppResult<Vec<Rebuilt>> {
        rebuild(infra, self, show).await
    }
}

/// What one feature's rebuild wrote, and how long it took.
#[derive(Debug, Clone)]
pub struct Rebuilt {
    pub feature: &'static str,
    /// Rows, members or users written (what its bar counted).
    pub written: u64,
    pub took: std::time::Duration,
}

async fn rebuild(infra: &Infra, features: &Features, show: bool) -> AppResult<Vec<Rebuilt>> {
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
        let run = Rebuild::new(infra, feature.name(), bar);
        let started = std::time::Instant::now();
        feature.rebuild(features, &run).await?;
        rebuilt.push(Rebuilt {
            feature: feature.name(),
            written: run.finish(),
            took: started.elapsed(),
        });
    }
    // Every feature finished: the next run starts over.
    let mut conn = infra.redis.get().await?;
    let () = redis::cmd("DEL")
        .arg(infra.keys.recovery_cursors())
        .query_async(&mut *conn)
        .await?;
    Ok(rebuilt)
}
