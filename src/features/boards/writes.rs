//! The writes of a board: a submitted score (`lua/boards_submit.lua`), a join within the
//! cap (`lua/boards_join.lua`), a record removed (`lua/boards_remove.lua`).
//!
//! - **A submission is once per key, for ever**: SQL is asked first (`board_submissions`
//!   remembers every key), then the script, whose marker answers a replay racing the first
//!   call for a week; the record and the key are then written to SQL in one transaction,
//!   ordered by the record's version so a late write never undoes a newer one.
//! - **Who may submit**: a service or an admin for anyone on any board; a user only for
//!   themself, on a board that is not authoritative.
//! - **A tournament's window and entries**: outside `startsAt..endsAt` a submission is
//!   refused (`NOT_STARTED`, `ENDED`); on a board with `joinRequired` so is one of a user who
//!   did not join (`NOT_JOINED`). A join never leaves a board: a check of it before the
//!   submission's script cannot be overtaken.

use redis::FromRedisValue;

use super::{BoardDef, BoardRecord, Boards, MAX_IDEMPOTENCY_CHARS, MAX_METADATA_BYTES, SEASON_KEY};
use crate::infra::{
    error::{AppError, AppResult, ErrorCode},
    redis::{
        scripts::{
            BoardsJoin, BoardsJoinArgs, BoardsRemove, BoardsRemoveArgs, BoardsSubmit,
            BoardsSubmitArgs, Replies, Reply,
        },
        status::Status,
    },
};

/// Redis remembers a submission's key for a week; SQL for ever.
const MARKER_TTL_SECONDS: u64 = 7 * 24 * 3600;

/// Who asks for a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Caller {
    /// A service or an admin: any user, any board.
    Privileged,
    /// A signed-in user.
    User(i64),
}

/// A submitted score.
#[derive(Debug, Clone)]
pub(crate) struct Submission {
    pub(crate) user_id: i64,
    pub(crate) score: i64,
    pub(crate) subscore: i64,
    /// JSON text.
    pub(crate) metadata: Option<String>,
    pub(crate) idempotency_key: String,
}

/// What `lua/boards_submit.lua` answers: the record after the call.
pub(crate) struct SubmitReply {
    status: Status,
    score: i64,
    subscore: i64,
    reached_at_ms: i64,
    updated_at_ms: i64,
    metadata: String,
    version: i64,
}

impl FromRedisValue for SubmitReply {
    fn from_redis_value(value: redis::Value) -> Result<Self, redis::ParsingError> {
        let values = Vec::<redis::Value>::from_redis_value(value)?;
        if values.len() != 7 {
            return Err("boards_submit answers seven values".into());
        }
        let mut values = values.into_iter();
        let mut next = || values.next().unwrap_or(redis::Value::Nil);
        let status = Status::from_redis_value(next())?;
        let number = |value: redis::Value| -> Result<i64, redis::ParsingError> {
            let text = String::from_redis_value(value)?;
            text.parse::<i64>()
                .map_err(|_| redis::ParsingError::from(format!("{text} is no number")))
        };
        Ok(Self {
            status,
            score: number(next())?,
            subscore: number(next())?,
            reached_at_ms: number(next())?,
            updated_at_ms: number(next())?,
            metadata: String::from_redis_value(next())?,
            version: number(next())?,
        })
    }
}

impl Reply for SubmitReply {
    fn status(&self) -> Status {
        self.status
    }
}

impl Replies for BoardsSubmit {
    type Reply = SubmitReply;
}

/// `{ status, users joined }`.
impl Replies for BoardsJoin {
    type Reply = (Status, i64);
}

impl Replies for BoardsRemove {
    type Reply = Status;
}

impl Boards {
    /// Refuses a write outside the board's window.
    fn check_window(&self, def: &BoardDef) -> AppResult<()> {
        let now = self.infra.clock.now_ms();
        if def.starts_at_ms.is_some_and(|starts| now < starts) {
            return Err(AppError::client(
                ErrorCode::NotStarted,
                format!("board {} has not started", def.key),
            ));
        }
        if def.ends_at_ms.is_some_and(|ends| now >= ends) {
            return Err(AppError::client(
                ErrorCode::Ended,
                format!("board {} has ended", def.key),
            ));
        }
        Ok(())
    }

    /// Whether a user joined a board.
    pub(crate) async fn joined(&self, def: &BoardDef, user_id: i64) -> AppResult<bool> {
        let mut conn = self.infra.redis.get().await?;
        let member: bool = redis::cmd("SISMEMBER")
            .arg(self.infra.keys.board_joins(&def.key))
            .arg(user_id)
            .query_async(&mut *conn)
            .await?;
        Ok(member)
    }

    /// Submits a score; a replay of its key changes nothing and answers the record as it is.
    pub(crate) async fn submit(
        &self,
        caller: Caller,
        key: &str,
        submission: Submission,
    ) -> AppResult<BoardRecord> {
        let def = self.get(key).await?;
        if def.key == SEASON_KEY {
            return Err(AppError::bad_input(
                "the season board counts points: award them with awardPoints",
            ));
        }
        let user_id = submission.user_id;
        if let Caller::User(viewer) = caller {
            if viewer != user_id {
                return Err(AppError::forbidden(
                    "a user submits scores only for themself",
                ));
            }
            if def.authoritative {
                return Err(AppError::forbidden(format!(
                    "board {} is authoritative: only a service submits to it",
                    def.key
                )));
            }
        }
        let idempotency = submission.idempotency_key.trim();
        if idempotency.is_empty() || idempotency.chars().count() > MAX_IDEMPOTENCY_CHARS {
            return Err(AppError::bad_input(format!(
                "idempotencyKey must have 1 to {MAX_IDEMPOTENCY_CHARS} characters"
            )));
        }
        let metadata = match &submission.metadata {
            Some(text) => {
                if text.len() > MAX_METADATA_BYTES {
                    return Err(AppError::bad_input(format!(
                        "metadata must have at most {MAX_METADATA_BYTES} bytes of JSON"
                    )));
                }
                text.clone()
            }
            None => String::new(),
        };
        // A replay SQL remembers: the record as it is, in the period the key went to.
        let prior = sqlx::query(
            "SELECT period FROM board_submissions WHERE board_key = $1 AND user_id = $2 \
             AND idempotency_key = $3",
        )
        .bind(&def.key)
        .bind(user_id)
        .bind(idempotency)
        .fetch_optional(&self.infra.db.pool)
        .await?;
        if let Some(row) = prior {
            let period: String = sqlx::Row::try_get(&row, "period")?;
            return self
                .record_of(&def, &period, user_id)
                .await?
                .ok_or_else(|| AppError::not_found("the record of this submission was removed"));
        }
        self.check_window(&def)?;
        if def.join_required && !self.joined(&def, user_id).await? {
            return Err(AppError::client(
                ErrorCode::NotJoined,
                format!("join board {} first", def.key),
            ));
        }
        let period = self.current_period(&def).await?;
        let keys = &self.infra.keys;
        let bucket = keys.board_bucket(user_id);
        let reply = self
            .infra
            .scripts()
            .call(
                &BoardsSubmit {
                    part: keys.board_part_of(&def.key, &period, user_id),
                    record: keys.board_record(&def.key, &period, user_id),
                    marker: keys.board_marker(&def.key, user_id, idempotency),
                    changes: keys.board_part_changes(&def.key, &period, bucket),
                },
                &BoardsSubmitArgs {
                    user: user_id,
                    operator: def.operator.as_str(),
                    direction: def.order.direction(),
                    score: submission.score,
                    subscore: submission.subscore,
                    metadata: &metadata,
                    now_ms: self.infra.clock.now_ms(),
                    marker_ttl_seconds: MARKER_TTL_SECONDS,
                    channel: keys.board_part_channel(&def.key, &period, bucket),
                    publish: keys.publish_command(),
                },
            )
            .await?;
        let mut tx = self.infra.db.pool.begin().await?;
        sqlx::query(
            "INSERT INTO board_submissions (board_key, user_id, idempotency_key, period, submitted_at_ms) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
        )
        .bind(&def.key)
        .bind(user_id)
        .bind(idempotency)
        .bind(&period)
        .bind(self.infra.clock.now_ms())
        .execute(&mut *tx)
        .await?;
        // The period is open: `close_due` finds it by its closing time (see `close`).
        sqlx::query(
            "INSERT INTO board_open_periods (board_key, period, closes_at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT DO NOTHING",
        )
        .bind(&def.key)
        .bind(&period)
        .bind(self.closes_at_ms(&def, self.infra.clock.now()))
        .execute(&mut *tx)
        .await?;
        if reply.version > 0 {
            sqlx::query(
                "INSERT INTO board_records (board_key, period, user_id, score, subscore, reached_at_ms, \
                 updated_at_ms, metadata, version) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
                 ON CONFLICT (board_key, period, user_id) DO UPDATE SET score = excluded.score, \
                 subscore = excluded.subscore, reached_at_ms = excluded.reached_at_ms, \
                 updated_at_ms = excluded.updated_at_ms, metadata = excluded.metadata, \
                 version = excluded.version WHERE board_records.version < excluded.version",
            )
            .bind(&def.key)
            .bind(&period)
            .bind(user_id)
            .bind(reply.score)
            .bind(reply.subscore)
            .bind(reply.reached_at_ms)
            .bind(reply.updated_at_ms)
            .bind((!reply.metadata.is_empty()).then_some(reply.metadata.as_str()))
            .bind(reply.version)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        self.record_of(&def, &period, user_id)
            .await?
            .ok_or_else(|| AppError::internal(anyhow::anyhow!("a submitted record is missing")))
    }

    /// Joins a user to a board that requires joining, within its cap (`BOARD_FULL` past it).
    pub(crate) async fn join(&self, key: &str, user_id: i64) -> AppResult<()> {
        let def = self.get(key).await?;
        if !def.join_required {
            return Err(AppError::bad_input(format!(
                "board {} needs no joining",
                def.key
            )));
        }
        if def
            .ends_at_ms
            .is_some_and(|ends| self.infra.clock.now_ms() >= ends)
        {
            return Err(AppError::client(
                ErrorCode::Ended,
                format!("board {} has ended", def.key),
            ));
        }
        let (status, _) = self
            .infra
            .scripts()
            .call(
                &BoardsJoin {
                    joins: self.infra.keys.board_joins(&def.key),
                },
                &BoardsJoinArgs {
                    user: user_id,
                    max_entries: def.max_entries.unwrap_or(-1),
                },
            )
            .await?;
        match status {
            Status::Ok | Status::Already => {}
            Status::SoldOut => {
                return Err(AppError::client(
                    ErrorCode::BoardFull,
                    format!("board {} has all the entries it takes", def.key),
                ))
            }
            other => return Err(other.refusal("join refused")),
        }
        sqlx::query(
            "INSERT INTO board_joins (board_key, user_id, joined_at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT DO NOTHING",
        )
        .bind(&def.key)
        .bind(user_id)
        .bind(self.infra.clock.now_ms())
        .execute(&self.infra.db.pool)
        .await?;
        Ok(())
    }

    /// Removes a user's record from a period (the current one without it), live and
    /// archived, and re-ranks those below; whether there was one.
    pub(crate) async fn remove(
        &self,
        key: &str,
        user_id: i64,
        period: Option<&str>,
    ) -> AppResult<bool> {
        let def = self.get(key).await?;
        if def.key == SEASON_KEY {
            let period = match period {
                Some(period) => period.to_string(),
                None => self.current_period(&def).await?,
            };
            let month = crate::infra::clock::Month::parse_dashed(&period).ok_or_else(|| {
                AppError::bad_input("a period of the season board is a month, 2026-11")
            })?;
            return self.season.remove(month, user_id).await;
        }
        let period = match period {
            Some(period) => period.to_string(),
            None => self.current_period(&def).await?,
        };
        let keys = &self.infra.keys;
        let bucket = keys.board_bucket(user_id);
        let status = self
            .infra
            .scripts()
            .call(
                &BoardsRemove {
                    part: keys.board_part_of(&def.key, &period, user_id),
                    record: keys.board_record(&def.key, &period, user_id),
                    changes: keys.board_part_changes(&def.key, &period, bucket),
                },
                &BoardsRemoveArgs {
                    user: user_id,
                    channel: keys.board_part_channel(&def.key, &period, bucket),
                    publish: keys.publish_command(),
                },
            )
            .await?;
        let mut removed = status == Status::Ok;
        let mut tx = self.infra.db.pool.begin().await?;
        removed |= sqlx::query(
            "DELETE FROM board_records WHERE board_key = $1 AND period = $2 AND user_id = $3",
        )
        .bind(&def.key)
        .bind(&period)
        .bind(user_id)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            > 0;
        removed |= remove_archived(&mut tx, &def.key, &period, user_id).await?;
        tx.commit().await?;
        Ok(removed)
    }
}

/// Removes a user's archived rank and moves everyone below up by one (in two steps: ranks
/// are unique at every row, and PostgreSQL checks that row by row).
async fn remove_archived(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    key: &str,
    period: &str,
    user_id: i64,
) -> AppResult<bool> {
    let row = sqlx::query(
        "SELECT rank FROM board_ranks WHERE board_key = $1 AND period = $2 AND user_id = $3",
    )
    .bind(key)
    .bind(period)
    .bind(user_id)
    .fetch_optional(&mut **tx)
    .await?;
    let Some(row) = row else { return Ok(false) };
    let rank: i64 = sqlx::Row::try_get(&row, "rank")?;
    sqlx::query("DELETE FROM board_ranks WHERE board_key = $1 AND period = $2 AND rank = $3")
        .bind(key)
        .bind(period)
        .bind(rank)
        .execute(&mut **tx)
        .await?;
    sqlx::query(
        "UPDATE board_ranks SET rank = 1 - rank WHERE board_key = $1 AND period = $2 AND rank > $3",
    )
    .bind(key)
    .bind(period)
    .bind(rank)
    .execute(&mut **tx)
    .await?;
    sqlx::query(
        "UPDATE board_ranks SET rank = -rank WHERE board_key = $1 AND period = $2 AND rank < 0",
    )
    .bind(key)
    .bind(period)
    .execute(&mut **tx)
    .await?;
    Ok(true)
}
