//! The Lua scripts of `lua/`, embedded at build time (see `build.rs`, which generates one
//! static per file, named after it: `lua/ids_allocate_block.lua` is `IDS_ALLOCATE_BLOCK`).
//!
//! Every script is loaded with SCRIPT LOAD at start and run with EVALSHA; when Redis answers
//! NOSCRIPT (a restart, a failover, SCRIPT FLUSH) the `redis` crate loads it again and
//! retries, so callers never see that error.

use std::sync::LazyLock;

use anyhow::Context;
use redis::{aio::ConnectionLike, FromRedisValue, ScriptInvocation, ToRedisArgs};

use super::RedisPool;

include!(concat!(env!("OUT_DIR"), "/lua_scripts.rs"));

/// One embedded script with its SHA-1 computed once. `KEYS` and `ARGS` are the numbers of
/// fixed keys and arguments its header declares, and `MORE` whether groups of keys or
/// arguments follow (build.rs reads them): [`LuaScript::call`] takes exactly that many of each.
pub struct LuaScript<const KEYS: usize, const ARGS: usize, const MORE: bool> {
    pub name: &'static str,
    script: redis::Script,
}

impl<const KEYS: usize, const ARGS: usize, const MORE: bool> LuaScript<KEYS, ARGS, MORE> {
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

    fn prepare(&self, keys: [String; KEYS], args: impl Args<ARGS>) -> ScriptInvocation<'_> {
        let mut call = self.script.prepare_invoke();
        for key in keys {
            call.key(key);
        }
        args.add_to(&mut call);
        call
    }
}

impl<const KEYS: usize, const ARGS: usize> LuaScript<KEYS, ARGS, false> {
    /// A call of the script with its keys and its arguments (a tuple), each in the order of
    /// its header; run it with `.invoke_async`.
    pub fn call(&self, keys: [String; KEYS], args: impl Args<ARGS>) -> Call<'_> {
        Call(self.prepare(keys, args))
    }
}

impl<const KEYS: usize, const ARGS: usize> LuaScript<KEYS, ARGS, true> {
    /// A call of a script whose keys or arguments end in groups (`KEYS[a..]`, `ARGV[a..]`):
    /// its fixed keys and arguments here, then each group with `.key` and `.arg`.
    pub fn call(&self, keys: [String; KEYS], args: impl Args<ARGS>) -> ScriptInvocation<'_> {
        self.prepare(keys, args)
    }
}

/// A call with every key and argument in place: it can run, and take nothing more.
pub struct Call<'a>(ScriptInvocation<'a>);

impl Call<'_> {
    pub async fn invoke_async<T: FromRedisValue>(
        &self,
        conn: &mut impl ConnectionLike,
    ) -> redis::RedisResult<T> {
        self.0.invoke_async(conn).await
    }
}

/// The arguments of a call: a tuple of `N` values, in the order of the script's header.
pub trait Args<const N: usize> {
    fn add_to(self, call: &mut ScriptInvocation<'_>);
}

macro_rules! args {
    ($n:literal: $($arg:ident)*) => {
        impl<$($arg: ToRedisArgs),*> Args<$n> for ($($arg,)*) {
            #[allow(non_snake_case, unused_variables)]
            fn add_to(self, call: &mut ScriptInvocation<'_>) {
                let ($($arg,)*) = self;
                $(call.arg($arg);)*
            }
        }
    };
}

args!(0:);
args!(1: A);
args!(2: A B);
args!(3: A B C);
args!(4: A B C D);
args!(5: A B C D E);
args!(6: A B C D E F);
args!(7: A B C D E F G);
args!(8: A B C D E F G H);
args!(9: A B C D E F G H I);
args!(10: A B C D E F G H I J);
args!(11: A B C D E F G H I J K);
args!(12: A B C D E F G H I J K L);
args!(13: A B C D E F G H I J K L M);
args!(14: A B C D E F G H I J K L M N);
args!(15: A B C D E F G H I J K L M N O);
args!(16: A B C D E F G H I J K L M N O P);
args!(17: A B C D E F G H I J K L M N O P Q);

/// A script as the loader sees it, whatever its key count.
pub trait Loadable: Sync {
    fn name(&self) -> &'static str;
    fn script(&self) -> &redis::Script;
}

impl<const KEYS: usize, const ARGS: usize, const MORE: bool> Loadable
    for LuaScript<KEYS, ARGS, MORE>
{
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
