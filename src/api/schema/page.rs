//! Paging shared by every list field: its arguments and its cursors.
//!
//! - [`Limit`] is a list's `first`: its default (the one the SDL shows) and its largest
//!   value, checked in one place and priced in one place for the complexity limit.
//! - [`PageArgs`] is `first` and `after` validated together, the cursor decoded.
//! - [`PageInfo`] ends every `…Connection` (see `connection.rs`).
//! - [`text_cost`] prices a field whose text may be long.
//!
//! Complexity estimates the response: a field costs 1 (its name and a short value: a few
//! dozen bytes), a text that may be long costs one per [`TEXT_BYTES_PER_COMPLEXITY`] bytes
//! it may hold, and every list multiplies what it holds by the most rows it may return (its
//! `first`, or its fixed length). Within `ENGAGE_MAX_COMPLEXITY` (2000), a response holds
//! at most some 2000 × 256 bytes, half a megabyte, however the query is written, while a
//! page of 20 remarks with everything they have still fits.
//!
//! A cursor is `c` followed by a decimal number: the id of the last row of a page (keyset
//! lists), or the position after it (offset lists: nearby items, the admin view of jobs).
//! Anything else, a negative position, or a position beyond what the list serves is
//! `BAD_USER_INPUT`: a cursor is client input like any other, and arithmetic on an unchecked
//! position is how a crafted one used to overflow. The feed's cursor is its own
//! ([`PageArgs::decoded`]).

use async_graphql::SimpleObject;

use crate::infra::error::{AppError, AppResult};
pub use crate::infra::page::PageArgs;

/// Bytes of text one unit of complexity stands for.
pub const TEXT_BYTES_PER_COMPLEXITY: usize = 256;

/// The complexity of a text field that may hold up to `max_bytes`.
pub const fn text_cost(max_bytes: usize) -> usize {
    max_bytes.div_ceil(TEXT_BYTES_PER_COMPLEXITY)
}

/// The complexity of a list that always returns at most `rows` of `child_complexity`.
pub const fn list_cost(rows: usize, child_complexity: usize) -> usize {
    rows * child_complexity
}

/// How many rows a list field returns when asked for `first`.
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    default: i32,
    max: i32,
}

/// Every paged list: 20 rows unless asked, at most 100.
pub const PAGE: Limit = Limit::new(20, 100);

impl Limit {
    pub const fn new(default: i32, max: i32) -> Self {
        Self { default, max }
    }

    /// The argument's default, as `#[graphql(default_with = "…")]` wants it.
    pub const fn default_first(&self) -> Option<i32> {
        Some(self.default)
    }

    /// `first` checked: 1 to `max`, the default when the client sends `null`.
    pub fn first(&self, first: Option<i32>) -> AppResult<usize> {
        let first = first.unwrap_or(self.default);
        if (1..=self.max).contains(&first) {
            Ok(first as usize)
        } else {
            Err(AppError::bad_input(format!(
                "first must be between 1 and {}, got {first}",
                self.max
            )))
        }
    }

    /// What a field returning up to `first` children costs against the complexity limit
    /// (priced at the largest page it may return, a refused `first` included).
    pub fn cost(&self, first: Option<i32>, child_complexity: usize) -> usize {
        first.unwrap_or(self.default).clamp(1, self.max) as usize * child_complexity
    }
}

/// A list field's `first` and `after`, validated: `after` is the decoded cursor.
impl PageArgs<Option<i64>> {
    /// A keyset list's arguments: `after` is the id (or order) of the last row seen.
    pub fn keyset(first: Option<i32>, after: Option<&str>) -> AppResult<Self> {
        Self::decoded(first, after, decode_cursor)
    }
}

impl PageArgs<usize> {
    /// An offset list's arguments: `after` is the position after the last row seen, at most
    /// `max` (the list serves its first `max` rows).
    pub fn offset(first: Option<i32>, after: Option<&str>, max: usize) -> AppResult<Self> {
        Self::decoded(first, after, |after| decode_offset_cursor(after, max))
    }
}

impl<After> PageArgs<After> {
    /// Arguments whose cursor a list decodes in its own way.
    pub fn decoded(
        first: Option<i32>,
        after: Option<&str>,
        decode: impl FnOnce(Option<&str>) -> AppResult<After>,
    ) -> AppResult<Self> {
        Ok(Self {
            first: PAGE.first(first)?,
            after: decode(after)?,
        })
    }
}

#[derive(SimpleObject, Clone, Debug)]
pub struct PageInfo {
    pub has_next_page: bool,
    pub end_cursor: Option<String>,
}

/// Cursors are opaque to clients; here they carry the id of the last row of a page.
pub fn encode_cursor(id: i64) -> String {
    format!("c{id}")
}

/// Characters of a refused cursor quoted back in the error (a cursor may be a whole body).
const QUOTED: usize = 32;

fn not_a_cursor(cursor: &str) -> AppError {
    let quoted: String = cursor.chars().take(QUOTED).collect();
    let more = if cursor.chars().count() > QUOTED {
        "…"
    } else {
        ""
    };
    AppError::bad_input(format!("not a cursor of this list: {quoted:?}{more}"))
}

/// The id a keyset cursor carries.
pub fn decode_cursor(cursor: Option<&str>) -> AppResult<Option<i64>> {
    cursor
        .map(|c| {
            c.strip_prefix('c')
                .filter(|number| {
                    let digits = number.strip_prefix('-').unwrap_or(number);
                    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
                })
                .and_then(|number| number.parse::<i64>().ok())
                .ok_or_else(|| not_a_cursor(c))
        })
        .transpose()
}

/// The position an offset cursor carries (0 without one). Positions run from 0 to `max`:
/// a list that pages by offset serves its first `max` rows only, so that a page's cost
/// stays bounded however far a client pages.
pub fn decode_offset_cursor(cursor: Option<&str>, max: usize) -> AppResult<usize> {
    let (Some(text), Some(position)) = (cursor, decode_cursor(cursor)?) else {
        return Ok(0);
    };
    let position = usize::try_from(position).map_err(|_| not_a_cursor(text))?;
    if position > max {
        return Err(AppError::bad_input(format!(
            "the cursor is past the end: this list serves its first {max} rows"
        )));
    }
    Ok(position)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::error::ErrorCode;

    #[test]
    fn offset_cursors_are_bounded_and_malformed_ones_refused() {
        assert_eq!(decode_offset_cursor(None, 1000).unwrap(), 0);
        assert_eq!(decode_offset_cursor(Some("c0"), 1000).unwrap(), 0);
        assert_eq!(decode_offset_cursor(Some("c1000"), 1000).unwrap(), 1000);
        let huge = format!("c{}", "9".repeat(50_000));
        for bad in [
            "",
            "c",
            "c-1",
            "c1001",
            "c+5",
            "c 5",
            "Y3Vyc29yOjU=",
            "c9223372036854775807",
            "c99999999999999999999",
            huge.as_str(),
        ] {
            let error = decode_offset_cursor(Some(bad), 1000).unwrap_err();
            assert_eq!(error.code(), ErrorCode::BadUserInput, "{bad:?}");
            assert!(error.to_string().len() < 120, "{error}");
        }
    }
}
