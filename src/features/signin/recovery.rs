//! Sign-in calendars and streaks, from `sign_ins`, `streak_freezes` and `sign_in_zones`:
//! each user's monthly bitmaps (days counted, repaired, frozen) as long as Redis keeps
//! them, the runs through the months that no longer change, the longest streak, the
//! freezes held, the first day, the milestones paid for the latest streak, and the time
//! zone. Make-up counters are restored with the points (they change with an award, so they
//! are written while awards are held back).
//!
//! Setting a bit is idempotent and a sign-in only ever sets bits, so nothing is held back:
//! a sign-in racing with the rebuild of its own user may see a shorter streak for that
//! moment, and the rebuild's streak fields, written last, are the ones that stay.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{Datelike, Duration, NaiveDate};
use sqlx::Row;

use super::{epoch_day, BITMAP_TTL_SECONDS, KEPT_MONTHS};
use crate::{
    features::signin::SignIn,
    infra::{
        clock::{date_of_day_number, day_number, Month},
        error::AppResult,
        recovery::{next_ids, within, Rebuild, Report},
    },
};

/// Users read and written per round trip.
const CHUNK: usize = 500;

/// A user's days as SQL records them.
#[derive(Default)]
struct Days {
    counted: BTreeSet<NaiveDate>,
    made_up: BTreeSet<NaiveDate>,
    frozen: BTreeSet<NaiveDate>,
    freezes: i64,
}

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

/// The longest run of counted days, and the runs that ended within a month of the latest
/// one's end (a repair may still join them), each as its first day and length.
fn runs(days: &BTreeSet<NaiveDate>) -> (i64, Vec<(NaiveDate, i64)>) {
    let mut all: Vec<(NaiveDate, i64)> = Vec::new();
    for &day in days {
        match all.last_mut() {
            Some((start, length)) if *start + Duration::days(*length) == day => *length += 1,
            _ => all.push((day, 1)),
        }
    }
    let longest = all.iter().map(|(_, length)| *length).max().unwrap_or(0);
    let last_day = days.last().copied().unwrap_or_default();
    let recent = all
        .into_iter()
        .filter(|(start, length)| *start + Duration::days(*length + 31) > last_day)
        .collect();
    (longest, recent)
}

impl SignIn {
    /// Months whose bitmaps Redis keeps: the bitmap TTL, in whole months, back from this one
    /// (and the next, where a user's zone is ahead of the server's).
    fn kept_months(&self) -> Vec<Month> {
        let mut month = self.infra.clock.current_month().next();
        let mut months = vec![month];
        for _ in 0..=KEPT_MONTHS {
            month = month.previous();
            months.push(month);
        }
        months
    }

    /// The next users after `after` with a streak to check or rebuild: those who signed in,
    /// and those who only bought freezes so far.
    async fn streak_users(&self, after: i64) -> AppResult<Vec<i64>> {
        let mut users = next_ids(&self.infra, "sign_ins", "user_id", "TRUE", after, CHUNK).await?;
        users.extend(
            next_ids(
                &self.infra,
                "streak_freezes",
                "user_id",
                "TRUE",
                after,
                CHUNK,
            )
            .await?,
        );
        users.sort_unstable();
        users.dedup();
        users.truncate(CHUNK);
        Ok(users)
    }

    /// Every day each of `users` counted (signed, made up, frozen), with the freezes held.
    async fn days_of(&self, users: &[i64]) -> AppResult<BTreeMap<i64, Days>> {
        let rows = sqlx::query(&format!(
            "SELECT user_id, day, made_up, frozen FROM sign_ins WHERE {}",
            within("user_id", users)
        ))
        .fetch_all(&self.infra.db.pool)
        .await?;
        let mut days: BTreeMap<i64, Days> = BTreeMap::new();
        for row in &rows {
            if let Some(day) = date_of_day_number(row.try_get("day")?) {
                let user = days.entry(row.try_get("user_id")?).or_default();
                user.counted.insert(day);
                if row.try_get::<i64, _>("made_up")? == 1 {
                    user.made_up.insert(day);
                }
                if row.try_get::<i64, _>("frozen")? == 1 {
                    user.frozen.insert(day);
                }
            }
        }
        let rows = sqlx::query(&format!(
            "SELECT user_id, SUM(delta) AS held FROM streak_freezes WHERE {} GROUP BY user_id",
            within("user_id", users)
        ))
        .fetch_all(&self.infra.db.pool)
        .await?;
        for row in &rows {
            let held: Option<i64> = row.try_get("held")?;
            days.entry(row.try_get("user_id")?).or_default().freezes = held.unwrap_or(0);
        }
        Ok(days)
    }

    /// Each kept month's bitmaps of each user hold exactly the days SQL has; the longest
    /// streak and the freezes held agree.
    pub(crate) async fn verify(&self) -> AppResult<Report> {
        let mut report = Report::new("sign-in calendars");
        let months = self.kept_months();
        let mut after = 0;
        loop {
            let users = self.streak_users(after).await?;
            let Some(&last) = users.last() else {
                self.verify_zones(&mut report).await?;
                return Ok(report);
            };
            let days = self.days_of(&users).await?;
            let keys = &self.infra.keys;
            let mut pipe = redis::pipe();
            for &user in &users {
                for &month in &months {
                    for key in [
                        keys.sign_bitmap(user, month),
                        keys.sign_made_up(user, month),
                        keys.sign_frozen(user, month),
                    ] {
                        pipe.cmd("BITFIELD").arg(key).arg("GET").arg("u31").arg(0);
                    }
                }
            }
            let mut conn = self.infra.redis.get().await?;
            let bitmaps: Vec<Vec<u64>> = pipe.query_async(&mut *conn).await?;
            let mut streaks = redis::pipe();
            for &user in &users {
                streaks
                    .cmd("HMGET")
                    .arg(keys.sign_streak(user))
                    .arg("longest")
                    .arg("freezes");
            }
            let streaks: Vec<(Option<i64>, Option<i64>)> = streaks.query_async(&mut *conn).await?;
            drop(conn);
            let mut bitmaps = bitmaps.into_iter();
            let empty = Days::default();
            for (user, (longest, freezes)) in users.iter().zip(streaks) {
                let signed = days.get(user).unwrap_or(&empty);
                for &month in &months {
                    for (what, set) in [
                        ("days", &signed.counted),
                        ("repaired days", &signed.made_up),
                        ("frozen days", &signed.frozen),
                    ] {
                        let redis = bitmaps.next().and_then(|b| b.first().copied()).unwrap_or(0);
                        let sql = month_bits(set, month);
                        report.check(redis == sql, || {
                            format!(
                                "user {user}, {} {what}: SQL {sql:031b}, Redis {redis:031b}",
                                month.id()
                            )
                        });
                    }
                }
                let (sql_longest, _) = runs(&signed.counted);
                let redis_longest = longest.unwrap_or(0);
                report.check(redis_longest == sql_longest, || {
                    format!("user {user}: longest streak {sql_longest} in SQL, {redis_longest} in Redis")
                });
                let redis_freezes = freezes.unwrap_or(0);
                report.check(redis_freezes == signed.freezes, || {
                    format!(
                        "user {user}: {} freezes held in SQL, {redis_freezes} in Redis",
                        signed.freezes
                    )
                });
            }
            after = last;
        }
    }

    /// Each user's zone in Redis is the latest change SQL records.
    async fn verify_zones(&self, report: &mut Report) -> AppResult<()> {
        let mut after = 0;
        loop {
            let users = next_ids(
                &self.infra,
                "sign_in_zones",
                "user_id",
                "TRUE",
                after,
                CHUNK,
            )
            .await?;
            let Some(&last) = users.last() else {
                return Ok(());
            };
            let zones = self
                .points
                .zones
                .recorded_zones(&within("user_id", &users))
                .await?;
            let mut pipe = redis::pipe();
            for user in zones.keys() {
                pipe.cmd("HMGET")
                    .arg(self.infra.keys.sign_zone(*user))
                    .arg("zone")
                    .arg("changed_ms");
            }
            let mut conn = self.infra.redis.get().await?;
            let held: Vec<(Option<String>, Option<i64>)> = pipe.query_async(&mut *conn).await?;
            drop(conn);
            for ((user, zone), (name, changed)) in zones.iter().zip(held) {
                let same =
                    name.as_deref() == Some(zone.zone.name()) && changed == Some(zone.changed_ms);
                report.check(same, || {
                    format!(
                        "user {user}: time zone {} in SQL, {} in Redis",
                        zone.zone.name(),
                        name.as_deref().unwrap_or("none")
                    )
                });
            }
            after = last;
        }
    }

    /// Writes each user's latest zone change SQL records.
    async fn rebuild_zones(&self) -> AppResult<()> {
        let mut after = 0;
        loop {
            let users = next_ids(
                &self.infra,
                "sign_in_zones",
                "user_id",
                "TRUE",
                after,
                CHUNK,
            )
            .await?;
            let Some(&last) = users.last() else {
                return Ok(());
            };
            for (user, zone) in self
                .points
                .zones
                .recorded_zones(&within("user_id", &users))
                .await?
            {
                self.points.zones.deliver_zone(user, &zone).await?;
            }
            after = last;
        }
    }

    /// Sets each user's bits of the kept months and writes the streak hash anew: the runs
    /// through the months that no longer change, the longest streak, the freezes, the first
    /// day and the milestones paid for the latest streak; and the user's zone.
    pub(crate) async fn rebuild(&self, run: &Rebuild<'_>) -> AppResult<()> {
        run.expect_count("SELECT COUNT(DISTINCT user_id) AS n FROM sign_ins")
            .await?;
        let months = self.kept_months();
        // A repair or a freeze reaches into the previous month of the user's, which may be
        // one behind the server's: runs are remembered for the months before that.
        let settled = self
            .infra
            .clock
            .current_month()
            .previous()
            .previous()
            .previous();
        let mut after = run.resume_from().await?;
        loop {
            let users = self.streak_users(after).await?;
            let Some(&last) = users.last() else {
                return self.rebuild_zones().await;
            };
            let days = self.days_of(&users).await?;
            let keys = &self.infra.keys;
            let mut pipe = redis::pipe();
            for (user, signed) in &days {
                for &month in &months {
                    for (key, set) in [
                        (keys.sign_bitmap(*user, month), &signed.counted),
                        (keys.sign_made_up(*user, month), &signed.made_up),
                        (keys.sign_frozen(*user, month), &signed.frozen),
                    ] {
                        let in_month: Vec<&NaiveDate> =
                            set.iter().filter(|d| Month::of(**d) == month).collect();
                        if in_month.is_empty() {
                            continue;
                        }
                        let bits = pipe.cmd("BITFIELD").arg(&key);
                        for day in in_month {
                            bits.arg("SET").arg("u1").arg(day.day() - 1).arg(1);
                        }
                        bits.ignore();
                        pipe.cmd("EXPIRE")
                            .arg(&key)
                            .arg(BITMAP_TTL_SECONDS)
                            .ignore();
                    }
                }
                let streak = keys.sign_streak(*user);
                pipe.cmd("DEL").arg(&streak).ignore();
                let (longest, recent) = runs(&signed.counted);
                let fields = pipe.cmd("HSET").arg(&streak);
                fields
                    .arg("longest")
                    .arg(longest)
                    .arg("freezes")
                    .arg(signed.freezes);
                if let Some(first) = signed.counted.first() {
                    fields.arg("joined").arg(day_number(*first));
                }
                // Their milestones were paid and their freezes earned through their length.
                for (start, length) in recent {
                    fields.arg(format!("paid:{}", epoch_day(start))).arg(length);
                }
                for &month in months.iter().filter(|m| **m <= settled) {
                    fields
                        .arg(format!("run:{}", month.id()))
                        .arg(streak_before(&signed.counted, month.next()));
                }
                fields.ignore();
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
        assert_eq!(
            runs(&days),
            (2, vec![(day("2026-09-30"), 2), (day("2026-10-30"), 2)])
        );
    }
}
