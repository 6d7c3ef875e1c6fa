//! Integration tests: the whole app against real Redis and real SQL.
//! One test binary with a module per feature keeps linking time down.

mod harness;
/// The unpluggable TCP proxy, shared with the long fault suite of `examples/`.
#[path = "../../examples/support/plug.rs"]
mod plug;

mod abuse;
mod auth;
mod faults;
mod feed;
mod fuzz;
mod graphql_http;
mod ids;
mod items;
mod jobs;
mod leaderboard;
mod limits;
mod lock;
mod pages;
mod points;
mod remarks;
mod signin;
mod vouchers;
mod websocket;
