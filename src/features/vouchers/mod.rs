//! Flash-sale vouchers: one order per person, never oversold, unpaid orders
//! expire.
//!
//! - The sale itself is one Lua script (`lua/vouchers_seckill.lua`): window, buyer set, stock,
//!   order and its event, with the order id allocated before the call and every key passed
//!   in (a key built inside Lua cannot be routed to its Redis Cluster slot).
//! - [`orders`]: payment, cancellation and expiry, mutually exclusive in one script.
//! - [`archive`]: the order consumer that writes SQL (`stock > 0` guard, idempotent).
//! - [`sweep`]: the backstop that expires overdue orders whose expiry job was lost.
//!
//! A voucher's keys and its shard's order stream share the hash tag `{sale:S}`,
//! S = voucher id mod `ENGAGE_SALE_SHARDS`.
//!
//! A new voucher's stock and window reach Redis through an outbox (`voucher_preloads`,
//! emptied as `infra::outbox` says): its row and its preload to come are written in one
//! transaction, and the request preloads it, or leaves that to the retrier when Redis
//! refuses. The request is acknowledged either way: an error once the voucher is stored
//! would make the admin create it again, a second sale of the same stock, while the first
//! had nothing to sell until a rebuild. (An idempotency key on `createVoucher` was the
//! alternative: it mends only the retries that come.) A sale that finds its voucher missing
//! preloads it itself ([`Vouchers::seckill`]), so the retrier is not on the sale's path.

pub mod archive;
pub mod events;
pub(crate) mod my_orders;
pub mod orders;
pub mod recovery;
pub mod settings;
pub mod sweep;

pub use recovery::StockCheck;

use std::{collections::HashMap, time::Duration};

use chrono::{DateTime, Utc};
use sqlx::Row;

use crate::infra::redis::durability::DurableWrite;

use crate::{
    features::{
        items::Items,
        jobs::{self, Jobs, NewJob},
        vouchers::orders::OrderStatus,
    },
    infra::{
        error::{AppError, AppResult, ErrorCode},
        outbox::{self, Outbox},
        redis::{
            scripts::{Replies, Reply, VouchersSeckill, VouchersSeckillArgs},
            status::Status,
            KeyPart, Keys,
        },
        Infra,
    },
};

/// What flash-sale vouchers work with: a voucher is for an item, and an unpaid order
/// expires through the delay queue.
#[derive(Clone)]
pub struct Vouchers {
    pub(crate) infra: Infra,
    pub(crate) items: Items,
    pub(crate) jobs: Jobs,
    pub(crate) settings: VoucherSettings,
}

pub use settings::VoucherSettings;

/// The delay-queue topic of order expiry.
pub const EXPIRY_TOPIC: &str = "order-expiry";
pub(crate) const MAX_STOCK: i64 = 1_000_000;

/// The vouchers of an item a listing returns (the newest).
pub(crate) const VOUCHERS_PER_ITEM: usize = 100;

/// The slots the order → voucher keys spread over.
const ORDER_VOUCHER_BUCKETS: i64 = 1024;

impl Keys {
    fn sale_tag(id: i64, shards: u32) -> impl KeyPart {
        ("sale:", id.rem_euclid(i64::from(shards)))
    }

    pub fn voucher(&self, voucher_id: i64, shards: u32) -> String {
        self.tagged(Self::sale_tag(voucher_id, shards), ("voucher:", voucher_id))
    }

    pub fn voucher_buyers(&self, voucher_id: i64, shards: u32) -> String {
        self.tagged(
            Self::sale_tag(voucher_id, shards),
            ("voucher:", voucher_id, ":buyers"),
        )
    }

    /// An order lives in its voucher's slot, so settling it touches one slot.
    pub fn order(&self, voucher_id: i64, order_id: i64, shards: u32) -> String {
        self.tagged(Self::sale_tag(voucher_id, shards), ("order:", order_id))
    }

    pub fn order_stream(&self, shard: u32) -> String {
        self.tagged(("sale:", shard), "orders")
    }

    pub fn order_stream_of(&self, voucher_id: i64, shards: u32) -> String {
        self.order_stream(voucher_id.rem_euclid(i64::from(shards)) as u32)
    }

    /// Which voucher an order belongs to (its keys live in the voucher's slot). One key per
    /// order, spread over 1024 slots by order id: no script touches two of them, and one
    /// slot would put every order's key on one node.
    pub(crate) fn order_voucher(&self, order_id: i64) -> String {
        self.tagged(
            ("orders:", order_id.rem_euclid(ORDER_VOUCHER_BUCKETS)),
            ("voucher-of:", order_id),
        )
    }

    /// The live channel of a voucher's stock, in the slot of its keys.
    pub fn voucher_stock_channel(&self, voucher_id: i64, shards: u32) -> String {
        self.tagged(
            Self::sale_tag(voucher_id, shards),
            ("live:voucher:", voucher_id),
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VoucherRecord {
    pub(crate) id: i64,
    pub(crate) item_id: i64,
    pub(crate) title: String,
    pub(crate) stock: i64,
    pub(crate) begins_at_ms: i64,
    pub(crate) ends_at_ms: i64,
    pub(crate) pay_within_seconds: i64,
}

pub(crate) struct NewVoucher {
    pub(crate) item_id: i64,
    pub(crate) title: String,
    pub(crate) stock: i64,
    pub(crate) begins_at: DateTime<Utc>,
    pub(crate) ends_at: DateTime<Utc>,
    pub(crate) pay_within_seconds: i64,
}

impl NewVoucher {
    fn validate(&self, now: DateTime<Utc>) -> AppResult<()> {
        let title = self.title.trim();
        if title.is_empty() || title.chars().count() > 100 {
            return Err(AppError::bad_input("title must have 1 to 100 characters"));
        }
        if !(1..=MAX_STOCK).contains(&self.stock) {
            return Err(AppError::bad_input(format!(
                "stock must be between 1 and {MAX_STOCK}"
            )));
        }
        if self.ends_at <= self.begins_at || self.ends_at <= now {
            return Err(AppError::bad_input(
                "endsAt must be after beginsAt and in the future",
            ));
        }
        if !(1..=7 * 24 * 3600).contains(&self.pay_within_seconds) {
            return Err(AppError::bad_input(
                "payWithinSeconds must be between 1 and 604800",
            ));
        }
        Ok(())
    }
}

pub(crate) const COLUMNS: &str =
    "id, item_id, title, stock, begins_at_ms, ends_at_ms, pay_within_seconds";

pub(crate) fn record_of(row: &sqlx::any::AnyRow) -> Result<VoucherRecord, sqlx::Error> {
    Ok(VoucherRecord {
        id: row.try_get("id")?,
        item_id: row.try_get("item_id")?,
        title: row.try_get("title")?,
        stock: row.try_get("stock")?,
        begins_at_ms: row.try_get("begins_at_ms")?,
        ends_at_ms: row.try_get("ends_at_ms")?,
        pay_within_seconds: row.try_get("pay_within_seconds")?,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewOrder {
    pub order_id: i64,
    pub voucher_id: i64,
    pub created_at_ms: i64,
    pub pay_by_ms: i64,
}

/// The outbox of new vouchers to preload into Redis: voucher ids.
#[derive(Clone)]
pub(crate) struct Preloads(pub Vouchers);

#[async_trait::async_trait]
impl Outbox for Preloads {
    type Entry = i64;
    const NAME: &'static str = "voucher-preloader";
    const TABLE: &'static str = "voucher_preloads";
    const ID: &'static str = "voucher_id";
    const COLUMNS: &'static str = "voucher_id";

    fn infra(&self) -> &Infra {
        &self.0.infra
    }

    fn entry_of(row: &sqlx::any::AnyRow) -> Result<i64, sqlx::Error> {
        row.try_get("voucher_id")
    }

    fn id_of(voucher_id: &i64) -> i64 {
        *voucher_id
    }

    /// Preloads each voucher from what SQL holds now (its remaining stock and live buyers,
    /// should a sale have preloaded it already and sold some): the stock is written only
    /// where Redis has none, so a late or second delivery never gives stock back.
    async fn deliver(&self, voucher_ids: &[i64]) -> AppResult<()> {
        for &voucher_id in voucher_ids {
            match self.0.rebuild_voucher(voucher_id).await {
                Err(error) if error.code() == ErrorCode::NotFound => {}
                done => done?,
            }
        }
        Ok(())
    }
}

/// An expiry job that exists already is as good as a new one.
fn scheduled_or_pending(answer: AppResult<jobs::JobView>) -> AppResult<()> {
    match answer {
        Ok(_) => Ok(()),
        Err(error) if error.code() == ErrorCode::JobExists => Ok(()),
        Err(error) => Err(error),
    }
}

impl Vouchers {
    pub fn shards(&self) -> u32 {
        self.settings.shards()
    }

    /// Stores a voucher and preloads its stock and window into Redis (the retrier does, when
    /// Redis refuses).
    pub(crate) async fn create(&self, voucher: NewVoucher) -> AppResult<VoucherRecord> {
        voucher.validate(self.infra.clock.now())?;
        if self.items.find(voucher.item_id).await?.is_none() {
            return Err(AppError::not_found(format!("no item {}", voucher.item_id)));
        }
        let record = VoucherRecord {
            id: self.infra.ids.next_id().await?,
            item_id: voucher.item_id,
            title: voucher.title.trim().to_string(),
            stock: voucher.stock,
            begins_at_ms: voucher.begins_at.timestamp_millis(),
            ends_at_ms: voucher.ends_at.timestamp_millis(),
            pay_within_seconds: voucher.pay_within_seconds,
        };
        let now_ms = self.infra.clock.now_ms();
        let mut tx = self.infra.db.pool.begin().await?;
        sqlx::query(
            "INSERT INTO vouchers (id, item_id, title, stock, remaining, begins_at_ms, ends_at_ms, \
             pay_within_seconds, created_at_ms) VALUES ($1, $2, $3, $4, $4, $5, $6, $7, $8)",
        )
        .bind(record.id)
        .bind(record.item_id)
        .bind(&record.title)
        .bind(record.stock)
        .bind(record.begins_at_ms)
        .bind(record.ends_at_ms)
        .bind(record.pay_within_seconds)
        .bind(now_ms)
        .execute(&mut *tx)
        .await?;
        sqlx::query("INSERT INTO voucher_preloads (voucher_id, created_at_ms) VALUES ($1, $2)")
            .bind(record.id)
            .bind(now_ms)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        outbox::deliver_or_leave(&self.preloads(), &[record.id]).await;
        Ok(record)
    }

    /// The outbox of preloads of new vouchers.
    pub(crate) fn preloads(&self) -> Preloads {
        Preloads(self.clone())
    }

    /// Writes a voucher's stock, window and live buyers into Redis (at creation, or to rebuild
    /// them from SQL after Redis lost them). HSETNX: a rebuild never overwrites live stock.
    pub(crate) async fn preload(
        &self,
        voucher: &VoucherRecord,
        stock: i64,
        buyers: &[i64],
    ) -> AppResult<()> {
        let key = self.infra.keys.voucher(voucher.id, self.shards());
        let mut pipe = redis::pipe();
        pipe.cmd("HSETNX")
            .arg(&key)
            .arg("stock")
            .arg(stock)
            .ignore();
        pipe.cmd("HSET")
            .arg(&key)
            .arg("begins")
            .arg(voucher.begins_at_ms)
            .arg("ends")
            .arg(voucher.ends_at_ms)
            .arg("pay_within")
            .arg(voucher.pay_within_seconds)
            .ignore();
        if !buyers.is_empty() {
            pipe.cmd("SADD")
                .arg(self.infra.keys.voucher_buyers(voucher.id, self.shards()))
                .arg(buyers)
                .ignore();
        }
        let mut conn = self.infra.redis.get().await?;
        let () = pipe.query_async(&mut *conn).await?;
        Ok(())
    }

    /// Rebuilds a voucher in Redis from SQL; `NOT_FOUND` when there is no such voucher.
    pub(crate) async fn rebuild_voucher(&self, voucher_id: i64) -> AppResult<()> {
        let voucher = self
            .find(voucher_id)
            .await?
            .ok_or_else(|| AppError::not_found(format!("no voucher {voucher_id}")))?;
        let (remaining, live) = self.sql_stock(voucher_id).await?;
        let buyers: Vec<i64> = sqlx::query(
            "SELECT buyer_id FROM orders WHERE voucher_id = $1 AND status IN ('UNPAID', 'PAID')",
        )
        .bind(voucher_id)
        .fetch_all(&self.infra.db.pool)
        .await?
        .iter()
        .map(|row| row.try_get("buyer_id"))
        .collect::<Result<_, _>>()?;
        debug_assert_eq!(live as usize, buyers.len());
        self.preload(&voucher, remaining, &buyers).await
    }

    pub(crate) async fn find(&self, voucher_id: i64) -> AppResult<Option<VoucherRecord>> {
        let row = sqlx::query(&format!("SELECT {COLUMNS} FROM vouchers WHERE id = $1"))
            .bind(voucher_id)
            .fetch_optional(&self.infra.db.pool)
            .await?;
        Ok(row.map(|row| record_of(&row)).transpose()?)
    }

    pub(crate) async fn for_item(&self, item_id: i64) -> AppResult<Vec<VoucherRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM vouchers WHERE item_id = $1 ORDER BY id DESC \
             LIMIT {VOUCHERS_PER_ITEM}"
        ))
        .bind(item_id)
        .fetch_all(&self.infra.db.pool)
        .await?;
        rows.iter()
            .map(record_of)
            .collect::<Result<_, _>>()
            .map_err(Into::into)
    }

    /// A voucher's stock now, then each change (coalesced; read again after a lag).
    pub(crate) async fn stock_changes(
        &self,
        voucher_id: i64,
    ) -> AppResult<impl futures::Stream<Item = (i64, i64)>> {
        let keys = self.infra.keys.clone();
        let shards = self.shards();
        let reader = self.clone();
        crate::infra::live::counter_changes(
            &self.infra,
            vec![voucher_id],
            move |id| keys.voucher_stock_channel(id, shards),
            move |ids| {
                let ctx = reader.clone();
                async move { ctx.remaining(&ids).await }
            },
        )
        .await
    }

    /// Live stock of vouchers from Redis, in one round trip (missing ones: SQL's count).
    pub async fn remaining(&self, voucher_ids: &[i64]) -> AppResult<HashMap<i64, i64>> {
        let mut pipe = redis::pipe();
        for &id in voucher_ids {
            pipe.cmd("HGET")
                .arg(self.infra.keys.voucher(id, self.shards()))
                .arg("stock");
        }
        let mut conn = self.infra.redis.get().await?;
        let stocks: Vec<Option<i64>> = pipe.query_async(&mut *conn).await?;
        drop(conn);
        let mut out = HashMap::new();
        for (&id, stock) in voucher_ids.iter().zip(stocks) {
            let stock = match stock {
                Some(stock) => stock,
                None => self.sql_stock(id).await?.0,
            };
            out.insert(id, stock);
        }
        Ok(out)
    }

    /// SQL's stock of a voucher and its live (unpaid or paid) orders.
    pub(crate) async fn sql_stock(&self, voucher_id: i64) -> AppResult<(i64, i64)> {
        let row = sqlx::query(
            "SELECT v.remaining AS remaining, (SELECT COUNT(*) FROM orders o WHERE o.voucher_id = v.id \
             AND o.status IN ('UNPAID', 'PAID')) AS live FROM vouchers v WHERE v.id = $1",
        )
        .bind(voucher_id)
        .fetch_optional(&self.infra.db.pool)
        .await?;
        match row {
            Some(row) => Ok((row.try_get("remaining")?, row.try_get("live")?)),
            None => Ok((0, 0)),
        }
    }

    /// One attempt to buy a voucher.
    pub(crate) async fn seckill(&self, buyer_id: i64, voucher_id: i64) -> AppResult<NewOrder> {
        let order_id = self.infra.ids.next_id().await?;
        let keys = &self.infra.keys;
        let shards = self.shards();
        // The time of the last attempt, which the order records as its creation.
        let mut now = 0;
        let order = || {
            now = self.infra.clock.now_ms();
            let sale = VouchersSeckill {
                voucher: keys.voucher(voucher_id, shards),
                buyers: keys.voucher_buyers(voucher_id, shards),
                order: keys.order(voucher_id, order_id, shards),
                events: keys.order_stream_of(voucher_id, shards),
            };
            let args = VouchersSeckillArgs {
                voucher: voucher_id,
                buyer: buyer_id,
                order: order_id,
                now_ms: now,
                channel: keys.voucher_stock_channel(voucher_id, shards),
                publish: keys.publish_command(),
            };
            (sale, args)
        };
        // Once: rebuild the voucher from SQL (NOT_FOUND when SQL has none either).
        let mut rebuilt = false;
        let rebuild = |_missing| {
            let first = !std::mem::replace(&mut rebuilt, true);
            async move {
                if first {
                    self.rebuild_voucher(voucher_id).await
                } else {
                    Err(AppError::not_found(format!("no voucher {voucher_id}")))
                }
            }
        };
        let reply = self
            .infra
            .durable_scripts(DurableWrite::Orders)
            .run(order, rebuild)
            .await?;
        match reply.status {
            Status::Ok => {
                let order = NewOrder {
                    order_id,
                    voucher_id,
                    created_at_ms: now,
                    pay_by_ms: reply.pay_by,
                };
                self.remember_voucher_of(&order).await;
                self.note_order(buyer_id, order_id, now).await;
                // The order consumer schedules the expiry too (durably); this is the fast path.
                if let Err(error) = self.schedule_expiry(&order).await {
                    tracing::warn!(order = order_id, %error, "expiry not scheduled yet; the order consumer will");
                }
                Ok(order)
            }
            refused @ Status::NotYet => Err(refused.refusal("the sale has not started")),
            refused @ Status::Ended => Err(refused.refusal("the sale has ended")),
            refused @ Status::Taken => {
                Err(refused.refusal("you already have an order for this voucher"))
            }
            refused @ Status::SoldOut => Err(refused.refusal("sold out")),
            other => Err(AppError::internal(anyhow::anyhow!(
                "vouchers_seckill answered {other:?}"
            ))),
        }
    }

    /// Records which voucher an order belongs to, so that the buyer can pay or cancel before
    /// the order reaches SQL. Best effort: SQL answers once the consumer archived the order.
    pub(crate) async fn remember_voucher_of(&self, order: &NewOrder) {
        let written: AppResult<()> = async {
            let mut conn = self.infra.redis.get().await?;
            let () = redis::cmd("SET")
                .arg(self.infra.keys.order_voucher(order.order_id))
                .arg(order.voucher_id)
                .arg("EX")
                .arg(30 * 24 * 3600)
                .query_async(&mut *conn)
                .await?;
            Ok(())
        }
        .await;
        if let Err(error) = written {
            tracing::warn!(order = order.order_id, %error, "order index not written");
        }
    }

    /// The expiry job of an order: due at its pay-by time, its id the order's.
    fn expiry_job(&self, order: &NewOrder) -> NewJob {
        let delay = (order.pay_by_ms - self.infra.clock.now_ms()).max(0) as u64;
        // The topic's policy (orders::register_expiry) gives it its attempts.
        NewJob::new(
            order.order_id.to_string(),
            EXPIRY_TOPIC,
            serde_json::json!({ "order": order.order_id, "voucher": order.voucher_id }).to_string(),
            Duration::from_millis(delay),
        )
    }

    /// Schedules the expiry of an unpaid order at its pay-by time, ahead of the order's SQL
    /// record (the order consumer records the job with the order); an existing job is fine.
    pub(crate) async fn schedule_expiry(&self, order: &NewOrder) -> AppResult<()> {
        scheduled_or_pending(
            self.jobs
                .schedule_ahead_of_record(self.expiry_job(order))
                .await,
        )
    }

    /// Takes the expiry job of a settled order off the delay queue (otherwise it would wait
    /// there until the pay-by time, to find nothing to do). Best effort: a job left behind
    /// finds the order settled and ends.
    pub(crate) async fn cancel_expiry(&self, order_id: i64) {
        if let Err(error) = self.jobs.cancel(EXPIRY_TOPIC, &order_id.to_string()).await {
            tracing::warn!(order = order_id, %error, "expiry job of a settled order not cancelled");
        }
    }

    /// Makes sure each order still unpaid has its expiry job, and that no job is left for an
    /// order settled meanwhile. An order settled already gets none; the jobs of the others are
    /// scheduled in one batch, their SQL rows written through `sql` (the order consumer's
    /// transaction, which commits them with the orders), and the orders' status read again
    /// after: a settlement came either before that read (seen here: its job is cancelled) or
    /// after the job existed (and its settler cancels it), so no interleaving leaves one behind.
    pub async fn ensure_expiries(
        &self,
        sql: &mut sqlx::AnyConnection,
        orders: &[NewOrder],
    ) -> AppResult<()> {
        let unpaid = self.unsettled(orders).await?;
        if unpaid.is_empty() {
            return Ok(());
        }
        let jobs = unpaid.iter().map(|order| self.expiry_job(order)).collect();
        for answer in self.jobs.schedule_in(sql, jobs).await? {
            scheduled_or_pending(answer)?;
        }
        let still_unpaid = self.unsettled(&unpaid).await?;
        for order in unpaid.iter().filter(|order| !still_unpaid.contains(order)) {
            self.jobs
                .cancel_in(sql, EXPIRY_TOPIC, &order.order_id.to_string())
                .await?;
        }
        Ok(())
    }

    /// The orders that Redis does not hold as settled (unpaid ones, and unknown ones: their
    /// expiry job finds nothing to do), in one round trip.
    async fn unsettled(&self, orders: &[NewOrder]) -> AppResult<Vec<NewOrder>> {
        if orders.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for order in orders {
            pipe.cmd("HGET")
                .arg(
                    self.infra
                        .keys
                        .order(order.voucher_id, order.order_id, self.shards()),
                )
                .arg("status");
        }
        let statuses: Vec<Option<String>> = {
            let mut conn = self.infra.redis.get().await?;
            pipe.query_async(&mut *conn).await?
        };
        Ok(orders
            .iter()
            .zip(statuses)
            .filter(|(_, status)| {
                status
                    .as_deref()
                    .and_then(OrderStatus::parse)
                    .is_none_or(|status| status == OrderStatus::Unpaid)
            })
            .map(|(order, _)| *order)
            .collect())
    }
}

/// What a flash-sale attempt answers: `{ status, stock left, pay by (epoch ms) }`.
pub(crate) struct SeckillReply {
    status: Status,
    pay_by: i64,
}

impl redis::FromRedisValue for SeckillReply {
    fn from_redis_value(value: redis::Value) -> Result<Self, redis::ParsingError> {
        let (status, _stock, pay_by): (Status, i64, i64) =
            redis::FromRedisValue::from_redis_value(value)?;
        Ok(Self { status, pay_by })
    }
}

impl Reply for SeckillReply {
    fn status(&self) -> Status {
        self.status
    }

    fn wrote(&self) -> bool {
        self.status == Status::Ok
    }
}

impl Replies for VouchersSeckill {
    type Reply = SeckillReply;
}
