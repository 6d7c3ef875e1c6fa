//! `item`, `items`, `createItem`.

use std::collections::HashMap;

use async_graphql::{Context, Object};

use crate::{
    api::schema::id::ItemId,
    api::schema::{
        connection::Connection,
        items::{CreateItemInput, GeoInput, Item},
        page::{PageArgs, PAGE},
        ContextExt,
    },
    features::{
        items::{Items, NewItem},
        nearby::{self, Location, Nearby},
    },
    infra::{
        auth::{self, RoleGuard},
        error::AppResult,
    },
};

/// How far `items(near:)` looks when no radius is given, in km.
const DEFAULT_RADIUS_KM: f64 = 50.0;

#[derive(Default)]
pub(crate) struct ItemQuery;

#[Object]
impl ItemQuery {
    async fn item(&self, ctx: &Context<'_>, id: ItemId) -> AppResult<Option<Item>> {
        let id = id.0;
        Ok(ctx.feature::<Items>().find(id).await?.map(Item))
    }

    /// The item with the most activity: remarks (neither deleted nor hidden) and the likes
    /// they hold, as the archive counts them (a like shows here within moments); ties to the
    /// newest item. Null before any remark. The dashboard opens on it by default.
    async fn most_active_item(&self, ctx: &Context<'_>) -> AppResult<Option<Item>> {
        Ok(ctx.feature::<Items>().most_active().await?.map(Item))
    }

    /// Items, newest first; with `near`, the items with a location within its radius,
    /// nearest first (as `nearbyItems` pages them: its 1000 nearest). `first` 1 to 100 (20
    /// unless given) after `after`.
    #[graphql(complexity = "PAGE.cost(first, child_complexity)")]
    async fn items(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        near: Option<GeoInput>,
    ) -> AppResult<Connection<Item>> {
        let items = ctx.feature::<Items>();
        let Some(near) = near else {
            let args = PageArgs::keyset(first, after.as_deref(), None, None)?;
            let (found, more) = items.page(args).await?;
            return Ok(Connection::keyset(
                found.into_iter().map(Item),
                |item| item.0.id,
                &args,
                more,
            ));
        };
        let from = Location::new(near.lat, near.lng)?;
        let args = PageArgs::offset(first, after.as_deref(), nearby::MAX_RESULTS)?;
        let offset = args.after;
        let (found, more) = ctx
            .feature::<Nearby>()
            .search(from, near.radius_km.unwrap_or(DEFAULT_RADIUS_KM), args)
            .await?;
        let ids: Vec<i64> = found.iter().map(|(id, _)| *id).collect();
        let end = offset + found.len();
        let mut records: HashMap<i64, _> = items
            .find_many(&ids)
            .await?
            .into_iter()
            .map(|item| (item.id, item))
            .collect();
        let nodes = found
            .into_iter()
            .enumerate()
            .filter_map(|(i, (id, _))| records.remove(&id).map(|item| (offset + i, Item(item))));
        Ok(Connection::offset(nodes, offset, end, more))
    }
}

#[derive(Default)]
pub(crate) struct ItemMutation;

#[Object]
impl ItemMutation {
    /// Admin only.
    #[graphql(guard = "RoleGuard::admin()")]
    async fn create_item(&self, ctx: &Context<'_>, input: CreateItemInput) -> AppResult<Item> {
        let viewer = auth::require_viewer(ctx)?;
        let item = NewItem::new(&input.name, input.lat, input.lng)?;
        Ok(Item(
            ctx.feature::<Items>().create(viewer.user_id, item).await?,
        ))
    }
}
