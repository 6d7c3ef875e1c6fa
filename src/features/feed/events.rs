//! The event of a follow: XADDed by `lua/feed_count_follows.lua` when it counts a follow,
//! read by notifications (`NEW_FOLLOWER`).

use crate::infra::streams::{Event, HandleError, StreamEntry};

/// A follow, counted once by its change id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowEvent {
    pub change_id: i64,
    pub follower: i64,
    pub followee: i64,
    pub at_ms: i64,
}

impl Event for FollowEvent {
    fn from_entry(entry: &StreamEntry) -> Result<Self, HandleError> {
        Ok(Self {
            change_id: entry.number("change")?,
            follower: entry.number("follower")?,
            followee: entry.number("followee")?,
            at_ms: entry.number("at")?,
        })
    }

    fn to_fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("change", self.change_id.to_string()),
            ("follower", self.follower.to_string()),
            ("followee", self.followee.to_string()),
            ("at", self.at_ms.to_string()),
        ]
    }
}
