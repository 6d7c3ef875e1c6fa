//! Users removed from a season's board (cheaters'). From an archived season the rank is
//! deleted and those below move up (`Leaderboards::remove_archived`). From a live season the
//! user leaves the board for the rest of it: SQL records the removal (`season_removals`)
//! first, then `lua/leaderboard_remove.lua` takes the user off their part and adds them to
//! the part's removed users, which every award reads, so that the user's later awards
//! count toward their balance and caps but never the board. `engage rebuild` leaves removed
//! users out of the boards it writes and writes the removed sets back (`points::recovery`),
//! and the rollover takes them off the board before its snapshot (`rollover`): every path
//! that builds or adds to the board honours the record. (Rejected: revoking the user's
//! points, which would take their balance too.)

use redis::FromRedisValue;
use sqlx::Row;

use super::Leaderboards;
use crate::infra::{
    clock::Month,
    error::{AppError, AppResult},
    redis::{
        durability::DurableWrite,
        scripts::{LeaderboardRemove, LeaderboardRemoveArgs, Replies, Reply},
        status::Status,
    },
};

/// A condition on `points_record` rows (and their `season` and `user_id`) that leaves out
/// the users removed from the season's board.
pub(crate) const NOT_REMOVED: &str = "NOT EXISTS (SELECT 1 FROM season_removals r \
     WHERE r.season = points_record.season AND r.user_id = points_record.user_id)";

/// What `lua/leaderboard_remove.lua` answers: OK, NOT_FOUND or HELD.
pub(crate) struct RemoveReply(Status);

impl FromRedisValue for RemoveReply {
    fn from_redis_value(value: redis::Value) -> Result<Self, redis::ParsingError> {
        Status::from_redis_value(value).map(Self)
    }
}

impl Reply for RemoveReply {
    fn status(&self) -> Status {
        self.0
    }

    fn wrote(&self) -> bool {
        self.0 != Status::Held
    }
}

impl Replies for LeaderboardRemove {
    type Reply = RemoveReply;
}

impl Leaderboards {
    /// Removes a user from a season's board, archived or live (see the module's doc); whether
    /// the user was ranked (a repeat answers `false` and changes nothing).
    pub(crate) async fn remove(&self, season: Month, user_id: i64) -> AppResult<bool> {
        if self.archived(season).await? {
            return self.remove_archived(season, user_id).await;
        }
        if season > self.infra.clock.current_month() {
            return Err(AppError::bad_input(format!(
                "season {} has not begun",
                season.dashed()
            )));
        }
        sqlx::query(
            "INSERT INTO season_removals (season, user_id, removed_at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT DO NOTHING",
        )
        .bind(i64::from(season.id()))
        .bind(user_id)
        .bind(self.infra.clock.now_ms())
        .execute(&self.infra.db.pool)
        .await?;
        let keys = &self.infra.keys;
        let reply = self
            .infra
            .durable_scripts(DurableWrite::Points)
            .run_while_held(|| {
                (
                    LeaderboardRemove {
                        board: keys.season_board_of(season, user_id),
                        removed: keys.season_removed_of(season, user_id),
                        changes: keys.board_changes_of(season, user_id),
                        hold: keys.points_hold_of(user_id),
                    },
                    LeaderboardRemoveArgs {
                        user: user_id,
                        channel: keys.board_channel_of(season, user_id),
                        publish: keys.publish_command(),
                    },
                )
            })
            .await?;
        Ok(reply.0 == Status::Ok)
    }
}

/// The users removed from a season's board, in SQL (the record), in user order.
pub(crate) async fn removed_users(
    infra: &crate::infra::Infra,
    season: Month,
) -> AppResult<Vec<i64>> {
    let rows =
        sqlx::query("SELECT user_id FROM season_removals WHERE season = $1 ORDER BY user_id")
            .bind(i64::from(season.id()))
            .fetch_all(&infra.db.pool)
            .await?;
    rows.iter()
        .map(|row| row.try_get("user_id").map_err(Into::into))
        .collect()
}
