//! Boards: many leaderboards, each with its own reset, operator and order, tournaments
//! among them (a window, entry by joining, a cap on entries).
//!
//! - **SQL is the record** of each board (`boards`), of each user's record on each period
//!   (`board_records`), of every idempotency key a submission used (`board_submissions`: a
//!   replay changes nothing, for ever) and of the joins (`board_joins`). Redis holds what the
//!   reads rank: `engage rebuild` writes it again from SQL ([`recovery`]).
//! - **Sharded as the season board**: a period of a board is one sorted set per user bucket
//!   (`{board:<key>:<bucket>}:z:<period>`, the bucket of `ENGAGE_POINTS_BUCKETS`), each with
//!   the records of its users and their change counter in the same slot, so a submission is
//!   one single-slot script on a Redis Cluster, and a page merges the parts' tops.
//! - **Order in one sorted set**: a part's score is the record's score (negated on an ASC
//!   board) and its member `<subscore key><time key>:<user>`, fixed-width decimal text, so
//!   that among equal scores the higher subscore (for the order) and then the earlier time
//!   the record reached its score come first in `ZREVRANGE`: ties go to whoever got there
//!   first, and a score of any size stays exact.
//! - **Operators**: `INCREMENT` and `DECREMENT` add (subtract) the score and the subscore,
//!   `SET` replaces both, `BEST` keeps the better pair for the order.
//! - **Periods** turn at the reset in `ENGAGE_TIMEZONE`: `2026-11-23`, `2026-W48` (ISO
//!   week), `2026-11`, or `all`. A period closed early keeps its name; the next one of the
//!   same reset window is `<name>.<n>` ([`Boards::current_period`]).

pub mod close;
pub(crate) mod live;
pub(crate) mod reads;
pub(crate) mod recovery;
pub(crate) mod writes;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use chrono::{DateTime, Datelike, Days, Utc};
use sha2::{Digest, Sha256};
use sqlx::Row;

use crate::{
    features::{leaderboard::Leaderboards, points::Points},
    infra::{
        clock::Month,
        error::{AppError, AppResult},
        redis::{KeyPart, Keys},
        Infra,
    },
};

/// When a board's period turns.
#[derive(async_graphql::Enum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoardReset {
    Never,
    Daily,
    Weekly,
    Monthly,
}

/// How a submitted score changes a record.
#[derive(async_graphql::Enum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoardOperator {
    Increment,
    Decrement,
    Best,
    Set,
}

/// Which end of a board is first.
#[derive(async_graphql::Enum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortOrder {
    Desc,
    Asc,
}

impl BoardReset {
    fn as_str(self) -> &'static str {
        match self {
            Self::Never => "NEVER",
            Self::Daily => "DAILY",
            Self::Weekly => "WEEKLY",
            Self::Monthly => "MONTHLY",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        [Self::Never, Self::Daily, Self::Weekly, Self::Monthly]
            .into_iter()
            .find(|r| r.as_str() == text)
    }
}

impl BoardOperator {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Increment => "INCREMENT",
            Self::Decrement => "DECREMENT",
            Self::Best => "BEST",
            Self::Set => "SET",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        [Self::Increment, Self::Decrement, Self::Best, Self::Set]
            .into_iter()
            .find(|o| o.as_str() == text)
    }
}

impl SortOrder {
    fn as_str(self) -> &'static str {
        match self {
            Self::Desc => "DESC",
            Self::Asc => "ASC",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        [Self::Desc, Self::Asc]
            .into_iter()
            .find(|o| o.as_str() == text)
    }

    /// The sign that makes the board's best the highest score of its sorted sets.
    pub(crate) fn direction(self) -> i64 {
        match self {
            Self::Desc => 1,
            Self::Asc => -1,
        }
    }
}

pub(crate) use crate::features::leaderboard::rewards::Reward as BoardReward;

/// A board's definition, as `createBoard` stored it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BoardDef {
    pub(crate) key: String,
    pub(crate) title: String,
    pub(crate) reset: BoardReset,
    pub(crate) operator: BoardOperator,
    pub(crate) order: SortOrder,
    pub(crate) authoritative: bool,
    pub(crate) starts_at_ms: Option<i64>,
    pub(crate) ends_at_ms: Option<i64>,
    pub(crate) join_required: bool,
    pub(crate) max_entries: Option<i64>,
    pub(crate) rewards: Vec<BoardReward>,
    pub(crate) created_at_ms: i64,
}

/// A user's record on a period of a board, with its rank there.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BoardRecord {
    pub(crate) rank: i64,
    pub(crate) user_id: i64,
    pub(crate) score: i64,
    pub(crate) subscore: i64,
    /// JSON text.
    pub(crate) metadata: Option<String>,
    pub(crate) updated_at_ms: i64,
}

/// A page of a board.
#[derive(Debug, Clone)]
pub(crate) struct BoardPage {
    pub(crate) period: String,
    pub(crate) total: i64,
    pub(crate) me: Option<BoardRecord>,
    pub(crate) records: Vec<BoardRecord>,
}

/// What boards work with: the definitions read so far (a board never changes once created),
/// and points, through which rewards are paid.
#[derive(Clone)]
pub struct Boards {
    pub infra: Infra,
    pub(crate) points: Points,
    pub(crate) defs: Arc<Mutex<HashMap<String, Arc<BoardDef>>>>,
    /// How often this instance looks for periods to close (`ENGAGE_ROLLOVER_CHECK_SECONDS`).
    pub(crate) close_check: std::time::Duration,
    /// The live readers this instance shares among its subscribers.
    pub(crate) watchers: Arc<live::BoardWatchers>,
    /// The monthly season board, the built-in board `season`, read through its own feature.
    pub(crate) season: Leaderboards,
}

/// The longest key and title of a board.
const MAX_KEY_CHARS: usize = 64;
const MAX_TITLE_CHARS: usize = 200;
/// The most ranks rewards reach.
const MAX_REWARDED_RANK: i64 = 1000;
/// The longest idempotency key and metadata.
pub(crate) const MAX_IDEMPOTENCY_CHARS: usize = 128;
pub(crate) const MAX_METADATA_BYTES: usize = 4096;

/// Board keys (their parts, records, markers, counters and channels) carry the hash tag of
/// the board and the user's bucket, `{board:<key>:<bucket>}`, so a submission stays one
/// single-slot script; the joins of a board share `{board:<key>}`.
impl Keys {
    fn board_bucket_tag<'a>(&self, key: &'a str, bucket: u32) -> impl KeyPart + 'a {
        ("board:", key, ':', bucket)
    }

    pub(crate) fn board_bucket(&self, user_id: i64) -> u32 {
        self.points_bucket(user_id)
    }

    /// The part of a period of a board that holds a user.
    pub(crate) fn board_part_of(&self, key: &str, period: &str, user_id: i64) -> String {
        self.board_part(key, period, self.board_bucket(user_id))
    }

    pub(crate) fn board_part(&self, key: &str, period: &str, bucket: u32) -> String {
        self.tagged(self.board_bucket_tag(key, bucket), ("z:", period))
    }

    /// Every part of a period of a board, in bucket order.
    pub(crate) fn board_parts(&self, key: &str, period: &str) -> Vec<String> {
        (0..self.points_buckets())
            .map(|bucket| self.board_part(key, period, bucket))
            .collect()
    }

    /// A user's record on a period of a board: score, subscore, reached, updated, member,
    /// metadata, version.
    pub(crate) fn board_record(&self, key: &str, period: &str, user_id: i64) -> String {
        self.tagged(
            self.board_bucket_tag(key, self.board_bucket(user_id)),
            ("r:", period, ':', user_id),
        )
    }

    /// The marker of a submission's idempotency key (hashed: keys are the caller's text).
    pub(crate) fn board_marker(&self, key: &str, user_id: i64, idempotency_key: &str) -> String {
        let digest = hex::encode(&Sha256::digest(idempotency_key.as_bytes())[..16]);
        self.tagged(
            self.board_bucket_tag(key, self.board_bucket(user_id)),
            ("sub:", user_id, ':', digest),
        )
    }

    /// The change counter of a part.
    pub(crate) fn board_part_changes(&self, key: &str, period: &str, bucket: u32) -> String {
        self.tagged(self.board_bucket_tag(key, bucket), ("changes:", period))
    }

    /// The live channel of a part.
    pub(crate) fn board_part_channel(&self, key: &str, period: &str, bucket: u32) -> String {
        self.tagged(self.board_bucket_tag(key, bucket), ("live:", period))
    }

    /// The snapshot of a part that a closed period's archive copies.
    pub(crate) fn board_snapshot(&self, key: &str, period: &str, bucket: u32) -> String {
        self.tagged(self.board_bucket_tag(key, bucket), ("snap:", period))
    }

    /// The users who joined a board.
    pub(crate) fn board_joins(&self, key: &str) -> String {
        self.tagged(("board:", key), "joins")
    }
}

/// What `createBoard` asks for.
#[derive(Debug, Clone)]
pub(crate) struct NewBoard {
    pub(crate) key: String,
    pub(crate) title: String,
    pub(crate) reset: BoardReset,
    pub(crate) operator: BoardOperator,
    pub(crate) order: SortOrder,
    pub(crate) authoritative: bool,
    pub(crate) starts_at: Option<DateTime<Utc>>,
    pub(crate) ends_at: Option<DateTime<Utc>>,
    pub(crate) join_required: bool,
    pub(crate) max_entries: Option<i64>,
    pub(crate) rewards: Vec<BoardReward>,
}

/// The key of the built-in monthly season board, which no created board may take.
pub(crate) use crate::features::leaderboard::SEASON_BOARD as SEASON_KEY;

fn check_key(key: &str) -> AppResult<()> {
    let ok = !key.is_empty()
        && key.len() <= MAX_KEY_CHARS
        && key
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(AppError::bad_input(format!(
            "key must be 1 to {MAX_KEY_CHARS} of a-z 0-9 _ -, got {:?}",
            key.chars().take(80).collect::<String>()
        )))
    }
}

fn check_rewards(rewards: &[BoardReward]) -> AppResult<()> {
    let mut ranges: Vec<(i64, i64)> = Vec::new();
    for reward in rewards {
        if reward.from_rank < 1 || reward.to_rank < reward.from_rank {
            return Err(AppError::bad_input(
                "a reward's ranks must satisfy 1 <= fromRank <= toRank",
            ));
        }
        if reward.to_rank > MAX_REWARDED_RANK {
            return Err(AppError::bad_input(format!(
                "rewards reach at most rank {MAX_REWARDED_RANK}"
            )));
        }
        if !(0..=crate::features::points::MAX_AWARD).contains(&reward.points) {
            return Err(AppError::bad_input(format!(
                "a reward's points must be between 0 and {}",
                crate::features::points::MAX_AWARD
            )));
        }
        if reward.points == 0 && reward.voucher_id.is_none() {
            return Err(AppError::bad_input(
                "a reward pays points, a voucher, or both",
            ));
        }
        if ranges
            .iter()
            .any(|&(from, to)| reward.from_rank <= to && from <= reward.to_rank)
        {
            return Err(AppError::bad_input("reward rank ranges must not overlap"));
        }
        ranges.push((reward.from_rank, reward.to_rank));
    }
    Ok(())
}

fn def_of(row: &sqlx::any::AnyRow) -> AppResult<BoardDef> {
    let text = |column: &str| row.try_get::<String, _>(column);
    let bad = |what: &str| AppError::internal(anyhow::anyhow!("a board with an unknown {what}"));
    let rewards: Vec<BoardReward> = serde_json::from_str(&text("rewards")?)
        .map_err(|e| AppError::internal(anyhow::anyhow!("board rewards: {e}")))?;
    Ok(BoardDef {
        key: text("board_key")?,
        title: text("title")?,
        reset: BoardReset::parse(&text("reset")?).ok_or_else(|| bad("reset"))?,
        operator: BoardOperator::parse(&text("operator")?).ok_or_else(|| bad("operator"))?,
        order: SortOrder::parse(&text("sort_order")?).ok_or_else(|| bad("order"))?,
        authoritative: row.try_get::<i64, _>("authoritative")? != 0,
        starts_at_ms: row.try_get("starts_at_ms")?,
        ends_at_ms: row.try_get("ends_at_ms")?,
        join_required: row.try_get::<i64, _>("join_required")? != 0,
        max_entries: row.try_get("max_entries")?,
        rewards,
        created_at_ms: row.try_get("created_at_ms")?,
    })
}

const DEF_COLUMNS: &str = "board_key, title, reset, operator, sort_order, authoritative, \
    starts_at_ms, ends_at_ms, join_required, max_entries, rewards, created_at_ms";

impl Boards {
    pub(crate) fn new(infra: Infra, points: Points, season: Leaderboards) -> Self {
        let season_def = Arc::new(BoardDef {
            key: SEASON_KEY.to_string(),
            title: "Season".to_string(),
            reset: BoardReset::Monthly,
            operator: BoardOperator::Increment,
            order: SortOrder::Desc,
            authoritative: true,
            starts_at_ms: None,
            ends_at_ms: None,
            join_required: false,
            max_entries: None,
            rewards: season.season_rewards.to_vec(),
            created_at_ms: 0,
        });
        Self {
            infra,
            points,
            defs: Arc::new(Mutex::new(HashMap::from([(
                SEASON_KEY.to_string(),
                season_def,
            )]))),
            close_check: season.rollover_check,
            season,
            watchers: Arc::default(),
        }
    }

    /// Creates a board; a key already taken is a conflict.
    pub(crate) async fn create(&self, new: NewBoard) -> AppResult<Arc<BoardDef>> {
        check_key(&new.key)?;
        if new.key == SEASON_KEY {
            return Err(AppError::conflict(
                "the key season is the built-in season board's",
            ));
        }
        let title = new.title.trim().to_string();
        if title.is_empty() || title.chars().count() > MAX_TITLE_CHARS {
            return Err(AppError::bad_input(format!(
                "title must have 1 to {MAX_TITLE_CHARS} characters"
            )));
        }
        if let (Some(starts), Some(ends)) = (new.starts_at, new.ends_at) {
            if ends <= starts {
                return Err(AppError::bad_input("endsAt must be after startsAt"));
            }
        }
        if new.max_entries.is_some_and(|max| max < 1) {
            return Err(AppError::bad_input("maxEntries must be at least 1"));
        }
        if new.max_entries.is_some() && !new.join_required {
            return Err(AppError::bad_input(
                "maxEntries caps joins: it needs joinRequired",
            ));
        }
        check_rewards(&new.rewards)?;
        let def = BoardDef {
            key: new.key,
            title,
            reset: new.reset,
            operator: new.operator,
            order: new.order,
            authoritative: new.authoritative,
            starts_at_ms: new.starts_at.map(|at| at.timestamp_millis()),
            ends_at_ms: new.ends_at.map(|at| at.timestamp_millis()),
            join_required: new.join_required,
            max_entries: new.max_entries,
            rewards: new.rewards,
            created_at_ms: self.infra.clock.now_ms(),
        };
        let rewards = serde_json::to_string(&def.rewards)
            .map_err(|e| AppError::internal(anyhow::anyhow!("{e}")))?;
        let inserted = sqlx::query(&format!(
            "INSERT INTO boards ({DEF_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
             ON CONFLICT (board_key) DO NOTHING"
        ))
        .bind(&def.key)
        .bind(&def.title)
        .bind(def.reset.as_str())
        .bind(def.operator.as_str())
        .bind(def.order.as_str())
        .bind(i64::from(def.authoritative))
        .bind(def.starts_at_ms)
        .bind(def.ends_at_ms)
        .bind(i64::from(def.join_required))
        .bind(def.max_entries)
        .bind(rewards)
        .bind(def.created_at_ms)
        .execute(&self.infra.db.pool)
        .await?;
        if inserted.rows_affected() == 0 {
            return Err(AppError::conflict(format!(
                "a board with the key {} exists",
                def.key
            )));
        }
        let def = Arc::new(def);
        self.remember(def.clone());
        Ok(def)
    }

    fn remember(&self, def: Arc<BoardDef>) {
        if let Ok(mut defs) = self.defs.lock() {
            defs.insert(def.key.clone(), def);
        }
    }

    /// A board by its key (`None`: no such board).
    pub(crate) async fn find(&self, key: &str) -> AppResult<Option<Arc<BoardDef>>> {
        if let Some(def) = self
            .defs
            .lock()
            .ok()
            .and_then(|defs| defs.get(key).cloned())
        {
            return Ok(Some(def));
        }
        let row = sqlx::query(&format!(
            "SELECT {DEF_COLUMNS} FROM boards WHERE board_key = $1"
        ))
        .bind(key)
        .fetch_optional(&self.infra.db.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let def = Arc::new(def_of(&row)?);
        self.remember(def.clone());
        Ok(Some(def))
    }

    /// A board by its key, or `NOT_FOUND`.
    pub(crate) async fn get(&self, key: &str) -> AppResult<Arc<BoardDef>> {
        self.find(key)
            .await?
            .ok_or_else(|| AppError::not_found(format!("no board {key}")))
    }

    /// The built-in season board, then the boards in the order they were created, `first`
    /// from `offset`, and whether more follow.
    pub(crate) async fn list(
        &self,
        offset: usize,
        first: usize,
    ) -> AppResult<(Vec<Arc<BoardDef>>, bool)> {
        let rows = sqlx::query(&format!(
            "SELECT {DEF_COLUMNS} FROM boards ORDER BY created_at_ms, board_key LIMIT $1 OFFSET $2"
        ))
        .bind(first as i64 + 1)
        .bind(offset.saturating_sub(1) as i64)
        .fetch_all(&self.infra.db.pool)
        .await?;
        let mut defs = Vec::with_capacity(first + 1);
        if offset == 0 {
            defs.push(self.get(SEASON_KEY).await?);
        }
        for row in &rows {
            defs.push(Arc::new(def_of(row)?));
        }
        let more = defs.len() > first;
        defs.truncate(first);
        Ok((defs, more))
    }

    /// The name of the reset window of a board at an instant, in `ENGAGE_TIMEZONE`.
    pub(crate) fn window_of(&self, reset: BoardReset, at: DateTime<Utc>) -> String {
        let date = self.infra.clock.date_of(at);
        match reset {
            BoardReset::Never => "all".to_string(),
            BoardReset::Daily => date.format("%Y-%m-%d").to_string(),
            BoardReset::Weekly => {
                let week = date.iso_week();
                format!("{:04}-W{:02}", week.year(), week.week())
            }
            BoardReset::Monthly => date.format("%Y-%m").to_string(),
        }
    }

    /// When the period running at `at` is due to close: the end of its reset window in
    /// `ENGAGE_TIMEZONE`, or the tournament's end if sooner; `None` for a board that neither
    /// resets nor ends (its periods close only by `closeBoardPeriod`).
    pub(crate) fn closes_at_ms(&self, def: &BoardDef, at: DateTime<Utc>) -> Option<i64> {
        let clock = &self.infra.clock;
        let date = clock.date_of(at);
        let next_window = match def.reset {
            BoardReset::Never => None,
            BoardReset::Daily => Some(date + Days::new(1)),
            BoardReset::Weekly => {
                Some(date + Days::new(7 - u64::from(date.weekday().num_days_from_monday())))
            }
            BoardReset::Monthly => Some(Month::of(date).next().first_day()),
        };
        let window_ends = next_window.map(|day| clock.start_of(day).timestamp_millis());
        match (window_ends, def.ends_at_ms) {
            (Some(window), Some(ends)) => Some(window.min(ends)),
            (window, ends) => window.or(ends),
        }
    }

    /// The current period of a board: its reset window's name, with `.<n>` when the window
    /// had periods closed early (the first keeps the plain name).
    pub(crate) async fn current_period(&self, def: &BoardDef) -> AppResult<String> {
        let base = self.window_of(def.reset, self.infra.clock.now());
        let closed: i64 = sqlx::query(
            "SELECT COUNT(*) AS n FROM board_periods WHERE board_key = $1 AND base = $2 AND early = 1",
        )
        .bind(&def.key)
        .bind(&base)
        .fetch_one(&self.infra.db.pool)
        .await?
        .try_get("n")?;
        Ok(if closed == 0 {
            base
        } else {
            format!("{base}.{}", closed + 1)
        })
    }
}

/// The sorted-set member of a record: `<subscore key><time key>:<user>` (as
/// `lua/boards_submit.lua` writes it).
pub(crate) fn member_of(direction: i64, subscore: i64, reached_at_ms: i64, user_id: i64) -> String {
    format!(
        "{:010}{:013}:{user_id}",
        (subscore * direction + 2_147_483_648).clamp(0, 4_294_967_295),
        9_999_999_999_999 - reached_at_ms
    )
}

/// The user of a sorted-set member.
pub(crate) fn user_of_member(member: &str) -> Option<i64> {
    member.rsplit_once(':')?.1.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_order_equal_scores_by_subscore_then_time() {
        let higher_sub = member_of(1, 5, 2_000, 9);
        let lower_sub = member_of(1, 4, 1_000, 9);
        assert!(higher_sub > lower_sub);
        let earlier = member_of(1, 5, 1_000, 1);
        assert!(earlier > higher_sub);
        // Ascending: the lower subscore first.
        assert!(member_of(-1, 3, 1_000, 1) > member_of(-1, 4, 1_000, 1));
        assert_eq!(user_of_member(&earlier), Some(1));
    }

    #[test]
    fn keys_share_the_slot_of_the_board_and_bucket() {
        let keys = Keys::new("e:").with_points_buckets(4);
        assert_eq!(keys.board_part_of("cup", "all", 7), "e:{board:cup:3}:z:all");
        assert_eq!(
            keys.board_record("cup", "all", 7),
            "e:{board:cup:3}:r:all:7"
        );
        assert_eq!(keys.board_parts("cup", "all").len(), 4);
    }
}
