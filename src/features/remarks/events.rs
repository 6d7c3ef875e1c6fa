//! The events of remarks: a vote (XADDed by `lua/remarks_like.lua` and
//! `lua/remarks_unlike.lua` to the vote stream of the remark's shard), read by the vote
//! archive and by the points for likes received; and a new remark, read by the feed.

use crate::infra::streams::{Event, HandleError, StreamEntry};

/// A like or an unlike that changed something.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoteEvent {
    pub remark_id: i64,
    pub voter_id: i64,
    pub author_id: i64,
    /// A like (an unlike otherwise).
    pub liked: bool,
    /// The remark's like count after the vote.
    pub like_count: i64,
    pub at_ms: i64,
    /// A like known to be the voter's first vote on the remark: its author cannot have been
    /// paid for this liker before. False when unsure (and in entries written before the
    /// field existed).
    pub first_vote: bool,
}

impl Event for VoteEvent {
    fn from_entry(entry: &StreamEntry) -> Result<Self, HandleError> {
        Ok(Self {
            remark_id: entry.number("remark")?,
            voter_id: entry.number("voter")?,
            author_id: entry.number("author")?,
            liked: entry.number("voting")? == 1,
            like_count: entry.number("count")?,
            at_ms: entry.number("at")?,
            first_vote: entry.get("first") == Some("1"),
        })
    }

    fn to_fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("remark", self.remark_id.to_string()),
            ("voter", self.voter_id.to_string()),
            ("author", self.author_id.to_string()),
            ("voting", i64::from(self.liked).to_string()),
            ("count", self.like_count.to_string()),
            ("at", self.at_ms.to_string()),
            ("first", i64::from(self.first_vote).to_string()),
        ]
    }
}

/// A remark was stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RemarkCreated {
    pub(crate) remark_id: i64,
    pub(crate) author_id: i64,
    pub(crate) created_at_ms: i64,
}

impl Event for RemarkCreated {
    fn from_entry(entry: &StreamEntry) -> Result<Self, HandleError> {
        Ok(Self {
            remark_id: entry.number("remark")?,
            author_id: entry.number("author")?,
            created_at_ms: entry.number("created")?,
        })
    }

    fn to_fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("remark", self.remark_id.to_string()),
            ("author", self.author_id.to_string()),
            ("created", self.created_at_ms.to_string()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_read_back_what_they_write() {
        let vote = VoteEvent {
            remark_id: 1,
            voter_id: 2,
            author_id: 3,
            liked: true,
            like_count: 4,
            at_ms: 5,
            first_vote: true,
        };
        let entry = StreamEntry::of_event("votes", "1-0", &vote);
        assert_eq!(VoteEvent::from_entry(&entry).unwrap(), vote);
        let created = RemarkCreated {
            remark_id: 1,
            author_id: 2,
            created_at_ms: 3,
        };
        let entry = StreamEntry::of_event("remarks", "1-0", &created);
        assert_eq!(RemarkCreated::from_entry(&entry).unwrap(), created);
    }
}
