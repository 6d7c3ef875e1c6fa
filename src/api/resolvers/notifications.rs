//! `notifications`, `unreadNotificationCount`, `markNotificationsRead`, `notificationAdded`,
//! `unreadCountChanged`: the viewer's own, signed in only.

use async_graphql::{Context, Object, Subscription};
use futures::{Stream, StreamExt};

use crate::{
    api::{
        live::SubscriptionSlot,
        schema::{
            connection::{Connection, Edge},
            id::NotificationId,
            notifications::Notification,
            page::{decode_cursor, encode_cursor, PAGE},
            ContextExt,
        },
    },
    features::notifications::Notifications,
    infra::{
        auth::{self, RoleGuard},
        error::{AppError, AppResult},
    },
};

#[derive(Default)]
pub(crate) struct NotificationQuery;

#[Object]
impl NotificationQuery {
    /// The viewer's notifications, newest activity first: `first` (1 to 100, 20 when not
    /// given) after `after`; with `unreadOnly`, the unread ones alone. Kept 90 days.
    #[graphql(
        guard = "RoleGuard::signed_in()",
        complexity = "PAGE.cost(first, child_complexity)"
    )]
    async fn notifications(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        #[graphql(default_with = "Some(false)")] unread_only: Option<bool>,
    ) -> AppResult<Connection<Notification>> {
        let viewer = auth::require_viewer(ctx)?;
        let rows = PAGE.first(first)?;
        let after = decode_cursor(after.as_deref())?;
        let page = ctx
            .feature::<Notifications>()
            .page(viewer.user_id, rows, after, unread_only.unwrap_or(false))
            .await?;
        let edges = page
            .records
            .into_iter()
            .map(|record| Edge {
                cursor: encode_cursor(record.seq),
                node: Notification(record),
            })
            .collect();
        Ok(Connection::new(edges, page.more, after.is_some()))
    }

    /// How many of the viewer's notifications are unread.
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn unread_notification_count(&self, ctx: &Context<'_>) -> AppResult<i32> {
        let viewer = auth::require_viewer(ctx)?;
        let count = ctx
            .feature::<Notifications>()
            .unread_count(viewer.user_id)
            .await?;
        Ok(count.clamp(0, i64::from(i32::MAX)) as i32)
    }
}

#[derive(Default)]
pub(crate) struct NotificationMutation;

#[Object]
impl NotificationMutation {
    /// Marks the viewer's notification `upTo` and every older one read; answers how many
    /// were unread. Repeating it marks none. Another user's notification is `NOT_FOUND`.
    #[graphql(guard = "RoleGuard::signed_in()")]
    async fn mark_notifications_read(
        &self,
        ctx: &Context<'_>,
        up_to: NotificationId,
    ) -> AppResult<i32> {
        let viewer = auth::require_viewer(ctx)?;
        let marked = ctx
            .feature::<Notifications>()
            .mark_read(viewer.user_id, up_to.0)
            .await?;
        Ok(marked.clamp(0, i64::from(i32::MAX)) as i32)
    }
}

#[derive(Default)]
pub(crate) struct NotificationSubscription;

#[Subscription]
impl NotificationSubscription {
    /// Each notification the viewer is sent from now on: a new one, or a like group that
    /// grew (then unread again).
    async fn notification_added(
        &self,
        ctx: &Context<'_>,
    ) -> Result<impl Stream<Item = Notification>, AppError> {
        let viewer = auth::require_viewer(ctx)?;
        let slot = SubscriptionSlot::acquire(ctx)?;
        let added = ctx.feature::<Notifications>().added(viewer.user_id).await?;
        Ok(slot.hold(added).map(Notification))
    }

    /// The viewer's unread count now, then each time it changes.
    async fn unread_count_changed(
        &self,
        ctx: &Context<'_>,
    ) -> Result<impl Stream<Item = i32>, AppError> {
        let viewer = auth::require_viewer(ctx)?;
        let slot = SubscriptionSlot::acquire(ctx)?;
        let counts = ctx
            .feature::<Notifications>()
            .unread_changes(viewer.user_id)
            .await?;
        Ok(slot
            .hold(counts)
            .map(|count| count.clamp(0, i64::from(i32::MAX)) as i32))
    }
}
