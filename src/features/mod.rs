//! The features, one folder each: domain rules, keys, script wrappers, SQL, stream
//! consumers, live streams and recovery. A feature imports infra and, where one feature is
//! built on another, that feature (sign-in awards points); never the API or the wiring.

pub mod feed;
pub mod items;
pub mod jobs;
pub mod leaderboard;
pub mod nearby;
pub mod points;
pub mod recovery;
pub mod remarks;
pub mod signin;
pub mod users;
pub mod vouchers;
