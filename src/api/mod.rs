//! What clients see: the GraphQL schema (types in [`schema`], root fields in [`resolvers`],
//! one file per feature in each) and the transports that carry it ([`http`]: POST, GET,
//! persisted queries and both WebSocket protocols, behind one admission path).

pub mod http;
pub mod resolvers;
pub mod schema;
