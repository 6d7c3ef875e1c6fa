//! engage: a GraphQL backend for the engagement features of community and commerce apps.
//!
//! Redis is the hot path (every write one atomic Lua script), SQL the durable archive,
//! Redis Streams carry events between them, and Redis pub/sub feeds GraphQL subscriptions.
//! Each feature is a slice found by its name: `src/<feature>.rs` (domain and data access),
//! `src/schema/<feature>.rs` (types), `src/resolvers/<feature>.rs` (root fields),
//! `lua/<feature>_<action>.lua` and its migration.

pub mod app;
pub mod auth;
pub mod background;
pub mod backoff;
pub mod cache;
pub mod cli;
pub mod clock;
pub mod config;
pub mod db;
pub mod demo;
pub mod error;
pub mod feed;
pub mod http;
pub mod ids;
pub mod items;
pub mod jobs;
pub mod leaderboard;
pub mod live;
pub mod lock;
pub mod metrics;
pub mod nearby;
pub mod points;
pub mod recovery;
pub mod redis;
pub mod remarks;
pub mod resolvers;
pub mod schema;
pub mod signin;
pub mod streams;
pub mod users;
pub mod vouchers;
