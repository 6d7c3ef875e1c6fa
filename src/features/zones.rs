//! Each user's time zone as recorded, and the user's day it gives at an instant: sign-in's
//! days (what a sign-in signs, the streak, the calendar) and the points' daily caps are
//! both counted in it, so that one rule decides "today" for both. How a change takes
//! effect, and why not at once, is `signin::zones`'s to explain and decide
//! ([`UserZone::changed_to`] applies it); this module reads and writes the record.
//!
//! SQL holds every change (`sign_in_zones`, the record); Redis holds the latest in a hash
//! next to the user's points keys (`lua/signin_set_zone.lua`), which the scripts' callers
//! read. A user with no record counts days in the zone the caller gives (sign-in: the
//! token's `zoneinfo` claim) or else in `ENGAGE_TIMEZONE`.
//!
//! A user Redis holds no zone for is looked up in SQL, in case Redis lost it. Most such users
//! have no record at all (a first sign-in, the author of a liked remark who never signed in),
//! so these lookups are gathered across requests into one query ([`RecordedZones`]).

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::Duration,
};

use async_graphql::dataloader::{DataLoader, Loader};
use chrono::{DateTime, Days, NaiveDate, Utc};
use chrono_tz::Tz;
use sqlx::Row;

use crate::infra::{
    clock::{date_in, date_of_day_number, day_number, start_of_in},
    db,
    error::{AppError, AppResult},
    redis::{
        scripts::{Replies, SigninSetZone, SigninSetZoneArgs},
        Keys,
    },
    Infra,
};

impl Keys {
    /// A user's time zone: `{ zone, previous, from, changed_ms }`.
    pub fn sign_zone(&self, user_id: i64) -> String {
        self.of_points_user(user_id, ("zone:", user_id))
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
    pub(crate) fn default_of(zone: Tz) -> Self {
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

/// How long a lookup of a zone Redis lacks waits for others to share its query. Under a
/// load of first sign-ins a query of its own cost each sign-in 40–70 µs of server CPU, most
/// of it waking SQLite's worker thread; the wait (one tick of tokio's timer, 1–2 ms) is paid
/// once by a user, at the first sign-in.
const LOOKUP_GATHERING: Duration = Duration::from_millis(1);

/// Reads and writes the users' zone records.
#[derive(Clone)]
pub(crate) struct Zones {
    infra: Infra,
    recorded: Arc<DataLoader<RecordedZones>>,
}

/// SQL's latest record of each user asked for, one query for all the lookups gathered.
pub(crate) struct RecordedZones(Infra);

impl Loader<i64> for RecordedZones {
    type Value = UserZone;
    type Error = Arc<AppError>;

    async fn load(&self, users: &[i64]) -> Result<HashMap<i64, UserZone>, Self::Error> {
        let mut zones = HashMap::with_capacity(users.len());
        for list in db::in_lists(users) {
            let condition = format!(
                "user_id IN ({})",
                db::params(self.0.db.backend, 1, list.len())
            );
            let ids: Vec<i64> = list.into_iter().copied().collect();
            zones.extend(
                recorded_zones(&self.0, &condition, &ids)
                    .await
                    .map_err(Arc::new)?,
            );
        }
        Ok(zones)
    }
}

impl Zones {
    pub(crate) fn new(infra: Infra) -> Self {
        let recorded =
            DataLoader::new(RecordedZones(infra.clone()), tokio::spawn).delay(LOOKUP_GATHERING);
        Self {
            infra,
            recorded: Arc::new(recorded),
        }
    }

    /// A user's zone: Redis's record, else SQL's (after a loss of Redis, before the
    /// rebuild), else the default (`claim`, then `ENGAGE_TIMEZONE`).
    pub(crate) async fn zone_of(&self, user_id: i64, claim: Option<Tz>) -> AppResult<UserZone> {
        Ok(self
            .zones_of(&[user_id], claim)
            .await?
            .remove(&user_id)
            .unwrap_or_else(|| UserZone::default_of(claim.unwrap_or(self.infra.clock.zone()))))
    }

    /// The zones of several users (one Redis round trip; one SQL query for those Redis lacks,
    /// shared with other requests'), each as [`Zones::zone_of`] reads it.
    pub(crate) async fn zones_of(
        &self,
        users: &[i64],
        claim: Option<Tz>,
    ) -> AppResult<HashMap<i64, UserZone>> {
        let mut pipe = redis::pipe();
        for &user_id in users {
            pipe.cmd("HMGET")
                .arg(self.infra.keys.sign_zone(user_id))
                .arg(&["zone", "previous", "from", "changed_ms"]);
        }
        let mut conn = self.infra.redis.get().await?;
        let held: Vec<Vec<Option<String>>> = pipe.query_async(&mut *conn).await?;
        drop(conn);
        let mut zones = HashMap::new();
        let mut lacking = Vec::new();
        for (&user_id, fields) in users.iter().zip(held) {
            let text = |i: usize| fields.get(i).cloned().flatten().unwrap_or_default();
            match text(0).parse::<Tz>() {
                Ok(zone) => {
                    let zone = UserZone {
                        zone,
                        previous: text(1).parse::<Tz>().ok(),
                        from_day: text(2).parse().ok().and_then(date_of_day_number),
                        changed_ms: text(3).parse().unwrap_or(0),
                        recorded: true,
                    };
                    zones.insert(user_id, zone);
                }
                Err(_) => lacking.push(user_id),
            }
        }
        if lacking.is_empty() {
            return Ok(zones);
        }
        let recorded = self
            .recorded
            .load_many(lacking.iter().copied())
            .await
            .map_err(|e| (*e).clone())?;
        for user_id in lacking {
            let zone = match recorded.get(&user_id) {
                Some(recorded) => {
                    // Redis lost it (before a rebuild): it is restored here.
                    self.deliver_zone(user_id, recorded).await?;
                    *recorded
                }
                None => UserZone::default_of(claim.unwrap_or_else(|| self.infra.clock.zone())),
            };
            zones.insert(user_id, zone);
        }
        Ok(zones)
    }

    /// The latest change SQL records, read now (not gathered with other lookups).
    pub(crate) async fn recorded_zone(&self, user_id: i64) -> AppResult<Option<UserZone>> {
        let condition = format!("user_id = {}", self.infra.db.backend.param(1));
        let mut recorded = recorded_zones(&self.infra, &condition, &[user_id]).await?;
        Ok(recorded.remove(&user_id))
    }

    /// The latest change SQL records of each user of a range (`range`: a condition on
    /// `user_id`).
    pub(crate) async fn recorded_zones(&self, range: &str) -> AppResult<BTreeMap<i64, UserZone>> {
        recorded_zones(&self.infra, range, &[]).await
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

/// The latest change SQL records of each user `range` takes, its parameters bound from `ids`.
async fn recorded_zones(
    infra: &Infra,
    range: &str,
    ids: &[i64],
) -> AppResult<BTreeMap<i64, UserZone>> {
    let sql = format!(
        "SELECT user_id, zone, previous_zone, from_day, changed_at_ms FROM sign_in_zones \
         WHERE {range} ORDER BY changed_at_ms"
    );
    let mut query = sqlx::query(&sql);
    for id in ids {
        query = query.bind(*id);
    }
    let rows = query.fetch_all(&infra.db.pool).await?;
    let mut zones = BTreeMap::new();
    for row in &rows {
        zones.insert(row.try_get("user_id")?, zone_of_row(infra, row)?);
    }
    Ok(zones)
}

fn zone_of_row(infra: &Infra, row: &sqlx::any::AnyRow) -> AppResult<UserZone> {
    let zone: String = row.try_get("zone")?;
    let previous: Option<String> = row.try_get("previous_zone")?;
    let from: Option<i64> = row.try_get("from_day")?;
    Ok(UserZone {
        zone: zone.parse().unwrap_or(infra.clock.zone()),
        previous: previous.and_then(|p| p.parse().ok()),
        from_day: from.and_then(date_of_day_number),
        changed_ms: row.try_get("changed_at_ms")?,
        recorded: true,
    })
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
