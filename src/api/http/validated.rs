//! Validation once per kind of request, not once per request.
//!
//! async-graphql checks every request's document against the schema before running it:
//! twenty-two rules over the document, then a second pass for depth, complexity and cache
//! control. That was 5 to 7 % of a like's CPU and of a page's, spent finding again what the
//! last request with the same document found, since clients send the same few operations
//! with other ids. What the rules find depends only on the document, the operation chosen
//! and the variables' values. So each parsed document (cached by its text in admission, or
//! trusted) remembers the operations and the variables' [`signature`]s that passed, and a
//! request matching one runs on a second build of the schema with `ValidationMode::Fast`.
//! That one still refuses fragment cycles and still measures depth, complexity and cache
//! control on the request's own variables, so the limits hold for every request.
//!
//! A signature keeps each variable's value, except where the variable is of a built-in
//! scalar and its value of a kind that scalar takes: then only the kind is kept. Validation
//! lets a variable stand only where its own type is expected, and checks a built-in scalar's
//! value by its kind alone: `String` takes any string, `ID` any string or integer, `Boolean`
//! any boolean, `Float` any number, and `Int` any number that is an integer (async-graphql
//! registers one of its integer types as `Int`, which takes either every `i64` or every
//! `u64`: the kind notes both, so the verdict is the same whichever). An integer's range,
//! like a page size's, is checked when the argument is read, on both schemas alike. A like's
//! signature is then one letter whatever remark it names, and a leaderboard page's the same
//! whatever its offset. Other values (enums, lists, input objects, scalars of the schema's
//! own) are kept whole: their validity depends on what they hold.
//!
//! Bounded: signatures longer than [`MAX_SIGNATURE_BYTES`] are not remembered, and a
//! document remembers at most [`MAX_PER_DOCUMENT`]; the parse cache bounds the documents.
//! The cost is the second schema's registry in memory.

use std::sync::{Arc, Mutex};

use async_graphql::{
    parser::types::{BaseType, DocumentOperations, ExecutableDocument},
    ValidationMode, Value, Variables,
};

use super::document::Parsed;
use crate::{
    api::schema::{self, AppSchema},
    features::Features,
    infra::{config::Config, Infra},
};

/// Longest signature remembered: a few variables of a few small values.
const MAX_SIGNATURE_BYTES: usize = 128;

/// Signatures one document remembers: a client asks a page with a few sizes.
const MAX_PER_DOCUMENT: usize = 16;

/// The schema built twice: strict for a request not seen to pass, fast for one that has.
#[derive(Clone)]
pub(crate) struct Schemas {
    strict: AppSchema,
    fast: AppSchema,
}

impl Schemas {
    pub(crate) fn build(config: &Config, infra: &Infra, features: &Features) -> Self {
        // `/metrics` lists every subscription field, once for the instance.
        infra
            .instance
            .open
            .known_fields(schema::subscription_fields());
        let instance = Some((config, infra, features));
        Self {
            strict: schema::build(instance, ValidationMode::Strict),
            fast: schema::build(instance, ValidationMode::Fast),
        }
    }

    /// The schema to run a request on.
    pub(crate) fn for_request(&self, validation: &Validation) -> &AppSchema {
        if validation.known {
            &self.fast
        } else {
            &self.strict
        }
    }
}

/// The [`signature`]s of a document's requests that passed validation.
#[derive(Default)]
pub(crate) struct Passed(Mutex<Vec<Box<str>>>);

impl Passed {
    fn contains(&self, key: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .any(|passed| &**passed == key)
    }

    fn insert(&self, key: Box<str>) {
        let mut passed = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if passed.len() < MAX_PER_DOCUMENT && !passed.contains(&key) {
            passed.push(key);
        }
    }
}

/// What a request's validation is known to find, and where to remember that it passed.
pub(crate) struct Validation {
    parsed: Arc<Parsed>,
    /// None when the request's signature is too long to remember.
    key: Option<Box<str>>,
    /// Whether a request of the same signature passed before.
    known: bool,
}

impl Validation {
    pub(crate) fn of(
        parsed: Arc<Parsed>,
        operation_name: Option<&str>,
        variables: &Variables,
    ) -> Self {
        let key =
            signature(&parsed.document, operation_name, variables).map(String::into_boxed_str);
        let known = key
            .as_deref()
            .is_some_and(|key| parsed.passed.contains(key));
        Self { parsed, key, known }
    }

    /// Called once the request has run without a request error: it passed validation.
    pub(crate) fn passed(self) {
        if let (false, Some(key)) = (self.known, self.key) {
            self.parsed.passed.insert(key);
        }
    }
}

/// The operation a request runs and its variables, as far as validation can tell them apart
/// (see the module doc): the operation's name (if the request gives one) and a tab, then
/// one entry per variable definition, each ended by a newline: `-` absent,
/// `0` null, a [`kind`] of a built-in scalar's value, else `=` and the value's JSON (which
/// holds no raw newline). None for an operation the request does not select unambiguously
/// (validation refuses it anyway) or a signature past [`MAX_SIGNATURE_BYTES`].
fn signature(
    document: &ExecutableDocument,
    operation_name: Option<&str>,
    variables: &Variables,
) -> Option<String> {
    let operation = match (&document.operations, operation_name) {
        (DocumentOperations::Single(operation), None) => operation,
        (DocumentOperations::Multiple(operations), Some(name)) => operations.get(name)?,
        (DocumentOperations::Multiple(operations), None) if operations.len() == 1 => {
            operations.values().next()?
        }
        _ => return None,
    };
    let mut signature = String::with_capacity(32);
    signature.push_str(operation_name.unwrap_or_default());
    signature.push('\t');
    for definition in &operation.node.variable_definitions {
        let definition = &definition.node;
        let scalar = match &definition.var_type.node.base {
            BaseType::Named(name) => name.as_str(),
            BaseType::List(_) => "",
        };
        match variables.get(&definition.name.node) {
            None => signature.push('-'),
            Some(Value::Null) => signature.push('0'),
            Some(value) => match kind(scalar, value) {
                Some(kind) => signature.push_str(kind),
                None => {
                    signature.push('=');
                    signature.push_str(&serde_json::to_string(value).ok()?);
                }
            },
        }
        signature.push('\n');
        if signature.len() > MAX_SIGNATURE_BYTES {
            return None;
        }
    }
    Some(signature)
}

/// The kind of a built-in scalar's value that the scalar takes, as validation tells them
/// apart; None for any other value.
fn kind(scalar: &str, value: &Value) -> Option<&'static str> {
    let integer = |number: &async_graphql::Number| match (number.is_i64(), number.is_u64()) {
        (true, true) => Some("i"),
        (true, false) => Some("i-"),
        (false, true) => Some("i+"),
        (false, false) => None,
    };
    match (scalar, value) {
        ("String" | "ID", Value::String(_)) => Some("s"),
        ("ID" | "Int", Value::Number(number)) => integer(number),
        ("Float", Value::Number(_)) => Some("f"),
        ("Boolean", Value::Boolean(_)) => Some("b"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signature_of(
        query: &str,
        operation: Option<&str>,
        variables: serde_json::Value,
    ) -> Option<String> {
        let document = async_graphql::parser::parse_query(query).unwrap();
        signature(&document, operation, &Variables::from_json(variables))
    }

    #[test]
    fn values_of_one_kind_for_a_built_in_scalar_are_one_signature_and_others_are_kept() {
        let query = "query Q($id: ID!, $after: String, $first: Int, $at: Float, $mine: Boolean, \
                     $order: Order, $ids: [ID!]) { a }";
        let of = |variables| signature_of(query, None, variables);
        let one = of(serde_json::json!({
            "id": "UmVtYXJrOjE=", "after": "abc", "first": 20, "at": 1.5, "mine": true,
            "order": "NEW", "ids": ["a"],
        }));
        let other = of(serde_json::json!({
            "id": "UmVtYXJrOjI=", "after": "xyz", "first": 999_999, "at": 7, "mine": false,
            "order": "NEW", "ids": ["a"],
        }));
        assert_eq!(one, other);
        assert_eq!(
            one.as_deref(),
            Some("\ts\ns\ni\nf\nb\n=\"NEW\"\n=[\"a\"]\n")
        );
        // Another kind, a negative or a fractional number, a null, an absent variable,
        // another enum value or list: each tells apart.
        let base = serde_json::json!({
            "id": "x", "after": "abc", "first": 20, "at": 1.5, "mine": true,
            "order": "NEW", "ids": ["a"],
        });
        for (name, value) in [
            ("id", serde_json::json!(1)),
            ("first", serde_json::json!(-20)),
            ("first", serde_json::json!(2.5)),
            ("first", serde_json::json!("20")),
            ("after", serde_json::json!(null)),
            ("mine", serde_json::json!("true")),
            ("order", serde_json::json!("OLD")),
            ("ids", serde_json::json!(["b"])),
        ] {
            let mut variables = base.clone();
            variables[name] = value;
            assert_ne!(of(variables.clone()), one, "{variables}");
        }
        let mut absent = base.clone();
        absent.as_object_mut().unwrap().remove("after");
        assert_ne!(of(absent), one);
    }

    #[test]
    fn a_signature_is_known_once_a_request_of_it_passed() {
        let parsed = std::sync::Arc::new(
            super::super::document::parse("query Q($id: ID!) { a(id: $id) }").unwrap(),
        );
        let of = |id: serde_json::Value| {
            let variables = Variables::from_json(serde_json::json!({ "id": id }));
            Validation::of(parsed.clone(), Some("Q"), &variables)
        };
        assert!(!of("one".into()).known);
        of("one".into()).passed();
        assert!(of("two".into()).known);
        assert!(!of(2.into()).known);
        assert!(!of(serde_json::json!({ "an": "object" })).known);
        // Another operation name is another key.
        let variables = Variables::from_json(serde_json::json!({ "id": "one" }));
        assert!(!Validation::of(parsed.clone(), None, &variables).known);
        // A document remembers a bounded number of signatures.
        for n in 0..2 * MAX_PER_DOCUMENT {
            of(serde_json::json!({ "n": n })).passed();
        }
        assert_eq!(parsed.passed.0.lock().unwrap().len(), MAX_PER_DOCUMENT);
    }

    #[test]
    fn an_operation_not_selected_unambiguously_or_too_long_a_signature_is_not_remembered() {
        let two = "query A { a } query B { b }";
        assert_eq!(signature_of(two, None, serde_json::json!({})), None);
        assert_eq!(signature_of(two, Some("C"), serde_json::json!({})), None);
        assert_eq!(
            signature_of(two, Some("B"), serde_json::json!({})).as_deref(),
            Some("B\t")
        );
        let long = "x".repeat(MAX_SIGNATURE_BYTES);
        assert_eq!(
            signature_of(
                "query($n: Int) { a }",
                None,
                serde_json::json!({ "n": long })
            ),
            None
        );
    }
}
