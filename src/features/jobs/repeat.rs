//! Repeating jobs: a job that runs every N seconds, or at the times of a cron pattern in a
//! time zone, until a number of runs or an end time. One job id carries the whole series:
//! its runs, its next due time and its history.
//!
//! The next run is computed here when a run ends and scheduled by the script that ends it
//! (`lua/jobs_finish.lua`), so a run never overlaps the one before it. The next run is the
//! schedule's first time after both the run's due time and now: a run that was late (the
//! queue was down, or the run before it was slow) is followed by the next time on schedule,
//! never by a burst of the times it missed.
//!
//! Cron times are computed in the job's zone with `croner`, which follows the Open Cron
//! Pattern Specification across daylight-saving changes: a time of day that a spring-forward
//! skips runs at the first minute after the gap, one that a fall-back repeats runs once;
//! patterns with a wildcard or a step in their hour, minute or second run once per real
//! interval (none in the gap, each pass of the repeated hour).

use std::str::FromStr;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::{
    parser::{CronParser, Seconds, Year},
    Cron,
};
use serde::{Deserialize, Serialize};

use crate::infra::error::{AppError, AppResult};

/// The shortest interval of `everySeconds`.
const MIN_EVERY_SECONDS: i64 = 1;
/// The longest interval of `everySeconds`: a year.
const MAX_EVERY_SECONDS: i64 = 365 * 24 * 3600;
/// The longest cron pattern accepted.
const MAX_CRON_BYTES: usize = 256;

/// A repeat as a caller gives it, unchecked.
#[derive(Debug, Clone, Default)]
pub struct RepeatRule {
    pub every_seconds: Option<i64>,
    pub cron: Option<String>,
    /// An IANA zone; `None`: `ENGAGE_TIMEZONE`.
    pub time_zone: Option<String>,
    pub limit: Option<i64>,
    pub ends_at_ms: Option<i64>,
}

/// A checked repeat, as the pool's JSON and the SQL row (`pending_job.options`) keep it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Repeat {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// The IANA zone cron times are read in.
    pub time_zone: String,
    /// Most runs of the series.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// No run is due after this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ends_at_ms: Option<i64>,
    /// The first run's due time: `every_seconds` counts from it.
    #[serde(default)]
    pub anchor_ms: i64,
}

/// A 5-field pattern, or 6 with seconds first.
fn parse_cron(pattern: &str) -> AppResult<Cron> {
    let fields = pattern.split_whitespace().count();
    if pattern.len() > MAX_CRON_BYTES || !(5..=6).contains(&fields) {
        return Err(AppError::bad_input(
            "cron must have 5 fields (minute hour day month weekday), or 6 with seconds first",
        ));
    }
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
        .parse(pattern)
        .map_err(|error| AppError::bad_input(format!("cron {pattern:?} does not read: {error}")))
}

fn zone(name: &str) -> AppResult<Tz> {
    Tz::from_str(name)
        .map_err(|_| AppError::bad_input(format!("timeZone {name:?} is not an IANA time zone")))
}

fn instant(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

impl RepeatRule {
    /// The checked repeat and its first run, at or after `from_ms` (`BAD_USER_INPUT` for a
    /// pattern or zone that does not read, both or neither of `everySeconds` and `cron`, a
    /// limit below 1, or an end before the first run).
    pub(crate) fn check(self, default_zone: Tz, from_ms: i64) -> AppResult<(Repeat, i64)> {
        let every_seconds = match (self.every_seconds, &self.cron) {
            (Some(_), Some(_)) | (None, None) => {
                return Err(AppError::bad_input(
                    "repeat needs exactly one of everySeconds and cron",
                ))
            }
            (Some(n), None) if !(MIN_EVERY_SECONDS..=MAX_EVERY_SECONDS).contains(&n) => {
                return Err(AppError::bad_input(format!(
                    "everySeconds must be between {MIN_EVERY_SECONDS} and {MAX_EVERY_SECONDS}"
                )))
            }
            (Some(n), None) => Some(n as u64),
            (None, Some(pattern)) => {
                parse_cron(pattern)?;
                None
            }
        };
        let time_zone = match &self.time_zone {
            Some(name) => zone(name)?,
            None => default_zone,
        };
        let limit = self
            .limit
            .map(|n| {
                u32::try_from(n)
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| AppError::bad_input("limit must be 1 or more"))
            })
            .transpose()?;
        let mut repeat = Repeat {
            every_seconds,
            cron: self
                .cron
                .map(|c| c.split_whitespace().collect::<Vec<_>>().join(" ")),
            time_zone: time_zone.name().to_string(),
            limit,
            ends_at_ms: self.ends_at_ms,
            anchor_ms: from_ms,
        };
        let first = repeat
            .occurrence(from_ms, true)
            .ok_or_else(|| AppError::bad_input("the cron pattern has no time ahead"))?;
        if repeat.ends_at_ms.is_some_and(|end| first > end) {
            return Err(AppError::bad_input("endsAt is before the first run"));
        }
        repeat.anchor_ms = first;
        Ok((repeat, first))
    }
}

impl Repeat {
    /// The schedule's first time after `from_ms` (at or after, when `inclusive`).
    fn occurrence(&self, from_ms: i64, inclusive: bool) -> Option<i64> {
        if let Some(every) = self.every_seconds {
            let every = every as i64 * 1000;
            let passed = from_ms - self.anchor_ms;
            if passed < 0 || (inclusive && passed == 0) {
                return Some(self.anchor_ms);
            }
            return Some(self.anchor_ms + (passed / every + 1) * every);
        }
        let cron = parse_cron(self.cron.as_deref()?).ok()?;
        let tz = zone(&self.time_zone).ok()?;
        // Cron times are whole seconds: a start within a second counts from the next one, so
        // that a run ending just after its own second is never given that second again.
        let from = instant(from_ms.div_euclid(1000) * 1000 + 1000 * i64::from(from_ms % 1000 != 0))
            .with_timezone(&tz);
        let next = cron.find_next_occurrence(&from, inclusive).ok()?;
        Some(next.timestamp_millis())
    }

    /// The next run after one that ended at `ended_ms` (a run ends after it was due); `None`
    /// when the series ends there (past `endsAt`; the limit is counted by the script that
    /// ends the run).
    pub(crate) fn next_run(&self, ended_ms: i64) -> Option<i64> {
        let next = self.occurrence(ended_ms, false)?;
        match self.ends_at_ms {
            Some(end) if next > end => None,
            _ => Some(next),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> i64 {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .timestamp_millis()
    }

    fn cron(pattern: &str, from: &str) -> (Repeat, i64) {
        RepeatRule {
            cron: Some(pattern.into()),
            time_zone: Some("Europe/Berlin".into()),
            ..RepeatRule::default()
        }
        .check(Tz::UTC, at(from))
        .unwrap()
    }

    /// The times a series runs from `from`, each run ending at its due time.
    fn runs(repeat: &Repeat, first: i64, n: usize) -> Vec<String> {
        let mut due = first;
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(instant(due).to_rfc3339());
            due = repeat.next_run(due).unwrap();
        }
        out
    }

    #[test]
    fn a_fixed_time_in_the_spring_gap_runs_just_after_it_and_on_time_the_next_day() {
        let (repeat, first) = cron("30 2 * * *", "2026-03-28T12:00:00Z");
        assert_eq!(
            runs(&repeat, first, 3),
            [
                "2026-03-29T01:00:00+00:00",
                "2026-03-30T00:30:00+00:00",
                "2026-03-31T00:30:00+00:00"
            ]
        );
    }

    #[test]
    fn a_fixed_time_in_the_repeated_autumn_hour_runs_once() {
        let (repeat, first) = cron("30 2 * * *", "2026-10-24T12:00:00Z");
        assert_eq!(
            runs(&repeat, first, 3),
            [
                "2026-10-25T00:30:00+00:00",
                "2026-10-26T01:30:00+00:00",
                "2026-10-27T01:30:00+00:00"
            ]
        );
    }

    #[test]
    fn an_hourly_pattern_runs_once_per_real_hour_across_both_changes() {
        let (repeat, first) = cron("0 * * * *", "2026-03-28T23:30:00Z");
        assert_eq!(
            runs(&repeat, first, 3),
            [
                "2026-03-29T00:00:00+00:00",
                "2026-03-29T01:00:00+00:00",
                "2026-03-29T02:00:00+00:00"
            ]
        );
        let (repeat, first) = cron("0 * * * *", "2026-10-24T23:30:00Z");
        assert_eq!(
            runs(&repeat, first, 4),
            [
                "2026-10-25T00:00:00+00:00",
                "2026-10-25T01:00:00+00:00",
                "2026-10-25T02:00:00+00:00",
                "2026-10-25T03:00:00+00:00"
            ]
        );
    }

    #[test]
    fn six_fields_take_seconds_first_and_bad_input_is_refused() {
        let (repeat, first) = cron("15 0 * * * *", "2026-01-01T00:00:20Z");
        assert_eq!(runs(&repeat, first, 1), ["2026-01-01T01:00:15+00:00"]);
        let bad = |rule: RepeatRule| rule.check(Tz::UTC, 0).is_err();
        let cron = |p: &str| RepeatRule {
            cron: Some(p.into()),
            ..RepeatRule::default()
        };
        assert!(bad(cron("* * * *")));
        assert!(bad(cron("0 0 0 * * * 2030")));
        assert!(bad(cron("61 * * * *")));
        assert!(bad(RepeatRule {
            time_zone: Some("Mars/Olympus".into()),
            ..cron("0 * * * *")
        }));
        assert!(bad(RepeatRule::default()));
        assert!(bad(RepeatRule {
            every_seconds: Some(5),
            ..cron("0 * * * *")
        }));
        assert!(bad(RepeatRule {
            every_seconds: Some(0),
            ..RepeatRule::default()
        }));
    }

    #[test]
    fn a_late_run_is_followed_by_the_next_time_on_schedule_not_by_the_missed_ones() {
        let (repeat, first) = RepeatRule {
            every_seconds: Some(10),
            ..RepeatRule::default()
        }
        .check(Tz::UTC, 1_000)
        .unwrap();
        assert_eq!(first, 1_000);
        // Due at 11 s, run at 55.5 s: the next is 61 s, on the grid.
        assert_eq!(repeat.next_run(55_500), Some(61_000));
        assert_eq!(repeat.next_run(11_000), Some(21_000));
        let ending = Repeat {
            ends_at_ms: Some(20_000),
            ..repeat
        };
        assert_eq!(ending.next_run(11_000), None);
    }
}
