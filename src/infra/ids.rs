//! Global 64-bit IDs, the one place that knows their layout.
//!
//! ```text
//!  63 | 62 ............ 32 | 31 ............ 0
//!   0 | seconds since      | sequence number from Redis INCRBY
//!     | 2023-01-01 UTC     | on a per-UTC-day key that expires
//! ```
//! 31 bits of seconds last until 2091; 32 bits of sequence allow 4.29 billion IDs a day.
//!
//! Uniqueness across instances and restarts: two IDs with the same second share a UTC day,
//! hence a sequence key, and INCRBY never hands out a number twice. To save round trips each
//! generator reserves a block of numbers at once; a block is only used within the UTC day it
//! was reserved for, so its numbers always pair with seconds of that day. A restart wastes
//! the rest of a block, which costs nothing but numbers.
//! IDs travel as decimal text (JavaScript cannot hold 64-bit integers), in GraphQL inside the
//! global ids of `api::schema::id`.

use chrono::{DateTime, NaiveDate, Utc};
use tokio::sync::Mutex;

use crate::infra::{
    clock::Clock,
    error::{AppError, AppResult},
    redis::{
        runner::Scripts,
        scripts::{IdsAllocateBlock, IdsAllocateBlockArgs, Replies},
        Keys, RedisPool,
    },
};

/// 2023-01-01T00:00:00Z.
pub(crate) const EPOCH_SECONDS: i64 = 1_672_531_200;
const SEQUENCE_BITS: u32 = 32;
/// Day keys live for two days, so a clock that lags near midnight still finds its key.
const DAY_KEY_TTL_SECONDS: u64 = 2 * 24 * 3600;

/// The parts of an ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdParts {
    pub(crate) seconds_since_epoch: u32,
    pub sequence: u32,
}

pub fn compose(parts: IdParts) -> i64 {
    (i64::from(parts.seconds_since_epoch) << SEQUENCE_BITS) | i64::from(parts.sequence)
}

pub fn decompose(id: i64) -> IdParts {
    IdParts {
        seconds_since_epoch: (id >> SEQUENCE_BITS) as u32,
        sequence: id as u32,
    }
}

/// When the ID was made (to the second).
pub fn timestamp_of(id: i64) -> DateTime<Utc> {
    let seconds = EPOCH_SECONDS + i64::from(decompose(id).seconds_since_epoch);
    DateTime::from_timestamp(seconds, 0).unwrap_or_default()
}

/// A reserved range of sequence numbers for one UTC day.
struct Block {
    day: NaiveDate,
    next: u64,
    end: u64,
}

pub struct IdGenerator {
    redis: RedisPool,
    keys: Keys,
    clock: Clock,
    block_size: u32,
    block: Mutex<Option<Block>>,
}

impl IdGenerator {
    pub fn new(redis: RedisPool, keys: Keys, clock: Clock, block_size: u32) -> Self {
        Self {
            redis,
            keys,
            clock,
            block_size: block_size.max(1),
            block: Mutex::new(None),
        }
    }

    pub async fn next_id(&self) -> AppResult<i64> {
        let now = self.clock.now();
        let seconds = now.timestamp() - EPOCH_SECONDS;
        let seconds_since_epoch = u32::try_from(seconds)
            .ok()
            .filter(|s| *s < 1 << 31)
            .ok_or_else(|| AppError::internal(anyhow::anyhow!("clock out of ID range: {now}")))?;
        let day = now.date_naive();

        let mut block = self.block.lock().await;
        let sequence = match block.as_mut() {
            Some(b) if b.day == day && b.next < b.end => {
                b.next += 1;
                b.next - 1
            }
            _ => {
                let last = self.reserve(day).await?;
                let first = last - u64::from(self.block_size) + 1;
                *block = Some(Block {
                    day,
                    next: first + 1,
                    end: last + 1,
                });
                first
            }
        };
        let sequence = u32::try_from(sequence)
            .map_err(|_| AppError::internal(anyhow::anyhow!("ID sequence exhausted for {day}")))?;
        Ok(compose(IdParts {
            seconds_since_epoch,
            sequence,
        }))
    }

    async fn reserve(&self, day: NaiveDate) -> AppResult<u64> {
        let sequence = IdsAllocateBlock {
            sequence: self.keys.id_sequence(day),
        };
        let args = IdsAllocateBlockArgs {
            block_size: self.block_size,
            ttl_seconds: DAY_KEY_TTL_SECONDS,
        };
        Scripts::on(&self.redis).call(&sequence, &args).await
    }
}

/// The last number of the block reserved.
impl Replies for IdsAllocateBlock {
    type Reply = u64;
}

/// Parses an ID (decimal text), answering `BAD_USER_INPUT` otherwise.
pub(crate) fn parse(id: &str, what: &str) -> AppResult<i64> {
    id.trim()
        .parse::<i64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            AppError::bad_input(format!("{what} must be a positive integer id, got {id:?}"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_round_trips() {
        let parts = IdParts {
            seconds_since_epoch: 123_456_789,
            sequence: u32::MAX,
        };
        assert_eq!(decompose(compose(parts)), parts);
        assert!(
            compose(IdParts {
                seconds_since_epoch: (1 << 31) - 1,
                sequence: u32::MAX
            }) > 0
        );
    }

    #[test]
    fn timestamp_decodes_from_the_high_bits() {
        let id = compose(IdParts {
            seconds_since_epoch: 86_400,
            sequence: 7,
        });
        assert_eq!(timestamp_of(id).to_rfc3339(), "2023-01-02T00:00:00+00:00");
    }

    #[test]
    fn later_seconds_sort_after_any_sequence() {
        let early = compose(IdParts {
            seconds_since_epoch: 10,
            sequence: u32::MAX,
        });
        let late = compose(IdParts {
            seconds_since_epoch: 11,
            sequence: 0,
        });
        assert!(late > early);
    }
}
