//! A profile's remarks: the remarks of one author, newest first, and how many there are.
//! Read from SQL (`remarks_by_author`), the record of remarks, as an item's remarks are.

use sqlx::Row;

use super::{RemarkRecord, Remarks, COLUMNS};
use crate::infra::{
    error::AppResult,
    page::{KeyRange, PageArgs},
};

impl Remarks {
    /// A page of `author_id`'s remarks, newest first.
    pub(crate) async fn by_author(
        &self,
        author_id: i64,
        page: PageArgs<KeyRange>,
    ) -> AppResult<(Vec<RemarkRecord>, bool)> {
        let sql = format!(
            "SELECT {COLUMNS} FROM remarks WHERE author_id = $1 AND {}",
            page.after.sql_tail("id", 2)
        );
        let query = sqlx::query(&sql).bind(author_id);
        self.infra
            .db
            .keyset_page(query, page, RemarkRecord::from_row)
            .await
    }

    /// How many remarks `author_id` has, in SQL.
    pub(crate) async fn count_by_author(&self, author_id: i64) -> AppResult<i64> {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM remarks WHERE author_id = $1")
            .bind(author_id)
            .fetch_one(&self.infra.db.pool)
            .await?;
        Ok(row.try_get("n")?)
    }
}
