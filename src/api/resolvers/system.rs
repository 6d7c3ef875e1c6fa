//! `serverTime`: a heartbeat subscription that dashboards use to check their live connection
//! (and the smallest end-to-end check of the WebSocket transport).

use std::time::Duration;

use async_graphql::{Context, Subscription};
use futures::{Stream, StreamExt};

use crate::{
    api::{http::ws::SubscriptionSlot, schema::ContextExt},
    infra::{error::AppError, Instance},
};

#[derive(Default)]
pub struct SystemSubscription;

#[Subscription]
impl SystemSubscription {
    /// The server's time (RFC 3339, in the configured zone) now and every `everySeconds`.
    async fn server_time(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 1)] every_seconds: Option<i32>,
    ) -> Result<impl Stream<Item = String>, AppError> {
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
        Ok(ticks.take_until(shutdown.cancelled_owned()).map(move |()| {
            let _held = &slot;
            clock.format(clock.now())
        }))
    }
}

/// A stream that yields at once and then every `period`.
fn tokio_stream_interval(period: Duration) -> impl Stream<Item = ()> {
    futures::stream::unfold(tokio::time::interval(period), |mut interval| async move {
        interval.tick().await;
        Some(((), interval))
    })
}
