//! The one connection type: every `…Connection` of the schema is [`Connection`] of its
//! node, and every `…Edge` is [`Edge`]. The concrete names are the schema's; a new list adds
//! its line to both.

use async_graphql::{OutputType, SimpleObject};

use super::{
    boards::Board,
    items::Item,
    jobs::Job,
    nearby::NearbyItem,
    notifications::Notification,
    page::{cursor_sides, encode_cursor, KeyRange, PageArgs, PageInfo},
    points::PointsEntry,
    remarks::Remark,
    users::User,
    vouchers::Order,
};

// One page of a list (no doc comment: the SDL names each connection only).
#[derive(SimpleObject)]
#[graphql(
    concrete(name = "BoardConnection", params(Board)),
    concrete(name = "ItemConnection", params(Item)),
    concrete(name = "JobConnection", params(Job)),
    concrete(name = "NearbyItemConnection", params(NearbyItem)),
    concrete(name = "NotificationConnection", params(Notification)),
    concrete(name = "OrderConnection", params(Order)),
    concrete(name = "PointsRecordConnection", params(PointsEntry)),
    concrete(name = "RemarkConnection", params(Remark)),
    concrete(name = "UserConnection", params(User))
)]
pub(crate) struct Connection<Node: OutputType>
where
    Edge<Node>: OutputType,
{
    pub(crate) edges: Vec<Edge<Node>>,
    pub(crate) page_info: PageInfo,
}

#[derive(SimpleObject)]
#[graphql(
    concrete(name = "BoardEdge", params(Board)),
    concrete(name = "ItemEdge", params(Item)),
    concrete(name = "JobEdge", params(Job)),
    concrete(name = "NearbyItemEdge", params(NearbyItem)),
    concrete(name = "NotificationEdge", params(Notification)),
    concrete(name = "OrderEdge", params(Order)),
    concrete(name = "PointsRecordEdge", params(PointsEntry)),
    concrete(name = "RemarkEdge", params(Remark)),
    concrete(name = "UserEdge", params(User))
)]
pub(crate) struct Edge<Node: OutputType> {
    pub(crate) cursor: String,
    pub(crate) node: Node,
}

impl<Node: OutputType> Connection<Node>
where
    Edge<Node>: OutputType,
{
    /// Edges that carry their own cursors: the first one's is where the previous page ends,
    /// the last one's where the next page starts.
    pub(crate) fn new(
        edges: Vec<Edge<Node>>,
        has_next_page: bool,
        has_previous_page: bool,
    ) -> Self {
        let end_cursor = edges.last().map(|edge| edge.cursor.clone());
        Self::with_end(edges, has_next_page, has_previous_page, end_cursor)
    }

    fn with_end(
        edges: Vec<Edge<Node>>,
        has_next_page: bool,
        has_previous_page: bool,
        end_cursor: Option<String>,
    ) -> Self {
        let start_cursor = edges.first().map(|edge| edge.cursor.clone());
        Self {
            edges,
            page_info: PageInfo {
                has_next_page,
                has_previous_page,
                start_cursor,
                end_cursor,
            },
        }
    }

    /// A keyset page: each node's cursor is its key. `more` says whether rows lie beyond
    /// the page in the direction it was read ([`cursor_sides`]).
    pub(crate) fn keyset(
        nodes: impl IntoIterator<Item = Node>,
        key: impl Fn(&Node) -> i64,
        page: &PageArgs<KeyRange>,
        more: bool,
    ) -> Self {
        let edges = nodes
            .into_iter()
            .map(|node| Edge {
                cursor: encode_cursor(key(&node)),
                node,
            })
            .collect();
        let range = page.after;
        let (has_next_page, has_previous_page) = cursor_sides(
            range.backward,
            range.after.is_some(),
            range.before.is_some(),
            more,
        );
        Self::new(edges, has_next_page, has_previous_page)
    }

    /// An offset page read from position `offset` up to `end`: each node comes with its
    /// position, and its cursor is the position after it. A row that vanished between the
    /// two reads leaves no edge, yet the next page still starts at `end`. Rows precede the
    /// page when it starts past position 0.
    pub(crate) fn offset(
        nodes: impl IntoIterator<Item = (usize, Node)>,
        offset: usize,
        end: usize,
        has_next_page: bool,
    ) -> Self {
        let edges = nodes
            .into_iter()
            .map(|(position, node)| Edge {
                cursor: encode_cursor(position as i64 + 1),
                node,
            })
            .collect();
        let end_cursor = (end > offset).then(|| encode_cursor(end as i64));
        Self::with_end(edges, has_next_page, offset > 0, end_cursor)
    }
}
