//! The GraphQL schema: the types of each domain (one file each) and the roots assembled from
//! the per-feature resolver roots of `src/api/resolvers/`.
//!
//! Adding a feature means adding its files and naming its roots once in the tuples below.

pub mod errors;
pub mod items;
pub mod jobs;
pub mod leaderboard;
pub mod nearby;
pub mod page;
pub mod points;
pub mod remarks;
pub mod signin;
pub mod users;
pub mod vouchers;

use async_graphql::{dataloader::DataLoader, Context, MergedObject, MergedSubscription, Schema};

use crate::{
    api::resolvers, app::AppState, features::remarks::likes::LikeInfoLoader,
    features::users::UserLoader,
};

#[derive(MergedObject, Default)]
#[graphql(name = "Query")]
pub struct QueryRoot(
    resolvers::users::UserQuery,
    resolvers::items::ItemQuery,
    resolvers::remarks::RemarkQuery,
    resolvers::signin::SignInQuery,
    resolvers::points::PointsQuery,
    resolvers::leaderboard::LeaderboardQuery,
    resolvers::jobs::JobQuery,
    resolvers::vouchers::VoucherQuery,
    resolvers::feed::FeedQuery,
    resolvers::nearby::NearbyQuery,
);

#[derive(MergedObject, Default)]
#[graphql(name = "Mutation")]
pub struct MutationRoot(
    resolvers::items::ItemMutation,
    resolvers::remarks::RemarkMutation,
    resolvers::signin::SignInMutation,
    resolvers::points::PointsMutation,
    resolvers::jobs::JobMutation,
    resolvers::vouchers::VoucherMutation,
    resolvers::feed::FeedMutation,
);

#[derive(MergedSubscription, Default)]
#[graphql(name = "Subscription")]
pub struct SubscriptionRoot(
    resolvers::system::SystemSubscription,
    resolvers::remarks::RemarkSubscription,
    resolvers::leaderboard::LeaderboardSubscription,
    resolvers::vouchers::VoucherSubscription,
);

pub type AppSchema = Schema<QueryRoot, MutationRoot, SubscriptionRoot>;

/// Builds the schema. Without state it can only print its SDL (`engage schema`).
pub fn build(state: Option<AppState>) -> AppSchema {
    let mut builder = Schema::build(
        QueryRoot::default(),
        MutationRoot::default(),
        SubscriptionRoot::default(),
    )
    .extension(errors::ErrorCodes)
    // Admission refuses documents nested deeper than this before they reach the schema
    // (`http::document`); the schema's own check stays as a second line. `limit_depth`
    // (far lower) then gives the precise validation error.
    .limit_recursive_depth(crate::api::http::document::MAX_NESTING);
    if let Some(state) = state {
        builder = builder
            .limit_depth(state.config.max_depth)
            .limit_complexity(state.config.max_complexity)
            .data(DataLoader::new(
                UserLoader(state.users.clone()),
                tokio::spawn,
            ))
            .data(DataLoader::new(LikeInfoLoader(state.clone()), tokio::spawn))
            .data(DataLoader::new(
                vouchers::StockLoader(state.clone()),
                tokio::spawn,
            ))
            .data(state);
    }
    builder.finish()
}

/// The SDL as `schema.graphql` holds it.
pub fn sdl() -> String {
    build(None).sdl()
}

/// Access to the shared state from a resolver.
pub trait ContextExt {
    fn state(&self) -> &AppState;
}

impl ContextExt for Context<'_> {
    fn state(&self) -> &AppState {
        self.data_unchecked::<AppState>()
    }
}

/// The largest page any list field returns (`first` above this is an input error).
pub const MAX_PAGE_SIZE: i32 = 100;

/// Checks a `first` argument: 1..=100.
pub fn page_size(first: i32) -> crate::infra::error::AppResult<usize> {
    if (1..=MAX_PAGE_SIZE).contains(&first) {
        Ok(first as usize)
    } else {
        Err(crate::infra::error::AppError::bad_input(format!(
            "first must be between 1 and {MAX_PAGE_SIZE}, got {first}"
        )))
    }
}
