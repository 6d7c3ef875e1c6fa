//! The announcement of a new remark on the remark stream ([`RemarkCreated`]), which the
//! feed's fan-out and the points for writing a remark read: an outbox in SQL, so that a
//! remark that was acknowledged is announced even when Redis refused the announcement then.
//!
//! A remark's row and its row in `remark_announcements` are written in one transaction. The
//! request then XADDs the announcement and deletes the row; when Redis refuses, the row
//! stays, and the announcer (every instance runs one) announces it once Redis answers. The
//! alternative, answering an error, would leave the remark stored and shown yet never in
//! a feed: a client that retried would be told it had already reviewed the item.
//!
//! An announcement may land twice (an XADD whose reply was lost, a row whose delete failed,
//! two instances' announcers at once): both readers are idempotent on the remark (the feed
//! adds the same member again, the award's key is `remark:<id>`).

use std::time::Duration;

use sqlx::Row;

use super::{events::RemarkCreated, Remarks};
use crate::infra::{error::AppResult, streams};

/// How often the announcer looks for remarks left unannounced.
const ANNOUNCER_EVERY: Duration = Duration::from_secs(1);
/// How old a row must be before the announcer takes it: younger ones are the requests' own
/// to announce, which they do at once.
const LEFT_FOR_THE_REQUEST_MS: i64 = 5_000;
/// Announcements per round.
const PER_ROUND: i64 = 500;

impl Remarks {
    /// Announces stored remarks on the remark stream (one round trip), then forgets their
    /// rows of `remark_announcements`.
    pub(super) async fn announce(&self, remarks: &[RemarkCreated]) -> AppResult<()> {
        if remarks.is_empty() {
            return Ok(());
        }
        streams::publish_all(&self.infra, &self.infra.keys.remark_stream(), remarks).await?;
        // Exactly these ids (numbers, written by this code): a range would take the rows of
        // remarks stored meanwhile, still unannounced.
        let ids: Vec<String> = remarks.iter().map(|r| r.remark_id.to_string()).collect();
        sqlx::query(&format!(
            "DELETE FROM remark_announcements WHERE remark_id IN ({})",
            ids.join(", ")
        ))
        .execute(&self.infra.db.pool)
        .await?;
        Ok(())
    }

    /// Remarks whose announcement is not confirmed, stored at least
    /// `LEFT_FOR_THE_REQUEST_MS` ago, oldest first.
    async fn unannounced(&self) -> AppResult<Vec<RemarkCreated>> {
        let rows = sqlx::query(
            "SELECT remark_id, author_id, created_at_ms FROM remark_announcements \
             WHERE created_at_ms <= $1 ORDER BY remark_id LIMIT $2",
        )
        .bind(self.infra.clock.now_ms() - LEFT_FOR_THE_REQUEST_MS)
        .bind(PER_ROUND)
        .fetch_all(&self.infra.db.pool)
        .await?;
        let mut remarks = Vec::with_capacity(rows.len());
        for row in &rows {
            remarks.push(RemarkCreated {
                remark_id: row.try_get("remark_id")?,
                author_id: row.try_get("author_id")?,
                created_at_ms: row.try_get("created_at_ms")?,
            });
        }
        Ok(remarks)
    }

    /// Announces what requests could not, until the instance shuts down.
    pub fn spawn_announcer(&self) {
        let remarks = self.clone();
        let shutdown = self.infra.instance.shutdown.clone();
        self.infra.instance.spawn("remark-announcer", async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(ANNOUNCER_EVERY) => {}
                    () = shutdown.cancelled() => return,
                }
                let round: AppResult<usize> = async {
                    let left = remarks.unannounced().await?;
                    remarks.announce(&left).await?;
                    Ok(left.len())
                }
                .await;
                match round {
                    Ok(0) => {}
                    Ok(announced) => {
                        tracing::info!(announced, "remarks announced after their requests")
                    }
                    Err(error) => {
                        tracing::warn!(%error, "remarks left unannounced; tried again shortly")
                    }
                }
            }
        });
    }
}
