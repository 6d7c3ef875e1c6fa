//! Orders after the sale: payment (simulated), cancellation by the buyer, expiry by the
//! delay queue. One script settles an order, so exactly one of paid, cancelled and expired
//! wins, and stock comes back exactly once.

use std::sync::Arc;

use sqlx::Row;

use crate::infra::redis::durability::DurableWrite;

use super::EXPIRY_TOPIC;
use crate::infra::page::{KeyRange, PageArgs};
use crate::{
    features::{
        jobs::{handlers::Delivery, JobError, JobHandler},
        vouchers::Vouchers,
    },
    infra::{
        error::{AppError, AppResult, ErrorCode},
        redis::{
            scripts::{Replies, Reply, VouchersSettle, VouchersSettleArgs},
            status::Status,
        },
    },
};

/// Settled orders stay readable in Redis this long (SQL has them for ever).
const KEEP_SETTLED_SECONDS: u64 = 30 * 24 * 3600;

#[derive(Debug, Clone, Copy, PartialEq, Eq, async_graphql::Enum)]
pub(crate) enum OrderStatus {
    Unpaid,
    Paid,
    Cancelled,
    Expired,
}

impl OrderStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Unpaid => "UNPAID",
            Self::Paid => "PAID",
            Self::Cancelled => "CANCELLED",
            Self::Expired => "EXPIRED",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<Self> {
        [Self::Unpaid, Self::Paid, Self::Cancelled, Self::Expired]
            .into_iter()
            .find(|s| s.as_str() == text)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OrderRecord {
    pub(crate) id: i64,
    pub(crate) voucher_id: i64,
    pub(crate) buyer_id: i64,
    pub(crate) status: OrderStatus,
    pub(crate) created_at_ms: i64,
    pub(crate) pay_by_ms: i64,
}

pub(crate) fn record_of(row: &sqlx::any::AnyRow) -> Result<OrderRecord, sqlx::Error> {
    let status: String = row.try_get("status")?;
    Ok(OrderRecord {
        id: row.try_get("id")?,
        voucher_id: row.try_get("voucher_id")?,
        buyer_id: row.try_get("buyer_id")?,
        status: OrderStatus::parse(&status).unwrap_or(OrderStatus::Unpaid),
        created_at_ms: row.try_get("created_at_ms")?,
        pay_by_ms: row.try_get("pay_by_ms")?,
    })
}

/// Someone else's order answers as a missing one does: which order ids exist is nobody's
/// business but their buyers'. (`FORBIDDEN` for someone else's order told a stranger that
/// the id was a real order.)
fn no_such_order(order_id: i64) -> AppError {
    AppError::not_found(format!("no order {order_id}"))
}

/// The expiry job of an order: settles it as expired if it is still unpaid.
pub(crate) struct ExpireOrder(pub Vouchers);

#[async_trait::async_trait]
impl JobHandler for ExpireOrder {
    async fn handle(&self, delivery: &Delivery) -> Result<(), JobError> {
        let body: serde_json::Value = serde_json::from_str(&delivery.spec.body)
            .map_err(|e| JobError::Permanent(format!("bad body: {e}")))?;
        let (Some(order), Some(voucher)) = (body["order"].as_i64(), body["voucher"].as_i64())
        else {
            return Err(JobError::Permanent("body lacks order or voucher".into()));
        };
        self.0
            .expire_order(voucher, order)
            .await
            .map(drop)
            .map_err(|error| JobError::Retry(error.to_string()))
    }
}

/// What [`Vouchers::expire_order`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expiry {
    Expired,
    /// Paid, cancelled or expired before.
    Settled,
    /// Neither Redis nor SQL holds the order live (a live order Redis lost is restored
    /// from SQL first): nothing to expire.
    Unknown,
}

/// Retries of an expiry job: an early delivery (a clock ahead) or a Redis that was away is
/// retried within seconds, then every 10 minutes, 25 attempts in all (over three hours; 3
/// attempts in 6 seconds would let a short outage lose an expiry). After that the job is
/// in `dead_job`, and the sweep still expires the order.
const EXPIRY_LADDER_SECONDS: [u64; 6] = [1, 5, 30, 60, 300, 600];
const EXPIRY_ATTEMPTS: u32 = 25;

impl Vouchers {
    /// An order as its buyer sees it: from Redis while it is there (fresh, and available before
    /// the consumer archived it), from SQL otherwise.
    pub(crate) async fn find_order(&self, order_id: i64) -> AppResult<Option<OrderRecord>> {
        let mut conn = self.infra.redis.get().await?;
        let voucher: Option<i64> = redis::cmd("GET")
            .arg(self.infra.keys.order_voucher(order_id))
            .query_async(&mut *conn)
            .await?;
        if let Some(voucher_id) = voucher {
            let (buyer, status, created, pay_by): (
                Option<i64>,
                Option<String>,
                Option<i64>,
                Option<i64>,
            ) = redis::cmd("HMGET")
                .arg(self.infra.keys.order(voucher_id, order_id, self.shards()))
                .arg("buyer")
                .arg("status")
                .arg("created")
                .arg("pay_by")
                .query_async(&mut *conn)
                .await?;
            if let (Some(buyer_id), Some(status), Some(created_at_ms), Some(pay_by_ms)) =
                (buyer, status, created, pay_by)
            {
                return Ok(Some(OrderRecord {
                    id: order_id,
                    voucher_id,
                    buyer_id,
                    status: OrderStatus::parse(&status).unwrap_or(OrderStatus::Unpaid),
                    created_at_ms,
                    pay_by_ms,
                }));
            }
        }
        drop(conn);
        let row = sqlx::query(
            "SELECT id, voucher_id, buyer_id, status, created_at_ms, pay_by_ms FROM orders WHERE id = $1",
        )
        .bind(order_id)
        .fetch_optional(&self.infra.db.pool)
        .await?;
        Ok(row.map(|row| record_of(&row)).transpose()?)
    }

    /// A page of a buyer's orders, newest first, within `page.after` (a range of order ids).
    pub(crate) async fn orders_of(
        &self,
        buyer_id: i64,
        page: PageArgs<KeyRange>,
    ) -> AppResult<(Vec<OrderRecord>, bool)> {
        let sql = format!(
            "SELECT id, voucher_id, buyer_id, status, created_at_ms, pay_by_ms FROM orders \
             WHERE buyer_id = $1 AND {}",
            page.after.sql_tail("id", 2)
        );
        let query = sqlx::query(&sql).bind(buyer_id);
        self.infra.db.keyset_page(query, page, record_of).await
    }

    /// Where an order must go; `buyer` is the acting user (`None` for the expiry job). An order
    /// Redis does not know but SQL holds live (Redis lost it and was not rebuilt yet) is
    /// restored from SQL first: it stays payable, cancellable and expirable.
    pub(crate) async fn settle_order(
        &self,
        voucher_id: i64,
        order_id: i64,
        outcome: OrderStatus,
        buyer: Option<i64>,
    ) -> AppResult<(bool, OrderStatus)> {
        let keys = &self.infra.keys;
        let shards = self.shards();
        let settle = || {
            let order = VouchersSettle {
                order: keys.order(voucher_id, order_id, shards),
                voucher: keys.voucher(voucher_id, shards),
                buyers: keys.voucher_buyers(voucher_id, shards),
                events: keys.order_stream_of(voucher_id, shards),
            };
            let args = VouchersSettleArgs {
                outcome: outcome.as_str(),
                now_ms: self.infra.clock.now_ms(),
                buyer: buyer.map(|b| b.to_string()).unwrap_or_default(),
                channel: keys.voucher_stock_channel(voucher_id, shards),
                order: order_id,
                keep_seconds: KEEP_SETTLED_SECONDS,
                publish: keys.publish_command(),
            };
            (order, args)
        };
        // Once: restore the order from SQL, where it is live; else there is no such order.
        let mut restored = false;
        let restore = |_missing| {
            let first = !std::mem::replace(&mut restored, true);
            async move {
                if first && self.restore_from_sql(voucher_id, order_id).await? {
                    Ok(())
                } else {
                    Err(no_such_order(order_id))
                }
            }
        };
        let reply = self
            .infra
            .durable_scripts(DurableWrite::Orders)
            .run(settle, restore)
            .await?;
        match (reply.status, OrderStatus::parse(&reply.now)) {
            (Status::Ok, Some(now)) => Ok((true, now)),
            (Status::Already, Some(now)) => Ok((false, now)),
            (Status::NotFound, _) => Err(no_such_order(order_id)),
            (refused @ Status::NotYet, _) => {
                Err(refused.refusal("the order is not due to expire yet"))
            }
            (other, now) => Err(AppError::internal(anyhow::anyhow!(
                "vouchers_settle answered {other:?} with the order {now:?}"
            ))),
        }
    }

    /// Puts a live SQL order (and its voucher) back into Redis; false when SQL has no such live
    /// order of that voucher.
    async fn restore_from_sql(&self, voucher_id: i64, order_id: i64) -> AppResult<bool> {
        let row = sqlx::query(
            "SELECT id, voucher_id, buyer_id, status, created_at_ms, pay_by_ms FROM orders \
             WHERE id = $1 AND voucher_id = $2 AND status IN ('UNPAID', 'PAID')",
        )
        .bind(order_id)
        .bind(voucher_id)
        .fetch_optional(&self.infra.db.pool)
        .await?;
        let Some(row) = row else {
            return Ok(false);
        };
        let order = record_of(&row)?;
        self.rebuild_voucher(voucher_id).await?;
        self.restore_orders(&[order]).await?;
        Ok(true)
    }

    /// Writes live orders into Redis where it lacks them (field by field with HSETNX, so an
    /// order a script changed meanwhile keeps its state), with the index of their voucher.
    pub(crate) async fn restore_orders(&self, orders: &[OrderRecord]) -> AppResult<()> {
        if orders.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for order in orders {
            let key = self
                .infra
                .keys
                .order(order.voucher_id, order.id, self.shards());
            for (field, value) in [
                ("voucher", order.voucher_id.to_string()),
                ("buyer", order.buyer_id.to_string()),
                ("status", order.status.as_str().to_string()),
                ("created", order.created_at_ms.to_string()),
                ("pay_by", order.pay_by_ms.to_string()),
            ] {
                pipe.cmd("HSETNX").arg(&key).arg(field).arg(value).ignore();
            }
            if order.status != OrderStatus::Unpaid {
                pipe.cmd("EXPIRE")
                    .arg(&key)
                    .arg(KEEP_SETTLED_SECONDS)
                    .ignore();
            }
            pipe.cmd("SET")
                .arg(self.infra.keys.order_voucher(order.id))
                .arg(order.voucher_id)
                .arg("NX")
                .arg("EX")
                .arg(KEEP_SETTLED_SECONDS)
                .ignore();
        }
        let mut conn = self.infra.redis.get().await?;
        let () = pipe.query_async(&mut *conn).await?;
        Ok(())
    }

    /// Pays or cancels the buyer's order. Repeating what already happened is a no-op; paying
    /// after the pay-by time expires the order, and paying an expired one, answers
    /// `PAY_WINDOW_OVER`; anything else on a settled order (paying a cancelled one, cancelling
    /// a paid or expired one) is a `CONFLICT`. Once settled, the order's expiry job leaves the
    /// delay queue.
    pub(crate) async fn act_on_order(
        &self,
        buyer_id: i64,
        order_id: i64,
        outcome: OrderStatus,
    ) -> AppResult<OrderRecord> {
        let order = self
            .find_order(order_id)
            .await?
            .filter(|order| order.buyer_id == buyer_id)
            .ok_or_else(|| no_such_order(order_id))?;
        let (_, now) = self
            .settle_order(order.voucher_id, order_id, outcome, Some(buyer_id))
            .await?;
        self.cancel_expiry(order_id).await;
        if now != outcome {
            if outcome == OrderStatus::Paid && now == OrderStatus::Expired {
                return Err(AppError::client(
                    ErrorCode::PayWindowOver,
                    "the time to pay is over; the order expired",
                ));
            }
            return Err(AppError::conflict(format!("the order is {}", now.as_str())));
        }
        Ok(OrderRecord {
            status: now,
            ..order
        })
    }

    /// Expires an order if it is still unpaid and its pay-by time has passed (`NOT_STARTED`
    /// before). The one path of the expiry job and of the sweep ([`super::sweep`]).
    pub(crate) async fn expire_order(&self, voucher_id: i64, order_id: i64) -> AppResult<Expiry> {
        match self
            .settle_order(voucher_id, order_id, OrderStatus::Expired, None)
            .await
        {
            Ok((true, _)) => Ok(Expiry::Expired),
            Ok((false, _)) => Ok(Expiry::Settled),
            Err(error) if error.code() == ErrorCode::NotFound => Ok(Expiry::Unknown),
            Err(error) => Err(error),
        }
    }

    /// Registers the expiry job's handler and retry policy. Before any consumer starts: the
    /// order consumer schedules expiry jobs with the topic's attempts.
    pub(crate) fn register_expiry(&self) {
        let mut policy = self.jobs.registry.policy(EXPIRY_TOPIC);
        policy.ladder = EXPIRY_LADDER_SECONDS
            .iter()
            .map(|seconds| std::time::Duration::from_secs(*seconds))
            .collect();
        policy.attempts = Some(EXPIRY_ATTEMPTS);
        self.jobs.register(
            EXPIRY_TOPIC,
            Arc::new(ExpireOrder(self.clone())),
            Some(policy),
        );
    }
}

/// What a settlement answers: `{ status, order status now }`.
pub(crate) struct SettleReply {
    status: Status,
    now: String,
}

impl redis::FromRedisValue for SettleReply {
    fn from_redis_value(value: redis::Value) -> Result<Self, redis::ParsingError> {
        let (status, now) = redis::FromRedisValue::from_redis_value(value)?;
        Ok(Self { status, now })
    }
}

impl Reply for SettleReply {
    fn status(&self) -> Status {
        self.status
    }

    fn wrote(&self) -> bool {
        self.status == Status::Ok
    }
}

impl Replies for VouchersSettle {
    type Reply = SettleReply;
}
