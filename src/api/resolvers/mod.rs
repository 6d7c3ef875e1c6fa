//! Root fields per domain. Resolvers are thin: they check arguments, call the domain layer
//! and map its records to schema types. No Redis commands, SQL or business rules here.

pub mod feed;
pub mod items;
pub mod jobs;
pub mod leaderboard;
pub mod nearby;
pub mod node;
pub mod points;
pub mod remarks;
pub mod signin;
pub mod system;
pub mod users;
pub mod vouchers;
