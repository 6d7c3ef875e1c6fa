//! `nearbyItems`.

use std::collections::HashMap;

use async_graphql::{Context, Object};

use crate::{
    api::schema::{
        connection::Connection,
        items::Item,
        nearby::NearbyItem,
        page::{PageArgs, PAGE},
        ContextExt,
    },
    features::{
        items::Items,
        nearby::Location,
        nearby::{self, Nearby},
    },
    infra::error::AppResult,
};

#[derive(Default)]
pub(crate) struct NearbyQuery;

#[Object]
impl NearbyQuery {
    /// Items within `radiusKm` (at most 1000) of a point, nearest first; a search pages
    /// through its 1000 nearest items. Forward only: the order is the distance from the
    /// point asked, recomputed by each search, so a page's position is all a cursor can
    /// hold, and positions counted back from a moved item would skip or repeat items.
    #[graphql(complexity = "PAGE.cost(first, child_complexity)")]
    async fn nearby_items(
        &self,
        ctx: &Context<'_>,
        lat: f64,
        lng: f64,
        radius_km: f64,
        #[graphql(default_with = "PAGE.default_first()")] first: Option<i32>,
        after: Option<String>,
    ) -> AppResult<Connection<NearbyItem>> {
        let from = Location::new(lat, lng)?;
        let args = PageArgs::offset(first, after.as_deref(), nearby::MAX_RESULTS)?;
        let offset = args.after;
        let (found, more) = ctx
            .feature::<Nearby>()
            .search(from, radius_km, args)
            .await?;
        let ids: Vec<i64> = found.iter().map(|(id, _)| *id).collect();
        // An item gone from SQL is skipped, yet the next page starts after it.
        let end = offset + found.len();
        let mut items: HashMap<i64, _> = ctx
            .feature::<Items>()
            .find_many(&ids)
            .await?
            .into_iter()
            .map(|i| (i.id, i))
            .collect();
        let nodes = found
            .into_iter()
            .enumerate()
            .filter_map(|(i, (id, distance_km))| {
                let item = items.remove(&id)?;
                Some((
                    offset + i,
                    NearbyItem {
                        item: Item(item),
                        distance_km,
                    },
                ))
            });
        Ok(Connection::offset(nodes, offset, end, more))
    }
}
