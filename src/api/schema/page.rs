//! Paging shared by every list field: its arguments and its cursors.
//!
//! - [`Limit`] is a list's `first` (or `last`): its default and its largest value, checked
//!   in one place and priced in one place for the complexity limit.
//! - [`PageArgs`] is `first` and `after` (and, where a list pages backward, `last` and
//!   `before`) validated together, the cursors decoded.
//! - [`PageInfo`] ends every `…Connection` (see `connection.rs`), as the Relay cursor
//!   connections specification has it.
//! - [`text_cost`] prices a field whose text may be long.
//!
//! Complexity estimates the response: a field costs 1 (its name and a short value: a few
//! dozen bytes), a text that may be long costs one per [`TEXT_BYTES_PER_COMPLEXITY`] bytes
//! it may hold, and every list multiplies what it holds by the most rows it may return (its
//! `first` or `last`, or its fixed length). Within `ENGAGE_MAX_COMPLEXITY` (2000), a
//! response holds at most some 2000 × 256 bytes, half a megabyte, however the query is
//! written, while a page of 20 remarks with everything they have still fits.
//!
//! A cursor is `c` followed by a decimal number: the id of its row (keyset
//! lists), or the position after it (offset lists: nearby items, the admin view of jobs).
//! Anything else, a negative position, or a position beyond what the list serves is
//! `BAD_USER_INPUT`: a cursor is client input like any other, and arithmetic on an unchecked
//! position is how a crafted one used to overflow. The feed's cursor is its own (an
//! entry's score and member).
//!
//! Backward paging (`last`, `before`) is served where the order is a stable key: the keyset
//! lists (`remarks`, `myOrders`, `pointsHistory`: an id or event order with an index, read
//! in reverse as cheaply as forward) and the feed (a score and member, each sorted set it
//! merges read upward from `before` as it is read downward from `after`). `first` and
//! `last` together are refused (the specification discourages them, and a page cut at
//! both ends has no use); `after` and `before` together bound the range at both ends, as
//! the specification's algorithm does. The offset lists page forward only: `nearbyItems`
//! is sorted by distance from the point asked, recomputed by each search, so its cursors
//! are positions that an item moving shifts (counting back from one would skip or repeat
//! items), and `jobs` is an admin view by position in sets that the queue keeps moving.
//!
//! `hasPreviousPage` and `hasNextPage` follow the specification: the side a page was read
//! towards is exact (one row more than asked was read); the other side is known without a
//! read on a keyset list or the feed, since a cursor there is the key of a row the client was served
//! (`after` given: rows precede the page; `before` given: rows follow it). An offset list
//! knows it from the position (`after` past position 0: rows precede the page).
//!
//! No connection has `totalCount`: none of its lists has a count that Redis or SQL already
//! keeps. An item's remarks, a buyer's orders and a user's points history would each be a
//! `COUNT(*)` over an index range that grows with the list; the feed is a merge of several
//! sorted sets (an inbox and outboxes) with no count of the merge; a nearby search would
//! count every item in its radius; and the sets behind `jobs` hold entries whose job has
//! moved on (the list skips them), the done and the cancelled share one set, and the dead
//! are SQL rows, so a `ZCARD` or `LLEN` would count rows the list does not show.

use async_graphql::SimpleObject;

use crate::infra::error::{AppError, AppResult};
pub(crate) use crate::infra::page::{KeyRange, PageArgs};

/// Bytes of text one unit of complexity stands for.
pub(crate) const TEXT_BYTES_PER_COMPLEXITY: usize = 256;

/// The complexity of a text field that may hold up to `max_bytes`.
pub(crate) const fn text_cost(max_bytes: usize) -> usize {
    max_bytes.div_ceil(TEXT_BYTES_PER_COMPLEXITY)
}

/// The complexity of a list that always returns at most `rows` of `child_complexity`.
pub(crate) const fn list_cost(rows: usize, child_complexity: usize) -> usize {
    rows * child_complexity
}

/// How many rows a list field returns when asked for `first`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limit {
    default: i32,
    max: i32,
}

/// Every paged list: 20 rows unless asked, at most 100.
pub(crate) const PAGE: Limit = Limit::new(20, 100);

impl Limit {
    pub(crate) const fn new(default: i32, max: i32) -> Self {
        Self { default, max }
    }

    /// The argument's default, as `#[graphql(default_with = "…")]` wants it.
    pub(crate) const fn default_first(&self) -> Option<i32> {
        Some(self.default)
    }

    /// `first` checked: 1 to `max`, the default when the client sends `null`.
    pub(crate) fn first(&self, first: Option<i32>) -> AppResult<usize> {
        self.rows("first", first.unwrap_or(self.default))
    }

    /// `first` or `last` checked (one of them, never both): the rows asked, and whether they
    /// are read backward (`last`). Neither: the default, forward.
    pub(crate) fn first_or_last(
        &self,
        first: Option<i32>,
        last: Option<i32>,
    ) -> AppResult<(usize, bool)> {
        match (first, last) {
            (Some(_), Some(_)) => Err(AppError::bad_input(
                "give first or last, not both: first pages forward from after, last backward from before",
            )),
            (_, Some(last)) => Ok((self.rows("last", last)?, true)),
            (first, None) => Ok((self.first(first)?, false)),
        }
    }

    fn rows(&self, name: &str, rows: i32) -> AppResult<usize> {
        if (1..=self.max).contains(&rows) {
            Ok(rows as usize)
        } else {
            Err(AppError::bad_input(format!(
                "{name} must be between 1 and {}, got {rows}",
                self.max
            )))
        }
    }

    /// What a field returning up to `first` children costs against the complexity limit
    /// (priced at the largest page it may return, a refused `first` included).
    pub(crate) fn cost(&self, first: Option<i32>, child_complexity: usize) -> usize {
        first.unwrap_or(self.default).clamp(1, self.max) as usize * child_complexity
    }

    /// [`Limit::cost`] of a list that pages both ways: `last` is priced like `first`, and
    /// both given (refused when run) at the larger.
    pub(crate) fn cost_either(
        &self,
        first: Option<i32>,
        last: Option<i32>,
        child_complexity: usize,
    ) -> usize {
        match (first, last) {
            (None, Some(last)) => self.cost(Some(last), child_complexity),
            (first, last) => self
                .cost(first, child_complexity)
                .max(last.map_or(0, |last| self.cost(Some(last), child_complexity))),
        }
    }
}

/// A keyset list's `first`/`after` and `last`/`before`, validated: the cursors are decoded
/// to the keys bounding the page.
impl PageArgs<KeyRange> {
    pub(crate) fn keyset(
        first: Option<i32>,
        after: Option<&str>,
        last: Option<i32>,
        before: Option<&str>,
    ) -> AppResult<Self> {
        let (rows, backward) = PAGE.first_or_last(first, last)?;
        Ok(Self {
            first: rows,
            after: KeyRange {
                after: decode_cursor(after)?,
                before: decode_cursor(before)?,
                backward,
            },
        })
    }
}

impl PageArgs<usize> {
    /// An offset list's arguments: `after` is the position after the last row seen, at most
    /// `max` (the list serves its first `max` rows).
    pub(crate) fn offset(first: Option<i32>, after: Option<&str>, max: usize) -> AppResult<Self> {
        Self::decoded(first, after, |after| decode_offset_cursor(after, max))
    }
}

impl<After> PageArgs<After> {
    /// Arguments whose cursor a list decodes in its own way.
    pub(crate) fn decoded(
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

/// `hasNextPage` and `hasPreviousPage` of a page of a list keyed by its cursors (a keyset
/// list, the feed), read `backward` (`last`) or forward, with `more` rows beyond it in the
/// direction read: that side is exact, the other is known from the cursor given there.
pub(crate) fn cursor_sides(backward: bool, after: bool, before: bool, more: bool) -> (bool, bool) {
    if backward {
        (before, more)
    } else {
        (more, after)
    }
}

/// Where a page lies in its list (the Relay cursor connections specification's).
#[derive(SimpleObject, Clone, Debug)]
pub(crate) struct PageInfo {
    /// Rows follow the page: exact when paging forward (`first`); when paging backward,
    /// true when `before` was given.
    pub(crate) has_next_page: bool,
    /// Rows precede the page: exact when paging backward (`last`); when paging forward,
    /// true when `after` was given (on `nearbyItems` and `jobs`: when it is past the start).
    pub(crate) has_previous_page: bool,
    /// The first edge's cursor; null without edges.
    pub(crate) start_cursor: Option<String>,
    /// The last edge's cursor; null without edges (on `nearbyItems` and `jobs`, the position
    /// the next page starts at, even when a row of this one vanished).
    pub(crate) end_cursor: Option<String>,
}

/// Cursors are opaque to clients; here they carry the id of the last row of a page.
pub(crate) fn encode_cursor(id: i64) -> String {
    let mut cursor = String::with_capacity(21);
    cursor.push('c');
    cursor.push_str(itoa::Buffer::new().format(id));
    cursor
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
pub(crate) fn decode_cursor(cursor: Option<&str>) -> AppResult<Option<i64>> {
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
pub(crate) fn decode_offset_cursor(cursor: Option<&str>, max: usize) -> AppResult<usize> {
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
