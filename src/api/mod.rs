//! What clients see: the GraphQL schema (types in [`schema`], root fields in [`resolvers`],
//! one file per feature in each), how subscriptions deliver their updates ([`live`]), and
//! the transports that carry it all ([`http`]: POST, GET, persisted queries and both
//! WebSocket protocols, behind one admission path). The transports import the rest, never
//! the other way round.

pub(crate) mod http;
pub(crate) mod live;
pub(crate) mod resolvers;
pub mod schema;
