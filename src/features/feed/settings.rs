//! The settings of the follow feed (`ENGAGE_FEED_*`), under their own heading in
//! `engage --help`.

use clap::Args;

/// What the feed may be told at start, read once from the command line and the environment.
#[derive(Debug, Clone, Copy, Args)]
#[command(next_help_heading = "Feed")]
pub struct FeedSettings {
    /// Authors with more followers than this are not pushed to inboxes: their remarks are
    /// pulled from their outbox when a follower reads the feed.
    #[arg(long, env = "ENGAGE_FEED_PUSH_LIMIT", default_value_t = 1000)]
    pub feed_push_limit: u64,

    /// Entries kept per inbox and per outbox (the oldest are trimmed).
    #[arg(long, env = "ENGAGE_FEED_INBOX_SIZE", default_value_t = 800)]
    pub feed_inbox_size: u64,
}

impl FeedSettings {
    /// Authors with more followers than this are pulled by their followers, not pushed.
    pub fn push_limit(&self) -> i64 {
        self.feed_push_limit as i64
    }

    /// Entries an inbox keeps: at least one.
    pub fn inbox_size(&self) -> i64 {
        self.feed_inbox_size.max(1) as i64
    }
}
