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
//!
//! # What is public, and why
//!
//! The crate is a server, not a library: its one real entry point is the binary's
//! [`app::cli::run`]. Everything else is `pub(crate)` unless code outside the crate needs it:
//! - the integration tests (`tests/api`) start the app with [`app::App::start`] and look
//!   behind the API through the handles of [`app::Services`] (the infrastructure, the
//!   features' contexts, the token check), but only inside their harness, which names what
//!   a test does with them (`app.sql()`, `app.keys()`, `app.advance_clock(…)`); a few
//!   tests drive one part directly (locks, streams, outboxes, job handlers, recovery), and
//!   the types they build (events, claims, new jobs and orders) stay public for them;
//! - the load and fault programs of `examples/` use the same handles;
//! - the configuration ([`infra::config`]) is public as a whole: it is the contract of the
//!   environment variables.
//!
//! A `pub` item inside a `pub(crate)` module is crate-private all the same. Anything else
//! made public needs a user outside the crate; without one, the compiler's dead-code check
//! names it.

pub mod api;
pub mod app;
pub mod features;
pub mod infra;
