//! GraphQL types of "near me".

use async_graphql::SimpleObject;

use super::items::Item;

#[derive(SimpleObject)]
pub struct NearbyItem {
    pub item: Item,
    pub distance_km: f64,
}
