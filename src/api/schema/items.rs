//! GraphQL types of items.

use async_graphql::{InputObject, Object};

use crate::{
    api::schema::{id::ItemId, scalars::DateTime},
    features::items::ItemRecord,
};

pub(crate) struct Item(pub ItemRecord);

#[Object]
impl Item {
    pub(crate) async fn id(&self) -> ItemId {
        ItemId::new(self.0.id)
    }

    async fn name(&self) -> &str {
        &self.0.name
    }

    /// Latitude, when the item has a location.
    async fn lat(&self) -> Option<f64> {
        self.0.location.map(|l| l.lat)
    }

    /// Longitude, when the item has a location.
    async fn lng(&self) -> Option<f64> {
        self.0.location.map(|l| l.lng)
    }

    async fn created_at(&self) -> DateTime {
        DateTime::from_ms(self.0.created_at_ms)
    }
}

#[derive(InputObject)]
pub(crate) struct CreateItemInput {
    /// 1 to 200 characters.
    pub(crate) name: String,
    /// Latitude in degrees; give with `lng`.
    pub(crate) lat: Option<f64>,
    /// Longitude in degrees; give with `lat`.
    pub(crate) lng: Option<f64>,
}
