//! `item`, `createItem`.

use async_graphql::{Context, Object};

use crate::{
    api::schema::id::ItemId,
    api::schema::{
        items::{CreateItemInput, Item},
        ContextExt,
    },
    features::items::{Items, NewItem},
    infra::{
        auth::{self, RoleGuard},
        error::AppResult,
    },
};

#[derive(Default)]
pub(crate) struct ItemQuery;

#[Object]
impl ItemQuery {
    async fn item(&self, ctx: &Context<'_>, id: ItemId) -> AppResult<Option<Item>> {
        let id = id.0;
        Ok(ctx.feature::<Items>().find(id).await?.map(Item))
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
