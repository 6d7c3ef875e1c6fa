//! The settings of points (`ENGAGE_POINTS_*`), under their own heading in `engage --help`.

use clap::Args;

use crate::{features::points::PointsRules, infra::redis::RedisMode};

/// A board read asks every bucket, so buckets are bounded by what one read may ask.
pub const MAX_POINTS_BUCKETS: u32 = 1024;

/// What points may be told at start, read once from the command line and the environment.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Points")]
pub struct PointsSettings {
    /// User buckets of the points keys (daily totals, sign-ins, the season board's parts):
    /// each bucket is one Redis Cluster slot, so more buckets spread points over more
    /// nodes. Unset: 1 on one Redis node, 16 on a cluster. Changing it moves users to other
    /// buckets: run `engage rebuild` after a change.
    #[arg(long, env = "ENGAGE_POINTS_BUCKETS")]
    pub points_buckets: Option<u32>,

    /// A TOML file of points rules (see points-rules.example.toml); unset: the defaults.
    #[arg(long, env = "ENGAGE_POINTS_RULES")]
    pub points_rules: Option<String>,
}

impl PointsSettings {
    /// The points buckets in effect: as set, or what suits the Redis mode. (The key builder
    /// holds them, `Keys::with_points_buckets`.)
    pub fn buckets(&self, mode: RedisMode) -> u32 {
        self.points_buckets.unwrap_or(mode.spread(1, 16))
    }

    /// Refuses a number of buckets a board read could not ask.
    pub fn check(&self, mode: RedisMode) -> anyhow::Result<()> {
        let buckets = self.buckets(mode);
        if !(1..=MAX_POINTS_BUCKETS).contains(&buckets) {
            anyhow::bail!(
                "ENGAGE_POINTS_BUCKETS must be between 1 and {MAX_POINTS_BUCKETS}, got {buckets}"
            );
        }
        Ok(())
    }

    /// The rules of `ENGAGE_POINTS_RULES`, or the defaults.
    pub fn rules(&self) -> anyhow::Result<PointsRules> {
        PointsRules::load(self.points_rules.as_deref())
    }
}
