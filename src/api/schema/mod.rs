//! The GraphQL schema: the types of each domain (one file each) and the roots assembled from
//! the per-feature resolver roots of `src/api/resolvers/`.
//!
//! Adding a feature means adding its files and naming its roots once in the tuples below.

pub mod connection;
pub mod errors;
pub mod id;
pub mod items;
pub mod jobs;
pub mod leaderboard;
pub mod nearby;
pub mod node;
pub mod page;
pub mod points;
pub mod remarks;
pub mod signin;
pub mod users;
pub mod vouchers;

use async_graphql::{dataloader::DataLoader, Context, MergedObject, MergedSubscription, Schema};

use crate::{
    api::resolvers,
    features::{remarks::likes::LikeInfoLoader, users::UserLoader, Features},
    infra::{clock::Clock, config::Config, Infra},
};

/// The root query fields that read only public data, the same for every anonymous viewer
/// (a field that depends on the viewer answers alike for all of them: `likedByMe` false,
/// `Leaderboard.me` null). An anonymous GET query of these alone, answered without errors,
/// may be kept by browsers and shared caches for `ENGAGE_PUBLIC_MAX_AGE_SECONDS`
/// (`api::http::graphql`). A root field added here must stay so, whatever it later grows:
/// nothing in it may read the viewer beyond what an anonymous one sees, nor anything
/// private (jobs, orders, points). `viewer` is left out: null for everyone anonymous, and
/// not worth a cache entry. `node` and `nodes` are left out too: given the right id they
/// answer an order (to its buyer) or a job (to an admin), private data this list keeps out,
/// even though an anonymous viewer is answered neither.
pub const PUBLIC_READS: &[&str] = &[
    "__typename",
    "item",
    "remarks",
    "recommendedRemarks",
    "seasons",
    "leaderboard",
    "voucher",
    "vouchers",
    "nearbyItems",
    "errorCodes",
];

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
    resolvers::system::SystemQuery,
    resolvers::node::NodeQuery,
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

/// The fields of the `Subscription` type.
pub fn subscription_fields() -> Vec<String> {
    let mut registry = async_graphql::registry::Registry::default();
    // The name of a type as a field's type: `Subscription!`.
    let name =
        <SubscriptionRoot as async_graphql::SubscriptionType>::create_type_info(&mut registry);
    registry
        .types
        .get(name.trim_end_matches('!'))
        .and_then(|subscription| subscription.fields())
        .map(|fields| {
            fields
                .keys()
                .filter(|field| !field.starts_with("__"))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// Builds the schema. Without an instance it can only print its SDL (`engage schema`).
pub fn build(instance: Option<(&Config, &Infra, &Features)>) -> AppSchema {
    let mut builder = Schema::build(
        QueryRoot::default(),
        MutationRoot::default(),
        SubscriptionRoot::default(),
    )
    // Admission refuses documents nested deeper than this before they reach the schema
    // (`http::document`); the schema's own check stays as a second line. `limit_depth`
    // (far lower) then gives the precise validation error.
    .limit_recursive_depth(crate::api::http::document::MAX_NESTING);
    if let Some((config, infra, features)) = instance {
        infra.instance.open.known_fields(subscription_fields());
        // Each resolver takes the one feature context it calls (`ContextExt::feature`).
        if !config.introspection_enabled() {
            builder = builder.disable_introspection();
        }
        if config.is_production() {
            // "Did you mean …" names fields a client was not told about.
            builder = builder.disable_suggestions();
        }
        builder = builder
            .limit_depth(config.max_depth)
            .limit_complexity(config.max_complexity)
            .data(DataLoader::new(
                UserLoader(features.users.clone()),
                tokio::spawn,
            ))
            .data(DataLoader::new(
                LikeInfoLoader(features.remarks.clone()),
                tokio::spawn,
            ))
            .data(DataLoader::new(
                vouchers::StockLoader(features.vouchers.clone()),
                tokio::spawn,
            ))
            .data(infra.clock.clone())
            .data(infra.instance.clone())
            .data(features.users.clone())
            .data(features.items.clone())
            .data(features.nearby.clone())
            .data(features.points.clone())
            .data(features.signin.clone())
            .data(features.leaderboard.clone())
            .data(features.remarks.clone())
            .data(features.feed.clone())
            .data(features.jobs.clone())
            .data(features.vouchers.clone());
    }
    builder.finish()
}

/// The SDL as `schema.graphql` holds it.
pub fn sdl() -> String {
    build(None).sdl()
}

/// What a resolver reads from the schema's data.
pub trait ContextExt {
    /// One feature's context (or the user directory, or this instance), as [`build`] put it.
    fn feature<T: std::any::Any + Send + Sync>(&self) -> &T;
    /// The clock, to show times in the service's time zone.
    fn clock(&self) -> &Clock;
}

impl ContextExt for Context<'_> {
    fn feature<T: std::any::Any + Send + Sync>(&self) -> &T {
        self.data_unchecked::<T>()
    }

    fn clock(&self) -> &Clock {
        self.data_unchecked::<Clock>()
    }
}
