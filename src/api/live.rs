//! Live updates: what a `Subscription` resolver uses to deliver its changes (like counts,
//! boards, ranks, voucher stock, the server's time), whatever transport carries them.
//!
//! Every subscription takes a [`SubscriptionSlot`] before it returns: a connection holds at
//! most `ENGAGE_MAX_SUBSCRIPTIONS` of them, and the slot is held as long as the
//! subscription runs. Its updates then take one of two paths:
//!
//! - **Through async-graphql** ([`SubscriptionSlot::hold`]): the resolver returns the
//!   feature's stream of changes, and each change's selection is executed. Every
//!   subscription on every transport, and every selection.
//! - **Written straight to the socket** ([`Direct`]): on a WebSocket, a subscription to
//!   counters that many subscribers watch (`likeCountChanged`) whose selection is plain
//!   fields of one object type. The instance's one follower of each counter
//!   ([`crate::infra::live::SharedCounters`]) hands each change to a [`DirectWatcher`],
//!   which writes the response a [`Template`] renders (once for all subscribers of an equal
//!   selection, see [`Renderings`]) without waiting for the socket.
//!
//! At thousands of subscribers a delivery through async-graphql cost a wake of the
//! subscriber's task, its own coalescing, the selection's execution (a boxed future per
//! field, a `Value` tree, a `Response`, serde walking it) and the session's framing; what
//! has to be paid is the write. Everything before the first update (admission, validation,
//! arguments, the resolver's own errors) still goes through async-graphql, so the two paths
//! answer alike; a selection a template cannot render exactly (arguments, directives,
//! fragments) stays on async-graphql's path.
//!
//! This module does not know the transport: the WebSocket (`api::http::ws`) puts a
//! [`DirectOutlet`] in each operation's data, made of its sending half (a [`Socket`]) and
//! what it writes around each result (an [`Envelope`]), and gives each connection its
//! [`SubscriptionSlots`]. The transport depends on this module, not the other way round.

use std::{
    any::TypeId,
    collections::HashMap,
    fmt::Debug,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex, Weak,
    },
};

use async_graphql::{parser::types::Selection, Context};
use axum::extract::ws::Utf8Bytes;
use futures::{stream::BoxStream, Stream, StreamExt};

use crate::infra::{
    error::{AppError, AppResult, ErrorCode},
    live::CounterWatcher,
    metrics::Held,
    weak_map::WeakMap,
    Instance,
};

/// How many subscriptions one connection holds; shared by all of its operations. Present
/// in the connection's data on WebSockets only (a request over HTTP holds none).
#[derive(Clone)]
pub(crate) struct SubscriptionSlots {
    held: Arc<AtomicUsize>,
    max: usize,
}

impl SubscriptionSlots {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            held: Arc::new(AtomicUsize::new(0)),
            max,
        }
    }
}

/// One held subscription; dropping it (when the stream ends or the client stops it)
/// frees the slot. Every subscription resolver takes one before returning its stream.
pub(crate) struct SubscriptionSlot {
    slots: Option<SubscriptionSlots>,
    /// Counts it in `engage_subscriptions_active` while held.
    _active: Option<Held>,
}

impl SubscriptionSlot {
    /// The slot of the subscription being resolved; `RATE_LIMITED` when its connection
    /// holds as many as it may.
    pub(crate) fn acquire(ctx: &Context<'_>) -> AppResult<Self> {
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

    /// `changes` delivered through async-graphql, holding the slot until the stream ends
    /// or the client stops it.
    pub(crate) fn hold<S: Stream>(self, changes: S) -> impl Stream<Item = S::Item> {
        changes.map(move |change| {
            let _held = &self;
            change
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

/// A subscription whose updates are written straight to its socket.
pub(crate) struct Direct {
    outlet: DirectOutlet,
    watcher: Arc<DirectWatcher>,
}

impl Direct {
    /// Direct delivery for the field being resolved, if it runs on a WebSocket and
    /// `template` can render its selection (see [`Template::of`]); `None` leaves it to
    /// async-graphql.
    pub(crate) fn of<F: Fields>(
        ctx: &Context<'_>,
        template: impl FnOnce(&Context<'_>) -> Option<Template<F>>,
    ) -> Option<Self> {
        let outlet = DirectOutlet::of(ctx)?;
        let template = template(ctx)?;
        Some(Self {
            watcher: outlet.watcher(template),
            outlet: outlet.clone(),
        })
    }

    /// Who writes each counter's value to the socket: to be handed to the feature's shared
    /// counters.
    pub(crate) fn watcher(&self) -> Arc<dyn CounterWatcher> {
        self.watcher.clone()
    }

    /// Ends async-graphql's part in the operation: from now on its updates are written by
    /// the watcher, for as long as the operation keeps `held` (the feature's watch and the
    /// [`SubscriptionSlot`]), until the client stops it or the socket closes. The stream to
    /// return from the resolver, which never yields.
    pub(crate) fn hold<T>(self, held: impl Send + 'static) -> impl Stream<Item = T> {
        *self.outlet.held.lock().expect("poisoned") = Some(Box::pin(Holding(held)));
        futures::stream::pending()
    }
}

/// The sending half of the socket an operation's results go to, as the transport gives it.
/// A watcher never waits for it: it writes if the socket takes the message now, and
/// otherwise is called back once the socket drained.
pub(crate) trait Socket: Send + Sync + 'static {
    /// Sends the message `message` gives if the socket takes it now; false (and
    /// `message` not called, nothing sent) if it cannot.
    fn try_send(&self, message: &dyn Fn() -> Utf8Bytes) -> bool;

    /// Calls `watcher`'s [`DirectWatcher::catch_up`] once the socket drained.
    fn wait_for_drain(&self, watcher: Weak<DirectWatcher>);
}

/// What the transport writes around each result of one operation: `head`, the GraphQL
/// response in JSON, `tail` (on a WebSocket the protocol's result message, which names the
/// operation's id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Envelope {
    head: Arc<str>,
    tail: &'static str,
}

impl Envelope {
    pub(crate) fn new(head: impl Into<Arc<str>>, tail: &'static str) -> Self {
        Self {
            head: head.into(),
            tail,
        }
    }
}

/// An operation's results as GraphQL responses in JSON; a direct subscription's never
/// yields and holds what the subscription holds.
pub(crate) type Payloads = BoxStream<'static, String>;

/// What the transport gives one WebSocket operation, in its data, so that its resolver may
/// deliver directly ([`Direct`]). Absent from every other transport's operations.
#[derive(Clone)]
pub(crate) struct DirectOutlet {
    socket: Arc<dyn Socket>,
    envelope: Envelope,
    renderings: Arc<Renderings>,
    held: Arc<Mutex<Option<Payloads>>>,
}

impl DirectOutlet {
    /// The outlet of an operation whose results go to `socket` in `envelope`; `renderings`
    /// are shared by every subscriber of the instance.
    pub(crate) fn new(
        socket: Arc<dyn Socket>,
        envelope: Envelope,
        renderings: Arc<Renderings>,
    ) -> Self {
        Self {
            socket,
            envelope,
            renderings,
            held: Arc::default(),
        }
    }

    /// The outlet of the operation being resolved; `None` off WebSockets.
    fn of<'a>(ctx: &Context<'a>) -> Option<&'a Self> {
        ctx.data_opt::<Self>()
    }

    /// A watcher writing each `(id, value)` as the operation's result, the response of
    /// `template`.
    fn watcher<F: Fields>(&self, template: Template<F>) -> Arc<DirectWatcher> {
        Arc::new_cyclic(|me| DirectWatcher {
            me: me.clone(),
            socket: self.socket.clone(),
            envelope: self.envelope.clone(),
            rendering: self.renderings.of(template),
            missed: Mutex::default(),
        })
    }

    /// What the resolver handed over to be held ([`Direct::hold`]), once: the operation's
    /// results from then on, in place of async-graphql's.
    pub(crate) fn take(&self) -> Option<Payloads> {
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
pub(crate) struct DirectWatcher {
    me: Weak<DirectWatcher>,
    socket: Arc<dyn Socket>,
    envelope: Envelope,
    /// Shared with the subscribers of the same selection.
    rendering: Arc<dyn Render>,
    /// The latest value of each counter the socket could not take yet.
    missed: Mutex<HashMap<i64, i64>>,
}

impl DirectWatcher {
    fn message(&self, id: i64, value: i64) -> Utf8Bytes {
        self.rendering.message(&self.envelope, id, value)
    }

    /// Sends what the socket could not take before, now that it drained (the socket calls
    /// this, see [`Socket::wait_for_drain`]).
    pub(crate) fn catch_up(&self) {
        let mut missed = self.missed.lock().expect("poisoned");
        let ids: Vec<i64> = missed.keys().copied().collect();
        for id in ids {
            let value = missed[&id];
            if !self.socket.try_send(&|| self.message(id, value)) {
                self.socket.wait_for_drain(self.me.clone());
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
        if !self.socket.try_send(&|| self.message(id, value)) {
            missed.insert(id, value);
            deferred();
            self.socket.wait_for_drain(self.me.clone());
        }
    }
}

fn deferred() {
    metrics::counter!("engage_ws_deferred_updates_total").increment(1);
}

/// The fields of one object type that a template can write: how each writes its value for
/// counter `id` at `value`. The same for every subscriber, which is what lets them share a
/// rendering.
pub(crate) trait Fields: Copy + Eq + Debug + Send + Sync + 'static {
    /// Appends this field's value as JSON.
    fn write(self, id: i64, value: i64, out: &mut String);
}

/// What a template writes for one field of the selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot<F> {
    Field(F),
    Typename,
}

/// The response of a subscription field whose selection is only plain fields of one object
/// type: each update is the fields' values written between fixed pieces of JSON.
#[derive(Debug)]
pub(crate) struct Template<F> {
    /// `{"data":{"<root>":{`
    head: String,
    /// `"<key>":` and what goes after it, in the selection's order.
    fields: Vec<(String, Slot<F>)>,
    /// The object type's name as a JSON string, for `__typename`.
    typename: String,
}

impl<F: Fields> Template<F> {
    /// The template of the field being resolved, if its selection is only fields that
    /// `field` knows, without arguments, directives, sub-selections or fragments (the rest
    /// of GraphQL is left to async-graphql). `typename` is the object type's name.
    pub(crate) fn of(
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

    /// The response for counter `id` at `value`, appended to `out`.
    fn render(&self, id: i64, value: i64, out: &mut String) {
        out.push_str(&self.head);
        for (n, (key, slot)) in self.fields.iter().enumerate() {
            if n > 0 {
                out.push(',');
            }
            out.push_str(key);
            match slot {
                Slot::Field(field) => field.write(id, value, out),
                Slot::Typename => out.push_str(&self.typename),
            }
        }
        out.push_str("}}}");
    }
}

/// A template's messages, shared by the subscribers that selected it.
trait Render: Send + Sync {
    /// The result message in `envelope` for counter `id` at `value`.
    fn message(&self, envelope: &Envelope, id: i64, value: i64) -> Utf8Bytes;
}

/// One template and the last message it wrote.
struct Rendering<F> {
    template: Template<F>,
    last: Mutex<Option<Last>>,
}

/// The payload last rendered, and the last message built around it.
struct Last {
    id: i64,
    value: i64,
    payload: String,
    message: Option<(Envelope, Utf8Bytes)>,
}

impl<F: Fields> Render for Rendering<F> {
    fn message(&self, envelope: &Envelope, id: i64, value: i64) -> Utf8Bytes {
        let mut last = self.last.lock().expect("poisoned");
        if !last
            .as_ref()
            .is_some_and(|l| l.id == id && l.value == value)
        {
            let mut payload = String::with_capacity(self.template.head.len() + 64);
            self.template.render(id, value, &mut payload);
            *last = Some(Last {
                id,
                value,
                payload,
                message: None,
            });
        }
        let last = last.as_mut().expect("just set");
        match &last.message {
            Some((around, message)) if around == envelope => message.clone(),
            _ => {
                let mut text = String::with_capacity(
                    envelope.head.len() + last.payload.len() + envelope.tail.len(),
                );
                text.push_str(&envelope.head);
                text.push_str(&last.payload);
                text.push_str(envelope.tail);
                let message = Utf8Bytes::from(text);
                last.message = Some((envelope.clone(), message.clone()));
                message
            }
        }
    }
}

/// The renderings of the templates some subscriber holds, one for equal templates.
///
/// The follower of a counter hands each change to all of its subscribers in turn. Rendered
/// per subscriber, each update read that subscriber's own copy of the template (a few
/// small allocations, cold in the cache at thousands of subscribers) and wrote the same
/// bytes again. Equal templates share one rendering here, which keeps the last message it
/// wrote: the subscribers after the first share it (a reference count, not a copy), or,
/// in another envelope (another operation id), reuse its rendered payload.
#[derive(Default)]
pub(crate) struct Renderings {
    /// By the fields' type and the template as written by `Debug` (its whole content); each
    /// lives as long as a subscriber holds it.
    interned: Mutex<WeakMap<(TypeId, String), dyn Render>>,
}

impl Renderings {
    /// The rendering of `template`, shared with every subscriber holding an equal one.
    fn of<F: Fields>(&self, template: Template<F>) -> Arc<dyn Render> {
        let key = (TypeId::of::<F>(), format!("{template:?}"));
        let mut interned = self.interned.lock().expect("poisoned");
        if let Some(rendering) = interned.get(&key) {
            return rendering;
        }
        let rendering: Arc<dyn Render> = Arc::new(Rendering {
            template,
            last: Mutex::new(None),
        });
        interned.insert(key, &rendering);
        rendering
    }

    /// Templates some subscriber holds (tests).
    #[cfg(test)]
    fn held(&self) -> usize {
        self.interned.lock().expect("poisoned").held()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Count {
        Id,
        Count,
    }

    impl Fields for Count {
        fn write(self, id: i64, value: i64, out: &mut String) {
            match self {
                Count::Id => out.push_str(&format!("\"{id}\"")),
                Count::Count => out.push_str(&value.to_string()),
            }
        }
    }

    fn template(fields: &[(&str, Slot<Count>)]) -> Template<Count> {
        Template {
            head: r#"{"data":{"counted":{"#.to_string(),
            fields: fields
                .iter()
                .map(|(key, slot)| (format!("\"{key}\":"), *slot))
                .collect(),
            typename: "\"Counted\"".to_string(),
        }
    }

    /// The envelope of operation `quoted_id` in a protocol whose results are `kind`.
    fn envelope(kind: &str, quoted_id: &str) -> Envelope {
        Envelope::new(
            format!(r#"{{"type":"{kind}","id":{quoted_id},"payload":"#),
            "}",
        )
    }

    #[test]
    fn subscribers_of_equal_selections_share_one_rendering() {
        let renderings = Renderings::default();
        let selection = [
            ("id", Slot::Field(Count::Id)),
            ("n", Slot::Field(Count::Count)),
        ];
        let first = renderings.of(template(&selection));
        let second = renderings.of(template(&selection));
        let other = renderings.of(template(&[("n", Slot::Field(Count::Count))]));
        assert!(Arc::ptr_eq(&first, &second));
        assert!(!Arc::ptr_eq(&first, &other));
        assert_eq!(renderings.held(), 2);
        drop((first, second));
        assert_eq!(renderings.held(), 1);
    }

    #[test]
    fn each_subscriber_is_sent_its_own_id_and_protocol_and_the_current_value() {
        let renderings = Renderings::default();
        let rendering = renderings.of(template(&[
            ("id", Slot::Field(Count::Id)),
            ("n", Slot::Field(Count::Count)),
            ("__typename", Slot::Typename),
        ]));
        let payload = |n: i64| {
            format!(r#"{{"data":{{"counted":{{"id":"7","n":{n},"__typename":"Counted"}}}}}}"#)
        };
        // Two subscribers with operation "1", one with "2", one on the legacy protocol,
        // then the next value: each sees its own id, protocol and the current value.
        for (kind, id, value) in [
            ("next", "\"1\"", 3),
            ("next", "\"1\"", 3),
            ("next", "\"2\"", 3),
            ("data", "\"2\"", 3),
            ("next", "\"1\"", 4),
        ] {
            let message = rendering.message(&envelope(kind, id), 7, value);
            let expected = format!(
                r#"{{"type":"{kind}","id":{id},"payload":{}}}"#,
                payload(value)
            );
            assert_eq!(message.as_str(), expected);
        }
    }
}
