//! The settings of the delay queue (`ENGAGE_JOBS_*`, `ENGAGE_CALLBACK_*`), under their own
//! heading in `engage --help`.

use std::time::Duration;

use clap::Args;

/// What the delay queue may be told at start, read once from the command line and the
/// environment.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Jobs")]
pub struct JobsSettings {
    /// Hosts (`host` or `host:port`, comma separated) that job callbacks may call. Loopback,
    /// link-local and private addresses are refused unless listed.
    #[arg(long, env = "ENGAGE_CALLBACK_HOSTS", default_value = "")]
    pub callback_hosts: String,

    /// Secret that signs every job callback (`X-Engage-Signature`, an HMAC-SHA256 of
    /// `<X-Engage-Timestamp>.<body>`); unset, callbacks are not signed.
    #[arg(long, env = "ENGAGE_CALLBACK_SECRET", hide_env_values = true)]
    pub callback_secret: Option<String>,

    /// Seconds a job callback may take.
    #[arg(long, env = "ENGAGE_CALLBACK_TIMEOUT_SECONDS", default_value_t = 10)]
    pub callback_timeout_seconds: u64,

    /// Milliseconds between delay-queue ticks (promotion and taking jobs).
    #[arg(long, env = "ENGAGE_JOBS_TICK_MS", default_value_t = 100)]
    pub jobs_tick_ms: u64,

    /// Jobs one instance runs at once. Handlers are async (in-process code or an HTTP
    /// callback), so many can wait at once; a take hands out at most as many jobs as there
    /// are free slots, and at 32 a burst of 100,000 due jobs took more than 5 s to deliver.
    #[arg(long, env = "ENGAGE_JOBS_CONCURRENCY", default_value_t = 128)]
    pub jobs_concurrency: usize,

    /// Seconds a taken job stays invisible before it is handed out again.
    #[arg(long, env = "ENGAGE_JOBS_VISIBILITY_SECONDS", default_value_t = 60)]
    pub jobs_visibility_seconds: u64,
}

impl JobsSettings {
    /// How often due jobs are promoted: no more often than every 10 ms.
    pub fn tick(&self) -> Duration {
        Duration::from_millis(self.jobs_tick_ms.max(10))
    }

    /// Jobs this instance runs at once: at least one.
    pub fn concurrency(&self) -> usize {
        self.jobs_concurrency.max(1)
    }

    /// How long a taken job stays invisible by default: at least a second.
    pub fn visibility(&self) -> Duration {
        Duration::from_secs(self.jobs_visibility_seconds.max(1))
    }

    /// How long a callback may take: at least a second.
    pub fn callback_timeout(&self) -> Duration {
        Duration::from_secs(self.callback_timeout_seconds.max(1))
    }
}
