//! Responses of direct subscriptions (see [`super::direct`]) written without async-graphql:
//! a [`Template`] is a selection of plain fields of one object type, and its rendering of
//! one counter's change is shared by every subscriber that selected the same fields.
//!
//! The follower of a counter hands each change to all of its subscribers in turn. Rendered
//! per subscriber, each update read that subscriber's own copy of the template (a few
//! small allocations, cold in the cache at thousands of subscribers) and wrote the same
//! bytes again. [`Renderings`] gives equal templates one [`Rendering`], which keeps the
//! last message it wrote: the subscribers after the first share it (a reference count, not
//! a copy), or, with another operation id, reuse its rendered payload.

use std::{
    any::TypeId,
    fmt::Debug,
    sync::{Arc, Mutex},
};

use async_graphql::{http::WebSocketProtocols, parser::types::Selection, Context};
use axum::extract::ws::Utf8Bytes;

use super::protocol;
use crate::infra::weak_map::WeakMap;

/// The fields of one object type that a template can write: how each writes its value for
/// counter `id` at `value`. The same for every subscriber, which is what lets them share a
/// rendering.
pub trait Fields: Copy + Eq + Debug + Send + Sync + 'static {
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
pub struct Template<F> {
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
pub trait Render: Send + Sync {
    /// The result message of operation `quoted_id` (a JSON string) for counter `id` at
    /// `value`.
    fn message(
        &self,
        protocol: WebSocketProtocols,
        quoted_id: &str,
        id: i64,
        value: i64,
    ) -> Utf8Bytes;
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
    message: Option<(WebSocketProtocols, Box<str>, Utf8Bytes)>,
}

impl<F: Fields> Render for Rendering<F> {
    fn message(
        &self,
        protocol: WebSocketProtocols,
        quoted_id: &str,
        id: i64,
        value: i64,
    ) -> Utf8Bytes {
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
            Some((p, q, message)) if *p == protocol && **q == *quoted_id => message.clone(),
            _ => {
                let text = protocol::next_with(protocol, quoted_id, last.payload.len(), |out| {
                    out.push_str(&last.payload)
                });
                let message = Utf8Bytes::from(text);
                last.message = Some((protocol, quoted_id.into(), message.clone()));
                message
            }
        }
    }
}

/// The renderings of the templates some subscriber holds, one for equal templates.
#[derive(Default)]
pub struct Renderings {
    /// By the fields' type and the template as written by `Debug` (its whole content); each
    /// lives as long as a subscriber holds it.
    interned: Mutex<WeakMap<(TypeId, String), dyn Render>>,
}

impl Renderings {
    /// The rendering of `template`, shared with every subscriber holding an equal one.
    pub fn of<F: Fields>(&self, template: Template<F>) -> Arc<dyn Render> {
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

    const GRAPHQL_WS: WebSocketProtocols = WebSocketProtocols::GraphQLWS;

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
        for (protocol, id, value, kind) in [
            (GRAPHQL_WS, "\"1\"", 3, "next"),
            (GRAPHQL_WS, "\"1\"", 3, "next"),
            (GRAPHQL_WS, "\"2\"", 3, "next"),
            (
                WebSocketProtocols::SubscriptionsTransportWS,
                "\"2\"",
                3,
                "data",
            ),
            (GRAPHQL_WS, "\"1\"", 4, "next"),
        ] {
            let message = rendering.message(protocol, id, 7, value);
            let expected = format!(
                r#"{{"type":"{kind}","id":{id},"payload":{}}}"#,
                payload(value)
            );
            assert_eq!(message.as_str(), expected);
        }
    }
}
