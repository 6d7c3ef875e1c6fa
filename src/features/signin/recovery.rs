//! Sign-in calendars, from `sign_ins`: each user's monthly bitmaps (as long as Redis keeps
//! them) and the streak that ended with the previous month, which the scripts read instead
//! of older bitmaps. Make-up counters are restored with the points (they change with an
//! award, so they are written while awards are held back).
//!
//! Setting a bit is idempotent and a sign-in only ever sets bits, so nothing is held back:
//! a sign-in racing with the rebuild of its own user may see a shorter streak for that
//! moment, and the rebuild's streak, written last, is the one that stays.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{Datelike, Duration, NaiveDate};
use sqlx::Row;

use super::BITMAP_TTL_SECONDS;
use crate::{
    features::signin::SignIn,
    infra::{
        clock::{date_of_day_number, Month},
        error::AppResult,
        recovery::{next_ids, within, Rebuild, Report},
    },
};

/// Users read and written per round trip.
const CHUNK: usize = 500;

/// A month's bitmap as `BITFIELD GET u31 0` reads it: day 1 is the most significant bit.
fn month_bits(days: &BTreeSet<NaiveDate>, month: Month) -> u64 {
    days.iter()
        .filter(|day| Month::of(**day) == month)
        .fold(0, |bits, day| bits | 1 << (31 - day.day()))
}

/// The streak that ended on the last day of the month before `month`.
fn streak_before(days: &BTreeSet<NaiveDate>, month: Month) -> i64 {
    let mut day = month.first_day() - Duration::days(1);
    let mut run = 0;
    while days.contains(&day) {
        run += 1;
        day -= Duration::days(1);
    }
    run
}

impl SignIn {
    /// Months whose bitmaps Redis keeps: the bitmap TTL, in whole months, back from this one.
    fn kept_months(&self) -> Vec<Month> {
        let mut month = self.infra.clock.current_month();
        let mut months = vec![month];
        for _ in 0..(BITMAP_TTL_SECONDS / (31 * 24 * 3600)) {
            month = month.previous();
            months.push(month);
        }
        months
    }

    /// Every day each of `users` signed (or made up).
    async fn days_of(&self, users: &[i64]) -> AppResult<BTreeMap<i64, BTreeSet<NaiveDate>>> {
        let rows = sqlx::query(&format!(
            "SELECT user_id, day FROM sign_ins WHERE {}",
            within("user_id", users)
        ))
        .fetch_all(&self.infra.db.pool)
        .await?;
        let mut days: BTreeMap<i64, BTreeSet<NaiveDate>> = BTreeMap::new();
        for row in &rows {
            if let Some(day) = date_of_day_number(row.try_get("day")?) {
                days.entry(row.try_get("user_id")?).or_default().insert(day);
            }
        }
        Ok(days)
    }

    /// Each kept month's bitmap of each user holds exactly the days SQL has.
    pub(crate) async fn verify(&self) -> AppResult<Report> {
        let mut report = Report::new("sign-in calendars");
        let months = self.kept_months();
        let mut after = 0;
        loop {
            let users = next_ids(&self.infra, "sign_ins", "user_id", "TRUE", after, CHUNK).await?;
            let Some(&last) = users.last() else {
                return Ok(report);
            };
            let days = self.days_of(&users).await?;
            let mut pipe = redis::pipe();
            for &user in &users {
                for &month in &months {
                    pipe.cmd("BITFIELD")
                        .arg(self.infra.keys.sign_bitmap(user, month))
                        .arg("GET")
                        .arg("u31")
                        .arg(0);
                }
            }
            let mut conn = self.infra.redis.get().await?;
            let bitmaps: Vec<Vec<u64>> = pipe.query_async(&mut *conn).await?;
            drop(conn);
            let mut bitmaps = bitmaps.into_iter();
            for user in &users {
                let signed = days.get(user).cloned().unwrap_or_default();
                for &month in &months {
                    let redis = bitmaps.next().and_then(|b| b.first().copied()).unwrap_or(0);
                    let sql = month_bits(&signed, month);
                    report.check(redis == sql, || {
                        format!(
                            "user {user}, {}: SQL days {sql:031b}, Redis {redis:031b}",
                            month.id()
                        )
                    });
                }
            }
            after = last;
        }
    }

    /// Sets each user's bits of the kept months and records the streak through the previous
    /// month.
    pub(crate) async fn rebuild(&self, run: &Rebuild<'_>) -> AppResult<()> {
        run.expect_count("SELECT COUNT(DISTINCT user_id) AS n FROM sign_ins")
            .await?;
        let months = self.kept_months();
        let current = self.infra.clock.current_month();
        let mut after = run.resume_from().await?;
        loop {
            let users = next_ids(&self.infra, "sign_ins", "user_id", "TRUE", after, CHUNK).await?;
            let Some(&last) = users.last() else {
                return Ok(());
            };
            let days = self.days_of(&users).await?;
            let mut pipe = redis::pipe();
            for (user, signed) in &days {
                for &month in &months {
                    let in_month: Vec<&NaiveDate> =
                        signed.iter().filter(|d| Month::of(**d) == month).collect();
                    if in_month.is_empty() {
                        continue;
                    }
                    let key = self.infra.keys.sign_bitmap(*user, month);
                    let set = pipe.cmd("BITFIELD").arg(&key);
                    for day in in_month {
                        set.arg("SET").arg("u1").arg(day.day() - 1).arg(1);
                    }
                    set.ignore();
                    pipe.cmd("EXPIRE")
                        .arg(&key)
                        .arg(BITMAP_TTL_SECONDS)
                        .ignore();
                }
                pipe.cmd("HSET")
                    .arg(self.infra.keys.sign_streak(*user))
                    .arg("through")
                    .arg(current.previous().id())
                    .arg("length")
                    .arg(streak_before(signed, current))
                    .ignore();
            }
            crate::infra::recovery::write(&self.infra, &pipe).await?;
            run.finished_through(last, users.len() as u64).await?;
            after = last;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::clock::day_number;

    fn day(text: &str) -> NaiveDate {
        NaiveDate::parse_from_str(text, "%Y-%m-%d").unwrap()
    }

    #[test]
    fn bits_put_day_one_first_and_streaks_run_back_across_months() {
        let days: BTreeSet<NaiveDate> = ["2026-09-30", "2026-10-01", "2026-10-31", "2026-10-30"]
            .into_iter()
            .map(day)
            .collect();
        let october = Month::of(day("2026-10-01"));
        assert_eq!(month_bits(&days, october), 1 << 30 | 1 << 1 | 1);
        assert_eq!(streak_before(&days, october.next()), 2);
        assert_eq!(streak_before(&days, october), 1);
        assert_eq!(day_number(day("2026-10-31")), 20261031);
        assert_eq!(date_of_day_number(20261031), Some(day("2026-10-31")));
    }
}
