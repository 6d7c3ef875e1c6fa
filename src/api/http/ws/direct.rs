//! Direct delivery: subscription updates written straight to the subscriber's socket by
//! the one task per instance that follows the counter (see
//! [`crate::infra::live::SharedCounters`]), rendered by a [`Template`] instead of
//! async-graphql executing the operation's selection for every update.
//!
//! At thousands of subscribers a delivery through async-graphql cost a wake of the
//! subscriber's task, its own coalescing, the selection's execution (a boxed future per
//! field, a `Value` tree, a `Response`, serde walking it) and the session's framing; what
//! has to be paid is the write. A subscription resolver on a WebSocket may instead hand a
//! [`DirectWatcher`] from its operation's [`DirectOutlet`] to the shared counters, and the
//! outlet what the subscription holds. Everything before the first update (admission,
//! validation, arguments, the resolver's own errors) still goes through async-graphql, so
//! the two paths answer alike; a selection the template cannot render exactly (arguments,
//! directives, fragments) stays on async-graphql's path.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, Weak},
};

use async_graphql::{http::WebSocketProtocols, Context};
use axum::extract::ws::Message;
use futures::stream::BoxStream;

use super::{
    template::{Fields, Render, Renderings, Template},
    writer::SocketWriter,
};
use crate::infra::live::CounterWatcher;

/// An operation's results as GraphQL responses in JSON; a direct subscription's never
/// yields and holds what the subscription holds.
pub type Payloads = BoxStream<'static, String>;

/// What the resolver of one WebSocket operation may use to deliver directly. Present in
/// the operation's data on WebSockets only.
#[derive(Clone)]
pub struct DirectOutlet {
    writer: Arc<SocketWriter>,
    protocol: WebSocketProtocols,
    /// The operation's id as a JSON string.
    quoted_id: Arc<str>,
    renderings: Arc<Renderings>,
    held: Arc<Mutex<Option<Payloads>>>,
}

impl DirectOutlet {
    pub(super) fn new(
        writer: Arc<SocketWriter>,
        protocol: WebSocketProtocols,
        quoted_id: Arc<str>,
        renderings: Arc<Renderings>,
    ) -> Self {
        Self {
            writer,
            protocol,
            quoted_id,
            renderings,
            held: Arc::default(),
        }
    }

    /// The outlet of the operation being resolved; `None` off WebSockets.
    pub fn of<'a>(ctx: &Context<'a>) -> Option<&'a Self> {
        ctx.data_opt::<Self>()
    }

    /// A watcher writing each `(id, value)` as the operation's result, the response of
    /// `template`.
    pub fn watcher<F: Fields>(&self, template: Template<F>) -> Arc<DirectWatcher> {
        Arc::new_cyclic(|me| DirectWatcher {
            me: me.clone(),
            writer: self.writer.clone(),
            protocol: self.protocol,
            quoted_id: self.quoted_id.clone(),
            rendering: self.renderings.of(template),
            missed: Mutex::default(),
        })
    }

    /// Ends async-graphql's part in the operation: from now on its updates are delivered
    /// directly, for as long as the operation keeps `held` (until the client stops it or
    /// the socket closes).
    pub fn hold(&self, held: impl Send + 'static) {
        *self.held.lock().expect("poisoned") = Some(Box::pin(Holding(held)));
    }

    pub(super) fn take(&self) -> Option<Payloads> {
        self.held.lock().expect("poisoned").take()
    }
}

/// A result stream that never yields, keeping what a direct subscription holds.
struct Holding<T>(T);

impl<T> futures::Stream for Holding<T> {
    type Item = String;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<String>> {
        std::task::Poll::Pending
    }
}

/// One direct subscription's side of the shared counters.
pub struct DirectWatcher {
    me: Weak<DirectWatcher>,
    writer: Arc<SocketWriter>,
    protocol: WebSocketProtocols,
    quoted_id: Arc<str>,
    /// Shared with the subscribers of the same selection.
    rendering: Arc<dyn Render>,
    /// The latest value of each counter the socket could not take yet.
    missed: Mutex<HashMap<i64, i64>>,
}

impl DirectWatcher {
    fn message(&self, id: i64, value: i64) -> Message {
        Message::Text(
            self.rendering
                .message(self.protocol, &self.quoted_id, id, value),
        )
    }

    /// Sends what the socket could not take before, now that it drained.
    pub(super) fn catch_up(&self) {
        let mut missed = self.missed.lock().expect("poisoned");
        let ids: Vec<i64> = missed.keys().copied().collect();
        for id in ids {
            let value = missed[&id];
            if !self.writer.try_send(|| self.message(id, value)) {
                self.writer.wait_for_drain(self.me.clone());
                return;
            }
            missed.remove(&id);
        }
    }
}

impl CounterWatcher for DirectWatcher {
    fn deliver(&self, id: i64, value: i64) {
        let mut missed = self.missed.lock().expect("poisoned");
        // Behind already: the latest value waits with the others for the socket to drain.
        if !missed.is_empty() {
            missed.insert(id, value);
            deferred();
            return;
        }
        if !self.writer.try_send(|| self.message(id, value)) {
            missed.insert(id, value);
            deferred();
            self.writer.wait_for_drain(self.me.clone());
        }
    }
}

fn deferred() {
    metrics::counter!("engage_ws_deferred_updates_total").increment(1);
}
