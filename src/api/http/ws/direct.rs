//! Direct delivery: a subscription whose updates are written straight to JSON, once per
//! update, instead of async-graphql executing the operation's selection for every update.
//!
//! At thousands of subscribers the selection's execution was the largest part of a
//! delivery (a boxed future per field, a `Value` tree, a `Response`, then serde walking
//! it). A subscription resolver on a WebSocket may hand its updates to its operation's
//! [`DirectOutlet`] instead, already rendered by a [`Template`]; the operation then sends
//! those and no longer polls async-graphql. Everything before the first update (admission,
//! validation, arguments, the resolver's own errors) still goes through async-graphql, so
//! the two paths answer alike; a selection the template cannot render exactly (arguments,
//! directives, fragments) stays on async-graphql's path.

use std::sync::{Arc, Mutex};

use async_graphql::{parser::types::Selection, Context};
use futures::stream::BoxStream;

/// Updates rendered as GraphQL responses in JSON (`{"data":{…}}`).
pub type Payloads = BoxStream<'static, String>;

/// Where the resolver of one WebSocket operation may hand its rendered updates. Present in
/// the operation's data on WebSockets only.
#[derive(Clone, Default)]
pub struct DirectOutlet(Arc<Mutex<Option<Payloads>>>);

impl DirectOutlet {
    /// The outlet of the operation being resolved; `None` off WebSockets.
    pub fn of<'a>(ctx: &Context<'a>) -> Option<&'a Self> {
        ctx.data_opt::<Self>()
    }

    pub fn hand_over(&self, payloads: Payloads) {
        *self.0.lock().expect("poisoned") = Some(payloads);
    }

    pub(super) fn take(&self) -> Option<Payloads> {
        self.0.lock().expect("poisoned").take()
    }
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
    pub fn of(ctx: &Context<'_>, typename: &str, field: impl Fn(&str) -> Option<F>) -> Option<Self> {
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
            head: format!(
                "{{\"data\":{{\"{}\":{{",
                root.response_key().node.as_str()
            ),
            fields,
            typename: format!("\"{typename}\""),
        })
    }

    /// One update's response; `value` writes a field's value as JSON.
    pub fn render(&self, mut value: impl FnMut(F, &mut String)) -> String {
        let mut out = String::with_capacity(self.head.len() + 24 * self.fields.len() + 3);
        out.push_str(&self.head);
        for (n, (key, slot)) in self.fields.iter().enumerate() {
            if n > 0 {
                out.push(',');
            }
            out.push_str(key);
            match slot {
                Slot::Field(field) => value(*field, &mut out),
                Slot::Typename => out.push_str(&self.typename),
            }
        }
        out.push_str("}}}");
        out
    }
}
