//! The backstop of order expiry. An unpaid order expires through its delay-queue job; if
//! that job was lost (a Redis that lost its data before a rebuild, a job dead after all its
//! attempts), the order would hold its stock for ever. Every `ENGAGE_ORDER_SWEEP_SECONDS`
//! one instance (under the lock `order-expiry-sweep`) reads the orders SQL still has UNPAID
//! a minute past their pay-by time and expires each through [`Vouchers::expire_order`], the script
//! the job uses: exactly one of paid, cancelled and expired wins, so a sweep racing a
//! payment or the job itself changes nothing twice. The order consumer then writes the
//! outcome to SQL as for any expiry.
//!
//! Why SQL and not Redis: SQL is the record of every order, and an index on the unpaid ones
//! by pay-by time (migration 0009) keeps the read small; Redis holds no list of unpaid
//! orders to walk, and one it held could be lost with the jobs.

use std::time::Duration;

use sqlx::Row;

use super::orders::Expiry;
use crate::{
    features::vouchers::Vouchers,
    infra::{
        error::AppResult,
        lock::{self, Held},
    },
};

/// How long past pay-by an order is left to its job before the sweep expires it.
const OVERDUE_AFTER: Duration = Duration::from_secs(60);
/// Orders read per statement.
const PAGE: i64 = 200;
const LOCK: &str = "order-expiry-sweep";
const LOCK_LEASE: Duration = Duration::from_secs(30);

pub(crate) async fn run(ctx: Vouchers) {
    let mut every = tokio::time::interval(ctx.settings.sweep_every);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            () = ctx.infra.instance.shutdown.cancelled() => return,
            _ = every.tick() => {}
        }
        match lock::with_lock(&ctx.infra, LOCK, LOCK_LEASE, |held| ctx.sweep(held)).await {
            // Another instance sweeps, or there was nothing to do.
            Ok(None | Some(Ok(0))) => {}
            Ok(Some(Ok(expired))) => {
                tracing::warn!(
                    expired,
                    "overdue orders expired by the sweep: their expiry jobs were lost"
                );
            }
            Ok(Some(Err(error))) | Err(error) => {
                tracing::warn!(%error, "order expiry sweep failed");
            }
        }
    }
}

impl Vouchers {
    /// Expires the overdue unpaid orders; how many this pass expired.
    async fn sweep(&self, held: Held) -> AppResult<usize> {
        let overdue_before = self.infra.clock.now_ms() - OVERDUE_AFTER.as_millis() as i64;
        let (mut after_pay_by, mut after_id) = (i64::MIN, i64::MIN);
        let (mut expired, mut unknown) = (0, 0);
        loop {
            let rows = sqlx::query(
                "SELECT id, voucher_id, pay_by_ms FROM orders WHERE status = 'UNPAID' \
                 AND pay_by_ms < $1 AND (pay_by_ms > $2 OR (pay_by_ms = $2 AND id > $3)) \
                 ORDER BY pay_by_ms, id LIMIT $4",
            )
            .bind(overdue_before)
            .bind(after_pay_by)
            .bind(after_id)
            .bind(PAGE)
            .fetch_all(&self.infra.db.pool)
            .await?;
            for row in &rows {
                if held.lost.is_cancelled() {
                    return Ok(expired);
                }
                let (order, voucher): (i64, i64) = (row.try_get("id")?, row.try_get("voucher_id")?);
                match self.expire_order(voucher, order).await? {
                    Expiry::Expired => {
                        expired += 1;
                        self.cancel_expiry(order).await;
                    }
                    // The order consumer has not written the outcome yet.
                    Expiry::Settled => {}
                    Expiry::Unknown => unknown += 1,
                }
                (after_pay_by, after_id) = (row.try_get("pay_by_ms")?, order);
            }
            if (rows.len() as i64) < PAGE {
                break;
            }
        }
        if unknown > 0 {
            tracing::warn!(
                orders = unknown,
                "overdue unpaid orders the sweep could not find live in Redis or SQL"
            );
        }
        Ok(expired)
    }
}
