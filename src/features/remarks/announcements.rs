//! The announcement of a new remark on the remark stream ([`RemarkCreated`]), which the
//! feed's fan-out and the points for writing a remark read: an outbox in SQL
//! (`remark_announcements`, emptied as `infra::outbox` says), so that a remark that was
//! acknowledged is announced even when Redis refused the announcement then.
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

use sqlx::{any::AnyRow, Row};

use super::{events::RemarkCreated, Remarks};
use crate::infra::{error::AppResult, outbox::Outbox, streams, Infra};

/// The outbox of remark announcements.
#[derive(Clone)]
pub(crate) struct Announcements(pub Remarks);

#[async_trait::async_trait]
impl Outbox for Announcements {
    type Entry = RemarkCreated;
    const NAME: &'static str = "remark-announcer";
    const TABLE: &'static str = "remark_announcements";
    const ID: &'static str = "remark_id";
    const COLUMNS: &'static str = "remark_id, author_id, created_at_ms";

    fn infra(&self) -> &Infra {
        &self.0.infra
    }

    fn entry_of(row: &AnyRow) -> Result<RemarkCreated, sqlx::Error> {
        Ok(RemarkCreated {
            remark_id: row.try_get("remark_id")?,
            author_id: row.try_get("author_id")?,
            created_at_ms: row.try_get("created_at_ms")?,
        })
    }

    fn id_of(remark: &RemarkCreated) -> i64 {
        remark.remark_id
    }

    /// Announces stored remarks on the remark stream, in one round trip.
    async fn deliver(&self, remarks: &[RemarkCreated]) -> AppResult<()> {
        let infra = &self.0.infra;
        streams::publish_all(infra, &infra.keys.remark_stream(), remarks).await
    }
}

impl Remarks {
    /// The outbox of this feature's announcements.
    pub(crate) fn announcements(&self) -> Announcements {
        Announcements(self.clone())
    }
}
