//! GraphQL documents: the one [`parse`] that every transport goes through (POST, GET,
//! persisted queries and both WebSocket protocols), and what admission reads from a parsed
//! document before anything runs.
//!
//! async-graphql's parser, its converter to the AST and its validation all recurse once per
//! level of nesting; a document nested thousands of levels deep overflows the thread's stack,
//! and a stack overflow aborts the process (no panic handler sees it). Three bounds keep
//! every document far from that:
//!
//! 1. [`nesting_depth`] reads the document with the grammar's own lexical rules (comments end
//!    at CR, LF or CRLF; strings and block strings, including the parser's fallback of an
//!    unterminated `"""` to an empty string) and refuses more than [`MAX_NESTING`] open
//!    brackets of any kind: selection sets, arguments, lists, objects, list types.
//! 2. The parser runs on a stack known to be large enough for the document whatever it holds:
//!    each level costs at most ~2 KiB of stack (measured: 32,000 levels of `[…]` need between
//!    32 and 64 MiB, debug and release alike) and takes at least two bytes of text, so
//!    [`STACK_PER_BYTE`] per byte always suffices. Short documents run on the thread's own
//!    stack; only long ones get a fresh stack (`stacker`), which costs some 30 µs.
//! 3. After parsing, [`OperationShape`]s follow fragment spreads once each (memoised), so
//!    fragment chains and fan-outs cannot make validation or the complexity visitor (which
//!    inline every spread, without memory) recurse deeply or run for exponential time.
//!
//! The first bound is the one clients meet; the second holds even if the first were wrong.
//!
//! Validation costs CPU in proportion to what a document holds, so before it runs a document
//! may hold at most [`MAX_ALIASES`] aliases, [`MAX_SELECTIONS`] selections (as written, and
//! in each operation with its fragments inlined) and [`MAX_VARIABLES`] variable definitions,
//! and each parse carries its [`Parsed::cost`]: what the rate limits charge for it.
//!
//! ## What a document costs
//!
//! `cost = 1 + (selections + variables) / 50 + bytes / 2048`, in requests of the per-IP and
//! per-user rates, where `selections` counts every operation's selections with its
//! fragments inlined plus the selections written in fragments (validation visits both), and
//! `variables` the variable definitions. The operations clients send every second (a
//! `likeRemark`, a page of remarks with its authors and likers) hold a few dozen selections
//! in a few hundred bytes and cost 1; the largest documents admitted (16 KiB, 1,000
//! selections, and as many again in fragments) cost 30 to 50, so one address spends on
//! parsing and validation what as many ordinary requests would, and its allowance runs out
//! as much sooner. Rejected: charging
//! by the time a parse took, which varies with the machine's load (an attacker's documents
//! would cost more exactly when others suffer) and cannot be cached with the parse.

use std::collections::HashMap;

use async_graphql::{
    parser::types::{
        DocumentOperations, ExecutableDocument, OperationType, Selection, SelectionSet,
    },
    Name, Positioned,
};

use super::validated::Passed;
use crate::{
    api::schema::{MAX_NESTING, PUBLIC_READS},
    infra::error::{AppError, AppResult, ErrorCode},
};

/// Selections a document may hold as written, and its operations together once their
/// fragments are inlined: beyond this, validation itself would be the cost. The largest operations of
/// real clients (a home screen, GraphiQL's introspection query at some 200) hold a few
/// hundred.
pub(crate) const MAX_SELECTIONS: usize = 1_000;

/// Aliases a document may hold. Clients alias a field to ask for it twice with other
/// arguments, a handful of times per operation; a request may run 20 aliased mutations.
pub(crate) const MAX_ALIASES: usize = 50;

/// Variable definitions a document may hold (every operation's together); real
/// operations define a few, the largest forms a few dozen.
pub(crate) const MAX_VARIABLES: usize = 50;

/// What a document's selections and variables cost: one request per this many.
const SELECTIONS_PER_COST: usize = 50;

/// What a document's text costs: one request per this many bytes.
const BYTES_PER_COST: usize = 2048;

/// Stack the parser may need per byte of document (see the module doc), and a base for the
/// frames around it.
const STACK_PER_BYTE: usize = 1024;
const STACK_BASE: usize = 256 * 1024;

/// A parsed document with the shape of each of its operations.
pub(crate) struct Parsed {
    pub(crate) document: ExecutableDocument,
    operations: Vec<(Option<Name>, OperationShape)>,
    /// What the document costs against the rates, in requests (see the module doc).
    pub(crate) cost: u32,
    /// The requests of it that passed validation.
    pub(crate) passed: Passed,
}

/// What admission needs to know about the operation a request runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OperationShape {
    pub(crate) ty: OperationType,
    /// Fields at the root once fragments are inlined; for a mutation, each one is a write.
    pub(crate) root_fields: usize,
    /// The name of the first root field (metrics label it by the schema's names).
    pub(crate) first_root_field: Option<Name>,
    /// Every root field is one of the schema's public reads
    /// ([`PUBLIC_READS`]): the same answer for every anonymous viewer.
    pub(crate) public_reads_only: bool,
}

impl Parsed {
    /// The operation a request selects by name (or the only one), as GraphQL defines it;
    /// `None` when the name matches nothing (validation then says so).
    pub(crate) fn operation(&self, name: Option<&str>) -> Option<&OperationShape> {
        match name {
            Some(name) => self
                .operations
                .iter()
                .find(|(op, _)| op.as_deref() == Some(name))
                .map(|(_, shape)| shape),
            None if self.operations.len() == 1 => Some(&self.operations[0].1),
            None => None,
        }
    }
}

/// Parses a document, refusing it with `GRAPHQL_PARSE_FAILED` when it nests too deep or
/// does not parse, and with `GRAPHQL_VALIDATION_FAILED` when its fragments form a cycle or
/// inline to too deep or too large a selection.
pub(crate) fn parse(query: &str) -> AppResult<Parsed> {
    let parse_failed = |message: String| AppError::client(ErrorCode::GraphqlParseFailed, message);
    if nesting_depth(query) > MAX_NESTING {
        return Err(parse_failed(format!(
            "the document nests deeper than {MAX_NESTING} levels"
        )));
    }
    let stack = STACK_BASE.saturating_add(query.len().saturating_mul(STACK_PER_BYTE));
    let document = stacker::maybe_grow(stack, stack, || async_graphql::parser::parse_query(query))
        .map_err(|error| parse_failed(short(&error.to_string())))?;
    let written = Written::count(&document)?;
    let (operations, inlined) = shapes(&document)?;
    let work = inlined
        .saturating_add(written.in_fragments)
        .saturating_add(written.variables);
    let cost = 1 + work / SELECTIONS_PER_COST + query.len() / BYTES_PER_COST;
    Ok(Parsed {
        document,
        operations,
        cost: u32::try_from(cost).unwrap_or(u32::MAX),
        passed: Passed::default(),
    })
}

/// What a document holds as written, counted before validation and refused past the caps.
#[derive(Default)]
struct Written {
    selections: usize,
    aliases: usize,
    variables: usize,
    /// Selections written inside fragment definitions.
    in_fragments: usize,
}

impl Written {
    fn count(document: &ExecutableDocument) -> AppResult<Self> {
        let mut written = Self::default();
        let operations: Vec<_> = match &document.operations {
            DocumentOperations::Single(operation) => vec![operation],
            DocumentOperations::Multiple(operations) => operations.values().collect(),
        };
        for operation in operations {
            written.variables += operation.node.variable_definitions.len();
            written.walk(&operation.node.selection_set, 0)?;
        }
        let in_operations = written.selections;
        for fragment in document.fragments.values() {
            written.walk(&fragment.node.selection_set, 0)?;
        }
        written.in_fragments = written.selections - in_operations;
        if written.variables > MAX_VARIABLES {
            return Err(too_complex(&format!(
                "the document defines {} variables, more than {MAX_VARIABLES}",
                written.variables
            )));
        }
        Ok(written)
    }

    /// Counts a selection set, refusing as soon as a cap is passed (`level` is bounded by
    /// the lexical nesting check, this only guards the recursion of its own).
    fn walk(&mut self, set: &Positioned<SelectionSet>, level: usize) -> AppResult<()> {
        if level > MAX_NESTING {
            return Err(too_complex(&format!(
                "selections nest deeper than {MAX_NESTING} levels"
            )));
        }
        for selection in &set.node.items {
            self.selections += 1;
            if self.selections > MAX_SELECTIONS {
                return Err(too_complex(&format!(
                    "the document holds more than {MAX_SELECTIONS} selections"
                )));
            }
            match &selection.node {
                Selection::Field(field) => {
                    if field.node.alias.is_some() {
                        self.aliases += 1;
                        if self.aliases > MAX_ALIASES {
                            return Err(too_complex(&format!(
                                "the document holds more than {MAX_ALIASES} aliases"
                            )));
                        }
                    }
                    self.walk(&field.node.selection_set, level + 1)?;
                }
                Selection::InlineFragment(inline) => {
                    self.walk(&inline.node.selection_set, level + 1)?
                }
                Selection::FragmentSpread(_) => {}
            }
        }
        Ok(())
    }
}

/// Parser messages quote the offending line, which may be the whole 64 KiB document.
fn short(message: &str) -> String {
    const MAX: usize = 300;
    if message.len() <= MAX {
        return message.to_string();
    }
    let mut end = MAX;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

/// The deepest nesting of `{`, `(` and `[` outside strings and comments, read with the
/// lexical rules of async-graphql's grammar (`graphql.pest`).
///
/// Exact for documents that parse. Past a malformed string the parser fails, so what this
/// counts after it cannot reach the parser's recursion; it only ever counts more, never less.
pub(crate) fn nesting_depth(query: &str) -> usize {
    let bytes = query.as_bytes();
    let (mut depth, mut deepest, mut i) = (0usize, 0usize, 0usize);
    while i < bytes.len() {
        match bytes[i] {
            // A comment runs to a line terminator: LF, CR, or CRLF (which begins with CR).
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' && bytes[i] != b'\r' {
                    i += 1;
                }
                continue;
            }
            b'"' => {
                i = after_string(bytes, i);
                continue;
            }
            b'{' | b'(' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b')' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    deepest
}

/// The index just after the string that opens at `start` (a `"`).
fn after_string(bytes: &[u8], start: usize) -> usize {
    if bytes[start..].starts_with(b"\"\"\"") {
        let mut i = start + 3;
        while i < bytes.len() {
            if bytes[i..].starts_with(b"\\\"\"\"") {
                i += 4;
            } else if bytes[i..].starts_with(b"\"\"\"") {
                return i + 3;
            } else {
                i += 1;
            }
        }
        // An unterminated block string fails, and the grammar's other choice reads `""` as
        // an empty string, with a new string opening at the third quote.
        return start + 2;
    }
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => return i + 1,
            b'\\' => i += 2,
            // A line terminator ends the string as invalid: the parse fails here.
            b'\n' | b'\r' => return i,
            _ => i += 1,
        }
    }
    i
}

/// Depth and size of a selection set with its fragments inlined.
#[derive(Clone, Copy)]
struct Extent {
    /// Nesting as async-graphql's recursion check counts it: one per selection set, spread
    /// and inline fragment.
    depth: usize,
    selections: usize,
}

/// Walks the document once, following each fragment once.
struct Inliner<'a> {
    document: &'a ExecutableDocument,
    extents: HashMap<&'a str, Extent>,
    visiting: Vec<&'a str>,
}

/// Each operation's shape, and the selections of all of them with their fragments inlined.
type Shapes = (Vec<(Option<Name>, OperationShape)>, usize);

fn shapes(document: &ExecutableDocument) -> AppResult<Shapes> {
    let mut inliner = Inliner {
        document,
        extents: HashMap::new(),
        visiting: Vec::new(),
    };
    let mut shapes = Vec::new();
    let mut inlined = 0usize;
    let operations: Vec<_> = match &document.operations {
        DocumentOperations::Single(operation) => vec![(None, operation)],
        DocumentOperations::Multiple(operations) => operations
            .iter()
            .map(|(name, operation)| (Some(name.clone()), operation))
            .collect(),
    };
    for (name, operation) in operations {
        let set = &operation.node.selection_set;
        inlined = inlined.saturating_add(inliner.extent(set, 0)?.selections);
        if inlined > MAX_SELECTIONS {
            return Err(too_complex(&format!(
                "the operations hold more than {MAX_SELECTIONS} selections once fragments are \
                 inlined"
            )));
        }
        let mut roots = Roots {
            count: 0,
            first: None,
            public_reads_only: true,
        };
        inliner.root_fields(set, &mut roots, 0)?;
        shapes.push((
            name,
            OperationShape {
                ty: operation.node.ty,
                root_fields: roots.count,
                first_root_field: roots.first,
                public_reads_only: roots.public_reads_only,
            },
        ));
    }
    for fragment in document.fragments.keys() {
        inliner.fragment(fragment.as_str(), 0)?;
    }
    Ok((shapes, inlined))
}

fn too_complex(message: &str) -> AppError {
    AppError::client(ErrorCode::GraphqlValidationFailed, message)
}

impl<'a> Inliner<'a> {
    /// `level` is the nesting above `set`; it bounds this walk's own recursion.
    fn extent(&mut self, set: &'a Positioned<SelectionSet>, level: usize) -> AppResult<Extent> {
        if level > MAX_NESTING {
            return Err(too_complex(&format!(
                "selections nest deeper than {MAX_NESTING} levels once fragments are inlined"
            )));
        }
        let mut extent = Extent {
            depth: 0,
            selections: 0,
        };
        for selection in &set.node.items {
            let inner = match &selection.node {
                Selection::Field(field) if field.node.selection_set.node.items.is_empty() => {
                    Extent {
                        depth: 0,
                        selections: 0,
                    }
                }
                Selection::Field(field) => self.extent(&field.node.selection_set, level + 1)?,
                Selection::InlineFragment(inline) => {
                    self.extent(&inline.node.selection_set, level + 1)?
                }
                Selection::FragmentSpread(spread) => {
                    self.fragment(spread.node.fragment_name.node.as_str(), level + 1)?
                }
            };
            extent.depth = extent.depth.max(inner.depth + 1);
            extent.selections = extent.selections.saturating_add(inner.selections + 1);
        }
        if level + extent.depth > MAX_NESTING {
            return Err(too_complex(&format!(
                "selections nest deeper than {MAX_NESTING} levels once fragments are inlined"
            )));
        }
        if extent.selections > MAX_SELECTIONS {
            return Err(too_complex(&format!(
                "the operation holds more than {MAX_SELECTIONS} selections once fragments \
                 are inlined"
            )));
        }
        Ok(extent)
    }

    fn fragment(&mut self, name: &'a str, level: usize) -> AppResult<Extent> {
        if let Some(extent) = self.extents.get(name) {
            return Ok(*extent);
        }
        // Unknown fragments are left to validation, which names them.
        let Some(fragment) = self.document.fragments.get(name) else {
            return Ok(Extent {
                depth: 0,
                selections: 0,
            });
        };
        if self.visiting.contains(&name) {
            return Err(too_complex(&format!("fragment \"{name}\" spreads itself")));
        }
        self.visiting.push(name);
        let extent = self.extent(&fragment.node.selection_set, level);
        self.visiting.pop();
        let extent = extent?;
        self.extents.insert(name, extent);
        Ok(extent)
    }

    /// Counts the fields at the root of an operation, looking through fragments (already
    /// known to be acyclic and shallow).
    fn root_fields(
        &self,
        set: &'a Positioned<SelectionSet>,
        roots: &mut Roots,
        level: usize,
    ) -> AppResult<()> {
        if level > MAX_NESTING {
            return Err(too_complex("fragments nest too deep at the root"));
        }
        for selection in &set.node.items {
            match &selection.node {
                Selection::Field(field) => {
                    let name = &field.node.name.node;
                    roots.count += 1;
                    roots.first.get_or_insert_with(|| name.clone());
                    roots.public_reads_only &= PUBLIC_READS.contains(&name.as_str());
                }
                Selection::InlineFragment(inline) => {
                    self.root_fields(&inline.node.selection_set, roots, level + 1)?
                }
                Selection::FragmentSpread(spread) => {
                    if let Some(fragment) =
                        self.document.fragments.get(&spread.node.fragment_name.node)
                    {
                        self.root_fields(&fragment.node.selection_set, roots, level + 1)?
                    }
                }
            }
        }
        Ok(())
    }
}

/// What an operation's root holds, once fragments are inlined.
struct Roots {
    count: usize,
    first: Option<Name>,
    public_reads_only: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_ignores_strings_and_comments_read_as_the_grammar_reads_them() {
        assert_eq!(nesting_depth("{ a { b } }"), 2);
        assert_eq!(nesting_depth("{ a(x: \"{{{{\") } # {{{{"), 2);
        assert_eq!(nesting_depth("{ a(x: \"\"\"{{{ \\\"\"\" {\"\"\") }"), 2);
        assert_eq!(nesting_depth(&"{".repeat(10_000)), 10_000);
        // Comments end at CR, LF and CRLF alike.
        assert_eq!(nesting_depth("#\r[[[["), 4);
        assert_eq!(nesting_depth("#\n[[[["), 4);
        assert_eq!(nesting_depth("#\r\n[[[["), 4);
        // A string cannot span lines: what follows the line end is read as code.
        assert_eq!(nesting_depth("\"abc\r[[["), 3);
        // An unterminated block string is read as `""` and a new string.
        assert_eq!(nesting_depth("[\"\"\" \" [[[[ ]]]]"), 5);
        // A string's closing quotes inside it hide nothing.
        assert_eq!(nesting_depth("[[[[ \"]]]]\" [[[["), 8);
    }

    #[test]
    fn documents_nested_past_the_bound_are_refused_before_parsing() {
        for document in [
            format!(
                "#\r{{__typename(a:{}1{})}}",
                "[".repeat(2000),
                "]".repeat(2000)
            ),
            format!("{{a(x:{}1{})}}", "{a:".repeat(5000), "}".repeat(5000)),
            format!("query($v:{}Int{}){{a}}", "[".repeat(5000), "]".repeat(5000)),
            format!("{}a{}", "{a".repeat(5000), "}".repeat(5000)),
        ] {
            let error = parse(&document).err().expect("refused");
            assert_eq!(error.code(), ErrorCode::GraphqlParseFailed);
        }
    }

    #[test]
    fn the_parser_survives_deep_documents_even_without_the_lexical_bound() {
        // What the known stack guards: a document that reached the parser unchecked.
        let depth = 20_000;
        let document = format!("{{a(x:{}1{})}}", "[".repeat(depth), "]".repeat(depth));
        let stack = STACK_BASE + document.len() * STACK_PER_BYTE;
        // Dropping the AST recurses as deep as it nests, so it is dropped there too.
        let parsed = stacker::maybe_grow(stack, stack, || {
            async_graphql::parser::parse_query(&document).map(drop)
        });
        assert!(parsed.is_ok(), "{parsed:?}");
    }

    #[test]
    fn ordinary_operations_cost_one_and_large_documents_more() {
        let like = "mutation Like($id: ID!) { likeRemark(remarkId: $id) { remarkId likeCount \
                    liked changed } }";
        let page = include_str!("../../../playground/operations/06_remarks.graphql");
        for document in [like, page, "{ __typename }"] {
            assert_eq!(parse(document).unwrap().cost, 1, "{document}");
        }
        let wide = format!("{{ {} }}", "__typename ".repeat(MAX_SELECTIONS));
        let cost = parse(&wide).unwrap().cost;
        assert!((20..=40).contains(&cost), "{cost}");
    }

    #[test]
    fn aliases_selections_and_variables_past_their_caps_are_refused() {
        let aliases = format!(
            "{{ {} }}",
            (0..=MAX_ALIASES)
                .map(|i| format!("a{i}: __typename"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        let selections = format!("{{ {} }}", "__typename ".repeat(MAX_SELECTIONS + 1));
        let in_fragments = format!(
            "{{ __typename }} fragment F on Query {{ {} }}",
            "__typename ".repeat(MAX_SELECTIONS)
        );
        let variables = format!(
            "query({}) {{ __typename }}",
            (0..=MAX_VARIABLES)
                .map(|i| format!("$v{i}: Int"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        for document in [aliases, selections, in_fragments, variables] {
            let error = parse(&document).err().expect("refused");
            assert_eq!(error.code(), ErrorCode::GraphqlValidationFailed);
        }
    }

    #[test]
    fn root_fields_count_through_fragments_and_aliases() {
        let parsed = parse(
            "mutation M { a: likeRemark(remarkId: \"1\") { changed } ...More } \
             fragment More on Mutation { b: likeRemark(remarkId: \"2\") { changed } \
             ... on Mutation { c: signIn { streak } } }",
        )
        .unwrap();
        let shape = parsed.operation(Some("M")).unwrap();
        assert_eq!(shape.ty, OperationType::Mutation);
        assert_eq!(shape.root_fields, 3);
        assert_eq!(shape.first_root_field.as_deref(), Some("likeRemark"));
        assert!(parsed.operation(Some("N")).is_none());
    }
}
