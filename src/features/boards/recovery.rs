//! Boards from SQL: the records of every period not yet archived (`board_records`: each
//! record's hash and its member in its part), the joins (`board_joins`), and the rewards of
//! closed periods, which must all be paid (`board_rewards`).
//!
//! Submissions and joins are not held back while a rebuild runs: one that lands on the
//! record the rebuild is writing at that moment can leave it one write behind, which the next
//! `verify` shows and the next `rebuild` mends. A rebuild pays any reward left unpaid (each
//! rank's award is once, whoever makes it).

use std::collections::{BTreeSet, HashMap};

use sqlx::Row;

use super::{close::DONE, member_of, BoardDef, Boards};
use crate::{
    features::leaderboard::rewards,
    infra::{
        error::AppResult,
        recovery::{write, Rebuild, Report},
    },
};

/// Records read per round trip.
const CHUNK: i64 = 500;

/// A record as SQL holds it.
struct Row0 {
    user: i64,
    score: i64,
    subscore: i64,
    reached: i64,
    updated: i64,
    metadata: Option<String>,
    version: i64,
}

impl Boards {
    /// Every board, with the periods of its records that are not archived.
    async fn live_periods(&self) -> AppResult<Vec<(std::sync::Arc<BoardDef>, String)>> {
        let rows = sqlx::query(
            "SELECT DISTINCT r.board_key, r.period FROM board_records r WHERE NOT EXISTS \
             (SELECT 1 FROM board_periods p WHERE p.board_key = r.board_key AND p.period = r.period \
             AND p.status = $1) ORDER BY r.board_key, r.period",
        )
        .bind(DONE)
        .fetch_all(&self.infra.db.pool)
        .await?;
        let mut periods = Vec::new();
        for row in rows {
            let key: String = row.try_get("board_key")?;
            if let Some(def) = self.find(&key).await? {
                periods.push((def, row.try_get("period")?));
            }
        }
        Ok(periods)
    }

    /// The records of a period after user `after`, in user order.
    async fn sql_records(&self, def: &BoardDef, period: &str, after: i64) -> AppResult<Vec<Row0>> {
        let rows = sqlx::query(
            "SELECT user_id, score, subscore, reached_at_ms, updated_at_ms, metadata, version \
             FROM board_records WHERE board_key = $1 AND period = $2 AND user_id > $3 \
             ORDER BY user_id LIMIT $4",
        )
        .bind(&def.key)
        .bind(period)
        .bind(after)
        .bind(CHUNK)
        .fetch_all(&self.infra.db.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(Row0 {
                    user: row.try_get("user_id")?,
                    score: row.try_get("score")?,
                    subscore: row.try_get("subscore")?,
                    reached: row.try_get("reached_at_ms")?,
                    updated: row.try_get("updated_at_ms")?,
                    metadata: row.try_get("metadata")?,
                    version: row.try_get("version")?,
                })
            })
            .collect()
    }

    async fn sql_joins(&self, def: &BoardDef) -> AppResult<BTreeSet<i64>> {
        let rows = sqlx::query("SELECT user_id FROM board_joins WHERE board_key = $1")
            .bind(&def.key)
            .fetch_all(&self.infra.db.pool)
            .await?;
        rows.iter()
            .map(|row| row.try_get("user_id").map_err(Into::into))
            .collect()
    }

    async fn boards_with_joins(&self) -> AppResult<Vec<std::sync::Arc<BoardDef>>> {
        let rows = sqlx::query("SELECT DISTINCT board_key FROM board_joins ORDER BY board_key")
            .fetch_all(&self.infra.db.pool)
            .await?;
        let mut defs = Vec::new();
        for row in rows {
            if let Some(def) = self.find(&row.try_get::<String, _>("board_key")?).await? {
                defs.push(def);
            }
        }
        Ok(defs)
    }

    /// Live records, joins and paid rewards agree with SQL.
    pub async fn verify(&self) -> AppResult<Report> {
        let mut report = Report::new("boards");
        let keys = &self.infra.keys;
        for (def, period) in self.live_periods().await? {
            let direction = def.order.direction();
            let mut after = 0;
            let mut count = 0;
            loop {
                let records = self.sql_records(&def, &period, after).await?;
                let Some(last) = records.last().map(|r| r.user) else {
                    break;
                };
                count += records.len() as i64;
                let mut pipe = redis::pipe();
                for record in &records {
                    let member = member_of(direction, record.subscore, record.reached, record.user);
                    pipe.cmd("HGET")
                        .arg(keys.board_record(&def.key, &period, record.user))
                        .arg("score")
                        .cmd("ZSCORE")
                        .arg(keys.board_part_of(&def.key, &period, record.user))
                        .arg(member);
                }
                let mut conn = self.infra.redis.get().await?;
                let found: Vec<(Option<i64>, Option<f64>)> = {
                    let flat: Vec<redis::Value> = pipe.query_async(&mut *conn).await?;
                    let mut flat = flat.into_iter();
                    let mut pairs = Vec::new();
                    while let (Some(a), Some(b)) = (flat.next(), flat.next()) {
                        pairs.push((
                            redis::FromRedisValue::from_redis_value(a).ok().flatten(),
                            redis::FromRedisValue::from_redis_value(b).ok().flatten(),
                        ));
                    }
                    pairs
                };
                drop(conn);
                for (record, (score, ranked)) in records.iter().zip(found) {
                    let expected = record.score * direction;
                    report.check(
                        score == Some(record.score) && ranked == Some(expected as f64),
                        || {
                            format!(
                                "board {} {period}: user {} has {} in SQL, {score:?} in Redis{}",
                                def.key,
                                record.user,
                                record.score,
                                if ranked.is_none() { ", unranked" } else { "" }
                            )
                        },
                    );
                }
                after = last;
            }
            let mut pipe = redis::pipe();
            for part in keys.board_parts(&def.key, &period) {
                pipe.cmd("ZCARD").arg(part);
            }
            let mut conn = self.infra.redis.get().await?;
            let sizes: Vec<i64> = pipe.query_async(&mut *conn).await?;
            let size: i64 = sizes.iter().sum();
            report.check(size == count, || {
                format!(
                    "board {} {period}: {count} records in SQL, {size} in Redis",
                    def.key
                )
            });
        }
        for def in self.boards_with_joins().await? {
            let expected = self.sql_joins(&def).await?;
            let mut conn = self.infra.redis.get().await?;
            let joined: BTreeSet<i64> = redis::cmd("SMEMBERS")
                .arg(keys.board_joins(&def.key))
                .query_async(&mut *conn)
                .await?;
            report.check(joined == expected, || {
                format!(
                    "board {}: {} joined in SQL, {} in Redis",
                    def.key,
                    expected.len(),
                    joined.len()
                )
            });
        }
        // Every reward of a verified period is paid.
        let unpaid = sqlx::query(
            "SELECT w.board_key, w.period, w.rank FROM board_rewards w WHERE w.paid_at_ms IS NULL",
        )
        .fetch_all(&self.infra.db.pool)
        .await?;
        for row in &unpaid {
            let (key, period, rank): (String, String, i64) = (
                row.try_get("board_key")?,
                row.try_get("period")?,
                row.try_get("rank")?,
            );
            report.check(false, || {
                format!("board {key} {period}: the reward of rank {rank} is unpaid")
            });
        }
        Ok(report)
    }

    /// Writes every live record, its member and the joins from SQL (each period's parts
    /// replaced), and pays any reward left unpaid.
    pub(crate) async fn rebuild(&self, run: &Rebuild<'_>) -> AppResult<()> {
        let keys = &self.infra.keys;
        let periods = self.live_periods().await?;
        run.expect(periods.len() as u64);
        for (def, period) in &periods {
            let direction = def.order.direction();
            let mut pipe = redis::pipe();
            for part in keys.board_parts(&def.key, period) {
                pipe.cmd("UNLINK").arg(part).ignore();
            }
            write(&self.infra, &pipe).await?;
            let mut after = 0;
            loop {
                let records = self.sql_records(def, period, after).await?;
                let Some(last) = records.last().map(|r| r.user) else {
                    break;
                };
                let mut pipe = redis::pipe();
                for r in &records {
                    let member = member_of(direction, r.subscore, r.reached, r.user);
                    let key = keys.board_record(&def.key, period, r.user);
                    pipe.cmd("UNLINK").arg(&key).ignore();
                    let mut fields: Vec<(&str, String)> = vec![
                        ("score", r.score.to_string()),
                        ("subscore", r.subscore.to_string()),
                        ("reached", r.reached.to_string()),
                        ("updated", r.updated.to_string()),
                        ("member", member.clone()),
                        ("version", r.version.to_string()),
                    ];
                    if let Some(metadata) = &r.metadata {
                        fields.push(("metadata", metadata.clone()));
                    }
                    pipe.cmd("HSET").arg(&key).arg(fields).ignore();
                    pipe.cmd("ZADD")
                        .arg(keys.board_part_of(&def.key, period, r.user))
                        .arg(r.score * direction)
                        .arg(member)
                        .ignore();
                }
                write(&self.infra, &pipe).await?;
                after = last;
            }
            run.advance(1);
        }
        for def in self.boards_with_joins().await? {
            let joined: Vec<i64> = self.sql_joins(&def).await?.into_iter().collect();
            let mut pipe = redis::pipe();
            pipe.cmd("UNLINK").arg(keys.board_joins(&def.key)).ignore();
            for chunk in joined.chunks(CHUNK as usize) {
                pipe.cmd("SADD")
                    .arg(keys.board_joins(&def.key))
                    .arg(chunk)
                    .ignore();
            }
            write(&self.infra, &pipe).await?;
        }
        let unpaid = sqlx::query(
            "SELECT DISTINCT board_key, period FROM board_rewards WHERE paid_at_ms IS NULL",
        )
        .fetch_all(&self.infra.db.pool)
        .await?;
        let mut periods: HashMap<String, Vec<String>> = HashMap::new();
        for row in &unpaid {
            periods
                .entry(row.try_get("board_key")?)
                .or_default()
                .push(row.try_get("period")?);
        }
        for (key, periods) in periods {
            for period in periods {
                rewards::pay(&self.points, &key, &period, None).await?;
            }
        }
        Ok(())
    }
}
