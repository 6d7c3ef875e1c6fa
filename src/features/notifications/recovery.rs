//! Notifications in `engage verify` and `engage rebuild`: each user's hot list (the newest
//! [`HOT_WINDOW`] ids, in order), read watermark and unread count, from
//! `notification_states` and `notifications`.

use sqlx::Row;

use super::{Notifications, HOT_WINDOW};
use crate::infra::{
    error::AppResult,
    recovery::{Rebuild, Report},
};

/// Users per chunk.
const CHUNK: i64 = 200;

impl Notifications {
    /// Compares each user's state and hot list in Redis with SQL's.
    pub async fn verify(&self) -> AppResult<Report> {
        let mut report = Report::new("notifications");
        let mut after = i64::MIN;
        loop {
            let users = self.users_after(after).await?;
            let Some(&last) = users.last() else { break };
            for user_id in users {
                let sql = self.sql_state(user_id).await?;
                let hot = self.hot_state(user_id).await?;
                report.check(
                    hot.is_some_and(|hot| hot.unread == sql.unread && hot.read_seq == sql.read_seq),
                    || {
                        format!(
                            "user {user_id}: Redis holds {hot:?}, SQL {} unread read through {}",
                            sql.unread, sql.read_seq
                        )
                    },
                );
                let (want, held) = (
                    self.sql_newest(user_id).await?,
                    self.hot_ids(user_id).await?,
                );
                report.check(want == held, || {
                    format!(
                        "user {user_id}: hot list holds {} notifications, SQL's newest {}",
                        held.len(),
                        want.len()
                    )
                });
            }
            after = last;
        }
        Ok(report)
    }

    /// Rewrites each user's hot list and state from SQL.
    pub async fn rebuild(&self, run: &Rebuild<'_>) -> AppResult<()> {
        run.expect_count("SELECT COUNT(*) AS n FROM notification_states")
            .await?;
        let mut after = match run.resume_from().await? {
            0 => i64::MIN,
            cursor => cursor,
        };
        loop {
            let users = self.users_after(after).await?;
            let Some(&last) = users.last() else { break };
            for &user_id in &users {
                self.rebuild_user(user_id).await?;
            }
            run.finished_through(last, users.len() as u64).await?;
            after = last;
        }
        Ok(())
    }

    async fn users_after(&self, after: i64) -> AppResult<Vec<i64>> {
        let rows = sqlx::query(
            "SELECT user_id FROM notification_states WHERE user_id > $1 ORDER BY user_id LIMIT $2",
        )
        .bind(after)
        .bind(CHUNK)
        .fetch_all(&self.infra.db.pool)
        .await?;
        rows.iter()
            .map(|row| row.try_get("user_id"))
            .collect::<Result<_, _>>()
            .map_err(Into::into)
    }

    async fn sql_newest(&self, user_id: i64) -> AppResult<Vec<i64>> {
        let rows = sqlx::query(
            "SELECT id FROM notifications WHERE user_id = $1 ORDER BY seq DESC LIMIT $2",
        )
        .bind(user_id)
        .bind(HOT_WINDOW as i64)
        .fetch_all(&self.infra.db.pool)
        .await?;
        rows.iter()
            .map(|row| row.try_get("id"))
            .collect::<Result<_, _>>()
            .map_err(Into::into)
    }

    async fn hot_ids(&self, user_id: i64) -> AppResult<Vec<i64>> {
        let mut conn = self.infra.redis.get().await?;
        Ok(redis::cmd("ZREVRANGE")
            .arg(self.infra.keys.notifications_hot(user_id))
            .arg(0)
            .arg(-1)
            .query_async(&mut *conn)
            .await?)
    }
}
