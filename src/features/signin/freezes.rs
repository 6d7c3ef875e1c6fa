//! Buying a streak freeze with points. The purchase is a spend of the user's balance and a
//! freeze more in the streak hash, in one script (`lua/signin_buy_freeze.lua`): both share
//! the hash tag of the user's points bucket, so no purchase takes the points without giving
//! the freeze. Its record in SQL is the spend's `points_record` row (source `freeze`) and a
//! `streak_freezes` row per purchase, which `engage rebuild` counts with the freezes earned
//! and used.

use chrono_tz::Tz;
use redis::FromRedisValue;

use super::{SignIn, StreakStatus};
use crate::{
    features::points::{balance::namespaced_key, IDEMPOTENCY_TTL_SECONDS},
    infra::{
        clock::day_number,
        error::{AppError, AppResult, ErrorCode},
        redis::{
            durability::DurableWrite,
            scripts::{Replies, Reply, SigninBuyFreeze, SigninBuyFreezeArgs},
            status::Status,
        },
    },
};

/// What a purchase answers: `{ status, freezes held after the call }`.
pub(crate) struct BuyReply {
    status: Status,
    held: i64,
}

impl FromRedisValue for BuyReply {
    fn from_redis_value(value: redis::Value) -> Result<Self, redis::ParsingError> {
        let (status, held) = <(Status, i64)>::from_redis_value(value)?;
        Ok(Self { status, held })
    }
}

impl Reply for BuyReply {
    fn status(&self) -> Status {
        self.status
    }

    /// Only a purchase writes (the spend's event).
    fn wrote(&self) -> bool {
        self.status == Status::Ok
    }
}

impl Replies for SigninBuyFreeze {
    type Reply = BuyReply;
}

impl SignIn {
    /// Buys a streak freeze for `ENGAGE_FREEZE_COST` points, once per idempotency key:
    /// `INSUFFICIENT_POINTS` when the balance is short, `CONFLICT` when the user holds the
    /// most freezes already (nothing is spent).
    pub(crate) async fn buy_freeze(
        &self,
        user_id: i64,
        claim: Option<Tz>,
        key: &str,
    ) -> AppResult<StreakStatus> {
        let key = namespaced_key("freeze", key)?;
        // A key older than the Redis marker's week is answered by SQL, as for spends.
        if self
            .points
            .archived_once(user_id, &key)
            .await
            .unwrap_or(false)
        {
            return self.status(user_id, claim).await;
        }
        let zone = self.settled_zone(user_id, claim).await?;
        let cost = self.settings.freeze_cost;
        let keys = &self.infra.keys;
        let reply = self
            .infra
            .durable_scripts(DurableWrite::Points)
            .run_while_held(|| {
                let now = self.infra.clock.now();
                let (season, _) = self.points.season_now();
                (
                    SigninBuyFreeze {
                        balances: keys.points_balances_of(user_id),
                        marker: keys.points_award_marker(user_id, &key),
                        events: keys.points_stream_of(user_id),
                        hold: keys.points_hold_of(user_id),
                        streak: keys.sign_streak(user_id),
                    },
                    SigninBuyFreezeArgs {
                        user: user_id,
                        cost,
                        now_ms: now.timestamp_millis(),
                        season: season.id(),
                        marker_ttl_seconds: IDEMPOTENCY_TTL_SECONDS,
                        idempotency: key.as_str(),
                        reason: "streak freeze",
                        freezes_max: self.settings.freezes_max,
                        day_number: day_number(zone.today_at(now)),
                    },
                )
            })
            .await?;
        match reply.status {
            Status::Ok | Status::Already => self.status(user_id, claim).await,
            Status::OverLimit => Err(AppError::client(
                ErrorCode::InsufficientPoints,
                format!("a streak freeze costs {cost} points, more than the balance"),
            )),
            Status::Taken => Err(AppError::client(
                ErrorCode::Conflict,
                format!(
                    "{} freezes held already, the most a user may hold",
                    reply.held
                ),
            )),
            other => Err(AppError::internal(anyhow::anyhow!(
                "signin_buy_freeze answered {other:?}"
            ))),
        }
    }
}
