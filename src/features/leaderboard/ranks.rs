//! The viewers' ranks of `myRankChanged`, kept exact by the board's changes instead of read
//! after each one: an award costs a few Redis commands however many viewers watch.
//!
//! - **Each change says what moved**: the points scripts increment the change counter of
//!   the board part they write (`{points:B}:board:<YYYYMM>:changes`, in the part's slot) and
//!   publish `<change> <user> <old score> <new score>` on the part's channel
//!   (`lua/include/points_award.lua`). A viewer's rank is one plus the members ahead of it
//!   in board order (score, then member text, see [`super::parts`]); a change moves it by
//!   one exactly when the awarded user crosses the viewer ([`Standing::apply`]). Only the
//!   awarded viewer's own entry is read again, and only when that user watches.
//! - **Reads and changes agree by number**: a viewer is read part by part with
//!   `lua/leaderboard_ranks.lua`, which reads the part and its counter in one script, so the
//!   read reflects exactly the part's changes up to the counter it answers. Each viewer
//!   keeps, per part, the number of the last change it reflects ([`Standing::seen`]): a
//!   change of that number or below is skipped (already read), the next one applied, and
//!   any other means a change was missed. The parts of a cluster board live on different
//!   nodes and their channels arrive independently; the numbers are per part, so no order
//!   between parts is needed. The reader reads only between changes (it applies none while
//!   a read is under way), so every change above a read's counter reaches it afterwards.
//! - **When unsure, read again**: a viewer is read afresh ([`Leaderboards::standings_of`])
//!   when its own score changed, when a change of a part is missing, when a message is not
//!   a change (`engage rebuild` announces its swap of the board as `rebuilt`; an older
//!   instance's scripts publish only the user), and every viewer is when the live hub says
//!   messages may have been lost (a dropped pub/sub connection, a moved slot, a subscriber
//!   that fell behind). A new season's board is a new reader, which reads its viewers as
//!   they join. A past season's board read from SQL takes no changes: any message makes
//!   its viewers read again.
//!
//! Rejected alternative: reading every viewer's entry after each change (a `ZREVRANK` and a
//! score per viewer): pipelined it costs few round trips, but one command per viewer, which
//! made an award with 3,000 viewers cost about 90 times the commands of one with none.

use std::collections::HashMap;

use redis::Value;

use super::{from_value, points_of, Leaderboards, RankEntry, SCORE_TIME_UNIT};
use crate::infra::{
    clock::Month,
    error::{AppError, AppResult},
    redis::scripts::{LeaderboardRanks, LeaderboardRanksArgs, Replies},
};

/// Users read by one call of `lua/leaderboard_ranks.lua`: a larger read takes several calls,
/// so that no call holds Redis for long.
const USERS_PER_CALL: usize = 500;

/// A change of one part of a board, as its script published it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Change {
    /// The part, by bucket.
    pub(crate) part: usize,
    /// The part's change counter after this change.
    pub(crate) number: u64,
    pub(crate) user: i64,
    /// The user's score before (`None`: not on the board) and after.
    pub(crate) old: Option<i64>,
    pub(crate) new: i64,
}

impl Change {
    /// A change published on the channel of `part`: `<change> <user> <old score or -> <new
    /// score>`; `None` for any other message.
    pub(crate) fn parse(part: usize, payload: &str) -> Option<Self> {
        let mut fields = payload.split(' ');
        let number = fields.next()?.parse().ok()?;
        let user = fields.next()?.parse().ok()?;
        let old = match fields.next()? {
            "-" => None,
            old => Some(old.parse().ok()?),
        };
        let new = fields.next()?.parse().ok()?;
        if fields.next().is_some() {
            return None;
        }
        Some(Self {
            part,
            number,
            user,
            old,
            new,
        })
    }
}

/// Whether the member `a` (score, user) comes before `b` in board order: a higher score,
/// or the same score and a greater member text (as `ZREVRANK` orders equal scores).
fn ahead(a: (i64, i64), b: (i64, i64)) -> bool {
    a.0 > b.0 || (a.0 == b.0 && a.1.to_string() > b.1.to_string())
}

/// What a change did to a viewer's standing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Applied {
    /// Nothing that the viewer sees (or the change was already read).
    Unchanged,
    /// The viewer's rank moved.
    Moved,
    /// The standing can no longer be trusted: read it again.
    Unsure,
}

/// A viewer's place on the board as last read and moved since by changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Standing {
    /// Score and rank, when on the board.
    place: Option<(i64, i64)>,
    /// Per part, the number of the last change that this standing reflects (off the board,
    /// only its own part's counts); `None` for a season read from SQL, which takes no changes.
    seen: Option<Vec<u64>>,
}

impl Standing {
    /// The viewer's entry (`None`: not on the board).
    pub(crate) fn entry(&self, user_id: i64) -> Option<RankEntry> {
        self.place.map(|(score, rank)| RankEntry {
            rank,
            points: points_of(score as f64),
            user_id,
        })
    }

    /// Moves `viewer`'s standing by a change of the board.
    pub(crate) fn apply(&mut self, viewer: i64, change: &Change) -> Applied {
        let Some(last) = self
            .seen
            .as_mut()
            .and_then(|seen| seen.get_mut(change.part))
        else {
            return Applied::Unsure;
        };
        if change.number <= *last {
            return Applied::Unchanged;
        }
        let Some((score, rank)) = self.place.as_mut() else {
            // Off the board, only its own arrival counts (its part's number is the one read).
            return match change.user == viewer {
                true => Applied::Unsure,
                false => Applied::Unchanged,
            };
        };
        if change.number != *last + 1 {
            return Applied::Unsure;
        }
        *last = change.number;
        if change.user == viewer {
            // Its own score moved: where it lands is the board's to say.
            return Applied::Unsure;
        }
        let me = (*score, viewer);
        let before = change.old.is_some_and(|old| ahead((old, change.user), me));
        let after = ahead((change.new, change.user), me);
        match (before, after) {
            (false, true) => *rank += 1,
            (true, false) => *rank -= 1,
            _ => return Applied::Unchanged,
        }
        Applied::Moved
    }
}

impl Leaderboards {
    /// The standings of distinct `users` on a season's board, in their order, each with the
    /// changes it reflects: per part, a `lua/leaderboard_ranks.lua` call for the part's own
    /// users (scores and ranks within it), then, with several parts, one per part for the
    /// users on the board of the others (members ahead of them there). Two round trips,
    /// however many users; one user on the board costs one call per part.
    pub(crate) async fn standings_of(
        &self,
        season: Month,
        users: &[i64],
    ) -> AppResult<Vec<Standing>> {
        if self.archived(season).await? {
            let mut standings = Vec::with_capacity(users.len());
            for &user in users {
                let entry = self.archived_entry(season, user).await?;
                standings.push(Standing {
                    place: entry.map(|e| (e.points * SCORE_TIME_UNIT as i64, e.rank)),
                    seen: None,
                });
            }
            return Ok(standings);
        }
        let keys = &self.infra.keys;
        let parts = keys.season_board_parts(season);
        let counters = keys.board_changes(season);
        let part_of = |user: i64| keys.points_bucket(user) as usize;
        // Per user: score and members ahead (within its part first), and the numbers read.
        let mut read: HashMap<i64, Standing> = HashMap::new();

        let part_keys = |at: usize| LeaderboardRanks {
            board: parts[at].clone(),
            changes: counters[at].clone(),
        };
        let mut calls = Vec::new();
        let mut asked: Vec<(usize, Vec<i64>)> = Vec::new();
        for at in 0..parts.len() {
            let own: Vec<i64> = users
                .iter()
                .copied()
                .filter(|u| part_of(*u) == at)
                .collect();
            for chunk in own.chunks(USERS_PER_CALL) {
                let args = LeaderboardRanksArgs {
                    own: chunk.len(),
                    users: chunk.to_vec(),
                };
                calls.push((part_keys(at), args));
                asked.push((at, chunk.to_vec()));
            }
        }
        for ((at, chunk), reply) in asked.iter().zip(self.ranks_calls(&calls).await?) {
            let mut reply = reply.into_iter();
            let number = counter_of(reply.next())?;
            for &user in chunk {
                let score: Option<f64> = from_value(reply.next())?;
                let rank: Option<i64> = from_value(reply.next())?;
                let mut seen = vec![0; parts.len()];
                seen[*at] = number;
                let place = score.map(|s| s as i64).zip(rank);
                read.insert(
                    user,
                    Standing {
                        place,
                        seen: Some(seen),
                    },
                );
            }
        }

        if parts.len() > 1 {
            let mut calls = Vec::new();
            let mut asked: Vec<(usize, Vec<i64>)> = Vec::new();
            for at in 0..parts.len() {
                let others: Vec<(i64, i64)> = users
                    .iter()
                    .filter(|u| part_of(**u) != at)
                    .filter_map(|u| read[u].place.map(|(score, _)| (*u, score)))
                    .collect();
                for chunk in others.chunks(USERS_PER_CALL) {
                    let args = LeaderboardRanksArgs {
                        own: 0,
                        users: chunk
                            .iter()
                            .map(|&(user, score)| (score, user))
                            .collect::<Vec<_>>(),
                    };
                    calls.push((part_keys(at), args));
                    asked.push((at, chunk.iter().map(|(user, _)| *user).collect()));
                }
            }
            for ((at, chunk), reply) in asked.iter().zip(self.ranks_calls(&calls).await?) {
                let mut reply = reply.into_iter();
                let number = counter_of(reply.next())?;
                for user in chunk {
                    let higher: i64 = from_value(reply.next())?;
                    let equal: Vec<i64> = from_value(reply.next())?;
                    let standing = read.get_mut(user).expect("read above");
                    if let Some((score, rank)) = standing.place.as_mut() {
                        let me = (*score, *user);
                        *rank += higher
                            + equal
                                .into_iter()
                                .filter(|other| ahead((me.0, *other), me))
                                .count() as i64;
                    }
                    if let Some(seen) = standing.seen.as_mut() {
                        seen[*at] = number;
                    }
                }
            }
        }
        Ok(users
            .iter()
            .map(|user| {
                let mut standing = read.remove(user).expect("read above");
                if let Some((_, rank)) = standing.place.as_mut() {
                    *rank += 1;
                }
                standing
            })
            .collect())
    }

    /// Sends `lua/leaderboard_ranks.lua` calls in one pipeline; each reply as a list.
    async fn ranks_calls<A: redis::ToRedisArgs>(
        &self,
        calls: &[(LeaderboardRanks, LeaderboardRanksArgs<usize, A>)],
    ) -> AppResult<Vec<Vec<Value>>> {
        self.infra.scripts().call_many(calls).await
    }
}

/// Per call, the change counter and what it read of each user (see the script's header).
impl Replies for LeaderboardRanks {
    type Reply = Vec<Value>;
}

/// The change counter that opens a reply of `lua/leaderboard_ranks.lua`.
fn counter_of(value: Option<Value>) -> AppResult<u64> {
    value
        .ok_or_else(|| AppError::internal(anyhow::anyhow!("a rank read without its counter")))
        .and_then(|value| from_value(Some(value)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn standing(score: i64, rank: i64, seen: u64) -> Standing {
        Standing {
            place: Some((score, rank)),
            seen: Some(vec![seen]),
        }
    }

    fn change(number: u64, user: i64, old: Option<i64>, new: i64) -> Change {
        Change {
            part: 0,
            number,
            user,
            old,
            new,
        }
    }

    #[test]
    fn changes_parse_from_what_the_scripts_publish() {
        assert_eq!(
            Change::parse(2, "7 42 - 419430"),
            Some(Change {
                part: 2,
                number: 7,
                user: 42,
                old: None,
                new: 419430
            })
        );
        assert_eq!(
            Change::parse(0, "8 42 419430 8388000").map(|c| c.old),
            Some(Some(419430))
        );
        assert_eq!(Change::parse(0, "42"), None);
        assert_eq!(Change::parse(0, "rebuilt"), None);
        assert_eq!(Change::parse(0, "1 2 3 4 5"), None);
    }

    #[test]
    fn a_viewer_moves_only_when_someone_crosses_it() {
        let mut me = standing(100, 5, 10);
        // A new member above: one more ahead.
        assert_eq!(me.apply(1, &change(11, 2, None, 200)), Applied::Moved);
        assert_eq!(me.entry(1).unwrap().rank, 6);
        // Someone below who stays below.
        assert_eq!(
            me.apply(1, &change(12, 3, Some(10), 50)),
            Applied::Unchanged
        );
        // Someone above who goes further above.
        assert_eq!(
            me.apply(1, &change(13, 2, Some(200), 300)),
            Applied::Unchanged
        );
        // Someone below who passes.
        assert_eq!(me.apply(1, &change(14, 3, Some(50), 150)), Applied::Moved);
        assert_eq!(me.entry(1).unwrap().rank, 7);
        // The same score: member text decides ("9" before "10", "10" before "1").
        assert_eq!(me.apply(10, &change(15, 9, None, 100)), Applied::Moved);
        assert_eq!(me.apply(10, &change(16, 1, None, 100)), Applied::Unchanged);
    }

    #[test]
    fn changes_already_read_are_skipped_and_a_missing_one_makes_it_unsure() {
        let mut me = standing(100, 5, 10);
        assert_eq!(me.apply(1, &change(9, 2, None, 200)), Applied::Unchanged);
        assert_eq!(me.apply(1, &change(10, 2, None, 200)), Applied::Unchanged);
        assert_eq!(me.entry(1).unwrap().rank, 5);
        assert_eq!(me.apply(1, &change(12, 2, None, 200)), Applied::Unsure);
        // Its own change: read again.
        let mut me = standing(100, 5, 10);
        assert_eq!(me.apply(1, &change(11, 1, Some(100), 200)), Applied::Unsure);
        // Off the board: others' changes do not matter, its own arrival does.
        let mut off = Standing {
            place: None,
            seen: Some(vec![10]),
        };
        assert_eq!(off.apply(1, &change(15, 2, None, 200)), Applied::Unchanged);
        assert_eq!(off.apply(1, &change(9, 1, None, 200)), Applied::Unchanged);
        assert_eq!(off.apply(1, &change(16, 1, None, 200)), Applied::Unsure);
        // A season from SQL takes no change.
        let mut archived = Standing {
            place: Some((100, 1)),
            seen: None,
        };
        assert_eq!(archived.apply(1, &change(1, 2, None, 5)), Applied::Unsure);
    }
}
