//! The settings of the season leaderboards (`ENGAGE_ROLLOVER_*`), under their own heading in
//! `engage --help`.

use std::time::Duration;

use clap::Args;

/// What the leaderboards may be told at start, read once from the command line and the
/// environment.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Leaderboard")]
pub struct LeaderboardSettings {
    /// Seconds between checks for finished seasons to archive.
    #[arg(long, env = "ENGAGE_ROLLOVER_CHECK_SECONDS", default_value_t = 60)]
    pub rollover_check_seconds: u64,

    /// What a finished season pays its top ranks, as points: `<rank>:<points>` or
    /// `<from>-<to>:<points>`, comma-separated; empty for none.
    #[arg(long, env = "ENGAGE_SEASON_REWARDS", default_value = "1:100,2:50,3:20")]
    pub season_rewards: String,
}

impl LeaderboardSettings {
    /// The season's rewards by rank.
    pub(crate) fn season_rewards(&self) -> anyhow::Result<Vec<super::rewards::Reward>> {
        super::rewards::parse(&self.season_rewards)
            .map_err(|error| anyhow::anyhow!("ENGAGE_SEASON_REWARDS: {error}"))
    }

    /// How often this instance looks for a season to archive: at least every second.
    pub fn rollover_check(&self) -> Duration {
        Duration::from_secs(self.rollover_check_seconds.max(1))
    }
}
