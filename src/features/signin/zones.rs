//! Each user's time zone: the user's days (what a sign-in signs, the streak, "today", the
//! calendar, the day whose points the daily caps count) are the calendar days of that zone,
//! while boards' seasons stay in `ENGAGE_TIMEZONE`. The record and its reads are
//! `features::zones`; this module decides how a change takes effect.
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
//! The points' daily caps count the same effective day: a cap's day is a date, and as each
//! date is "today" for one stretch of time only, a change never opens a day's cap twice.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::SignIn;
use crate::{
    features::zones::{parse_zone, UserZone},
    infra::{
        clock::day_number,
        error::{AppError, AppResult, ResultExt},
    },
};

impl SignIn {
    /// A user's zone (see [`Zones::zone_of`]).
    pub(crate) async fn zone_of(&self, user_id: i64, claim: Option<Tz>) -> AppResult<UserZone> {
        self.points.zones.zone_of(user_id, claim).await
    }

    /// The user's zone, recorded if it was the default, so that a later token's claim no
    /// longer moves the user's days: what a repair, a make-up or a freeze does first when
    /// it is the user's first act (a sign-in records it in its own script, see
    /// [`SignIn::sign_in`]). Concurrent first records of one user (at the same instant,
    /// PostgreSQL's NOT EXISTS sees neither) keep one.
    pub(crate) async fn settled_zone(
        &self,
        user_id: i64,
        claim: Option<Tz>,
    ) -> AppResult<UserZone> {
        let zone = self.zone_of(user_id, claim).await?;
        if zone.recorded {
            return Ok(zone);
        }
        let first = self
            .first_record(user_id, zone.zone, self.infra.clock.now())
            .await?;
        sqlx::query(
            "INSERT INTO sign_in_zones (user_id, zone, previous_zone, from_day, changed_on, \
             changed_at_ms) SELECT $1, $2, $3, $4, NULL, $5 \
             WHERE NOT EXISTS (SELECT 1 FROM sign_in_zones WHERE user_id = $6) \
             ON CONFLICT DO NOTHING",
        )
        .bind(user_id)
        .bind(first.zone.name())
        .bind(first.previous.map(|p| p.name()))
        .bind(first.from_day.map(day_number))
        .bind(first.changed_ms)
        .bind(user_id)
        .execute(&self.infra.db.pool)
        .await?;
        let recorded = self
            .points
            .zones
            .recorded_zone(user_id)
            .await?
            .unwrap_or(first);
        self.points.zones.deliver_zone(user_id, &recorded).await?;
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
            // No day signed yet: the zone applies at once, unless points today hold a cap.
            self.first_record(user_id, to, now).await?
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
        self.points.zones.deliver_zone(user_id, &changed).await?;
        Ok(changed)
    }

    /// The first zone recorded for a user: at once (nothing was counted in another zone's
    /// days), unless the user has points today by `ENGAGE_TIMEZONE`'s day, which the daily
    /// caps counted before any record: then as a change from that zone, so that no day's
    /// cap opens twice within hours. (Between zones more than a day apart, where no change
    /// can be made, at once.)
    pub(super) async fn first_record(
        &self,
        user_id: i64,
        to: Tz,
        now: DateTime<Utc>,
    ) -> AppResult<UserZone> {
        let server = UserZone::default_of(self.infra.clock.zone());
        let at_once = UserZone {
            zone: to,
            previous: None,
            from_day: None,
            changed_ms: now.timestamp_millis(),
            recorded: true,
        };
        if to == server.zone {
            return Ok(at_once);
        }
        let mut conn = self.infra.redis.get().await?;
        let capped_today: bool = redis::cmd("EXISTS")
            .arg(self.infra.keys.points_today(user_id, server.today_at(now)))
            .query_async(&mut *conn)
            .await?;
        if !capped_today {
            return Ok(at_once);
        }
        Ok(server.changed_to(to, now).unwrap_or(at_once))
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
}
