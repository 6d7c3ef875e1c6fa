//! GraphQL types of "near me".

use async_graphql::SimpleObject;

use super::items::Item;

#[derive(SimpleObject)]
pub(crate) struct NearbyItem {
    pub(crate) item: Item,
    pub(crate) distance_km: f64,
}
