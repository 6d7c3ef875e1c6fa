//! The one place that knows about time zones.
//!
//! "Today", months and seasons are computed in `ENGAGE_TIMEZONE`, never in the server's local
//! time. Builds with the `test-clock` feature (the test suite's) can move the clock, so that
//! streaks, month ends and expiries are tested without sleeping; production builds cannot.

use std::sync::{
    atomic::{AtomicI64, Ordering},
    Arc,
};

use chrono::{DateTime, Datelike, NaiveDate, TimeZone, Utc};
use chrono_tz::Tz;

/// A date as SQL keeps it: `yyyymmdd` as one integer (vote_date, award_date, sign_ins.day).
pub fn day_number(date: NaiveDate) -> i64 {
    date.year() as i64 * 10_000 + date.month() as i64 * 100 + date.day() as i64
}

/// The date of a `yyyymmdd` integer, if it is one.
pub(crate) fn date_of_day_number(number: i64) -> Option<NaiveDate> {
    NaiveDate::from_ymd_opt(
        i32::try_from(number / 10_000).ok()?,
        u32::try_from(number / 100 % 100).ok()?,
        u32::try_from(number % 100).ok()?,
    )
}

#[derive(Clone)]
pub struct Clock {
    tz: Tz,
    /// Microseconds added to the system clock; zero outside tests. Finer than the
    /// milliseconds instants are stored in, so that a clock set to an instant reads that
    /// instant or later, never the millisecond before it.
    offset_us: Arc<AtomicI64>,
}

impl Clock {
    pub(crate) fn new(tz: Tz) -> Self {
        Self {
            tz,
            offset_us: Arc::new(AtomicI64::new(0)),
        }
    }

    pub fn now(&self) -> DateTime<Utc> {
        Utc::now() + chrono::Duration::microseconds(self.offset_us.load(Ordering::Relaxed))
    }

    pub fn now_ms(&self) -> i64 {
        self.now().timestamp_millis()
    }

    /// The calendar date of now in the configured time zone.
    pub fn today(&self) -> NaiveDate {
        self.now().with_timezone(&self.tz).date_naive()
    }

    /// Moves the clock forward (simulates time passing).
    #[cfg(feature = "test-clock")]
    pub fn advance(&self, by: chrono::Duration) {
        self.offset_us
            .fetch_add(by.num_microseconds().unwrap_or(i64::MAX), Ordering::Relaxed);
    }

    /// Sets the clock to an instant.
    #[cfg(feature = "test-clock")]
    pub fn set(&self, at: DateTime<Utc>) {
        // Rounded up: read at once, the clock shows `at`, not a moment before it.
        let offset = match (at - Utc::now()).num_nanoseconds() {
            Some(nanos) => nanos.div_euclid(1000) + i64::from(nanos.rem_euclid(1000) > 0),
            None => (at - Utc::now()).num_microseconds().unwrap_or(i64::MAX),
        };
        self.offset_us.store(offset, Ordering::Relaxed);
    }

    /// In a test build, a server started with `ENGAGE_TEST_CLOCK_AT` (an RFC 3339 instant)
    /// reads its clock from that instant on, so that a browser test can run on a day of its
    /// choosing (a month's first days leave a make-up nothing to reach). Unset: the system
    /// clock. Production builds do not read it.
    #[cfg(feature = "test-clock")]
    pub(crate) fn start_from_env(&self) -> anyhow::Result<()> {
        const VAR: &str = "ENGAGE_TEST_CLOCK_AT";
        if let Ok(at) = std::env::var(VAR) {
            let at = DateTime::parse_from_rfc3339(&at)
                .map_err(|error| anyhow::anyhow!("{VAR}={at}: not an RFC 3339 instant: {error}"))?;
            self.set(at.with_timezone(&Utc));
            tracing::warn!(%at, "{VAR}: the clock starts at this instant, not now");
        }
        Ok(())
    }

    /// The calendar date of an instant in the configured zone.
    pub fn date_of(&self, at: DateTime<Utc>) -> NaiveDate {
        at.with_timezone(&self.tz).date_naive()
    }

    /// The local date of an instant given in epoch milliseconds (an event's `at`).
    pub(crate) fn date_of_ms(&self, epoch_ms: i64) -> NaiveDate {
        self.date_of(DateTime::from_timestamp_millis(epoch_ms).unwrap_or_default())
    }

    pub fn current_month(&self) -> Month {
        Month::of(self.today())
    }

    /// The instant a day begins in the configured zone (the first existing instant of the
    /// day where a daylight-saving jump skips midnight).
    pub(crate) fn start_of(&self, date: NaiveDate) -> DateTime<Utc> {
        start_of_in(self.tz, date)
    }

    /// The configured zone (`ENGAGE_TIMEZONE`).
    pub(crate) fn zone(&self) -> Tz {
        self.tz
    }

    pub fn month_begins(&self, month: Month) -> DateTime<Utc> {
        self.start_of(month.first_day())
    }
}

/// The instant a day begins in a zone (the first existing instant of the day where a
/// daylight-saving jump skips midnight).
pub(crate) fn start_of_in(tz: Tz, date: NaiveDate) -> DateTime<Utc> {
    (0..24)
        .find_map(|hour| {
            tz.from_local_datetime(&date.and_hms_opt(hour, 0, 0)?)
                .earliest()
        })
        .map(|local| local.with_timezone(&Utc))
        .unwrap_or_else(|| date.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc())
}

/// The calendar date of an instant in a zone.
pub(crate) fn date_in(tz: Tz, at: DateTime<Utc>) -> NaiveDate {
    at.with_timezone(&tz).date_naive()
}

/// A calendar month (a season is one), identified as `YYYYMM`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Month {
    pub(crate) year: i32,
    pub(crate) month: u32,
}

impl Month {
    pub fn of(date: NaiveDate) -> Self {
        Self {
            year: date.year(),
            month: date.month(),
        }
    }

    /// `202611`.
    pub fn id(self) -> u32 {
        self.year as u32 * 100 + self.month
    }

    /// Parses `YYYYMM`.
    pub fn parse_id(text: &str) -> Option<Self> {
        if text.len() != 6 || !text.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let month = Self {
            year: text[..4].parse().ok()?,
            month: text[4..].parse().ok()?,
        };
        (1..=12).contains(&month.month).then_some(month)
    }

    /// Parses `YYYY-MM`.
    pub(crate) fn parse_dashed(text: &str) -> Option<Self> {
        let (year, month) = text.split_once('-')?;
        if year.len() != 4 || month.len() != 2 {
            return None;
        }
        Self::parse_id(&format!("{year}{month}"))
    }

    pub(crate) fn dashed(self) -> String {
        format!("{:04}-{:02}", self.year, self.month)
    }

    pub fn previous(self) -> Self {
        if self.month == 1 {
            Self {
                year: self.year - 1,
                month: 12,
            }
        } else {
            Self {
                year: self.year,
                month: self.month - 1,
            }
        }
    }

    pub(crate) fn next(self) -> Self {
        if self.month == 12 {
            Self {
                year: self.year + 1,
                month: 1,
            }
        } else {
            Self {
                year: self.year,
                month: self.month + 1,
            }
        }
    }

    pub(crate) fn first_day(self) -> NaiveDate {
        NaiveDate::from_ymd_opt(self.year, self.month, 1).unwrap_or_default()
    }

    pub fn days(self) -> u32 {
        (self.next().first_day() - self.first_day()).num_days() as u32
    }

    /// English name, e.g. "November 2026".
    pub(crate) fn name(self) -> String {
        self.first_day().format("%B %Y").to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn months_step_across_years_and_know_their_length() {
        let december = Month::parse_id("202612").unwrap();
        assert_eq!(december.next().id(), 202701);
        assert_eq!(Month::parse_id("202701").unwrap().previous(), december);
        assert_eq!(Month::parse_dashed("2028-02").unwrap().days(), 29);
        assert_eq!(Month::parse_id("202613"), None);
        assert_eq!(december.name(), "December 2026");
    }

    #[test]
    fn a_day_starts_at_local_midnight() {
        let clock = Clock::new(chrono_tz::Asia::Shanghai);
        let start = clock.start_of(NaiveDate::from_ymd_opt(2026, 11, 23).unwrap());
        assert_eq!(start.to_rfc3339(), "2026-11-22T16:00:00+00:00");
    }
}
