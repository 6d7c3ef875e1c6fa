//! The order consumer: writes orders to SQL and keeps SQL's stock in step, idempotent on the
//! order id and indifferent to the order in which the events of one order arrive (two
//! instances may archive neighbouring batches out of order).
//!
//! A batch first settles the orders SQL already has (UNPAID to their outcome, giving the
//! stock back for cancellation and expiry, only if the row was still UNPAID: exactly once),
//! then inserts the orders SQL lacks, each with its last known status, taking stock only for
//! live ones (UNPAID, PAID). That order matters: a buyer whose order A was cancelled may
//! already hold order B, and B's row only fits the one-live-order-per-buyer index once A is
//! settled. When A's settlement is in a batch another instance has not committed yet, B's
//! batch waits (it is retried) rather than dropping B. Unpaid orders get their expiry job
//! (the durable path: the job's SQL row commits with the order; the request scheduled it
//! already, best effort), and none if they were settled meanwhile.

use std::{
    collections::{BTreeMap, HashSet},
    sync::Arc,
};

use sqlx::{Any, Row, Transaction};

use super::{orders::OrderStatus, NewOrder};
use crate::{
    features::vouchers::{
        events::{OrderChange, OrderEvent},
        Vouchers,
    },
    infra::{
        db::{self, values_placeholders, Backend},
        streams::{self, Event, HandleError, Handler, StreamEntry, StreamHandler},
    },
};

impl Vouchers {
    /// The order streams, one per shard: the archive and notifications read them.
    pub fn order_streams(&self) -> Vec<String> {
        (0..self.settings.shards())
            .map(|shard| self.infra.keys.order_stream(shard))
            .collect()
    }

    pub fn spawn_archive(&self) {
        let streams = self.order_streams();
        streams::spawn(
            &self.infra,
            "order-archive",
            "archive",
            streams,
            Handler::Archive(Arc::new(OrderArchive(self.clone()))),
        );
    }
}

struct OrderArchive(Vouchers);

#[async_trait::async_trait]
impl StreamHandler for OrderArchive {
    /// A batch costs a few statements whatever its size (one insert of every order it names,
    /// one update of every settled order, one stock update per voucher): a statement per
    /// entry could not keep up with a flash sale once a backlog had built up.
    async fn handle(
        &self,
        tx: &mut Transaction<'static, Any>,
        entries: &[StreamEntry],
    ) -> Result<(), HandleError> {
        // Every entry is read before anything is written, so a malformed one is isolated
        // by the consumer before the batch touches SQL.
        let mut orders: Vec<ArchivedOrder> = Vec::with_capacity(entries.len());
        let mut created = Vec::new();
        let mut settled = Vec::new();
        for entry in entries {
            let OrderEvent {
                order,
                buyer_id: buyer,
                happened,
            } = OrderEvent::from_entry(entry)?;
            match happened {
                OrderChange::Created => {
                    created.push(order);
                    orders.push(ArchivedOrder::unpaid(order, buyer));
                }
                OrderChange::Settled { outcome, at_ms } => {
                    settled.push((order.order_id, outcome, at_ms));
                    // A settled entry carries its order too: it may arrive before `created`.
                    orders.push(ArchivedOrder {
                        order,
                        buyer,
                        status: outcome,
                        settled_at_ms: Some(at_ms),
                    });
                }
            }
        }
        settle_orders(tx, &settled).await?;
        insert_orders(tx, &orders).await?;
        self.0
            .ensure_expiries(tx, &created)
            .await
            .map_err(|error| HandleError::Unavailable(error.to_string()))
    }
}

/// An order as a batch last saw it.
struct ArchivedOrder {
    order: NewOrder,
    buyer: i64,
    status: OrderStatus,
    settled_at_ms: Option<i64>,
}

impl ArchivedOrder {
    fn unpaid(order: NewOrder, buyer: i64) -> Self {
        Self {
            order,
            buyer,
            status: OrderStatus::Unpaid,
            settled_at_ms: None,
        }
    }
}

/// Inserts the orders not archived yet, each with its last status in the batch, and takes
/// one from SQL's stock for each live one, with the `remaining > 0` guard.
async fn insert_orders(
    tx: &mut Transaction<'static, Any>,
    orders: &[ArchivedOrder],
) -> Result<(), HandleError> {
    // The last event of an order in the batch is its status now.
    let mut last: BTreeMap<i64, &ArchivedOrder> = BTreeMap::new();
    for order in orders {
        let kept = last.entry(order.order.order_id).or_insert(order);
        if order.status != OrderStatus::Unpaid {
            *kept = order;
        }
    }
    if last.is_empty() {
        return Ok(());
    }
    let last: Vec<&ArchivedOrder> = last.into_values().collect();
    let mut inserted = Vec::new();
    for run in db::runs(&last) {
        let sql = format!(
            "INSERT INTO orders (id, voucher_id, buyer_id, status, created_at_ms, pay_by_ms, \
             settled_at_ms) VALUES {} ON CONFLICT (id) DO NOTHING RETURNING voucher_id, status",
            values_placeholders(Backend::of(tx), run.len(), 7)
        );
        let mut query = sqlx::query(&sql);
        for archived in run {
            query = query
                .bind(archived.order.order_id)
                .bind(archived.order.voucher_id)
                .bind(archived.buyer)
                .bind(archived.status.as_str())
                .bind(archived.order.created_at_ms)
                .bind(archived.order.pay_by_ms)
                .bind(archived.settled_at_ms);
        }
        match query.fetch_all(&mut **tx).await {
            Ok(rows) => inserted.extend(rows),
            // The buyer's earlier order is live in SQL still: its settlement is on its way in
            // a batch not committed yet. Wait for it; the order is never dropped.
            Err(sqlx::Error::Database(db)) if db.is_unique_violation() => {
                return Err(HandleError::Unavailable(format!(
                    "an order waits for its buyer's earlier order to be settled in SQL: {db}"
                )))
            }
            Err(error) => return Err(error.into()),
        }
    }
    let mut taken: BTreeMap<i64, i64> = BTreeMap::new();
    for row in inserted {
        let status: String = row.try_get("status")?;
        if matches!(
            OrderStatus::parse(&status),
            Some(OrderStatus::Unpaid | OrderStatus::Paid)
        ) {
            *taken.entry(row.try_get("voucher_id")?).or_default() += 1;
        }
    }
    for (voucher, count) in taken {
        let updated = sqlx::query(
            "UPDATE vouchers SET remaining = remaining - $1 WHERE id = $2 AND remaining >= $1",
        )
        .bind(count)
        .bind(voucher)
        .execute(&mut **tx)
        .await?
        .rows_affected();
        if updated == 0 {
            // Redis sold more than SQL holds: never expected; `engage verify` shows it.
            tracing::error!(
                voucher,
                orders = count,
                "SQL stock exhausted before Redis stock"
            );
            sqlx::query("UPDATE vouchers SET remaining = 0 WHERE id = $1")
                .bind(voucher)
                .execute(&mut **tx)
                .await?;
        }
    }
    Ok(())
}

/// Moves orders from UNPAID to their outcome and gives the stock back for cancellations and
/// expiries; an order no longer UNPAID is left alone, so each settles exactly once.
async fn settle_orders(
    tx: &mut Transaction<'static, Any>,
    settled: &[(i64, OrderStatus, i64)],
) -> Result<(), HandleError> {
    let mut seen = HashSet::new();
    let settled: Vec<_> = settled
        .iter()
        .filter(|(order, _, _)| seen.insert(*order))
        .collect();
    if settled.is_empty() {
        return Ok(());
    }
    // Parameters per order: $id, $status, $at.
    let param = |n: usize, column: usize| format!("${}", 3 * n + column);
    let status_cases: String = (0..settled.len())
        .map(|n| format!(" WHEN {} THEN {}", param(n, 1), param(n, 2)))
        .collect();
    let at_cases: String = (0..settled.len())
        .map(|n| format!(" WHEN {} THEN {}", param(n, 1), param(n, 3)))
        .collect();
    let ids: Vec<String> = (0..settled.len()).map(|n| param(n, 1)).collect();
    let sql = format!(
        "UPDATE orders SET status = CASE id{status_cases} END, \
         settled_at_ms = CASE id{at_cases} END \
         WHERE status = 'UNPAID' AND id IN ({}) RETURNING voucher_id, status",
        ids.join(", ")
    );
    let mut query = sqlx::query(&sql);
    for (order, outcome, at) in &settled {
        query = query.bind(*order).bind(outcome.as_str()).bind(*at);
    }
    let mut returned: BTreeMap<i64, i64> = BTreeMap::new();
    for row in query.fetch_all(&mut **tx).await? {
        let status: String = row.try_get("status")?;
        if status != OrderStatus::Paid.as_str() {
            *returned.entry(row.try_get("voucher_id")?).or_default() += 1;
        }
    }
    for (voucher, count) in returned {
        sqlx::query("UPDATE vouchers SET remaining = remaining + $1 WHERE id = $2")
            .bind(count)
            .bind(voucher)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}
