//! engage: a GraphQL backend for the engagement features of community and commerce apps.
//!
//! Redis is the hot path (every write one atomic Lua script), SQL the system of record,
//! Redis Streams carry events between them, and Redis pub/sub feeds GraphQL subscriptions.
//!
//! Four layers, each importing only the ones before it (ARCHITECTURE.md draws them):
//! - [`infra`]: connections, keys, clock, IDs, errors, the stream worker, the live hub;
//!   it knows no feature.
//! - [`features`]: one folder per feature (domain, keys, scripts, consumers, recovery).
//! - [`api`]: the GraphQL schema and resolvers, and the HTTP and WebSocket transports.
//! - [`app`]: the only wiring (state, background tasks, command line); nothing imports it.

pub mod api;
pub mod app;
pub mod features;
pub mod infra;
