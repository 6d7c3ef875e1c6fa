//! `notificationAdded` and `unreadCountChanged`: the store script publishes on the user's
//! channel (`n <JSON>` for a notification that is new or moved up, `c <count>` for a new
//! unread count), and each subscription reads the messages of its kind.
//!
//! A notification missed while the subscriber lagged or Redis was away is not sent again
//! (pub/sub keeps nothing): the client reads `notifications` when it comes back. The count
//! is read afresh then, so it is never left wrong.

use futures::{Stream, StreamExt};

use super::{NotificationRecord, Notifications};
use crate::infra::{error::AppResult, live::LiveMessage};

/// What a user's channel carries.
#[derive(Debug, Clone)]
pub(crate) enum LiveNotice {
    Added(Box<NotificationRecord>),
    UnreadCount(i64),
}

impl LiveNotice {
    fn parse(payload: &str) -> Option<Self> {
        let (kind, rest) = payload.split_once(' ')?;
        match kind {
            "n" => serde_json::from_str(rest).ok().map(Self::Added),
            "c" => rest.parse().ok().map(Self::UnreadCount),
            _ => None,
        }
    }
}

impl Notifications {
    /// Each notification the user is sent from now on (new ones, and groups that grew), unread.
    pub(crate) async fn added(
        &self,
        user_id: i64,
    ) -> AppResult<impl Stream<Item = NotificationRecord>> {
        let subscription = self
            .infra
            .live
            .subscribe(self.infra.keys.notifications_channel(user_id))
            .await;
        Ok(futures::stream::unfold(
            subscription,
            |mut subscription| async move {
                loop {
                    match subscription.recv().await? {
                        LiveMessage::Payload(payload) => {
                            if let Some(LiveNotice::Added(record)) = LiveNotice::parse(&payload) {
                                return Some((*record, subscription));
                            }
                        }
                        LiveMessage::Resync => {}
                    }
                }
            },
        ))
    }

    /// The user's unread count now, then each new one (read afresh after a lag or an outage).
    pub(crate) async fn unread_changes(&self, user_id: i64) -> AppResult<impl Stream<Item = i64>> {
        let subscription = self
            .infra
            .live
            .subscribe(self.infra.keys.notifications_channel(user_id))
            .await;
        // Subscribed first (confirmed by Redis), so no change slips in before this read.
        let now = self.unread_count(user_id).await?;
        let this = self.clone();
        let changes =
            futures::stream::unfold((subscription, now), move |(mut subscription, last)| {
                let this = this.clone();
                async move {
                    loop {
                        let count = match subscription.recv().await? {
                            LiveMessage::Payload(payload) => match LiveNotice::parse(&payload) {
                                Some(LiveNotice::UnreadCount(count)) => count,
                                _ => continue,
                            },
                            LiveMessage::Resync => match this.unread_count(user_id).await {
                                Ok(count) => count,
                                Err(_) => continue,
                            },
                        };
                        if count != last {
                            return Some((count, (subscription, count)));
                        }
                    }
                }
            });
        Ok(futures::stream::once(async move { now }).chain(changes))
    }
}
