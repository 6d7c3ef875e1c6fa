//! Subscriptions held per WebSocket connection: every subscription resolver takes a slot,
//! and a connection holds at most `ENGAGE_MAX_SUBSCRIPTIONS` of them.

use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Arc,
};

use async_graphql::Context;

use crate::infra::error::{AppError, AppResult, ErrorCode};

/// How many subscriptions one connection holds; shared by all of its operations.
#[derive(Clone)]
pub struct SubscriptionSlots {
    held: Arc<AtomicUsize>,
    max: usize,
}

impl SubscriptionSlots {
    pub(super) fn new(max: usize) -> Self {
        Self {
            held: Arc::new(AtomicUsize::new(0)),
            max,
        }
    }
}

/// One held subscription; dropping it (when the stream ends or the client stops it)
/// frees the slot. Every subscription resolver takes one before returning its stream.
pub struct SubscriptionSlot(Option<SubscriptionSlots>);

impl SubscriptionSlot {
    pub fn acquire(ctx: &Context<'_>) -> AppResult<Self> {
        let Some(slots) = ctx.data_opt::<SubscriptionSlots>() else {
            return Ok(Self(None));
        };
        let held = slots.held.fetch_add(1, Ordering::AcqRel);
        if held >= slots.max {
            slots.held.fetch_sub(1, Ordering::AcqRel);
            return Err(AppError::client(
                ErrorCode::RateLimited,
                format!("a connection may hold at most {} subscriptions", slots.max),
            ));
        }
        Ok(Self(Some(slots.clone())))
    }
}

impl Drop for SubscriptionSlot {
    fn drop(&mut self) {
        if let Some(slots) = &self.0 {
            slots.held.fetch_sub(1, Ordering::AcqRel);
        }
    }
}
