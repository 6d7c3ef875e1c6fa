//! The Lua scripts of `lua/`, embedded at build time (see `build.rs`, which generates one
//! static per file, named after it: `lua/ids_allocate_block.lua` is `IDS_ALLOCATE_BLOCK`).
//!
//! Every script is loaded with SCRIPT LOAD at start and run with EVALSHA; when Redis answers
//! NOSCRIPT (a restart, a failover, SCRIPT FLUSH) the `redis` crate loads it again and
//! retries, so callers never see that error.

use std::sync::LazyLock;

use anyhow::Context;
use redis::{aio::ConnectionLike, ScriptInvocation};

use super::RedisPool;

include!(concat!(env!("OUT_DIR"), "/lua_scripts.rs"));

/// One embedded script with its SHA-1 computed once. `KEYS` is the number of keys its
/// header declares (build.rs reads it): [`LuaScript::keys`] takes exactly that many.
pub struct LuaScript<const KEYS: usize> {
    pub name: &'static str,
    script: redis::Script,
}

impl<const KEYS: usize> LuaScript<KEYS> {
    pub fn new(name: &'static str, source: &str) -> Self {
        Self {
            name,
            script: redis::Script::new(source),
        }
    }

    /// The script's SHA-1, for EVALSHA sent by hand.
    pub fn hash(&self) -> &str {
        self.script.get_hash()
    }

    /// A call of the script with its keys, in the order of its header; add its ARGV with
    /// `.arg` and run it with `.invoke_async` (or put it in a pipeline).
    pub fn keys(&self, keys: [String; KEYS]) -> ScriptInvocation<'_> {
        let mut call = self.script.prepare_invoke();
        for key in keys {
            call.key(key);
        }
        call
    }
}

/// A script as the loader sees it, whatever its key count.
pub trait Loadable: Sync {
    fn name(&self) -> &'static str;
    fn script(&self) -> &redis::Script;
}

impl<const KEYS: usize> Loadable for LuaScript<KEYS> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn script(&self) -> &redis::Script {
        &self.script
    }
}

/// Loads one script (a pipeline does not reload a script Redis forgot: its caller does).
/// The error stays Redis's own, so that a lost connection still reads as unavailable.
pub async fn load(script: &dyn Loadable, conn: &mut impl ConnectionLike) -> redis::RedisResult<()> {
    let _sha: String = script.script().load_async(conn).await?;
    Ok(())
}

/// Loads every script, so that a syntax error shows at start rather than on first use.
pub async fn load_all(pool: &RedisPool) -> anyhow::Result<()> {
    let mut conn = pool.get().await?;
    for script in all() {
        load(script, &mut *conn)
            .await
            .with_context(|| format!("loading lua/{}.lua", script.name()))?;
    }
    Ok(())
}
