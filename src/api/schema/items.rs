//! GraphQL types of items.

use std::collections::HashMap;

use async_graphql::{dataloader::DataLoader, dataloader::Loader, Context, InputObject, Object};

use crate::{
    api::schema::{id::ItemId, scalars::DateTime},
    features::items::{ItemRecord, Items, Ratings},
    infra::error::{AppError, AppResult},
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

    /// How many remarks rate the item (deleted and hidden ones do not).
    async fn rating_count(&self, ctx: &Context<'_>) -> AppResult<i64> {
        Ok(self.ratings(ctx).await?.count())
    }

    /// The mean score of its remarks, 1 to 5; null without any.
    async fn rating_average(&self, ctx: &Context<'_>) -> AppResult<Option<f64>> {
        Ok(self.ratings(ctx).await?.average())
    }

    /// How many remarks give 1, 2, 3, 4 and 5 stars, in that order.
    async fn rating_histogram(&self, ctx: &Context<'_>) -> AppResult<Vec<i64>> {
        Ok(self.ratings(ctx).await?.histogram.to_vec())
    }
}

impl Item {
    /// The item's rating summary, the summaries of a response read in one query.
    async fn ratings(&self, ctx: &Context<'_>) -> AppResult<Ratings> {
        let loader = ctx.data_unchecked::<DataLoader<RatingsLoader>>();
        Ok(loader
            .load_one(self.0.id)
            .await
            .map_err(|e| (*e).clone())?
            .unwrap_or_default())
    }
}

/// Batches the rating summaries of one response into one SQL query.
pub(crate) struct RatingsLoader(pub Items);

impl Loader<i64> for RatingsLoader {
    type Value = Ratings;
    type Error = std::sync::Arc<AppError>;

    async fn load(&self, keys: &[i64]) -> Result<HashMap<i64, Ratings>, Self::Error> {
        self.0.ratings(keys).await.map_err(std::sync::Arc::new)
    }
}

/// A point to list items by their distance from.
#[derive(InputObject)]
pub(crate) struct GeoInput {
    /// Latitude in degrees.
    pub(crate) lat: f64,
    /// Longitude in degrees.
    pub(crate) lng: f64,
    /// How far to look, in km (at most 1000; 50 unless given).
    pub(crate) radius_km: Option<f64>,
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
