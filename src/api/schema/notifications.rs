//! GraphQL types of notifications.

use async_graphql::{Context, Object};

use super::{
    boards::Board, id::NotificationId, remarks::Remark, scalars::DateTime, users::load_user,
    users::User, vouchers::Order, ContextExt,
};
use crate::{
    features::{
        boards::Boards,
        notifications::{NotificationKind, NotificationRecord},
        remarks::Remarks,
        vouchers::Vouchers,
    },
    infra::{auth, error::AppResult},
};

/// Something that happened to the viewer. `text` says it in English; the other fields name
/// what it is about, for a client that renders its own.
pub(crate) struct Notification(pub NotificationRecord);

#[Object]
impl Notification {
    pub(crate) async fn id(&self) -> NotificationId {
        NotificationId::new(self.0.id)
    }

    async fn kind(&self) -> NotificationKind {
        self.0.kind
    }

    /// When it last happened: a like group's latest like.
    async fn created_at(&self) -> DateTime {
        DateTime::from_ms(self.0.at_ms)
    }

    /// Whether the viewer marked it (or a newer one) read since it last happened.
    async fn read(&self) -> bool {
        self.0.read
    }

    /// Who did it: the latest liker, the follower.
    async fn actor(&self, ctx: &Context<'_>) -> AppResult<Option<User>> {
        match self.0.actor_id {
            Some(actor) => Ok(Some(load_user(ctx, actor).await?)),
            None => Ok(None),
        }
    }

    /// The remark liked (null once it is no longer shown).
    async fn remark(&self, ctx: &Context<'_>) -> AppResult<Option<Remark>> {
        let Some(id) = self.0.remark_id else {
            return Ok(None);
        };
        Ok(ctx
            .feature::<Remarks>()
            .find(id)
            .await?
            .filter(|remark| remark.shown_to(auth::viewer(ctx)))
            .map(Remark::from))
    }

    /// The order about to expire, or expired.
    async fn order(&self, ctx: &Context<'_>) -> AppResult<Option<Order>> {
        let Some(id) = self.0.order_id else {
            return Ok(None);
        };
        Ok(ctx
            .feature::<Vouchers>()
            .find_order(id)
            .await?
            .filter(|order| order.buyer_id == self.0.user_id)
            .map(Order))
    }

    /// The board whose reward was paid.
    async fn board(&self, ctx: &Context<'_>) -> AppResult<Option<Board>> {
        let Some(key) = &self.0.board_key else {
            return Ok(None);
        };
        Ok(ctx.feature::<Boards>().find(key).await?.map(Board))
    }

    /// What happened, in English: "Mei and 12 others liked your review".
    async fn text(&self) -> &str {
        &self.0.text
    }
}
