//! A season board in parts, one per points bucket (see `features::points`), read as one.
//!
//! The board's order is score descending, and among equal scores the user id's decimal text
//! descending: the order `ZREVRANGE` gives within one sorted set, so a board of one part
//! reads exactly as Redis ranks it, and a board of many parts as if they were one set.
//!
//! - **A page near the top** ([`SHALLOW`]): each part's first `offset + count` members,
//!   merged, in one round trip.
//! - **A deep page** ([`deep_page`]): a search on `Σ ZCOUNT` over the parts finds the
//!   score at the page's first rank; each part is then read from its first member at or
//!   below that score. A round trip per step, none of which reads more than the page.
//! - **A rank** ([`ahead_elsewhere`]): `ZREVRANK` in the user's own part, plus, in each other
//!   part, the members of a higher score (`ZCOUNT`) and those of the same score that come
//!   first. The ranks of many users (every viewer of a board) are read together, in
//!   pipelines of at most [`PIPELINE_COMMANDS`].
//! - **A walk through the whole board** ([`after`], the rollover's copy): from a cursor, each
//!   part's next members below it, merged.
//!
//! The commands of a round trip go in one pipeline, which a cluster connection sends to each
//! node at once.

use std::cmp::Reverse;

use crate::infra::{
    error::{AppError, AppResult},
    Infra,
};

/// A board member: user id and score.
pub(crate) type Member = (i64, f64);

/// Pages that end within this many ranks are read by merging each part's top.
pub(crate) const SHALLOW: usize = 1000;

/// Most commands in one pipeline of a read of many users' ranks: the users of a larger
/// read go in several round trips, so that neither its replies nor the commands one
/// connection queues at once grow with the number of users.
pub(crate) const PIPELINE_COMMANDS: usize = 4096;

/// A user id's decimal text, the order Redis gives equal scores, kept on the stack: a page
/// sorts every part's top, and a `String` per member was an allocation each. Padded with
/// zero bytes, which no digit is, so that it compares as the text does; 20 bytes hold
/// `i64::MIN`, the longest.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Decimal([u8; 20]);

impl Decimal {
    fn of(user: i64) -> Self {
        let mut buffer = itoa::Buffer::new();
        let text = buffer.format(user).as_bytes();
        let mut digits = [0; 20];
        digits[..text.len()].copy_from_slice(text);
        Self(digits)
    }
}

/// Sorts members into board order.
fn sort(members: &mut [Member]) {
    members
        .sort_by_cached_key(|(user, score)| (Reverse(*score as i64), Reverse(Decimal::of(*user))));
}

/// Whether `a` comes after `b` in board order among members of the same score.
fn after_among_equals(a: i64, b: i64) -> bool {
    Decimal::of(a) < Decimal::of(b)
}

/// The members at `skip..skip + take` of the merged lists.
pub(crate) fn merge(lists: Vec<Vec<Member>>, skip: usize, take: usize) -> Vec<Member> {
    let mut all: Vec<Member> = lists.into_iter().flatten().collect();
    sort(&mut all);
    all.into_iter().skip(skip).take(take).collect()
}

fn decode<T: redis::FromRedisValue>(value: redis::Value) -> AppResult<T> {
    T::from_redis_value(value).map_err(|e| AppError::internal(anyhow::anyhow!("{e}")))
}

/// Sends a pipeline and decodes each reply as a `T`.
async fn each<T: redis::FromRedisValue>(
    infra: &Infra,
    pipe: &redis::Pipeline,
) -> AppResult<Vec<T>> {
    let mut conn = infra.redis.get().await?;
    let replies: Vec<redis::Value> = pipe.query_async(&mut *conn).await?;
    replies.into_iter().map(decode).collect()
}

/// A score as a ZCOUNT bound (scores are whole numbers, see `leaderboard::score_of`).
fn bound(score: i64, exclusive: bool) -> String {
    if exclusive {
        format!("({score}")
    } else {
        score.to_string()
    }
}

/// The members at `offset..offset + count` of the board, for a page past [`SHALLOW`].
pub(crate) async fn deep_page(
    infra: &Infra,
    parts: &[String],
    offset: usize,
    count: usize,
) -> AppResult<Vec<Member>> {
    let mut ends = redis::pipe();
    for part in parts {
        ends.cmd("ZREVRANGE")
            .arg(part)
            .arg(0)
            .arg(0)
            .arg("WITHSCORES");
        ends.cmd("ZRANGE").arg(part).arg(0).arg(0).arg("WITHSCORES");
    }
    let ends: Vec<Vec<Member>> = each(infra, &ends).await?;
    let scores = ends.iter().flatten().map(|(_, score)| *score as i64);
    let (Some(mut low), Some(mut high)) = (scores.clone().min(), scores.max()) else {
        return Ok(Vec::new());
    };
    let at_or_above = |score: i64| async move {
        let mut pipe = redis::pipe();
        for part in parts {
            pipe.cmd("ZCOUNT")
                .arg(part)
                .arg(bound(score, false))
                .arg("+inf");
        }
        Ok::<i64, AppError>(each::<i64>(infra, &pipe).await?.into_iter().sum())
    };
    let wanted = offset as i64 + 1;
    let (mut at_low, mut at_high) = (at_or_above(low).await?, 0);
    if at_low < wanted {
        return Ok(Vec::new());
    }
    // The highest score with at least `wanted` members at or above it: the score of the
    // member at rank `offset + 1`. It lies in `low..high` (`high` is above every score).
    // Counts grow smoothly with the score on a large board, so the search guesses where
    // the count crosses `wanted` from the counts at both ends, and halves every other
    // step, which bounds it to twice a bisection however the scores fall.
    high += 1;
    let mut interpolate = true;
    while high - low > 1 {
        let guess = if interpolate && at_low > at_high {
            let fraction = (at_low - wanted) as f64 / (at_low - at_high) as f64;
            low + ((high - low) as f64 * fraction) as i64
        } else {
            low + (high - low) / 2
        }
        .clamp(low + 1, high - 1);
        interpolate = !interpolate;
        let at_guess = at_or_above(guess).await?;
        if at_guess >= wanted {
            (low, at_low) = (guess, at_guess);
        } else {
            (high, at_high) = (guess, at_guess);
        }
    }
    let mut above = redis::pipe();
    for part in parts {
        above
            .cmd("ZCOUNT")
            .arg(part)
            .arg(bound(low, true))
            .arg("+inf");
    }
    let above: Vec<usize> = each(infra, &above).await?;
    // Members of that same score that come before the page.
    let skip = offset - above.iter().sum::<usize>();
    let mut reads = redis::pipe();
    for (part, above) in parts.iter().zip(&above) {
        reads
            .cmd("ZREVRANGE")
            .arg(part)
            .arg(above)
            .arg(above + skip + count - 1)
            .arg("WITHSCORES");
    }
    Ok(merge(each(infra, &reads).await?, skip, count))
}

/// How many members of the other parts than its own come before each of `members` (a
/// member and the part that holds it) on the board: per other part, a `ZCOUNT` and the
/// members of its score, in pipelines of at most [`PIPELINE_COMMANDS`].
pub(crate) async fn ahead_elsewhere(
    infra: &Infra,
    parts: &[String],
    members: &[(&str, Member)],
) -> AppResult<Vec<i64>> {
    fn others<'a>(parts: &'a [String], own: &'a str) -> impl Iterator<Item = &'a String> {
        parts.iter().filter(move |part| part.as_str() != own)
    }
    let per_member = 2 * parts.len().saturating_sub(1);
    if per_member == 0 {
        return Ok(vec![0; members.len()]);
    }
    let mut ahead = Vec::with_capacity(members.len());
    for chunk in members.chunks((PIPELINE_COMMANDS / per_member).max(1)) {
        let mut pipe = redis::pipe();
        for (own, (_, score)) in chunk {
            let score = *score as i64;
            for part in others(parts, own) {
                pipe.cmd("ZCOUNT")
                    .arg(part)
                    .arg(bound(score, true))
                    .arg("+inf");
                pipe.cmd("ZRANGEBYSCORE").arg(part).arg(score).arg(score);
            }
        }
        let mut replies = {
            let mut conn = infra.redis.get().await?;
            let replies: Vec<redis::Value> = pipe.query_async(&mut *conn).await?;
            replies.into_iter()
        };
        for (own, (user, _)) in chunk {
            let mut count = 0;
            for _ in others(parts, own) {
                let (Some(higher), Some(equal)) = (replies.next(), replies.next()) else {
                    return Err(AppError::internal(anyhow::anyhow!(
                        "fewer replies than commands in a rank read"
                    )));
                };
                count += decode::<i64>(higher)?;
                let equal: Vec<i64> = decode(equal)?;
                count += equal
                    .into_iter()
                    .filter(|other| after_among_equals(*user, *other))
                    .count() as i64;
            }
            ahead.push(count);
        }
    }
    Ok(ahead)
}

/// The next `count` members of the board after `cursor` (from the top without one).
pub(crate) async fn after(
    infra: &Infra,
    parts: &[String],
    cursor: Option<Member>,
    count: usize,
) -> AppResult<Vec<Member>> {
    let mut pipe = redis::pipe();
    for part in parts {
        match cursor {
            None => pipe.cmd("ZREVRANGE").arg(part).arg(0).arg(count - 1),
            Some((_, score)) => pipe
                .cmd("ZREVRANGEBYSCORE")
                .arg(part)
                .arg(bound(score as i64, true))
                .arg("-inf")
                .arg("LIMIT")
                .arg(0)
                .arg(count),
        }
        .arg("WITHSCORES");
        if let Some((_, score)) = cursor {
            let score = score as i64;
            pipe.cmd("ZRANGEBYSCORE")
                .arg(part)
                .arg(score)
                .arg(score)
                .arg("WITHSCORES");
        }
    }
    let mut lists: Vec<Vec<Member>> = each(infra, &pipe).await?;
    if let Some((user, _)) = cursor {
        // Every other list holds the cursor's equals: keep those that come after it.
        for (i, list) in lists.iter_mut().enumerate() {
            if i % 2 == 1 {
                list.retain(|(other, _)| after_among_equals(*other, user));
            }
        }
    }
    Ok(merge(lists, 0, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_parts_read_as_one_sorted_set() {
        // Redis orders equal scores by member text, descending for ZREVRANGE: "9" before "10".
        let parts = vec![vec![(10, 5.0), (3, 1.0)], vec![(9, 5.0), (4, 7.0)]];
        assert_eq!(
            merge(parts, 0, 10),
            vec![(4, 7.0), (9, 5.0), (10, 5.0), (3, 1.0)]
        );
    }

    #[test]
    fn equals_follow_member_text() {
        assert!(after_among_equals(10, 9));
        assert!(!after_among_equals(9, 10));
        let ids = [
            0,
            1,
            9,
            10,
            19,
            100,
            101,
            2_147_483_648,
            i64::MAX,
            -1,
            i64::MIN,
        ];
        for a in ids {
            for b in ids {
                assert_eq!(after_among_equals(a, b), a.to_string() < b.to_string());
            }
        }
    }
}
