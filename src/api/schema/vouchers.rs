//! GraphQL types of flash-sale vouchers and orders.

use std::collections::HashMap;

use async_graphql::{
    dataloader::{DataLoader, Loader},
    Context, InputObject, Object, SimpleObject,
};

use super::{items::Item, scalars::DateTime, ContextExt};
use crate::{
    api::schema::id::{ItemId, OrderId, VoucherId},
    features::{
        items::Items,
        vouchers::{
            orders::{OrderRecord, OrderStatus},
            VoucherRecord, Vouchers,
        },
    },
    infra::error::{AppError, AppResult},
};

pub(crate) struct Voucher(pub VoucherRecord);

#[Object]
impl Voucher {
    pub(crate) async fn id(&self) -> VoucherId {
        VoucherId::new(self.0.id)
    }

    async fn item(&self, ctx: &Context<'_>) -> AppResult<Item> {
        ctx.feature::<Items>()
            .find(self.0.item_id)
            .await?
            .map(Item)
            .ok_or_else(|| AppError::not_found(format!("no item {}", self.0.item_id)))
    }

    async fn title(&self) -> &str {
        &self.0.title
    }

    /// The stock the sale started with.
    async fn stock(&self) -> i64 {
        self.0.stock
    }

    /// Live stock (Redis); the vouchers of a response are read in one round trip.
    async fn remaining(&self, ctx: &Context<'_>) -> AppResult<i64> {
        let loader = ctx.data_unchecked::<DataLoader<StockLoader>>();
        Ok(loader
            .load_one(self.0.id)
            .await
            .map_err(|e| (*e).clone())?
            .unwrap_or(0))
    }

    async fn begins_at(&self) -> DateTime {
        DateTime::from_ms(self.0.begins_at_ms)
    }

    async fn ends_at(&self) -> DateTime {
        DateTime::from_ms(self.0.ends_at_ms)
    }

    async fn pay_within_seconds(&self) -> i64 {
        self.0.pay_within_seconds
    }
}

/// Batches the live stock of the vouchers of one response.
pub(crate) struct StockLoader(pub Vouchers);

impl Loader<i64> for StockLoader {
    type Value = i64;
    type Error = std::sync::Arc<AppError>;

    async fn load(&self, ids: &[i64]) -> Result<HashMap<i64, i64>, Self::Error> {
        self.0.remaining(ids).await.map_err(std::sync::Arc::new)
    }
}

pub(crate) struct Order(pub OrderRecord);

#[Object]
impl Order {
    pub(crate) async fn id(&self) -> OrderId {
        OrderId::new(self.0.id)
    }

    async fn voucher(&self, ctx: &Context<'_>) -> AppResult<Voucher> {
        ctx.feature::<Vouchers>()
            .find(self.0.voucher_id)
            .await?
            .map(Voucher)
            .ok_or_else(|| AppError::not_found(format!("no voucher {}", self.0.voucher_id)))
    }

    async fn status(&self) -> OrderStatus {
        self.0.status
    }

    async fn created_at(&self) -> DateTime {
        DateTime::from_ms(self.0.created_at_ms)
    }

    /// Unpaid orders expire at this time and their stock returns to the sale.
    async fn pay_by(&self) -> DateTime {
        DateTime::from_ms(self.0.pay_by_ms)
    }
}

#[derive(InputObject)]
pub(crate) struct CreateVoucherInput {
    pub(crate) item_id: ItemId,
    /// 1 to 100 characters.
    pub(crate) title: String,
    /// 1 to 1,000,000.
    pub(crate) stock: i32,
    /// When the sale opens, e.g. 2026-11-23T20:00:00+08:00.
    pub(crate) begins_at: DateTime,
    /// After beginsAt and in the future.
    pub(crate) ends_at: DateTime,
    /// 1 to 604,800: time a buyer has to pay before the order expires.
    pub(crate) pay_within_seconds: i32,
}

#[derive(SimpleObject)]
pub(crate) struct VoucherStock {
    pub(crate) voucher_id: VoucherId,
    pub(crate) remaining: i64,
}
