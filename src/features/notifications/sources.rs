//! The consumers that make notifications of other features' events, each a consumer group
//! (`notify`) of its own on their streams, so that notifying never holds up archiving nor
//! the reverse:
//! - the vote streams: a like of someone else's remark (`LIKE_RECEIVED`, grouped);
//! - the follow events: a follow counted (`NEW_FOLLOWER`);
//! - the award streams: a board's reward (`REWARD_PAID`, by the reward's idempotency key)
//!   and a sign-in that paid a streak milestone (`MILESTONE_REACHED`);
//! - the order streams: an order created schedules its reminder (`ORDER_EXPIRING`,
//!   [`super::schedule`]), an order expired unpaid is told (`ORDER_EXPIRED`).
//!
//! Each handler turns its batch into [`Notice`]s and records them in one transaction; the
//! stream consumer acknowledges the batch after that, so a crash replays it and the sources
//! already recorded write nothing.

use std::sync::Arc;

use super::{text, Notice, NotificationKind, Notifications};
use crate::{
    features::{
        feed::events::FollowEvent,
        points::{events::AwardEvent, PointsType},
        remarks::events::VoteEvent,
        vouchers::{
            events::{OrderChange, OrderEvent},
            orders::OrderStatus,
        },
    },
    infra::{
        error::AppError,
        streams::{self, Event, HandleError, Handler, RedisHandler, StreamEntry},
    },
};

/// The consumer group of notifications on every stream it reads.
pub(crate) const GROUP: &str = "notify";

/// The streams notifications read.
pub(crate) struct SourceStreams {
    pub(crate) votes: Vec<String>,
    pub(crate) awards: Vec<String>,
    pub(crate) orders: Vec<String>,
    pub(crate) follows: String,
}

impl Notifications {
    /// Runs the consumers of this instance.
    pub(crate) fn spawn_consumers(&self, streams: SourceStreams) {
        let spawn = |name, streams, handler: Arc<dyn RedisHandler>| {
            streams::spawn(&self.infra, name, GROUP, streams, Handler::Redis(handler));
        };
        spawn(
            "like-notices",
            streams.votes,
            Arc::new(LikeNotices(self.clone())),
        );
        spawn(
            "follow-notices",
            vec![streams.follows],
            Arc::new(FollowNotices(self.clone())),
        );
        spawn(
            "award-notices",
            streams.awards,
            Arc::new(AwardNotices(self.clone())),
        );
        spawn(
            "order-notices",
            streams.orders,
            Arc::new(OrderNotices(self.clone())),
        );
    }

    /// The source key of a stream entry: unique across the prefix's streams.
    fn entry_source(&self, entry: &StreamEntry) -> String {
        let stream = entry
            .stream
            .strip_prefix(self.infra.keys.prefix())
            .unwrap_or(&entry.stream);
        format!("{stream}/{}", entry.id)
    }

    async fn record_batch(&self, notices: Vec<Notice>) -> Result<(), HandleError> {
        self.record(notices).await.map_err(unavailable)
    }
}

/// A failure to record is the database's or Redis's, never the entry's: wait and retry.
fn unavailable(error: AppError) -> HandleError {
    HandleError::Unavailable(error.to_string())
}

struct LikeNotices(Notifications);

#[async_trait::async_trait]
impl RedisHandler for LikeNotices {
    fn writes_sql(&self) -> bool {
        true
    }

    async fn handle(&self, entries: &[StreamEntry]) -> Result<(), HandleError> {
        let mut notices = Vec::new();
        for entry in entries {
            let vote = VoteEvent::from_entry(entry)?;
            // An unlike takes nothing back; liking one's own remark tells nobody.
            if !vote.liked || vote.voter_id == vote.author_id {
                continue;
            }
            let mut notice = Notice::new(
                self.0.entry_source(entry),
                vote.author_id,
                NotificationKind::LikeReceived,
                vote.at_ms,
            );
            notice.actor_id = Some(vote.voter_id);
            notice.remark_id = Some(vote.remark_id);
            notices.push(notice);
        }
        self.0.record_batch(notices).await
    }
}

struct FollowNotices(Notifications);

#[async_trait::async_trait]
impl RedisHandler for FollowNotices {
    fn writes_sql(&self) -> bool {
        true
    }

    async fn handle(&self, entries: &[StreamEntry]) -> Result<(), HandleError> {
        let mut notices = Vec::new();
        for entry in entries {
            let follow = FollowEvent::from_entry(entry)?;
            let mut notice = Notice::new(
                format!("follow:{}", follow.change_id),
                follow.followee,
                NotificationKind::NewFollower,
                follow.at_ms,
            );
            notice.actor_id = Some(follow.follower);
            notices.push(notice);
        }
        self.0.record_batch(notices).await
    }
}

struct AwardNotices(Notifications);

#[async_trait::async_trait]
impl RedisHandler for AwardNotices {
    fn writes_sql(&self) -> bool {
        true
    }

    async fn handle(&self, entries: &[StreamEntry]) -> Result<(), HandleError> {
        let mut notices = Vec::new();
        for entry in entries {
            // Most awards (a like's, a day's sign-in) tell nobody: two fields say which, and
            // only those that tell are read whole.
            match AwardEvent::glance(entry) {
                (Some(PointsType::Reward), _) => {}
                (Some(PointsType::SignIn), bonus) if bonus > 0 => {}
                _ => continue,
            }
            let award = AwardEvent::from_entry(entry)?;
            match award.kind {
                Some(PointsType::Reward) => {
                    let Some((board, rank)) = reward_of(&award.idempotency_key) else {
                        continue;
                    };
                    let title = match self.0.boards.find(&board).await.map_err(unavailable)? {
                        Some(def) => def.title.clone(),
                        None => board.clone(),
                    };
                    let mut notice = Notice::new(
                        // The reward's key: one notice per reward, however often it is paid.
                        award.idempotency_key.clone(),
                        award.user_id,
                        NotificationKind::RewardPaid,
                        award.at_ms,
                    );
                    notice.board_key = Some(board);
                    notice.text = Some(text::reward_paid(rank, &title));
                    notices.push(notice);
                }
                Some(PointsType::SignIn) => {
                    let Some(signed) = award.sign_in.as_ref() else {
                        continue;
                    };
                    let mut notice = Notice::new(
                        format!("milestone:{}:{}", award.user_id, award.idempotency_key),
                        award.user_id,
                        NotificationKind::MilestoneReached,
                        award.at_ms,
                    );
                    notice.text = Some(text::milestone(signed.streak, signed.milestone_bonus));
                    notices.push(notice);
                }
                _ => {}
            }
        }
        self.0.record_batch(notices).await
    }
}

/// The board and rank of a reward's key, `reward:<board>:<period>:<rank>`.
fn reward_of(key: &str) -> Option<(String, i64)> {
    let rest = key.strip_prefix("reward:")?;
    let (board, rest) = rest.split_once(':')?;
    let (_period, rank) = rest.rsplit_once(':')?;
    Some((board.to_string(), rank.parse().ok()?))
}

struct OrderNotices(Notifications);

#[async_trait::async_trait]
impl RedisHandler for OrderNotices {
    fn writes_sql(&self) -> bool {
        true
    }

    async fn handle(&self, entries: &[StreamEntry]) -> Result<(), HandleError> {
        let mut notices = Vec::new();
        for entry in entries {
            let event = OrderEvent::from_entry(entry)?;
            match event.happened {
                OrderChange::Created => self
                    .0
                    .schedule_reminder(&event)
                    .await
                    .map_err(unavailable)?,
                OrderChange::Settled {
                    outcome: OrderStatus::Expired,
                    at_ms,
                } => {
                    let title = self
                        .0
                        .voucher_title(event.order.voucher_id)
                        .await
                        .map_err(unavailable)?;
                    let mut notice = Notice::new(
                        format!("expired:{}", event.order.order_id),
                        event.buyer_id,
                        NotificationKind::OrderExpired,
                        at_ms,
                    );
                    notice.order_id = Some(event.order.order_id);
                    notice.text = Some(text::order_expired(&title));
                    notices.push(notice);
                }
                OrderChange::Settled { .. } => {}
            }
        }
        self.0.record_batch(notices).await
    }
}

#[cfg(test)]
mod tests {
    use super::reward_of;

    #[test]
    fn a_reward_key_names_its_board_and_rank() {
        assert_eq!(
            reward_of("reward:weekly-quiz:weekly-quiz.3:2"),
            Some(("weekly-quiz".to_string(), 2))
        );
        assert_eq!(
            reward_of("reward:season:202611:1"),
            Some(("season".into(), 1))
        );
        assert_eq!(reward_of("signin:1:2026-11-01"), None);
    }
}
