//! The GraphQL schema: the types of each domain (one file each) and the roots assembled from
//! the per-feature resolver roots of `src/api/resolvers/`.
//!
//! Adding a feature means adding its files and naming its roots once in the tuples below.

pub(crate) mod boards;
pub(crate) mod connection;
pub(crate) mod errors;
pub(crate) mod feed;
pub(crate) mod id;
pub(crate) mod items;
pub(crate) mod jobs;
pub(crate) mod leaderboard;
pub(crate) mod nearby;
pub(crate) mod node;
pub(crate) mod notifications;
pub(crate) mod page;
pub(crate) mod points;
pub(crate) mod profiles;
pub(crate) mod remarks;
pub(crate) mod scalars;
pub(crate) mod signin;
pub(crate) mod users;
pub(crate) mod vouchers;

use async_graphql::{
    dataloader::DataLoader, Context, MergedObject, MergedSubscription, Schema, ValidationMode,
};

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
pub(crate) const PUBLIC_READS: &[&str] = &[
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
pub(crate) struct QueryRoot(
    resolvers::users::UserQuery,
    resolvers::items::ItemQuery,
    resolvers::remarks::RemarkQuery,
    resolvers::signin::SignInQuery,
    resolvers::points::PointsQuery,
    resolvers::leaderboard::LeaderboardQuery,
    resolvers::boards::BoardQuery,
    resolvers::jobs::JobQuery,
    resolvers::vouchers::VoucherQuery,
    resolvers::feed::FeedQuery,
    resolvers::nearby::NearbyQuery,
    resolvers::notifications::NotificationQuery,
    resolvers::system::SystemQuery,
    resolvers::node::NodeQuery,
);

#[derive(MergedObject, Default)]
#[graphql(name = "Mutation")]
pub(crate) struct MutationRoot(
    resolvers::users::UserMutation,
    resolvers::items::ItemMutation,
    resolvers::remarks::RemarkMutation,
    resolvers::signin::SignInMutation,
    resolvers::points::PointsMutation,
    resolvers::jobs::JobMutation,
    resolvers::vouchers::VoucherMutation,
    resolvers::feed::FeedMutation,
    resolvers::boards::BoardMutation,
    resolvers::notifications::NotificationMutation,
);

#[derive(MergedSubscription, Default)]
#[graphql(name = "Subscription")]
pub(crate) struct SubscriptionRoot(
    resolvers::system::SystemSubscription,
    resolvers::remarks::RemarkSubscription,
    resolvers::leaderboard::LeaderboardSubscription,
    resolvers::boards::BoardSubscription,
    resolvers::vouchers::VoucherSubscription,
    resolvers::jobs::JobSubscription,
    resolvers::notifications::NotificationSubscription,
);

pub(crate) type AppSchema = Schema<QueryRoot, MutationRoot, SubscriptionRoot>;

/// The deepest nesting of brackets a document may have, and the deepest a selection may
/// reach with its fragments inlined: admission refuses deeper documents before they are
/// parsed or validated (`api::http::document`), and the schema's own recursion limit is
/// the same, a second line. `ENGAGE_MAX_DEPTH` (far lower) then gives the precise
/// validation error for selections.
pub(crate) const MAX_NESTING: usize = 64;

/// The fields of the `Subscription` type.
pub(crate) fn subscription_fields() -> Vec<String> {
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
/// An instance builds it twice, validating strictly and fast
/// ([`crate::api::http::validated`]).
pub(crate) fn build(
    instance: Option<(&Config, &Infra, &Features)>,
    validation: ValidationMode,
) -> AppSchema {
    let mut builder = Schema::build(
        QueryRoot::default(),
        MutationRoot::default(),
        SubscriptionRoot::default(),
    )
    .validation_mode(validation)
    // Admission refuses documents nested deeper than this before they reach the schema;
    // the schema's own check stays as a second line. `limit_depth` (far lower) then gives
    // the precise validation error.
    .limit_recursive_depth(MAX_NESTING);
    if let Some((config, infra, features)) = instance {
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
                items::RatingsLoader(features.items.clone()),
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
            .data(features.boards.clone())
            .data(features.remarks.clone())
            .data(features.feed.clone())
            .data(features.jobs.clone())
            .data(features.vouchers.clone())
            .data(features.notifications.clone());
    }
    builder.finish()
}

/// The SDL as `schema.graphql` holds it. async-graphql also prints the definition of
/// `@deprecated` once a field uses it; that is left out, as graphql-js's `printSchema` leaves
/// out the directives the specification defines: every GraphQL tool knows it, and a copy
/// allowed in fewer places than a tool's own (graphql-js allows it on directive definitions
/// too) would replace the tool's, and read to the schema check as a location removed.
pub fn sdl() -> String {
    // `@specifiedBy` on each scalar is printed only when asked for.
    let options = async_graphql::SDLExportOptions::new().include_specified_by();
    let sdl = build(None, ValidationMode::Strict).sdl_with_options(options);
    ["deprecated", "specifiedBy"]
        .iter()
        .fold(sdl, |sdl, name| without_directive_definition(&sdl, name))
}

/// `sdl` without the definition of directive `@name` and the description above it.
fn without_directive_definition(sdl: &str, name: &str) -> String {
    const QUOTES: &str = "\"\"\"";
    let lines: Vec<&str> = sdl.lines().collect();
    let defines = |line: &str| {
        line.strip_prefix("directive @")
            .and_then(|rest| rest.strip_prefix(name))
            .is_some_and(|rest| rest.starts_with(['(', ' ']) || rest.is_empty())
    };
    let Some(at) = lines.iter().position(|line| defines(line)) else {
        return sdl.to_string();
    };
    // A description is the lines from an opening `"""` to a closing one just above.
    let start = match at.checked_sub(1).map(|above| lines[above]) {
        Some(QUOTES) => lines[..at - 1]
            .iter()
            .rposition(|line| *line == QUOTES)
            .unwrap_or(at),
        Some(line) if line.len() > 6 && line.starts_with(QUOTES) && line.ends_with(QUOTES) => {
            at - 1
        }
        _ => at,
    };
    let mut kept: Vec<&str> = lines[..start].to_vec();
    kept.extend_from_slice(&lines[at + 1..]);
    let mut out = kept.join("\n");
    if sdl.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// What a resolver reads from the schema's data.
pub(crate) trait ContextExt {
    /// One feature's context (or the user directory, or this instance), as [`build`] put it.
    fn feature<T: std::any::Any + Send + Sync>(&self) -> &T;
    /// The clock: now, and the calendar day in the service's time zone.
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

#[cfg(test)]
mod tests {
    use super::without_directive_definition;

    #[test]
    fn a_directive_definition_leaves_with_its_description_and_nothing_else() {
        let with =
            "type A {\n\tb: Int @deprecated(reason: \"Use c.\")\n}\n\n\"\"\"\nMarks it.\n\"\"\"\n\
            directive @deprecated(reason: String = \"No longer supported\") on FIELD_DEFINITION\n\
            \"\"\"\nDirects.\n\"\"\"\ndirective @include(if: Boolean!) on FIELD\n";
        let without = "type A {\n\tb: Int @deprecated(reason: \"Use c.\")\n}\n\n\
            \"\"\"\nDirects.\n\"\"\"\ndirective @include(if: Boolean!) on FIELD\n";
        assert_eq!(without_directive_definition(with, "deprecated"), without);
        assert_eq!(without_directive_definition(without, "deprecated"), without);
        assert_eq!(without_directive_definition(without, "includ"), without);
    }

    #[test]
    fn the_sdl_does_not_redefine_deprecated() {
        let sdl = super::sdl();
        assert!(!sdl.contains("directive @deprecated"));
        assert!(sdl.contains("directive @include(if: Boolean!)"));
    }
}
