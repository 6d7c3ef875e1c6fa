//! A buyer's orders as they are now: `order(id)` and `myOrders`.
//!
//! An order is born in Redis (the sale's script) and reaches SQL through the order stream's
//! consumer; its payment, cancellation or expiry likewise. SQL alone answered `myOrders`
//! late: a just-bought order was missing for a moment, a just-paid one still said UNPAID.
//! So a page reads SQL for the rest and Redis for what is live:
//!
//! - the buyer's recent orders (`lua/vouchers_note_order.lua`, noted by the request that
//!   bought) within the page's range are merged with SQL's rows, each order once, and the
//!   page cut to its size: an order is in SQL, or noted, or both, so nothing falls between;
//! - every order on the page takes its status from Redis's order hash while Redis holds it
//!   (the order scripts change it first; settled orders stay there 30 days).
//!
//! An order whose note was lost (the request died between the sale and the note, or Redis
//! refused the note) shows once the consumer archived it, within a second.

use std::collections::HashSet;

use super::{
    orders::{OrderRecord, OrderStatus},
    Vouchers,
};
use crate::infra::{
    error::AppResult,
    page::{KeyRange, PageArgs},
    redis::{
        scripts::{Replies, VouchersNoteOrder, VouchersNoteOrderArgs},
        Keys,
    },
};

/// How long, and how many, orders stay noted: far longer than the archive's lag.
const NOTED_MS: i64 = 24 * 3600 * 1000;
const NOTED_KEPT: i64 = 100;

/// Buckets the buyers' recent orders are spread over (by buyer), as the order index is.
const BUYER_BUCKETS: i64 = 1024;

impl Keys {
    /// A buyer's recent orders, in their own slot.
    pub(crate) fn recent_orders(&self, buyer_id: i64) -> String {
        self.tagged(
            ("orders:", buyer_id.rem_euclid(BUYER_BUCKETS)),
            ("recent:", buyer_id),
        )
    }
}

impl Replies for VouchersNoteOrder {
    type Reply = i64;
}

impl Vouchers {
    /// Notes a new order among the buyer's recent orders (best effort, see the module).
    pub(crate) async fn note_order(&self, buyer_id: i64, order_id: i64, created_at_ms: i64) {
        let keys = VouchersNoteOrder {
            recent: self.infra.keys.recent_orders(buyer_id),
        };
        let args = VouchersNoteOrderArgs {
            order: order_id,
            now_ms: created_at_ms,
            keep_ms: NOTED_MS,
            keep_count: NOTED_KEPT,
        };
        if let Err(error) = self.infra.scripts().call(&keys, &args).await {
            tracing::warn!(order = order_id, %error, "order not noted; myOrders shows it once archived");
        }
    }

    /// One of the buyer's orders as it is now; none for another buyer's.
    pub(crate) async fn order_of(
        &self,
        buyer_id: i64,
        order_id: i64,
    ) -> AppResult<Option<OrderRecord>> {
        Ok(self
            .find_order(order_id)
            .await?
            .filter(|order| order.buyer_id == buyer_id))
    }

    /// A page of the buyer's orders, newest first, as they are now: SQL's rows and the
    /// noted orders within the range, each once, with Redis's status.
    pub(crate) async fn live_orders_of(
        &self,
        buyer_id: i64,
        page: PageArgs<KeyRange>,
    ) -> AppResult<(Vec<OrderRecord>, bool)> {
        let (mut orders, mut more) = self.orders_of(buyer_id, page).await?;
        let range = page.after;
        let noted: Vec<i64> = {
            let mut conn = self.infra.redis.get().await?;
            redis::cmd("ZRANGE")
                .arg(self.infra.keys.recent_orders(buyer_id))
                .arg(0)
                .arg(-1)
                .query_async(&mut *conn)
                .await?
        };
        let have: HashSet<i64> = orders.iter().map(|order| order.id).collect();
        for id in noted {
            let within = range.after.is_none_or(|after| id < after)
                && range.before.is_none_or(|before| id > before);
            if !within || have.contains(&id) {
                continue;
            }
            if let Some(order) = self.order_of(buyer_id, id).await? {
                orders.push(order);
            }
        }
        orders.sort_by_key(|order| std::cmp::Reverse(order.id));
        if orders.len() > page.first {
            more = true;
            if range.backward {
                orders.drain(..orders.len() - page.first);
            } else {
                orders.truncate(page.first);
            }
        }
        self.fresh_statuses(&mut orders).await?;
        Ok((orders, more))
    }

    /// Each order's status from Redis where Redis holds the order (one round trip).
    async fn fresh_statuses(&self, orders: &mut [OrderRecord]) -> AppResult<()> {
        if orders.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for order in orders.iter() {
            pipe.cmd("HGET")
                .arg(
                    self.infra
                        .keys
                        .order(order.voucher_id, order.id, self.shards()),
                )
                .arg("status");
        }
        let mut conn = self.infra.redis.get().await?;
        let statuses: Vec<Option<String>> = pipe.query_async(&mut *conn).await?;
        for (order, status) in orders.iter_mut().zip(statuses) {
            if let Some(status) = status.as_deref().and_then(OrderStatus::parse) {
                order.status = status;
            }
        }
        Ok(())
    }
}
