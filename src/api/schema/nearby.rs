//! GraphQL types of "near me".

use async_graphql::SimpleObject;

use super::{items::Item, page::PageInfo};

#[derive(SimpleObject)]
pub struct NearbyItem {
    pub item: Item,
    pub distance_km: f64,
}

#[derive(SimpleObject)]
pub struct NearbyItemEdge {
    pub cursor: String,
    pub node: NearbyItem,
}

#[derive(SimpleObject)]
pub struct NearbyItemConnection {
    pub edges: Vec<NearbyItemEdge>,
    pub page_info: PageInfo,
}
