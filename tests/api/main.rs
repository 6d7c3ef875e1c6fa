//! Integration tests: the whole app against real Redis and real SQL.
//! One test binary with a module per feature keeps linking time down.

mod harness;
/// Hostile documents, shared with the abuse run of `examples/`.
#[path = "../../examples/support/hostile.rs"]
mod hostile_documents;
/// The unpluggable TCP proxy, shared with the long fault suite of `examples/`.
#[path = "../../examples/support/plug.rs"]
mod plug;

mod abuse;
mod auth;
mod binary;
mod boards;
mod conventions;
mod crash;
mod daily_caps;
mod drain;
mod faults;
mod feed;
mod fuzz;
mod graphql_http;
mod hostile;
mod ids;
mod items;
mod jobs;
mod leaderboard;
mod limits;
mod lock;
mod metrics;
mod nodes;
mod notifications;
mod oidc;
mod pages;
mod paging;
mod payloads;
mod people;
mod points;
mod postgres_tls;
mod production;
mod queue;
mod recovery;
mod redis_tls;
mod remarks;
mod repeats;
mod scalars;
mod signin;
mod spending;
mod streaks;
mod via;
mod vouchers;
mod websocket;
mod ws_protocol;
