//! `serverTime`: a heartbeat subscription that dashboards use to check their live connection
//! (and the smallest end-to-end check of the WebSocket transport); `errorCodes`: the codes an
//! error may carry, which makes the `ErrorCode` enum reachable by introspection.

use std::time::Duration;

use async_graphql::{Context, Object, Subscription};
use futures::{Stream, StreamExt};

use crate::{
    api::{
        live::SubscriptionSlot,
        schema::{scalars::DateTime, ContextExt},
    },
    infra::{
        error::{AppError, ErrorCode},
        Instance,
    },
};

#[derive(Default)]
pub(crate) struct SystemQuery;

#[Object]
impl SystemQuery {
    /// Every code an error may carry in `extensions.code`, in the order of `ErrorCode`,
    /// where each is described. The same for every caller, signed in or not.
    // Introspection shows only the types a field reaches (async-graphql hides the others,
    // even registered ones), so clients that generate types from introspection rather than
    // from the SDL file see `ErrorCode` through this field.
    async fn error_codes(&self) -> Vec<ErrorCode> {
        ErrorCode::all().collect()
    }
}

#[derive(Default)]
pub(crate) struct SystemSubscription;

#[Subscription]
impl SystemSubscription {
    /// The server's time now and every `everySeconds`.
    async fn server_time(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 1)] every_seconds: Option<i32>,
    ) -> Result<impl Stream<Item = DateTime>, AppError> {
        let every_seconds = every_seconds.unwrap_or(1);
        if !(1..=3600).contains(&every_seconds) {
            return Err(AppError::bad_input(
                "everySeconds must be between 1 and 3600",
            ));
        }
        let slot = SubscriptionSlot::acquire(ctx)?;
        let clock = ctx.clock().clone();
        let shutdown = ctx.feature::<Instance>().shutdown.clone();
        let ticks = tokio_stream_interval(Duration::from_secs(every_seconds as u64));
        Ok(slot
            .hold(ticks.take_until(shutdown.cancelled_owned()))
            .map(move |()| DateTime(clock.now())))
    }
}

/// A stream that yields at once and then every `period`.
fn tokio_stream_interval(period: Duration) -> impl Stream<Item = ()> {
    futures::stream::unfold(tokio::time::interval(period), |mut interval| async move {
        interval.tick().await;
        Some(((), interval))
    })
}
