//! The arguments of one page of a list, as the API validated them and as the features read
//! them (`api/schema/page.rs` builds them from `first` and `after`).

/// How many rows to read, and where the previous page ended: a key (`Option<i64>`, keyset
/// lists), a position (`usize`, offset lists) or a list's own cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PageArgs<After> {
    pub first: usize,
    pub after: After,
}

/// A page read with `LIMIT first + 1`: the first `first` rows, and whether more follow.
pub fn split_page<T>(mut rows: Vec<T>, first: usize) -> (Vec<T>, bool) {
    let more = rows.len() > first;
    rows.truncate(first);
    (rows, more)
}
