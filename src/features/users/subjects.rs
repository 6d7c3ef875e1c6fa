//! Users known to an identity provider by a subject of its own (`auth0|abc123`, a UUID):
//! each (issuer, subject) gets an internal 64-bit user id the first time a token names it,
//! kept in SQL (`user_subjects`) so that it stays the same across instances and restarts.
//!
//! The id comes from the ID generator (`IdGenerator::next_id`), so it never collides with
//! another mapped user; tokens whose `sub` is itself an id (engage's own) are not mapped.
//! Two instances that see a new subject at once both try to insert; the primary key keeps
//! the first, and both read it back.

use sqlx::Row;

use super::UserDirectory;
use crate::infra::error::AppResult;

impl UserDirectory {
    /// The user id of a provider's subject, created at first sight.
    pub(crate) async fn user_for_subject(&self, issuer: &str, subject: &str) -> AppResult<i64> {
        let key = (issuer.to_string(), subject.to_string());
        if let Some(user_id) = self.subjects.get(&key) {
            return Ok(*user_id);
        }
        let user_id = match self.stored_subject(issuer, subject).await? {
            Some(user_id) => user_id,
            None => {
                let candidate = self.infra.ids.next_id().await?;
                sqlx::query(
                    "INSERT INTO user_subjects (issuer, subject, user_id, created_at_ms) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT (issuer, subject) DO NOTHING",
                )
                .bind(issuer)
                .bind(subject)
                .bind(candidate)
                .bind(self.infra.clock.now_ms())
                .execute(&self.infra.db.pool)
                .await?;
                self.stored_subject(issuer, subject)
                    .await?
                    .unwrap_or(candidate)
            }
        };
        self.subjects.insert(key, std::sync::Arc::new(user_id));
        Ok(user_id)
    }

    async fn stored_subject(&self, issuer: &str, subject: &str) -> AppResult<Option<i64>> {
        let row =
            sqlx::query("SELECT user_id FROM user_subjects WHERE issuer = $1 AND subject = $2")
                .bind(issuer)
                .bind(subject)
                .fetch_optional(&self.infra.db.pool)
                .await?;
        Ok(row.map(|row| row.try_get("user_id")).transpose()?)
    }
}
