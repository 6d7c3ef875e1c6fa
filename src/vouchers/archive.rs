//! The order consumer: writes orders to SQL and keeps SQL's stock in step, idempotent on the
//! order id and indifferent to the order in which the events of one order arrive (two
//! instances may archive neighbouring batches out of order).
//!
//! - `created`: insert the order (`ON CONFLICT DO NOTHING`) and, only if it was inserted,
//!   take one from `vouchers.remaining` with the `remaining > 0` guard; then make sure its
//!   expiry job exists (the durable path; the request scheduled it already, best effort).
//! - `settled`: first the same as `created` (the order may not be archived yet), then move
//!   it from UNPAID to its outcome, and give the stock back for cancellation and expiry,
//!   both only if the row was still UNPAID: exactly once.

use std::sync::Arc;

use sqlx::{Any, Transaction};

use super::{orders::OrderStatus, NewOrder};
use crate::{
    app::AppState,
    streams::{self, ConsumerSpec, HandleError, StreamEntry, StreamHandler},
};

pub fn spawn(state: &AppState) {
    let spec = ConsumerSpec::new(&state.config, "order-archive", "archive");
    let streams = (0..state.config.sale_shards.max(1))
        .map(|shard| state.keys.order_stream(shard))
        .collect();
    streams::spawn(state, spec, streams, Arc::new(OrderArchive(state.clone())));
}

struct OrderArchive(AppState);

impl OrderArchive {
    async fn insert(
        &self,
        tx: &mut Transaction<'static, Any>,
        entry: &StreamEntry,
    ) -> Result<NewOrder, HandleError> {
        let order = NewOrder {
            order_id: entry.number("order")?,
            voucher_id: entry.number("voucher")?,
            created_at_ms: entry.number("created")?,
            pay_by_ms: entry.number("pay_by")?,
        };
        let inserted = sqlx::query(
            "INSERT INTO orders (id, voucher_id, buyer_id, status, created_at_ms, pay_by_ms) \
             VALUES ($1, $2, $3, 'UNPAID', $4, $5) ON CONFLICT DO NOTHING",
        )
        .bind(order.order_id)
        .bind(order.voucher_id)
        .bind(entry.number("buyer")?)
        .bind(order.created_at_ms)
        .bind(order.pay_by_ms)
        .execute(&mut **tx)
        .await?
        .rows_affected();
        if inserted == 1 {
            let taken = sqlx::query(
                "UPDATE vouchers SET remaining = remaining - 1 WHERE id = $1 AND remaining > 0",
            )
            .bind(order.voucher_id)
            .execute(&mut **tx)
            .await?
            .rows_affected();
            if taken == 0 {
                // Redis sold more than SQL holds: never expected; `engage verify` shows it.
                tracing::error!(
                    voucher = order.voucher_id,
                    order = order.order_id,
                    "SQL stock exhausted before Redis stock"
                );
            }
        }
        Ok(order)
    }

    async fn settle(
        &self,
        tx: &mut Transaction<'static, Any>,
        entry: &StreamEntry,
    ) -> Result<(), HandleError> {
        let order = self.insert(tx, entry).await?;
        let status = entry.field("status")?;
        let outcome = OrderStatus::parse(status)
            .filter(|s| *s != OrderStatus::Unpaid)
            .ok_or_else(|| {
                HandleError::Poison(format!("entry {}: bad status {status}", entry.id))
            })?;
        let moved = sqlx::query(
            "UPDATE orders SET status = $1, settled_at_ms = $2 WHERE id = $3 AND status = 'UNPAID'",
        )
        .bind(outcome.as_str())
        .bind(entry.number("at")?)
        .bind(order.order_id)
        .execute(&mut **tx)
        .await?
        .rows_affected();
        if moved == 1 && outcome != OrderStatus::Paid {
            sqlx::query("UPDATE vouchers SET remaining = remaining + 1 WHERE id = $1")
                .bind(order.voucher_id)
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl StreamHandler for OrderArchive {
    async fn handle(
        &self,
        tx: &mut Transaction<'static, Any>,
        entries: &[StreamEntry],
    ) -> Result<(), HandleError> {
        let mut created = Vec::new();
        for entry in entries {
            match entry.field("type")? {
                "created" => created.push(self.insert(tx, entry).await?),
                "settled" => self.settle(tx, entry).await?,
                other => {
                    return Err(HandleError::Poison(format!(
                        "entry {}: unknown type {other}",
                        entry.id
                    )))
                }
            }
        }
        for order in created {
            super::schedule_expiry(&self.0, &order)
                .await
                .map_err(|error| HandleError::Unavailable(error.to_string()))?;
        }
        Ok(())
    }
}
