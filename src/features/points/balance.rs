//! Points as currency: each user's balance (earned, spent, revoked), spending against it and
//! revoking an award.
//!
//! The balance lives in Redis, in the hash of the balances of the user's points bucket
//! (`{points:B}:balances`, fields `<user>:earned`, `<user>:spent`, `<user>:revoked`), so
//! that an award (which earns), a spend and a revoke each change it in the one script that
//! decides them: a spend checks the balance and takes from it atomically
//! (`lua/points_spend.lua`), and no two spends can both take the last points. One hash per
//! bucket rather than per user, so that a rebuild swaps a bucket's balances in at once.
//! SQL is its record: spends and revokes are `points_record` rows with negative points, and
//! `engage rebuild` writes every balance back from them (`recovery`).
//!
//! Spends and revokes are idempotent for ever, as awards are: the Redis marker answers a
//! repeat for a week, and `points_record`, unique on (user, key), after that.

use std::time::Duration;

use redis::FromRedisValue;
use sqlx::Row;

use super::{Points, PointsType, IDEMPOTENCY_TTL_SECONDS, MAX_KEY_CHARS};
use crate::infra::{
    clock::Month,
    error::{AppError, AppResult, ErrorCode},
    redis::{
        durability::DurableWrite,
        scripts::{PointsRevoke, PointsRevokeArgs, PointsSpend, PointsSpendArgs, Replies, Reply},
        status::Status,
        Keys,
    },
    streams,
};

/// The longest reason a spend or a revoke may give.
pub(crate) const MAX_REASON_CHARS: usize = 200;
/// How long a revoke waits for the archive to write an award it was just given.
const ARCHIVE_WAIT: Duration = Duration::from_secs(10);

impl Keys {
    /// The balances of the users of a user's bucket (`lua/include/points_balance.lua`).
    pub(crate) fn points_balances_of(&self, user_id: i64) -> String {
        self.of_points_user(user_id, "balances")
    }

    /// The balances of every bucket, in bucket order.
    pub(crate) fn points_balances(&self) -> Vec<String> {
        self.per_points_bucket("balances")
    }
}

/// The fields of a user's balance in their bucket's hash: earned, spent, revoked.
pub(crate) fn balance_fields(user_id: i64) -> [String; 3] {
    ["earned", "spent", "revoked"].map(|what| format!("{user_id}:{what}"))
}

/// What a user earned, spent and had revoked; the balance is what is left.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Balance {
    pub(crate) earned: i64,
    pub(crate) spent: i64,
    pub(crate) revoked: i64,
}

impl Balance {
    pub(crate) fn balance(&self) -> i64 {
        self.earned - self.spent - self.revoked
    }
}

/// What a spend answers: the balance after it, and whether its key had spent before (then
/// nothing changed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Spent {
    pub(crate) balance: Balance,
    pub(crate) duplicate: bool,
}

/// The idempotency key of a spend asked for through the API: in its own namespace, so that
/// it can meet no award's key nor a spend of another feature.
pub(crate) fn spend_key(key: &str) -> AppResult<String> {
    namespaced_key("spend", key)
}

/// A caller's idempotency key, checked, in a feature's own namespace (`freeze:<key>`): the
/// namespace is the record's source.
pub(crate) fn namespaced_key(namespace: &str, key: &str) -> AppResult<String> {
    Ok(format!("{namespace}:{}", checked_key(key)?))
}

/// A key as a caller gave it, trimmed: 1 to [`MAX_KEY_CHARS`] characters.
fn checked_key(key: &str) -> AppResult<&str> {
    let key = key.trim();
    if key.is_empty() || key.chars().count() > MAX_KEY_CHARS {
        return Err(AppError::bad_input(format!(
            "idempotencyKey must have 1 to {MAX_KEY_CHARS} characters"
        )));
    }
    Ok(key)
}

/// A reason, trimmed: 1 to [`MAX_REASON_CHARS`] characters.
fn checked_reason(reason: &str) -> AppResult<&str> {
    let reason = reason.trim();
    if reason.is_empty() || reason.chars().count() > MAX_REASON_CHARS {
        return Err(AppError::bad_input(format!(
            "reason must have 1 to {MAX_REASON_CHARS} characters"
        )));
    }
    Ok(reason)
}

/// The source of a record: its key's namespace, the text before the first `:`.
pub(crate) fn source_of(key: &str) -> Option<&str> {
    key.split_once(':')
        .map(|(namespace, _)| namespace)
        .filter(|namespace| !namespace.is_empty())
}

/// An award as SQL archived it: what a revoke takes back.
struct ArchivedAward {
    key: String,
    kind: PointsType,
    points: i64,
    season: Month,
}

impl Points {
    /// A user's balance.
    pub(crate) async fn balance(&self, user_id: i64) -> AppResult<Balance> {
        let mut conn = self.infra.redis.get().await?;
        let (earned, spent, revoked): (Option<i64>, Option<i64>, Option<i64>) = redis::cmd("HMGET")
            .arg(self.infra.keys.points_balances_of(user_id))
            .arg(&balance_fields(user_id))
            .query_async(&mut *conn)
            .await?;
        Ok(Balance {
            earned: earned.unwrap_or(0),
            spent: spent.unwrap_or(0),
            revoked: revoked.unwrap_or(0),
        })
    }

    /// Spends `amount` of a user's points once per `key`, atomically against the balance
    /// (`INSUFFICIENT_POINTS` when it is short, and nothing is spent). This is how any
    /// feature spends points: `key` is namespaced by the caller (`spend:<…>` for
    /// `spendPoints`, `<feature>:<…>` for another), its namespace the record's source, and
    /// never one of the awards' (`service`, `like`, `remark`, `signin`, `makeup`, `reward`,
    /// `revoke`). A repeat answers the balance as it is and spends nothing, for ever.
    pub(crate) async fn spend(
        &self,
        user_id: i64,
        amount: i64,
        reason: &str,
        key: &str,
    ) -> AppResult<Spent> {
        if amount <= 0 {
            return Err(AppError::bad_input("amount must be more than 0"));
        }
        let reason = checked_reason(reason)?;
        if source_of(key).is_none() || key.chars().count() > 2 * MAX_KEY_CHARS {
            return Err(AppError::internal(anyhow::anyhow!(
                "a spend's key must be namespaced: {key:?}"
            )));
        }
        // As for awards: while SQL cannot be read the Redis marker alone decides (it covers
        // a week), so that spending keeps working through an outage.
        match self.archived_once(user_id, key).await {
            Ok(true) => {
                return Ok(Spent {
                    balance: self.balance(user_id).await?,
                    duplicate: true,
                })
            }
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(%error, "archived spends not read; the Redis marker decides")
            }
        }
        let keys = &self.infra.keys;
        let reply = self
            .infra
            .durable_scripts(DurableWrite::Points)
            .run_while_held(|| {
                let (season, _) = self.season_now();
                (
                    PointsSpend {
                        balances: keys.points_balances_of(user_id),
                        marker: keys.points_award_marker(user_id, key),
                        events: keys.points_stream_of(user_id),
                        hold: keys.points_hold_of(user_id),
                    },
                    PointsSpendArgs {
                        user: user_id,
                        amount,
                        now_ms: self.infra.clock.now_ms(),
                        season: season.id(),
                        marker_ttl_seconds: IDEMPOTENCY_TTL_SECONDS,
                        idempotency: key,
                        reason,
                    },
                )
            })
            .await?;
        match reply.status {
            Status::Ok | Status::Already => Ok(Spent {
                balance: reply.balance,
                duplicate: reply.status == Status::Already,
            }),
            Status::OverLimit => Err(AppError::client(
                ErrorCode::InsufficientPoints,
                format!(
                    "the balance is {}, short of the {amount} points asked",
                    reply.balance.balance()
                ),
            )),
            other => Err(AppError::internal(anyhow::anyhow!(
                "points_spend answered {other:?}"
            ))),
        }
    }

    /// Revokes the award a user was given under `key` (as it was archived, or as a service
    /// gave it to `awardPoints`): what it paid comes off the balance, which may go below zero
    /// by that much, and off its season's board. Once: a repeat answers the balance as it is.
    /// `NOT_FOUND` when the user has no award under that key; `BAD_USER_INPUT` for the key of
    /// a spend or a revoke.
    pub(crate) async fn revoke(&self, user_id: i64, key: &str, reason: &str) -> AppResult<Balance> {
        let key = checked_key(key)?;
        let reason = checked_reason(reason)?;
        let award = self.archived_award(user_id, key).await?;
        let revoke_key = format!("revoke:{}", award.key);
        if self.archived_once(user_id, &revoke_key).await? {
            return self.balance(user_id).await;
        }
        let keys = &self.infra.keys;
        let reply = self
            .infra
            .durable_scripts(DurableWrite::Points)
            .run_while_held(|| {
                (
                    PointsRevoke {
                        balances: keys.points_balances_of(user_id),
                        marker: keys.points_award_marker(user_id, &revoke_key),
                        board: keys.season_board_of(award.season, user_id),
                        changes: keys.board_changes_of(award.season, user_id),
                        events: keys.points_stream_of(user_id),
                        hold: keys.points_hold_of(user_id),
                    },
                    PointsRevokeArgs {
                        user: user_id,
                        kind: award.kind.as_str(),
                        amount: award.points,
                        season: award.season.id(),
                        now_ms: self.infra.clock.now_ms(),
                        channel: keys.board_channel_of(award.season, user_id),
                        publish: keys.publish_command(),
                        marker_ttl_seconds: IDEMPOTENCY_TTL_SECONDS,
                        idempotency: revoke_key.as_str(),
                        reason,
                    },
                )
            })
            .await?;
        match reply.status {
            Status::Ok | Status::Already => Ok(reply.balance),
            other => Err(AppError::internal(anyhow::anyhow!(
                "points_revoke answered {other:?}"
            ))),
        }
    }

    /// Whether SQL archived a record of the user under `key`.
    pub(crate) async fn archived_once(&self, user_id: i64, key: &str) -> AppResult<bool> {
        Ok(sqlx::query(
            "SELECT 1 AS found FROM points_record WHERE user_id = $1 AND idempotency_key = $2",
        )
        .bind(user_id)
        .bind(key)
        .fetch_optional(&self.infra.db.pool)
        .await?
        .is_some())
    }

    /// The award a revoke names: under `key` as archived, else under the service key
    /// `awardPoints` made of it. An award given a moment ago may not be archived yet: while
    /// its Redis marker says it was given, this waits for the archive.
    async fn archived_award(&self, user_id: i64, key: &str) -> AppResult<ArchivedAward> {
        let candidates = [key.to_string(), format!("service:{key}")];
        let started = std::time::Instant::now();
        loop {
            for candidate in &candidates {
                if let Some(award) = self.find_award(user_id, candidate).await? {
                    return Ok(award);
                }
            }
            if !self.marked(user_id, &candidates).await? {
                return Err(AppError::not_found(format!(
                    "user {user_id} has no award under the key {key:?}"
                )));
            }
            if started.elapsed() > ARCHIVE_WAIT {
                return Err(AppError::Unavailable(
                    "the award is not archived yet: retry shortly".into(),
                ));
            }
            let position = streams::position_now(&self.infra).await?;
            let stream = self.infra.keys.points_stream_of(user_id);
            while !streams::handled_through(&self.infra, &stream, "archive", position).await? {
                if started.elapsed() > ARCHIVE_WAIT {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    /// Whether Redis remembers one of the keys as given to the user (in the last week).
    async fn marked(&self, user_id: i64, keys: &[String]) -> AppResult<bool> {
        let mut conn = self.infra.redis.get().await?;
        for key in keys {
            let marked: bool = redis::cmd("EXISTS")
                .arg(self.infra.keys.points_award_marker(user_id, key))
                .query_async(&mut *conn)
                .await?;
            if marked {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The archived award of the user under exactly `key`; `BAD_USER_INPUT` when the key is
    /// a spend's or a revoke's.
    async fn find_award(&self, user_id: i64, key: &str) -> AppResult<Option<ArchivedAward>> {
        let Some(row) = sqlx::query(
            "SELECT kind, points, season FROM points_record \
             WHERE user_id = $1 AND idempotency_key = $2",
        )
        .bind(user_id)
        .bind(key)
        .fetch_optional(&self.infra.db.pool)
        .await?
        else {
            return Ok(None);
        };
        let kind: String = row.try_get("kind")?;
        let points: i64 = row.try_get("points")?;
        let season: i64 = row.try_get("season")?;
        let kind = match PointsType::parse(&kind) {
            Some(kind) if points >= 0 => kind,
            _ => {
                return Err(AppError::bad_input(format!(
                    "the key {key:?} is not an award's: a spend or a revoke cannot be revoked"
                )))
            }
        };
        let season = Month::parse_id(&season.to_string()).ok_or_else(|| {
            AppError::internal(anyhow::anyhow!("points_record has the season {season}"))
        })?;
        Ok(Some(ArchivedAward {
            key: key.to_string(),
            kind,
            points,
            season,
        }))
    }
}

/// What a spend or a revoke answers: `{ status, earned, spent, revoked }`.
pub(crate) struct BalanceReply {
    status: Status,
    balance: Balance,
}

impl FromRedisValue for BalanceReply {
    fn from_redis_value(value: redis::Value) -> Result<Self, redis::ParsingError> {
        let mut values = Vec::<redis::Value>::from_redis_value(value)?.into_iter();
        let mut next = || values.next().unwrap_or(redis::Value::Nil);
        Ok(Self {
            status: Status::from_redis_value(next())?,
            balance: Balance {
                earned: i64::from_redis_value(next())?,
                spent: i64::from_redis_value(next())?,
                revoked: i64::from_redis_value(next())?,
            },
        })
    }
}

impl Reply for BalanceReply {
    fn status(&self) -> Status {
        self.status
    }

    /// Only OK wrote (a spend or a revoke and its event).
    fn wrote(&self) -> bool {
        self.status == Status::Ok
    }
}

impl Replies for PointsSpend {
    type Reply = BalanceReply;
}

impl Replies for PointsRevoke {
    type Reply = BalanceReply;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_the_namespace_of_a_key() {
        assert_eq!(source_of("reward:season:202611:1"), Some("reward"));
        assert_eq!(source_of("spend:a:b"), Some("spend"));
        assert_eq!(source_of("plain"), None);
        assert_eq!(source_of(":x"), None);
    }

    #[test]
    fn keys_and_reasons_are_checked() {
        assert_eq!(spend_key(" hat ").unwrap(), "spend:hat");
        assert!(spend_key("  ").is_err());
        assert!(spend_key(&"k".repeat(MAX_KEY_CHARS + 1)).is_err());
        assert!(checked_reason("").is_err());
        assert!(checked_reason(&"r".repeat(MAX_REASON_CHARS + 1)).is_err());
    }
}
