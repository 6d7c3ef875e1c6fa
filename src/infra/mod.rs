//! What every feature is built on, and that knows no feature: the Redis connection and key
//! builder, SQL, the clock, IDs, errors, configuration, tokens, the stream worker, the live
//! hub, the lock and the recovery toolkit.

pub mod auth;
pub mod backoff;
pub mod cache;
pub mod clock;
pub mod config;
pub mod db;
pub mod error;
pub mod ids;
pub mod live;
pub mod lock;
pub mod metrics;
pub mod recovery;
pub mod redis;
pub mod streams;
