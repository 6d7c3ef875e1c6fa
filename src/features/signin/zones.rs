//! Each user's time zone: the user's days (what a sign-in signs, the streak, "today", the
//! calendar) are the calendar days of that zone, while boards' seasons and the points'
//! daily totals stay in `ENGAGE_TIMEZONE`.
//!
//! A user starts in the zone of the token's `zoneinfo` claim, else in `ENGAGE_TIMEZONE`;
//! the first sign-in records it. `setTimeZone` changes it at most once a day.
//!
//! Why a change does not take effect at once: days are numbered by date, and at the
//! moment of a change the two zones may read different dates. Moving west (Shanghai to Los
//! Angeles at 02:00 on the 11th in Shanghai, 11:00 on the 10th in Los Angeles), switching
//! at once would make the 10th "today" again after the 11th: a second day signed within
//! the same hours, and a day that had ended opened again. Moving east (Los Angeles to
//! Shanghai at 10:00 on the 10th in Los Angeles), the 11th has already begun in Shanghai:
//! switching at once would end the 10th early and sign two days within minutes.
//!
//! So the day running in the old zone goes on, and the new zone counts from the first
//! day that has not begun in either zone: `from = max(old date, new date) + 1`, from the
//! moment that day begins in the new zone. Until then the user's day is the old zone's
//! date, held at `from - 1` once the old zone reaches it. The edge case is the day that
//! has begun in both zones at the change, `from - 1`: it is one day, signed at most once,
//! whose daily key is its date whichever zone it began in. Each date from before the
//! change to after it is "today" for exactly one stretch of time, in order, with none
//! left out: moving west lengthens the day running (up to the zones' difference), moving
//! east shortens the day that has begun in both (by the difference), and no day is
//! skipped or had twice. A change is refused while the previous one has not taken effect
//! (at most one a day), and between zones whose midnights are more than a day apart
//! (a few Pacific islands), where some date would have no time at all.
//!
//! SQL holds every change (`sign_in_zones`, the record); Redis holds the latest in a hash
//! next to the user's sign-in keys (`lua/signin_set_zone.lua`), which the sign-in reads.

use chrono::{DateTime, Days, NaiveDate, Utc};
use chrono_tz::Tz;
use sqlx::Row;

use super::SignIn;
use crate::infra::{
    clock::{date_in, date_of_day_number, day_number, start_of_in},
    error::{AppError, AppResult, ResultExt},
    redis::{
        scripts::{Replies, SigninSetZone, SigninSetZoneArgs},
        Keys,
    },
};

impl Keys {
    /// A user's time zone: `{ zone, previous, from, changed_ms }`.
    pub fn sign_zone(&self, user_id: i64) -> String {
        self.of_points_user(user_id, &format!("zone:{user_id}"))
    }
}

/// `{ status }`.
impl Replies for SigninSetZone {
    type Reply = Vec<i64>;
}

/// A user's time zone as recorded (or the default, before the first record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UserZone {
    pub(crate) zone: Tz,
    /// The zone before the latest change, while it may still count.
    pub(crate) previous: Option<Tz>,
    /// The first day counted in `zone` (with `previous`).
    pub(crate) from_day: Option<NaiveDate>,
    pub(crate) changed_ms: i64,
    /// Whether SQL records it (a default is not recorded until the first sign-in).
    pub(crate) recorded: bool,
}

impl UserZone {
    fn default_of(zone: Tz) -> Self {
        Self {
            zone,
            previous: None,
            from_day: None,
            changed_ms: 0,
            recorded: false,
        }
    }

    /// The user's day at an instant.
    pub(crate) fn today_at(&self, at: DateTime<Utc>) -> NaiveDate {
        match (self.previous, self.from_day) {
            (Some(previous), Some(from)) if at < start_of_in(self.zone, from) => {
                date_in(previous, at).min(from.pred_opt().unwrap_or(from))
            }
            _ => date_in(self.zone, at),
        }
    }

    /// Whether the latest change has taken effect (a new one may be made).
    pub(crate) fn settled_at(&self, at: DateTime<Utc>) -> bool {
        self.from_day
            .is_none_or(|from| at >= start_of_in(self.zone, from))
    }

    /// The zone after a change to `to` made at `at`; refused while the latest change has
    /// not taken effect, and between zones more than a day apart.
    pub(crate) fn changed_to(&self, to: Tz, at: DateTime<Utc>) -> AppResult<Self> {
        if !self.settled_at(at) {
            return Err(AppError::conflict(
                "the time zone was changed today already; it may change again tomorrow",
            ));
        }
        let from = date_in(self.zone, at).max(date_in(to, at)) + Days::new(1);
        let before = from.pred_opt().unwrap_or(from);
        if start_of_in(self.zone, before) > start_of_in(to, from) {
            return Err(AppError::bad_input(format!(
                "{} and {} are more than a day apart; change through a zone in between",
                self.zone.name(),
                to.name()
            )));
        }
        Ok(Self {
            zone: to,
            previous: Some(self.zone),
            from_day: Some(from),
            changed_ms: at.timestamp_millis(),
            recorded: true,
        })
    }
}

/// An IANA zone name; BAD_USER_INPUT otherwise.
pub(crate) fn parse_zone(name: &str) -> AppResult<Tz> {
    name.trim()
        .parse::<Tz>()
        .map_err(|_| AppError::bad_input(format!("{name:?} is not an IANA time zone")))
}

impl SignIn {
    /// A user's zone: Redis's record, else SQL's (after a loss of Redis, before the
    /// rebuild), else the default (`claim`, then `ENGAGE_TIMEZONE`).
    pub(crate) async fn zone_of(&self, user_id: i64, claim: Option<Tz>) -> AppResult<UserZone> {
        let mut conn = self.infra.redis.get().await?;
        let fields: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(self.infra.keys.sign_zone(user_id))
            .arg("zone")
            .arg("previous")
            .arg("from")
            .arg("changed_ms")
            .query_async(&mut *conn)
            .await?;
        drop(conn);
        if let Some(zone) = fields
            .first()
            .cloned()
            .flatten()
            .and_then(|z| z.parse::<Tz>().ok())
        {
            let text = |i: usize| fields.get(i).cloned().flatten().unwrap_or_default();
            return Ok(UserZone {
                zone,
                previous: text(1).parse::<Tz>().ok(),
                from_day: text(2).parse().ok().and_then(date_of_day_number),
                changed_ms: text(3).parse().unwrap_or(0),
                recorded: true,
            });
        }
        match self.recorded_zone(user_id).await? {
            Some(recorded) => {
                // Redis lost it (before a rebuild): it is restored here.
                self.deliver_zone(user_id, &recorded).await?;
                Ok(recorded)
            }
            None => Ok(UserZone::default_of(
                claim.unwrap_or_else(|| self.infra.clock.zone()),
            )),
        }
    }

    /// The latest change SQL records.
    pub(crate) async fn recorded_zone(&self, user_id: i64) -> AppResult<Option<UserZone>> {
        let row = sqlx::query(
            "SELECT user_id, zone, previous_zone, from_day, changed_at_ms FROM sign_in_zones \
             WHERE user_id = $1 ORDER BY changed_at_ms DESC LIMIT 1",
        )
        .bind(user_id)
        .fetch_optional(&self.infra.db.pool)
        .await?;
        row.map(|row| self.zone_of_row(&row)).transpose()
    }

    /// The latest change SQL records of each user of a range (`where`: a condition on
    /// `user_id`).
    pub(crate) async fn recorded_zones(
        &self,
        range: &str,
    ) -> AppResult<std::collections::BTreeMap<i64, UserZone>> {
        let rows = sqlx::query(&format!(
            "SELECT user_id, zone, previous_zone, from_day, changed_at_ms FROM sign_in_zones \
             WHERE {range} ORDER BY changed_at_ms"
        ))
        .fetch_all(&self.infra.db.pool)
        .await?;
        let mut zones = std::collections::BTreeMap::new();
        for row in &rows {
            zones.insert(row.try_get("user_id")?, self.zone_of_row(row)?);
        }
        Ok(zones)
    }

    fn zone_of_row(&self, row: &sqlx::any::AnyRow) -> AppResult<UserZone> {
        let zone: String = row.try_get("zone")?;
        let previous: Option<String> = row.try_get("previous_zone")?;
        let from: Option<i64> = row.try_get("from_day")?;
        Ok(UserZone {
            zone: zone.parse().unwrap_or(self.infra.clock.zone()),
            previous: previous.and_then(|p| p.parse().ok()),
            from_day: from.and_then(date_of_day_number),
            changed_ms: row.try_get("changed_at_ms")?,
            recorded: true,
        })
    }

    /// The user's zone, recorded if it was the default (the first sign-in does this), so
    /// that a later token's claim no longer moves the user's days.
    pub(crate) async fn settled_zone(
        &self,
        user_id: i64,
        claim: Option<Tz>,
    ) -> AppResult<UserZone> {
        let zone = self.zone_of(user_id, claim).await?;
        if zone.recorded {
            return Ok(zone);
        }
        let first = UserZone {
            changed_ms: self.infra.clock.now_ms(),
            recorded: true,
            ..zone
        };
        sqlx::query(
            "INSERT INTO sign_in_zones (user_id, zone, previous_zone, from_day, changed_on, \
             changed_at_ms) SELECT $1, $2, NULL, NULL, NULL, $3 \
             WHERE NOT EXISTS (SELECT 1 FROM sign_in_zones WHERE user_id = $4)",
        )
        .bind(user_id)
        .bind(first.zone.name())
        .bind(first.changed_ms)
        .bind(user_id)
        .execute(&self.infra.db.pool)
        .await?;
        let recorded = self.recorded_zone(user_id).await?.unwrap_or(first);
        self.deliver_zone(user_id, &recorded).await?;
        Ok(recorded)
    }

    /// Changes the user's zone (see the module doc); the same zone again changes nothing.
    pub(crate) async fn set_time_zone(
        &self,
        user_id: i64,
        claim: Option<Tz>,
        name: &str,
    ) -> AppResult<UserZone> {
        let to = parse_zone(name)?;
        let now = self.infra.clock.now();
        let current = self.zone_of(user_id, claim).await?;
        if current.zone == to {
            return Ok(current);
        }
        let changed = if current.recorded || self.has_signed(user_id).await? {
            current.changed_to(to, now)?
        } else {
            // No day counted yet: nothing to sign twice, the zone applies at once.
            UserZone {
                zone: to,
                previous: None,
                from_day: None,
                changed_ms: now.timestamp_millis(),
                recorded: true,
            }
        };
        sqlx::query(
            "INSERT INTO sign_in_zones (user_id, zone, previous_zone, from_day, changed_on, \
             changed_at_ms) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(user_id)
        .bind(changed.zone.name())
        .bind(changed.previous.map(|p| p.name()))
        .bind(changed.from_day.map(day_number))
        .bind(day_number(current.today_at(now)))
        .bind(changed.changed_ms)
        .execute(&self.infra.db.pool)
        .await
        .on_unique_violation(|| {
            AppError::conflict(
                "the time zone was changed today already; it may change again tomorrow",
            )
        })?;
        self.deliver_zone(user_id, &changed).await?;
        Ok(changed)
    }

    /// Whether SQL has a day of the user's (signed before zones were recorded).
    async fn has_signed(&self, user_id: i64) -> AppResult<bool> {
        Ok(
            sqlx::query("SELECT 1 AS one FROM sign_ins WHERE user_id = $1 LIMIT 1")
                .bind(user_id)
                .fetch_optional(&self.infra.db.pool)
                .await?
                .is_some(),
        )
    }

    /// Writes a recorded zone to Redis (a newer one held stays).
    pub(crate) async fn deliver_zone(&self, user_id: i64, zone: &UserZone) -> AppResult<()> {
        self.infra
            .scripts()
            .call(
                &SigninSetZone {
                    zone: self.infra.keys.sign_zone(user_id),
                },
                &SigninSetZoneArgs {
                    name: zone.zone.name(),
                    previous: zone.previous.map(|p| p.name()).unwrap_or(""),
                    from_day: zone.from_day.map(day_number).unwrap_or(0),
                    changed_ms: zone.changed_ms,
                },
            )
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use chrono::{Duration, TimeZone};
    use chrono_tz::{America::Los_Angeles, Asia::Shanghai, Pacific};

    use super::*;

    fn at(y: i32, m: u32, d: u32, h: u32, min: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, m, d, h, min, 0).unwrap()
    }

    fn day(m: u32, d: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(2026, m, d).unwrap()
    }

    /// Every date from `from` on is today for one stretch, in order, none left out.
    fn days_through(zone: &UserZone, from: DateTime<Utc>, hours: i64) -> Vec<NaiveDate> {
        let mut seen: Vec<NaiveDate> = Vec::new();
        for minute in (0..hours * 60).step_by(10) {
            let today = zone.today_at(from + Duration::minutes(minute));
            if seen.last() != Some(&today) {
                seen.push(today);
            }
        }
        seen
    }

    fn assert_consecutive(days: &[NaiveDate]) {
        for pair in days.windows(2) {
            assert_eq!(pair[1], pair[0].succ_opt().unwrap(), "{days:?}");
        }
    }

    #[test]
    fn moving_west_holds_the_day_running_until_the_new_zone_reaches_the_next() {
        let shanghai = UserZone::default_of(Shanghai);
        // 02:00 on 11 March in Shanghai, 11:00 on 10 March in Los Angeles.
        let change = at(2026, 3, 10, 18, 0);
        let moved = shanghai.changed_to(Los_Angeles, change).unwrap();
        assert_eq!(moved.from_day, Some(day(3, 12)));
        assert_eq!(moved.today_at(change), day(3, 11));
        // The 11th runs on to midnight in Los Angeles (07:00 UTC on the 12th).
        assert_eq!(moved.today_at(at(2026, 3, 12, 6, 59)), day(3, 11));
        assert_eq!(moved.today_at(at(2026, 3, 12, 7, 0)), day(3, 12));
        assert_consecutive(&days_through(&moved, change, 72));
        assert!(moved.changed_to(Shanghai, change).is_err(), "once a day");
        assert!(moved.changed_to(Shanghai, at(2026, 3, 12, 7, 0)).is_ok());
    }

    #[test]
    fn moving_east_shortens_the_day_begun_in_both_zones() {
        let la = UserZone::default_of(Los_Angeles);
        // 10:00 on 10 March in Los Angeles, 01:00 on 11 March in Shanghai.
        let change = at(2026, 3, 10, 17, 0);
        let moved = la.changed_to(Shanghai, change).unwrap();
        assert_eq!(moved.from_day, Some(day(3, 12)));
        assert_eq!(moved.today_at(change), day(3, 10));
        assert_eq!(moved.today_at(at(2026, 3, 11, 7, 0)), day(3, 11));
        // The 12th begins in Shanghai at 16:00 UTC on the 11th.
        assert_eq!(moved.today_at(at(2026, 3, 11, 15, 59)), day(3, 11));
        assert_eq!(moved.today_at(at(2026, 3, 11, 16, 0)), day(3, 12));
        assert_consecutive(&days_through(&moved, change, 72));
    }

    #[test]
    fn zones_more_than_a_day_apart_are_refused() {
        let kiritimati = UserZone::default_of(Pacific::Kiritimati);
        assert!(kiritimati
            .changed_to(Pacific::Pago_Pago, at(2026, 3, 10, 12, 0))
            .is_ok());
        let pago = UserZone::default_of(Pacific::Pago_Pago);
        assert!(pago
            .changed_to(Pacific::Kiritimati, at(2026, 3, 10, 12, 0))
            .is_err());
    }
}
