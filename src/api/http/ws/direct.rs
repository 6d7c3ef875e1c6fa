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

use async_graphql::{http::WebSocketProtocols, parser::types::Selection, Context};
use axum::extract::ws::Message;
use futures::stream::BoxStream;

use super::{protocol, writer::SocketWriter};
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
    held: Arc<Mutex<Option<Payloads>>>,
}

impl DirectOutlet {
    pub(super) fn new(
        writer: Arc<SocketWriter>,
        protocol: WebSocketProtocols,
        quoted_id: Arc<str>,
    ) -> Self {
        Self {
            writer,
            protocol,
            quoted_id,
            held: Arc::default(),
        }
    }

    /// The outlet of the operation being resolved; `None` off WebSockets.
    pub fn of<'a>(ctx: &Context<'a>) -> Option<&'a Self> {
        ctx.data_opt::<Self>()
    }

    /// A watcher writing each `(id, value)` as the operation's result, the response that
    /// `render` appends (about `size` bytes).
    pub fn watcher(
        &self,
        size: usize,
        render: impl Fn(i64, i64, &mut String) + Send + Sync + 'static,
    ) -> Arc<DirectWatcher> {
        Arc::new_cyclic(|me| DirectWatcher {
            me: me.clone(),
            writer: self.writer.clone(),
            protocol: self.protocol,
            quoted_id: self.quoted_id.clone(),
            size,
            render: Box::new(render),
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

/// Appends the response for counter `id` at `value`.
type Render = dyn Fn(i64, i64, &mut String) + Send + Sync;

/// One direct subscription's side of the shared counters.
pub struct DirectWatcher {
    me: Weak<DirectWatcher>,
    writer: Arc<SocketWriter>,
    protocol: WebSocketProtocols,
    quoted_id: Arc<str>,
    size: usize,
    render: Box<Render>,
    /// The latest value of each counter the socket could not take yet.
    missed: Mutex<HashMap<i64, i64>>,
}

impl DirectWatcher {
    fn message(&self, id: i64, value: i64) -> Message {
        let text = protocol::next_with(self.protocol, &self.quoted_id, self.size, |out| {
            (self.render)(id, value, out)
        });
        Message::Text(text.into())
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

/// What a template writes for one field of the selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot<F> {
    Field(F),
    Typename,
}

/// The response of a subscription field whose selection is only plain fields of one object
/// type: each update is the fields' values written between fixed pieces of JSON.
#[derive(Debug, Clone)]
pub struct Template<F> {
    /// `{"data":{"<root>":{`
    head: String,
    /// `"<key>":` and what goes after it, in the selection's order.
    fields: Vec<(String, Slot<F>)>,
    /// The object type's name as a JSON string, for `__typename`.
    typename: String,
}

impl<F: Copy + PartialEq> Template<F> {
    /// The template of the field being resolved, if its selection is only fields that
    /// `field` knows, without arguments, directives, sub-selections or fragments (the rest
    /// of GraphQL is left to async-graphql). `typename` is the object type's name.
    pub fn of(
        ctx: &Context<'_>,
        typename: &str,
        field: impl Fn(&str) -> Option<F>,
    ) -> Option<Self> {
        // The parsed field: `SelectionField` flattens fragments and hides their directives,
        // which decide whether their fields are in the response.
        let root = &ctx.item.node;
        let mut fields: Vec<(String, Slot<F>)> = Vec::new();
        let mut keys: Vec<(&str, Slot<F>)> = Vec::new();
        for selection in &root.selection_set.node.items {
            let Selection::Field(selected) = &selection.node else {
                return None;
            };
            let selected = &selected.node;
            if !selected.arguments.is_empty()
                || !selected.directives.is_empty()
                || !selected.selection_set.node.items.is_empty()
            {
                return None;
            }
            let name = selected.name.node.as_str();
            let slot = match name {
                "__typename" => Slot::Typename,
                _ => Slot::Field(field(name)?),
            };
            let key = selected.response_key().node.as_str();
            // Fields of one key are merged into one (validation made sure they agree).
            match keys.iter().find(|(k, _)| *k == key) {
                Some((_, seen)) if *seen == slot => continue,
                Some(_) => return None,
                None => keys.push((key, slot)),
            }
            fields.push((format!("\"{key}\":"), slot));
        }
        Some(Self {
            head: format!("{{\"data\":{{\"{}\":{{", root.response_key().node.as_str()),
            fields,
            typename: format!("\"{typename}\""),
        })
    }

    /// One update's response, appended to `out`; `value` writes a field's value as JSON.
    pub fn render(&self, out: &mut String, mut value: impl FnMut(F, &mut String)) {
        out.push_str(&self.head);
        for (n, (key, slot)) in self.fields.iter().enumerate() {
            if n > 0 {
                out.push(',');
            }
            out.push_str(key);
            match slot {
                Slot::Field(field) => value(*field, out),
                Slot::Typename => out.push_str(&self.typename),
            }
        }
        out.push_str("}}}");
    }

    /// About how long a rendered response is, to size its buffer once.
    pub fn size(&self) -> usize {
        self.head.len() + 24 * self.fields.len() + 3
    }
}
