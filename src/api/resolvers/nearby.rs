//! `nearbyItems`.

use std::collections::HashMap;

use async_graphql::{Context, Object};

use crate::{
    api::schema::{
        items::Item,
        nearby::{NearbyItem, NearbyItemConnection, NearbyItemEdge},
        page::{decode_offset_cursor, encode_cursor, PageInfo},
        page_size, ContextExt,
    },
    features::{
        items::{self, Items},
        nearby::Location,
        nearby::{self, Nearby},
    },
    infra::error::AppResult,
};

#[derive(Default)]
pub struct NearbyQuery;

#[Object]
impl NearbyQuery {
    /// Items within `radiusKm` (at most 1000) of a point, nearest first; a search pages
    /// through its 1000 nearest items.
    #[graphql(complexity = "first.unwrap_or(20).clamp(1, 100) as usize * child_complexity")]
    async fn nearby_items(
        &self,
        ctx: &Context<'_>,
        lat: f64,
        lng: f64,
        radius_km: f64,
        #[graphql(default = 20)] first: Option<i32>,
        after: Option<String>,
    ) -> AppResult<NearbyItemConnection> {
        let from = Location::new(lat, lng)?;
        let first = page_size(first.unwrap_or(20))?;
        // The cursor is the position after the last item of the previous page.
        let offset = decode_offset_cursor(after.as_deref(), nearby::MAX_RESULTS)?;
        let (found, more) =
            nearby::search(ctx.feature::<Nearby>(), from, radius_km, first, offset).await?;
        let ids: Vec<i64> = found.iter().map(|(id, _)| *id).collect();
        // An item gone from SQL is skipped, yet the next page starts after it.
        let end = offset + found.len();
        let mut items: HashMap<i64, _> = items::find_many(ctx.feature::<Items>(), &ids)
            .await?
            .into_iter()
            .map(|i| (i.id, i))
            .collect();
        let edges: Vec<NearbyItemEdge> = found
            .into_iter()
            .enumerate()
            .filter_map(|(i, (id, distance_km))| {
                items.remove(&id).map(|item| NearbyItemEdge {
                    cursor: encode_cursor((offset + i + 1) as i64),
                    node: NearbyItem {
                        item: Item(item),
                        distance_km,
                    },
                })
            })
            .collect();
        let end_cursor = (end > offset).then(|| encode_cursor(end as i64));
        Ok(NearbyItemConnection {
            edges,
            page_info: PageInfo {
                has_next_page: more,
                end_cursor,
            },
        })
    }
}
