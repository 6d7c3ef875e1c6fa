//! The whole command line's settings: the infrastructure's ([`Config`]) and, under a heading
//! of its own in `--help`, each feature's, declared in the feature's `settings.rs`. Every
//! setting is also an environment variable (`ENGAGE_*`) and listed in
//! docs/configuration.md.
//!
//! A feature's settings are flattened in here rather than listed in `infra::config`, so
//! that adding a setting to a feature touches only that feature (and its documentation):
//! infra knows no feature, and the wiring is the one place that sees them all.

use std::ops::{Deref, DerefMut};

use clap::Args;

use crate::{
    features::{
        feed::FeedSettings, jobs::JobsSettings, leaderboard::LeaderboardSettings,
        points::PointsSettings, remarks::RemarkSettings, signin::SignInSettings,
        vouchers::VoucherSettings, FeatureSettings,
    },
    infra::config::Config,
};

/// Every setting, read once at start.
#[derive(Debug, Clone, Args)]
pub struct Settings {
    #[command(flatten)]
    pub infra: Config,
    #[command(flatten)]
    pub points: PointsSettings,
    #[command(flatten)]
    pub signin: SignInSettings,
    #[command(flatten)]
    pub leaderboard: LeaderboardSettings,
    #[command(flatten)]
    pub remarks: RemarkSettings,
    #[command(flatten)]
    pub feed: FeedSettings,
    #[command(flatten)]
    pub vouchers: VoucherSettings,
    #[command(flatten)]
    pub jobs: JobsSettings,
}

impl Settings {
    /// Refuses settings that would leave the service open or would not do what they say
    /// (each part says which).
    pub fn check(&self) -> anyhow::Result<()> {
        self.points.check(self.infra.redis_mode)?;
        self.infra.check()
    }

    /// The features' part, for [`crate::features::Features::new`].
    pub fn features(&self) -> FeatureSettings<'_> {
        FeatureSettings {
            points: &self.points,
            signin: &self.signin,
            leaderboard: &self.leaderboard,
            remarks: &self.remarks,
            feed: &self.feed,
            vouchers: &self.vouchers,
            jobs: &self.jobs,
        }
    }
}

/// The infrastructure's settings are most of the command line and what most code and tests
/// read (`settings.bind`); a feature's are reached through its name (`settings.remarks`).
impl Deref for Settings {
    type Target = Config;

    fn deref(&self) -> &Config {
        &self.infra
    }
}

impl DerefMut for Settings {
    fn deref_mut(&mut self) -> &mut Config {
        &mut self.infra
    }
}
