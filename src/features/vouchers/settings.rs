//! The settings of flash-sale vouchers (`ENGAGE_SALE_*`, `ENGAGE_ORDER_*`), under their own
//! heading in `engage --help`.

use std::time::Duration;

use clap::Args;

use crate::infra::redis::RedisMode;

/// Sale shards on one Redis node, and on a cluster (see [`RedisMode::spread`]).
const SALE_SHARDS: (u32, u32) = (4, 16);

/// What vouchers may be told at start, read once from the command line and the environment.
#[derive(Debug, Clone, Copy, Args)]
#[command(next_help_heading = "Vouchers")]
pub struct VoucherSettings {
    /// Order streams of the flash sale (and hash-tag groups of voucher keys). Unset: 4 on
    /// one Redis node, 16 on a cluster.
    #[arg(long, env = "ENGAGE_SALE_SHARDS")]
    pub sale_shards: Option<u32>,

    /// Seconds between sweeps for unpaid orders past their pay-by time whose expiry job was
    /// lost (one instance sweeps at a time).
    #[arg(long, env = "ENGAGE_ORDER_SWEEP_SECONDS", default_value_t = 60)]
    pub order_sweep_seconds: u64,
}

impl VoucherSettings {
    /// The settings with the sale shards fixed for the Redis deployment, when unset (the
    /// wiring does this once, so that every reader of [`VoucherSettings::shards`] agrees).
    pub fn for_redis(mut self, mode: RedisMode) -> Self {
        let (one_node, cluster) = SALE_SHARDS;
        self.sale_shards
            .get_or_insert(mode.spread(one_node, cluster));
        self
    }

    /// Stock shards of a voucher (and order streams): as set (or fixed by
    /// [`VoucherSettings::for_redis`]), else one Redis node's.
    pub fn shards(&self) -> u32 {
        self.sale_shards.unwrap_or(SALE_SHARDS.0).max(1)
    }

    /// How often unpaid orders past their time are looked for: no more often than every second.
    pub fn sweep_every(&self) -> Duration {
        Duration::from_secs(self.order_sweep_seconds.max(1))
    }
}
