//! Cursor paging shared by every connection type.

use async_graphql::SimpleObject;

use crate::error::{AppError, AppResult};

#[derive(SimpleObject, Clone, Debug)]
pub struct PageInfo {
    pub has_next_page: bool,
    pub end_cursor: Option<String>,
}

/// Cursors are opaque to clients; here they carry the id of the last row of a page.
pub fn encode_cursor(id: i64) -> String {
    format!("c{id}")
}

pub fn decode_cursor(cursor: Option<&str>) -> AppResult<Option<i64>> {
    cursor
        .map(|c| {
            c.strip_prefix('c')
                .and_then(|id| id.parse::<i64>().ok())
                .ok_or_else(|| AppError::bad_input(format!("not a cursor of this list: {c:?}")))
        })
        .transpose()
}
