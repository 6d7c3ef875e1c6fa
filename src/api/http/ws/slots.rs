//! Subscriptions held per WebSocket connection: every subscription resolver takes a slot,
//! and a connection holds at most `ENGAGE_MAX_SUBSCRIPTIONS` of them.

use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Arc,
};

use async_graphql::Context;

use crate::infra::{
    error::{AppError, AppResult, ErrorCode},
    metrics::Held,
    Instance,
};

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
pub struct SubscriptionSlot {
    slots: Option<SubscriptionSlots>,
    /// Counts it in `engage_subscriptions_active` while held.
    _active: Option<Held>,
}

impl SubscriptionSlot {
    pub fn acquire(ctx: &Context<'_>) -> AppResult<Self> {
        let Some(slots) = ctx.data_opt::<SubscriptionSlots>() else {
            return Ok(Self {
                slots: None,
                _active: None,
            });
        };
        let held = slots.held.fetch_add(1, Ordering::AcqRel);
        if held >= slots.max {
            slots.held.fetch_sub(1, Ordering::AcqRel);
            return Err(AppError::client(
                ErrorCode::RateLimited,
                format!("a connection may hold at most {} subscriptions", slots.max),
            ));
        }
        Ok(Self {
            slots: Some(slots.clone()),
            _active: ctx
                .data_opt::<Instance>()
                .map(|instance| instance.open.subscription(ctx.field().name())),
        })
    }
}

impl Drop for SubscriptionSlot {
    fn drop(&mut self) {
        if let Some(slots) = &self.slots {
            slots.held.fetch_sub(1, Ordering::AcqRel);
        }
    }
}
