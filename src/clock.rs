//! The one place that knows about time zones.
//!
//! "Today", months and seasons are computed in `ENGAGE_TIMEZONE`, never in the server's local
//! time. Tests can move the clock forward (streaks, expiries) without sleeping.

use std::sync::{
    atomic::{AtomicI64, Ordering},
    Arc,
};

use chrono::{DateTime, NaiveDate, SecondsFormat, Utc};
use chrono_tz::Tz;

#[derive(Clone)]
pub struct Clock {
    tz: Tz,
    /// Milliseconds added to the system clock; zero outside tests.
    offset_ms: Arc<AtomicI64>,
}

impl Clock {
    pub fn new(tz: Tz) -> Self {
        Self {
            tz,
            offset_ms: Arc::new(AtomicI64::new(0)),
        }
    }

    pub fn tz(&self) -> Tz {
        self.tz
    }

    pub fn now(&self) -> DateTime<Utc> {
        Utc::now() + chrono::Duration::milliseconds(self.offset_ms.load(Ordering::Relaxed))
    }

    pub fn now_ms(&self) -> i64 {
        self.now().timestamp_millis()
    }

    /// The calendar date of now in the configured time zone.
    pub fn today(&self) -> NaiveDate {
        self.now().with_timezone(&self.tz).date_naive()
    }

    /// Moves the clock (tests only: simulates days passing).
    pub fn advance(&self, by: chrono::Duration) {
        self.offset_ms
            .fetch_add(by.num_milliseconds(), Ordering::Relaxed);
    }

    /// RFC 3339 with the configured zone's offset: the form every time takes in the API.
    pub fn format(&self, at: DateTime<Utc>) -> String {
        at.with_timezone(&self.tz)
            .to_rfc3339_opts(SecondsFormat::Millis, false)
    }

    /// [`Clock::format`] for epoch milliseconds, the form times take in SQL.
    pub fn format_ms(&self, epoch_ms: i64) -> String {
        self.format(DateTime::from_timestamp_millis(epoch_ms).unwrap_or_default())
    }
}
