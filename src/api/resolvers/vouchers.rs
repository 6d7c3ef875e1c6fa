//! `voucher`, `vouchers`, `myOrders`, `createVoucher`, `seckillVoucher`, `payOrder`,
//! `cancelOrder`, `voucherStockChanged`.

use async_graphql::{Context, Object, Subscription};
use futures::{Stream, StreamExt};

use crate::{
    api::schema::id::{ItemId, OrderId, VoucherId},
    api::{
        live::SubscriptionSlot,
        schema::{
            connection::Connection,
            page::{list_cost, PageArgs, PAGE},
            vouchers::{CreateVoucherInput, Order, Voucher, VoucherStock},
            ContextExt,
        },
    },
    features::vouchers::{
        orders::{OrderRecord, OrderStatus},
        NewVoucher, Vouchers, VOUCHERS_PER_ITEM,
    },
    infra::{
        auth::{self, RoleGuard},
        error::{AppError, AppResult},
    },
};

#[derive(Default)]
pub(crate) struct VoucherQuery;

#[Object]
impl VoucherQuery {
    async fn voucher(&self, ctx: &Context<'_>, id: VoucherId) -> AppResult<Option<Voucher>> {
        let id = id.0;
        Ok(ctx.feature::<Vouchers>().find(id).await?.map(Voucher))
    }

    /// An item's vouchers, newest first (at most 100).
    #[graphql(complexity = "list_cost(VOUCHERS_PER_ITEM, child_complexity)")]
    async fn vouchers(&self, ctx: &Context<'_>, item_id: ItemId) -> AppResult<Vec<Voucher>> {
        let item_id = item_id.0;
        Ok(ctx
            .feature::<Vouchers>()
            .for_item(item_id)
            .await?
            .into_iter()
            .map(Voucher)
            .collect())
    }

    /// One of the viewer's orders as it is now (a just-bought, just-paid or just-cancelled
    /// one at once); null for another buyer's order, or none.
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn order(&self, ctx: &Context<'_>, id: OrderId) -> AppResult<Option<Order>> {
        let viewer = auth::require_viewer(ctx)?;
        Ok(ctx
            .feature::<Vouchers>()
            .order_of(viewer.user_id, id.0)
            .await?
            .map(Order))
    }

    /// The viewer's orders, newest first, as they are now (a just-bought, just-paid or
    /// just-cancelled order at once): `first` (1 to 100; 20 when neither is given) after
    /// `after`, or `last` (1 to 100) before `before`, not both.
    #[graphql(
        guard = "RoleGuard::signed_in()",
        complexity = "PAGE.cost_either(first, last, child_complexity)"
    )]
    async fn my_orders(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        last: Option<i32>,
        before: Option<String>,
    ) -> AppResult<Connection<Order>> {
        let viewer = auth::require_viewer(ctx)?;
        let args = PageArgs::keyset(first, after.as_deref(), last, before.as_deref())?;
        let (records, more) = ctx
            .feature::<Vouchers>()
            .live_orders_of(viewer.user_id, args)
            .await?;
        Ok(Connection::keyset(
            records.into_iter().map(Order),
            |o| o.0.id,
            &args,
            more,
        ))
    }
}

#[derive(Default)]
pub(crate) struct VoucherMutation;

#[Object]
impl VoucherMutation {
    /// Admin only. The stock and window are preloaded into Redis.
    #[graphql(guard = "RoleGuard::admin()")]
    async fn create_voucher(
        &self,
        ctx: &Context<'_>,
        input: CreateVoucherInput,
    ) -> AppResult<Voucher> {
        let voucher = NewVoucher {
            item_id: input.item_id.0,
            title: input.title,
            stock: i64::from(input.stock),
            begins_at: input.begins_at.0,
            ends_at: input.ends_at.0,
            pay_within_seconds: i64::from(input.pay_within_seconds),
        };
        Ok(Voucher(ctx.feature::<Vouchers>().create(voucher).await?))
    }

    /// One attempt to buy: an UNPAID order, or NOT_STARTED, ENDED, ALREADY_ORDERED, SOLD_OUT.
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn seckill_voucher(&self, ctx: &Context<'_>, voucher_id: VoucherId) -> AppResult<Order> {
        let viewer = auth::require_viewer(ctx)?;
        let voucher_id = voucher_id.0;
        let order = ctx
            .feature::<Vouchers>()
            .seckill(viewer.user_id, voucher_id)
            .await?;
        Ok(Order(OrderRecord {
            id: order.order_id,
            voucher_id,
            buyer_id: viewer.user_id,
            status: OrderStatus::Unpaid,
            created_at_ms: order.created_at_ms,
            pay_by_ms: order.pay_by_ms,
        }))
    }

    /// Pays (simulated) the viewer's unpaid order before its pay-by time; after it,
    /// PAY_WINDOW_OVER (the order is expired).
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn pay_order(&self, ctx: &Context<'_>, order_id: OrderId) -> AppResult<Order> {
        act(ctx, order_id, OrderStatus::Paid).await
    }

    /// Cancels the viewer's unpaid order; the stock returns and the viewer may buy again.
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn cancel_order(&self, ctx: &Context<'_>, order_id: OrderId) -> AppResult<Order> {
        act(ctx, order_id, OrderStatus::Cancelled).await
    }
}

async fn act(ctx: &Context<'_>, order_id: OrderId, outcome: OrderStatus) -> AppResult<Order> {
    let viewer = auth::require_viewer(ctx)?;
    let order_id = order_id.0;
    Ok(Order(
        ctx.feature::<Vouchers>()
            .act_on_order(viewer.user_id, order_id, outcome)
            .await?,
    ))
}

#[derive(Default)]
pub(crate) struct VoucherSubscription;

#[Subscription]
impl VoucherSubscription {
    /// The voucher's remaining stock now, then each change (bursts coalesced).
    async fn voucher_stock_changed(
        &self,
        ctx: &Context<'_>,
        voucher_id: VoucherId,
    ) -> Result<impl Stream<Item = VoucherStock>, AppError> {
        let voucher_id = voucher_id.0;
        let vouchers = ctx.feature::<Vouchers>();
        if vouchers.find(voucher_id).await?.is_none() {
            return Err(AppError::not_found(format!("no voucher {voucher_id}")));
        }
        let slot = SubscriptionSlot::acquire(ctx)?;
        let changes = vouchers.stock_changes(voucher_id).await?;
        Ok(slot.hold(changes).map(|(id, remaining)| VoucherStock {
            voucher_id: VoucherId::new(id),
            remaining,
        }))
    }
}
