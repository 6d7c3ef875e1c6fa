//! A profile's remarks: the remarks of one author, newest first, and how many there are.
//! Read from SQL (`remarks_by_author`), the record of remarks, as an item's remarks are.

use sqlx::Row;

use super::{RemarkRecord, Remarks, COLUMNS, LISTED};
use crate::infra::{
    error::AppResult,
    page::{KeyRange, PageArgs},
};

impl Remarks {
    /// A page of `author_id`'s remarks, newest first: never the deleted ones, the hidden
    /// ones only `with_hidden` (for their author and admins).
    pub(crate) async fn by_author(
        &self,
        author_id: i64,
        with_hidden: bool,
        page: PageArgs<KeyRange>,
    ) -> AppResult<(Vec<RemarkRecord>, bool)> {
        let shown = if with_hidden {
            "deleted_at_ms IS NULL"
        } else {
            LISTED
        };
        let sql = format!(
            "SELECT {COLUMNS} FROM remarks WHERE author_id = $1 AND {shown} AND {}",
            page.after.sql_tail("id", 2)
        );
        let query = sqlx::query(&sql).bind(author_id);
        self.infra
            .db
            .keyset_page(query, page, RemarkRecord::from_row)
            .await
    }

    /// How many remarks of `author_id` are shown in public lists, in SQL.
    pub(crate) async fn count_by_author(&self, author_id: i64) -> AppResult<i64> {
        let row = sqlx::query(&format!(
            "SELECT COUNT(*) AS n FROM remarks WHERE author_id = $1 AND {LISTED}"
        ))
        .bind(author_id)
        .fetch_one(&self.infra.db.pool)
        .await?;
        Ok(row.try_get("n")?)
    }
}
