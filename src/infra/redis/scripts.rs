//! The Lua scripts of `lua/`, embedded at build time (see `build.rs`, which generates one
//! static per file, named after it: `lua/ids_allocate_block.lua` is `IDS_ALLOCATE_BLOCK`).
//!
//! Every script is loaded with SCRIPT LOAD at start and run with EVALSHA; when Redis answers
//! NOSCRIPT (a restart, a failover, SCRIPT FLUSH) the `redis` crate loads it again and
//! retries, so callers never see that error.

use std::{ops::Deref, sync::LazyLock};

use anyhow::Context;

use super::RedisPool;

include!(concat!(env!("OUT_DIR"), "/lua_scripts.rs"));

/// One embedded script with its SHA-1 computed once.
pub struct LuaScript {
    pub name: &'static str,
    script: redis::Script,
}

impl LuaScript {
    pub fn new(name: &'static str, source: &str) -> Self {
        Self {
            name,
            script: redis::Script::new(source),
        }
    }
}

impl Deref for LuaScript {
    type Target = redis::Script;

    fn deref(&self) -> &redis::Script {
        &self.script
    }
}

/// Loads every script, so that a syntax error shows at start rather than on first use.
pub async fn load_all(pool: &RedisPool) -> anyhow::Result<()> {
    let mut conn = pool.get().await?;
    for script in ALL {
        script
            .load_async(&mut *conn)
            .await
            .with_context(|| format!("loading lua/{}.lua", script.name))?;
    }
    Ok(())
}
