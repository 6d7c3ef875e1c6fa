//! Root fields per domain. Resolvers are thin: they check arguments, call the domain layer
//! and map its records to schema types. No Redis commands, SQL or business rules here.

pub(crate) mod boards;
pub(crate) mod feed;
pub(crate) mod items;
pub(crate) mod jobs;
pub(crate) mod leaderboard;
pub(crate) mod nearby;
pub(crate) mod node;
pub(crate) mod notifications;
pub(crate) mod points;
pub(crate) mod remarks;
pub(crate) mod signin;
pub(crate) mod system;
pub(crate) mod users;
pub(crate) mod vouchers;
