//! Notifications: what happened to a user (a like, a follower, an order, a reward, a
//! streak), listed newest first with an unread count, and pushed live.
//!
//! - **Written by consumers, never by requests** ([`sources`]): a consumer group of their
//!   own on the vote, points and order streams and on the follow events, and two jobs of the
//!   delay queue ([`schedule`]). Each notification names its source (a stream entry, a
//!   reward's key, a user's day), so a replay writes nothing twice.
//! - **SQL is the record** ([`store`]): `notifications`, and per user a state row with the
//!   last place given, the read watermark and the unread count, changed in one transaction
//!   with the notification under the state row's lock, so the count is exact whatever
//!   requests and consumers interleave.
//! - **Redis holds the newest 200 per user and the count** ([`hot`]), written from SQL after
//!   each commit by one script that keeps only what is newer, and read first; a page past
//!   the hot window, or a user Redis lost, is read from SQL.
//! - **Read is a watermark**: marking read moves the user's `read_seq` up to a notification's
//!   place; everything at or below it is read. A like group that grows takes a new place at
//!   the top, so it is unread again. Rejected: a read flag per row, which made a mark of
//!   200 notifications 200 row writes and left the count to be recounted.
//!
//! See docs/notifications.md for the model, its guarantees and its limits.

mod hot;
mod live;
mod reads;
mod recovery;
mod schedule;
mod sources;
mod store;
mod text;

pub use reads::NotificationPage;
pub(crate) use sources::SourceStreams;
pub(crate) use store::Notice;

use crate::{
    features::{
        boards::Boards, jobs::Jobs, signin::SignIn, users::UserDirectory, vouchers::Vouchers,
    },
    infra::{
        redis::{KeyPart, Keys},
        Infra,
    },
};

/// Notifications kept per user in Redis; reads past them go to SQL.
pub const HOT_WINDOW: usize = 200;
/// How long notifications are kept, from their latest activity.
pub const RETENTION_DAYS: i64 = 90;
/// Likes of one remark within this long of the group's first like join its notification.
pub const LIKE_GROUP_MS: i64 = 3600 * 1000;

/// The context of notifications: the infrastructure, and the features whose events or
/// records a notification is made of.
#[derive(Clone)]
pub struct Notifications {
    pub(crate) infra: Infra,
    pub(crate) jobs: Jobs,
    pub(crate) vouchers: Vouchers,
    pub(crate) boards: Boards,
    pub(crate) signin: SignIn,
    /// Actors' names, for the text.
    pub(crate) users: std::sync::Arc<UserDirectory>,
}

/// What a notification says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, async_graphql::Enum)]
pub enum NotificationKind {
    /// Someone liked the viewer's remark (likes of one remark within an hour are grouped).
    LikeReceived,
    NewFollower,
    /// The viewer's streak ends tonight unless they sign in (sent at 20:00 in their zone).
    StreakAtRisk,
    /// An unpaid order's time to pay ends in 5 minutes.
    OrderExpiring,
    OrderExpired,
    /// A board or season reward was paid.
    RewardPaid,
    /// A streak milestone's bonus was paid.
    MilestoneReached,
}

impl NotificationKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::LikeReceived => "LIKE_RECEIVED",
            Self::NewFollower => "NEW_FOLLOWER",
            Self::StreakAtRisk => "STREAK_AT_RISK",
            Self::OrderExpiring => "ORDER_EXPIRING",
            Self::OrderExpired => "ORDER_EXPIRED",
            Self::RewardPaid => "REWARD_PAID",
            Self::MilestoneReached => "MILESTONE_REACHED",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [
            Self::LikeReceived,
            Self::NewFollower,
            Self::StreakAtRisk,
            Self::OrderExpiring,
            Self::OrderExpired,
            Self::RewardPaid,
            Self::MilestoneReached,
        ]
        .into_iter()
        .find(|kind| kind.as_str() == text)
    }
}

/// One notification as a user sees it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NotificationRecord {
    pub id: i64,
    pub user_id: i64,
    /// Its place in the user's list: newest highest.
    pub seq: i64,
    #[serde(with = "kind_text")]
    pub kind: NotificationKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor_id: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remark_id: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order_id: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub board_key: Option<String>,
    pub text: String,
    /// When it last changed (a like group: its latest like).
    pub at_ms: i64,
    /// Derived from the user's read watermark when read; not stored.
    #[serde(default, skip)]
    pub read: bool,
}

mod kind_text {
    use super::NotificationKind;

    pub(super) fn serialize<S: serde::Serializer>(
        kind: &NotificationKind,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(kind.as_str())
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> Result<NotificationKind, D::Error> {
        let text: String = serde::Deserialize::deserialize(deserializer)?;
        NotificationKind::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown kind {text}")))
    }
}

impl Keys {
    fn notify_tag(user_id: i64) -> impl KeyPart {
        ("notify:", user_id)
    }

    /// A user's newest notifications by place.
    pub(crate) fn notifications_hot(&self, user_id: i64) -> String {
        self.tagged(Self::notify_tag(user_id), "hot")
    }

    /// A user's held notifications as JSON, by id.
    pub(crate) fn notifications_items(&self, user_id: i64) -> String {
        self.tagged(Self::notify_tag(user_id), "items")
    }

    /// A user's version, read watermark and unread count.
    pub(crate) fn notifications_state(&self, user_id: i64) -> String {
        self.tagged(Self::notify_tag(user_id), "state")
    }

    /// A user's live channel: `n <JSON>` for a notification, `c <count>` for the count.
    pub(crate) fn notifications_channel(&self, user_id: i64) -> String {
        self.tagged(Self::notify_tag(user_id), "live")
    }
}

/// The columns a [`NotificationRecord`] is read from.
pub(crate) const COLUMNS: &str =
    "id, user_id, seq, kind, actor_id, remark_id, order_id, board_key, text, updated_at_ms";

/// Reads a row of [`COLUMNS`]; `read` is set by the caller from the watermark.
pub(crate) fn record_of(row: &sqlx::any::AnyRow) -> Result<NotificationRecord, sqlx::Error> {
    use sqlx::Row;
    let kind: String = row.try_get("kind")?;
    Ok(NotificationRecord {
        id: row.try_get("id")?,
        user_id: row.try_get("user_id")?,
        seq: row.try_get("seq")?,
        kind: NotificationKind::parse(&kind).ok_or_else(|| sqlx::Error::ColumnDecode {
            index: "kind".into(),
            source: format!("unknown kind {kind}").into(),
        })?,
        actor_id: row.try_get("actor_id")?,
        remark_id: row.try_get("remark_id")?,
        order_id: row.try_get("order_id")?,
        board_key: row.try_get("board_key")?,
        text: row.try_get("text")?,
        at_ms: row.try_get("updated_at_ms")?,
        read: false,
    })
}
