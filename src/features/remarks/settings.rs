//! The settings of remarks and their likes (`ENGAGE_LIKE_*`, `ENGAGE_RECOMMENDED_*`,
//! `ENGAGE_REMARK_*`), under their own heading in `engage --help`.

use std::time::Duration;

use clap::Args;

use crate::infra::redis::RedisMode;

/// Like shards on one Redis node, and on a cluster (see [`RedisMode::spread`]).
const LIKE_SHARDS: (u32, u32) = (4, 16);

/// What remarks may be told at start, read once from the command line and the environment.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Remarks")]
pub struct RemarkSettings {
    /// Like streams (and the hash tags of remark keys): more shards spread likes over more
    /// Redis Cluster slots and more archive workers. Unset: 4 on one Redis node, 16 on a
    /// cluster.
    #[arg(long, env = "ENGAGE_LIKE_SHARDS")]
    pub like_shards: Option<u32>,

    /// Days a like relation stays in Redis after its last change; older ones are answered
    /// by the SQL archive (so memory stays bounded and a like still counts once).
    #[arg(long, env = "ENGAGE_LIKE_RELATION_TTL_DAYS", default_value_t = 10)]
    pub like_relation_ttl_days: u32,

    /// Seconds between refreshes of a cached "recommended remarks" list.
    #[arg(long, env = "ENGAGE_RECOMMENDED_REFRESH_SECONDS", default_value_t = 60)]
    pub recommended_refresh_seconds: u64,

    /// How long a page of remarks (with authors) is served from the instance's memory, in
    /// milliseconds; 0 reads SQL every time. A new remark shows at once on the instance that
    /// took it, on others within this time.
    #[arg(long, env = "ENGAGE_REMARK_PAGE_CACHE_MS", default_value_t = 1000)]
    pub remark_page_cache_ms: u64,
}

impl RemarkSettings {
    /// The settings with the like shards fixed for the Redis deployment, when unset (the
    /// wiring does this once, so that every reader of [`RemarkSettings::shards`] agrees).
    pub fn for_redis(mut self, mode: RedisMode) -> Self {
        let (one_node, cluster) = LIKE_SHARDS;
        self.like_shards
            .get_or_insert(mode.spread(one_node, cluster));
        self
    }

    /// The like shards in effect: as set (or fixed by [`RemarkSettings::for_redis`]), else
    /// one Redis node's.
    pub fn shards(&self) -> u32 {
        self.like_shards.unwrap_or(LIKE_SHARDS.0).max(1)
    }

    /// How long a like relation stays in Redis after its last change: at least a day.
    pub fn relation_ttl_seconds(&self) -> u64 {
        u64::from(self.like_relation_ttl_days.max(1)) * 24 * 3600
    }

    /// Seconds between refreshes of a recommended list: at least one.
    pub fn recommended_refresh(&self) -> u64 {
        self.recommended_refresh_seconds.max(1)
    }

    /// How long a page of remarks is served from memory.
    pub fn page_cache_ttl(&self) -> Duration {
        Duration::from_millis(self.remark_page_cache_ms)
    }
}
