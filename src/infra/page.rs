//! The arguments of one page of a list, as the API validated them and as the features read
//! them (`api/schema/page.rs` builds them from `first`/`after` or `last`/`before`).

/// How many rows to read, and where the previous page ended: a key range ([`KeyRange`],
/// keyset lists), a position (`usize`, offset lists) or a list's own cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct PageArgs<After> {
    pub(crate) first: usize,
    pub(crate) after: After,
}

/// Where a page of a keyset list (newest first by an integer key) lies: the keys below
/// `after` and above `before` (either bound may be absent), `first` of them read from the
/// newest end, or from the oldest end when `backward` (a `last` page: the rows just newer
/// than `before`). Either way the rows come back newest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) struct KeyRange {
    pub(crate) after: Option<i64>,
    pub(crate) before: Option<i64>,
    pub(crate) backward: bool,
}

impl KeyRange {
    /// The end of a keyset query over the column `key`, its parameters numbered from `$n`:
    /// `key < $n AND key > $n+1 ORDER BY key DESC LIMIT $n+2` (`ASC` when backward, so that
    /// the rows nearest `before` come first; [`crate::infra::db::Db::keyset_page`] binds
    /// the three and puts the rows back newest first). Both directions walk the same index.
    pub(crate) fn sql_tail(&self, key: &str, n: usize) -> String {
        let order = if self.backward { "ASC" } else { "DESC" };
        format!(
            "{key} < ${n} AND {key} > ${} ORDER BY {key} {order} LIMIT ${}",
            n + 1,
            n + 2
        )
    }
}

/// A page read with `LIMIT first + 1`: the first `first` rows, and whether more follow.
pub(crate) fn split_page<T>(mut rows: Vec<T>, first: usize) -> (Vec<T>, bool) {
    let more = rows.len() > first;
    rows.truncate(first);
    (rows, more)
}
