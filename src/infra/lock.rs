//! A distributed lock on Redis: an owner token per acquisition, `SET NX PX`,
//! compare-and-delete release in Lua, a lease renewed while the work runs (so a long job
//! keeps its lock), and a fencing number from INCR that writes can check to refuse a stale
//! holder.
//!
//! The API makes forgetting the release impossible: [`with_lock`] runs a closure and
//! releases afterwards, whatever the closure returns.

use std::{future::Future, time::Duration};

use tokio_util::sync::CancellationToken;

use crate::infra::{
    error::AppResult,
    redis::{
        scripts::{
            LockAcquire, LockAcquireArgs, LockRelease, LockReleaseArgs, LockRenew, LockRenewArgs,
            Replies,
        },
        Keys,
    },
    Infra,
};

impl Keys {
    pub fn lock_owner(&self, name: &str) -> String {
        self.tagged(("lock:", name), "owner")
    }

    pub(crate) fn lock_fence(&self, name: &str) -> String {
        self.tagged(("lock:", name), "fence")
    }
}

/// What the work under a lock knows of its hold.
#[derive(Clone)]
pub struct Held {
    /// Grows with every acquisition of this lock; store it with guarded writes.
    pub fence: i64,
    /// Cancelled if the lease could not be renewed: stop writing.
    pub lost: CancellationToken,
}

/// Runs `work` while holding the lock `name`; `Ok(None)` when another owner holds it.
/// The lease (`lease`) is renewed every third of itself until `work` returns.
pub async fn with_lock<T, F, Fut>(
    infra: &Infra,
    name: &str,
    lease: Duration,
    work: F,
) -> AppResult<Option<T>>
where
    F: FnOnce(Held) -> Fut,
    Fut: Future<Output = T>,
{
    let owner_key = infra.keys.lock_owner(name);
    let token = format!("{}:{}", infra.instance.id, uuid::Uuid::new_v4().simple());
    let lease_ms = lease.as_millis() as u64;
    let fence = infra
        .scripts()
        .call(
            &LockAcquire {
                owner: owner_key.clone(),
                fence: infra.keys.lock_fence(name),
            },
            &LockAcquireArgs {
                token: &token,
                lease_ms,
            },
        )
        .await?;
    if fence == 0 {
        return Ok(None);
    }

    let held = Held {
        fence,
        lost: CancellationToken::new(),
    };
    let done = CancellationToken::new();
    let renewer = {
        let (infra, owner_key, token, lost, done) = (
            infra.clone(),
            owner_key.clone(),
            token.clone(),
            held.lost.clone(),
            done.clone(),
        );
        tokio::spawn(async move {
            let mut every = tokio::time::interval(lease / 3);
            every.tick().await;
            loop {
                tokio::select! {
                    () = done.cancelled() => return,
                    _ = every.tick() => {}
                }
                let renewed = infra
                    .scripts()
                    .call(
                        &LockRenew {
                            owner: owner_key.clone(),
                        },
                        &LockRenewArgs {
                            token: &token,
                            lease_ms,
                        },
                    )
                    .await;
                if !matches!(renewed, Ok(1)) {
                    tracing::warn!(lock = owner_key, "lock lease lost");
                    lost.cancel();
                    return;
                }
            }
        })
    };

    let result = work(held).await;
    done.cancel();
    let _ = renewer.await;
    let _released = infra
        .scripts()
        .call(
            &LockRelease {
                owner: owner_key.clone(),
            },
            &LockReleaseArgs { token: &token },
        )
        .await?;
    Ok(Some(result))
}

/// The fencing number, or 0 when someone else holds the lock.
impl Replies for LockAcquire {
    type Reply = i64;
}

/// 1 extended, 0 no longer ours.
impl Replies for LockRenew {
    type Reply = i64;
}

/// 1 released, 0 not ours.
impl Replies for LockRelease {
    type Reply = i64;
}
