//! The settings of sign-in (`ENGAGE_MAKEUP_*`), under their own heading in `engage --help`.

use clap::Args;

/// What sign-in may be told at start, read once from the command line and the environment.
#[derive(Debug, Clone, Copy, Args)]
#[command(next_help_heading = "Sign-in")]
pub struct SignInSettings {
    /// Make-up sign-ins a user may use per month.
    #[arg(long, env = "ENGAGE_MAKEUP_PER_MONTH", default_value_t = 2)]
    pub make_ups_per_month: u32,
}
