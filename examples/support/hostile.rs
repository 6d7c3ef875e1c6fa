//! Hostile GraphQL documents, shared by the tests of `tests/api/hostile.rs` and the abuse
//! run of `examples/abuse.rs` (both include this file with `#[path]`).

/// Nesting in every shape the parser recurses on, `depth` levels deep, each behind a comment
/// ended by CR, LF or CRLF, and once in a document whose only line ends are CRs.
pub fn nesting_bombs(depth: usize) -> Vec<(String, String)> {
    let open = |s: &str| s.repeat(depth);
    let shapes = [
        (
            "list value",
            format!("{{ __typename(a: {}1{}) }}", open("["), open("]")),
        ),
        (
            "object value",
            format!("{{ __typename(a: {}1{}) }}", open("{a:"), open("}")),
        ),
        (
            "variable type",
            format!("query($v: {}Int{}) {{ __typename }}", open("["), open("]")),
        ),
        (
            "default value",
            format!(
                "query($v: Int = {}1{}) {{ __typename }}",
                open("["),
                open("]")
            ),
        ),
        (
            "directive argument",
            format!(
                "{{ __typename @include(if: {}true{}) }}",
                open("["),
                open("]")
            ),
        ),
        (
            "inline fragment",
            format!("{{ {}__typename{} }}", open("... on Query { "), open("}")),
        ),
        (
            "selection set",
            format!("{{ {}__typename{} }}", open("a { "), open("}")),
        ),
        ("unclosed list", format!("{{ __typename(a: {}", open("["))),
    ];
    let mut bombs = Vec::new();
    for (shape, document) in shapes {
        for (ending, comment) in [("CR", "#\r"), ("LF", "#\n"), ("CRLF", "#\r\n")] {
            bombs.push((
                format!("{shape} after a comment ended by {ending}"),
                format!("{comment}{document}"),
            ));
        }
        bombs.push((
            format!("{shape} in a CR-only document"),
            format!("# a comment\r{}\r", document.replace(' ', "\r")),
        ));
    }
    bombs
}

/// Fragments that inline to 2^40 selections, a chain of `chain` spreads, and a cycle.
pub fn fragment_bombs(chain: usize) -> Vec<(&'static str, String)> {
    let mut fan_out = String::from("{ ...F0 }");
    for i in 0..40 {
        fan_out.push_str(&format!(
            " fragment F{i} on Query {{ ...F{} ...F{} }}",
            i + 1,
            i + 1
        ));
    }
    fan_out.push_str(" fragment F40 on Query { __typename }");
    let mut spreads = String::from("{ ...F0 }");
    for i in 0..chain {
        spreads.push_str(&format!(" fragment F{i} on Query {{ ...F{} }}", i + 1));
    }
    spreads.push_str(&format!(" fragment F{chain} on Query {{ __typename }}"));
    let cycle = "{ ...A } fragment A on Query { ...B } fragment B on Query { ...A }".to_string();
    vec![("fan-out", fan_out), ("chain", spreads), ("cycle", cycle)]
}
