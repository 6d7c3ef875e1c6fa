//! Vouchers and their live orders, from `vouchers` and `orders`: each voucher's stock and
//! window, its buyers set (one live order per person), and the hashes of live orders, so
//! that an unpaid order can still be paid, cancelled or expired after Redis lost it.
//!
//! A voucher whose preload waits in `voucher_preloads` (Redis refused it at creation) is
//! drift in flight to `verify`; its delivery is this rebuild of the one voucher
//! ([`Vouchers::rebuild_voucher`]), so the two write the same, in either order.

use std::collections::BTreeSet;

use super::{
    orders::{self, OrderRecord},
    record_of, VoucherRecord, COLUMNS,
};
use crate::{
    features::vouchers::Vouchers,
    infra::{
        error::AppResult,
        recovery::{Rebuild, Report},
    },
};

/// Vouchers read per round trip.
const CHUNK: i64 = 100;

/// One voucher's counts in Redis and SQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StockCheck {
    pub voucher_id: i64,
    pub(crate) initial: i64,
    pub redis_stock: i64,
    pub(crate) redis_live_orders: i64,
    pub sql_stock: i64,
    pub sql_live_orders: i64,
}

impl StockCheck {
    /// Redis stock + live orders = initial stock = SQL stock + SQL live orders.
    pub fn consistent(&self) -> bool {
        self.redis_stock + self.redis_live_orders == self.initial
            && self.sql_stock + self.sql_live_orders == self.initial
    }
}

impl StockCheck {
    /// From Redis's stock (`None`: Redis lacks the voucher) and buyer count, and SQL's
    /// remaining stock and live orders.
    fn of(
        voucher: &VoucherRecord,
        stock: Option<i64>,
        buyers: i64,
        (sql_stock, sql_live): (i64, i64),
    ) -> Self {
        Self {
            voucher_id: voucher.id,
            initial: voucher.stock,
            redis_stock: stock.unwrap_or(sql_stock),
            redis_live_orders: if stock.is_some() { buyers } else { sql_live },
            sql_stock,
            sql_live_orders: sql_live,
        }
    }
}

impl Vouchers {
    /// Vouchers with ids above `after`, one chunk.
    async fn vouchers_after(&self, after: i64) -> AppResult<Vec<VoucherRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM vouchers WHERE id > $1 ORDER BY id LIMIT $2"
        ))
        .bind(after)
        .bind(CHUNK)
        .fetch_all(&self.infra.db.pool)
        .await?;
        Ok(rows.iter().map(record_of).collect::<Result<_, _>>()?)
    }

    /// A voucher's live (unpaid or paid) orders in SQL.
    async fn live_orders(&self, voucher_id: i64) -> AppResult<Vec<OrderRecord>> {
        let rows = sqlx::query(
            "SELECT id, voucher_id, buyer_id, status, created_at_ms, pay_by_ms FROM orders \
             WHERE voucher_id = $1 AND status IN ('UNPAID', 'PAID') ORDER BY id",
        )
        .bind(voucher_id)
        .fetch_all(&self.infra.db.pool)
        .await?;
        Ok(rows
            .iter()
            .map(orders::record_of)
            .collect::<Result<_, _>>()?)
    }

    /// Reconciles one voucher's stock between Redis and SQL. A voucher Redis lost reads as
    /// SQL's (the sale rebuilds it on demand), so a stock check alone never fails on loss.
    async fn stock_check(&self, voucher: &VoucherRecord) -> AppResult<StockCheck> {
        let mut conn = self.infra.redis.get().await?;
        let (stock, buyers): (Option<i64>, i64) = redis::pipe()
            .cmd("HGET")
            .arg(self.infra.keys.voucher(voucher.id, self.shards()))
            .arg("stock")
            .cmd("SCARD")
            .arg(self.infra.keys.voucher_buyers(voucher.id, self.shards()))
            .query_async(&mut *conn)
            .await?;
        drop(conn);
        let sql = self.sql_stock(voucher.id).await?;
        Ok(StockCheck::of(voucher, stock, buyers, sql))
    }

    /// Every voucher's stock in Redis and SQL. Counts taken while orders are in flight to SQL
    /// may differ for a moment; a second run then agrees.
    pub async fn stock_checks(&self) -> AppResult<Vec<StockCheck>> {
        let mut checks = Vec::new();
        let mut after = 0;
        loop {
            let vouchers = self.vouchers_after(after).await?;
            let Some(last) = vouchers.last().map(|v| v.id) else {
                return Ok(checks);
            };
            for voucher in &vouchers {
                checks.push(self.stock_check(voucher).await?);
            }
            after = last;
        }
    }

    /// Per voucher: Redis holds it, its stock agrees with SQL, its buyers set is exactly the
    /// buyers of SQL's live orders (a live order Redis has and SQL lacks is drift too), and
    /// each live order is in Redis with SQL's status.
    pub(crate) async fn verify(&self) -> AppResult<Report> {
        let mut report = Report::new("vouchers and orders");
        let mut after = 0;
        loop {
            let vouchers = self.vouchers_after(after).await?;
            let Some(last) = vouchers.last().map(|v| v.id) else {
                return Ok(report);
            };
            for voucher in &vouchers {
                self.verify_voucher(voucher, &mut report).await?;
            }
            after = last;
        }
    }

    async fn verify_voucher(&self, voucher: &VoucherRecord, report: &mut Report) -> AppResult<()> {
        let id = voucher.id;
        let keys = &self.infra.keys;
        let live = self.live_orders(id).await?;
        let mut statuses = redis::pipe();
        for order in &live {
            statuses
                .cmd("HGET")
                .arg(keys.order(id, order.id, self.shards()))
                .arg("status");
        }
        let mut conn = self.infra.redis.get().await?;
        let (stock, buyers): (Option<i64>, BTreeSet<i64>) = redis::pipe()
            .cmd("HGET")
            .arg(keys.voucher(id, self.shards()))
            .arg("stock")
            .cmd("SMEMBERS")
            .arg(keys.voucher_buyers(id, self.shards()))
            .query_async(&mut *conn)
            .await?;
        let statuses: Vec<Option<String>> = if statuses.is_empty() {
            Vec::new()
        } else {
            statuses.query_async(&mut *conn).await?
        };
        drop(conn);
        report.check(stock.is_some(), || format!("voucher {id} is not in Redis"));
        let sql = self.sql_stock(id).await?;
        let check = StockCheck::of(voucher, stock, buyers.len() as i64, sql);
        report.check(check.consistent(), || {
            format!(
                "voucher {id}: initial {} | Redis stock {} + live orders {} | SQL stock {} + live \
                 orders {}",
                check.initial,
                check.redis_stock,
                check.redis_live_orders,
                check.sql_stock,
                check.sql_live_orders
            )
        });
        let sql_buyers: BTreeSet<i64> = live.iter().map(|order| order.buyer_id).collect();
        for buyer in buyers.difference(&sql_buyers) {
            report.check(false, || {
                format!("voucher {id}: buyer {buyer} has a live order in Redis that SQL lacks")
            });
        }
        for (order, status) in live.iter().zip(statuses) {
            report.check(buyers.contains(&order.buyer_id), || {
                format!(
                    "voucher {id}: buyer {} is not in the buyers set",
                    order.buyer_id
                )
            });
            report.check(status.as_deref() == Some(order.status.as_str()), || {
                format!(
                    "order {}: SQL says {}, Redis {status:?}",
                    order.id,
                    order.status.as_str()
                )
            });
        }
        Ok(())
    }

    /// Restores each voucher (stock only where Redis has none: live stock is never
    /// overwritten), its buyers, and its live orders (only those Redis lacks). Everything is
    /// written only where missing, so a sale or a payment running meanwhile is never undone
    /// and nothing is held back.
    pub(crate) async fn rebuild(&self, run: &Rebuild<'_>) -> AppResult<()> {
        run.expect_count("SELECT COUNT(*) AS n FROM vouchers")
            .await?;
        let mut after = run.resume_from().await?;
        loop {
            let vouchers = self.vouchers_after(after).await?;
            let Some(last) = vouchers.last().map(|v| v.id) else {
                return Ok(());
            };
            for voucher in &vouchers {
                let live = self.live_orders(voucher.id).await?;
                let (remaining, _) = self.sql_stock(voucher.id).await?;
                let buyers: Vec<i64> = live.iter().map(|order| order.buyer_id).collect();
                self.preload(voucher, remaining, &buyers).await?;
                self.restore_orders(&live).await?;
            }
            run.finished_through(last, vouchers.len() as u64).await?;
            after = last;
        }
    }
}
