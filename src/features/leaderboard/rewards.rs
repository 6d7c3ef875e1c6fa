//! Rewards by rank for a finished board period, paid exactly once: the season board's
//! top three (`ENGAGE_SEASON_REWARDS`) at its rollover, and any board's rewards when its
//! period closes (`features::boards::close`).
//!
//! - **Recorded first**: the rewarded ranks go into `board_rewards` (one row per rank, in
//!   the transaction that verifies the archive), so what is owed is known before anything is
//!   paid, and survives a crash.
//! - **Paid through the award path**: each rank's points are an award with the idempotency
//!   key `reward:<board>:<period>:<rank>`; its Redis marker and `points_record`'s unique key
//!   answer a second award of the same key as a duplicate, whichever instance or restart
//!   makes it. A row is marked paid after its award; a crash between the two pays nothing
//!   twice, only marks it next time.
//! - **A voucher** is recorded in the row (`voucher_id`) as the user's grant: no order, no
//!   stock taken.

use serde::{Deserialize, Serialize};
use sqlx::Row;

use crate::{
    features::points::{Points, PointsType, MAX_AWARD},
    infra::error::{AppError, AppResult},
};

/// A reward for the ranks `from_rank..=to_rank`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Reward {
    pub(crate) from_rank: i64,
    pub(crate) to_rank: i64,
    pub(crate) points: i64,
    pub(crate) voucher_id: Option<i64>,
}

/// `1:100,2:50,3:20` or with ranges `1:100,2-3:50`: ranks and points.
pub(crate) fn parse(text: &str) -> anyhow::Result<Vec<Reward>> {
    let mut rewards = Vec::new();
    for item in text
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
    {
        let (ranks, points) = item.split_once(':').ok_or_else(|| {
            anyhow::anyhow!("{item}: a reward is <rank>:<points> or <from>-<to>:<points>")
        })?;
        let (from, to) = match ranks.split_once('-') {
            Some((from, to)) => (from.trim().parse::<i64>()?, to.trim().parse::<i64>()?),
            None => {
                let rank = ranks.trim().parse::<i64>()?;
                (rank, rank)
            }
        };
        let points: i64 = points.trim().parse()?;
        anyhow::ensure!(1 <= from && from <= to, "{item}: ranks from 1, in order");
        anyhow::ensure!(
            (1..=MAX_AWARD).contains(&points),
            "{item}: points from 1 to {MAX_AWARD}"
        );
        rewards.push(Reward {
            from_rank: from,
            to_rank: to,
            points,
            voucher_id: None,
        });
    }
    Ok(rewards)
}

/// The idempotency key of a rank's reward: `reward:<board>:<period>:<rank>`.
pub(crate) fn reward_key(board: &str, period: &str, rank: i64) -> String {
    format!("reward:{board}:{period}:{rank}")
}

/// The deepest rank any of `rewards` reaches (0: none).
pub(crate) fn deepest(rewards: &[Reward]) -> i64 {
    rewards
        .iter()
        .map(|reward| reward.to_rank)
        .max()
        .unwrap_or(0)
}

/// Records the rewarded ranks of a period, given its archive's top `(rank, user)` down to
/// [`deepest`].
pub(crate) async fn record(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    board: &str,
    period: &str,
    rewards: &[Reward],
    ranked: &[(i64, i64)],
) -> AppResult<()> {
    for reward in rewards {
        for &(rank, user) in ranked
            .iter()
            .filter(|(rank, _)| (reward.from_rank..=reward.to_rank).contains(rank))
        {
            sqlx::query(
                "INSERT INTO board_rewards (board_key, period, rank, user_id, points, voucher_id) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
            )
            .bind(board)
            .bind(period)
            .bind(rank)
            .bind(user)
            .bind(reward.points)
            .bind(reward.voucher_id)
            .execute(&mut **tx)
            .await?;
        }
    }
    Ok(())
}

/// Pays each recorded reward of a period not yet marked paid, in rank order; `false` when
/// stopped after `stop_after` payments (tests: a crash between an award and its mark).
pub(crate) async fn pay(
    points: &Points,
    board: &str,
    period: &str,
    stop_after: Option<usize>,
) -> AppResult<bool> {
    let pool = &points.infra.db.pool;
    let rows = sqlx::query(
        "SELECT rank, user_id, points FROM board_rewards WHERE board_key = $1 AND period = $2 \
         AND paid_at_ms IS NULL ORDER BY rank",
    )
    .bind(board)
    .bind(period)
    .fetch_all(pool)
    .await?;
    for (paid, row) in rows.iter().enumerate() {
        let rank: i64 = row.try_get("rank")?;
        let user: i64 = row.try_get("user_id")?;
        let amount: i64 = row.try_get("points")?;
        if amount > 0 {
            let outcome = points
                .award(
                    user,
                    PointsType::Reward,
                    amount,
                    &reward_key(board, period, rank),
                )
                .await?;
            if outcome.awarded == 0 && !outcome.duplicate {
                return Err(AppError::internal(anyhow::anyhow!(
                    "the reward of rank {rank} of {board} {period} paid nothing"
                )));
            }
        }
        if stop_after.is_some_and(|stop| paid + 1 >= stop) {
            return Ok(false);
        }
        sqlx::query(
            "UPDATE board_rewards SET paid_at_ms = $1 WHERE board_key = $2 AND period = $3 \
             AND rank = $4 AND paid_at_ms IS NULL",
        )
        .bind(points.infra.clock.now_ms())
        .bind(board)
        .bind(period)
        .bind(rank)
        .execute(pool)
        .await?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewards_read_as_ranks_and_points() {
        let rewards = parse("1:100, 2:50,3-5:20").unwrap();
        assert_eq!(rewards.len(), 3);
        assert_eq!(
            (rewards[2].from_rank, rewards[2].to_rank, rewards[2].points),
            (3, 5, 20)
        );
        assert!(parse("0:10").is_err());
        assert!(parse("1:0").is_err());
        assert!(parse("x").is_err());
        assert!(parse("").unwrap().is_empty());
    }
}
