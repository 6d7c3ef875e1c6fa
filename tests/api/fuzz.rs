//! Random and mutated GraphQL requests against the real server, over HTTP and both WebSocket
//! protocols: whatever arrives, the answer is never a 5xx, never a dropped connection,
//! always JSON, and every error carries `extensions.code`. Nesting of every shape the parser
//! recurses on, behind comments ended by CR, LF or CRLF, is generated on purpose. Deterministic from a seed (`ENGAGE_FUZZ_SEED`, printed on failure);
//! `ENGAGE_FUZZ_CASES` raises the count for a long run (default 3,000).

use futures::{SinkExt, StreamExt};
use reqwest::Method;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use crate::{
    harness::{percent_encode, TestApp},
    via::{self, Via},
};

/// SplitMix64: a few lines instead of a crate, and the same sequence on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

/// One request as sent on the wire.
struct Case {
    transport: Transport,
    method: Method,
    path_and_query: String,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    with_token: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Http,
    /// The body becomes a `subscribe` (or legacy `start`) message's payload.
    WebSocket(Via),
}

/// Raw JSON fragments for values: numbers past every integer and float range, odd strings.
const HOSTILE_JSON_VALUES: &[&str] = &[
    "1e309",
    "-1e309",
    "-0",
    "9223372036854775808",
    "18446744073709551616",
    "-9223372036854775809",
    "0.0000000000000000000000001",
    "123456789012345678901234567890",
    "null",
    "true",
    "[]",
    "{}",
    "[[[[[[[[[[1]]]]]]]]]]",
    r#""\u0000""#,
    r#""\ud800""#,
    r#""\udc00\ud800""#,
    r#""\u202e\u202dRTL""#,
    r#""😀👍🏽""#,
    r#""1; DROP TABLE remarks; --""#,
    r#""{tag}*:\n KEYS[1] redis.call('FLUSHALL')""#,
    r#""-1""#,
    r#""0""#,
    r#""99999999999999999999999""#,
    r#""2026-02-30""#,
    r#""9999-99""#,
    r#""NaN""#,
    r#""Infinity""#,
    r#""""#,
];

/// Tokens spliced into documents.
const HOSTILE_TOKENS: &[&str] = &[
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    ":",
    "$",
    "...",
    "@include(if: true)",
    "@skip(if: $x)",
    "@deprecated",
    "@unknown",
    "1e309",
    "-0",
    "18446744073709551616",
    "\"\\u0000\"",
    "\"\\ud800\"",
    "\"\"\"block\"\"\"",
    "\u{0}",
    "\u{202e}",
    "😀",
    "#",
    "__typename",
    "__schema { types { name } }",
    "fragment",
    "on",
    "query",
    "mutation",
    "subscription",
    "null",
    "true",
    "ID!",
    "[String!]!",
];

const CONTENT_TYPES: &[&str] = &[
    "application/json",
    "application/graphql",
    "application/graphql-response+json",
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data",
    "application/json; charset=latin1",
    "",
];

struct Corpus {
    operations: Vec<String>,
    words: Vec<String>,
}

impl Corpus {
    fn load() -> Self {
        let root = env!("CARGO_MANIFEST_DIR");
        let mut operations = Vec::new();
        let mut files: Vec<_> = std::fs::read_dir(format!("{root}/playground/operations"))
            .expect("playground operations")
            .map(|entry| entry.unwrap().path())
            .collect();
        files.sort();
        for path in files {
            let text = std::fs::read_to_string(path).unwrap();
            // One document per file, and each operation of it on its own as well.
            operations.push(text.clone());
            for chunk in text.split("\n\n") {
                if chunk.contains('{') {
                    operations.push(chunk.to_string());
                }
            }
        }
        let schema = std::fs::read_to_string(format!("{root}/schema.graphql")).unwrap();
        let mut words: Vec<String> = schema
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .map(str::to_string)
            .collect();
        words.sort();
        words.dedup();
        Self { operations, words }
    }
}

fn tokens(document: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    for c in document.chars() {
        if c.is_alphanumeric() || c == '_' || c == '"' || c == '$' || c == '-' || c == '.' {
            word.push(c);
        } else {
            if !word.is_empty() {
                tokens.push(std::mem::take(&mut word));
            }
            if !c.is_whitespace() {
                tokens.push(c.to_string());
            }
        }
    }
    if !word.is_empty() {
        tokens.push(word);
    }
    tokens
}

fn mutate_document(rng: &mut Rng, corpus: &Corpus) -> String {
    let document = rng.pick(&corpus.operations).clone();
    let mut tokens = tokens(&document);
    for _ in 0..=rng.below(4) {
        if tokens.is_empty() {
            break;
        }
        let at = rng.below(tokens.len());
        match rng.below(6) {
            0 => {
                tokens.remove(at);
            }
            1 => {
                let token = tokens[at].clone();
                tokens.insert(at, token);
            }
            2 => {
                let other = rng.below(tokens.len());
                tokens.swap(at, other);
            }
            3 => tokens.insert(at, rng.pick(HOSTILE_TOKENS).to_string()),
            4 => tokens.insert(at, rng.pick(&corpus.words).clone()),
            _ => tokens[at] = rng.pick(HOSTILE_JSON_VALUES).to_string(),
        }
    }
    tokens.join(" ")
}

/// Nesting in one of the shapes the parser recurses on, up to thousands of levels, with
/// comments and line ends of every kind, sometimes left unclosed.
fn nesting_document(rng: &mut Rng) -> String {
    let depth = if rng.chance(3) {
        1 + rng.below(80)
    } else {
        1 + rng.below(5_000)
    };
    let (open, inner, close, frame): (&str, &str, &str, fn(String) -> String) = match rng.below(8) {
        0 => ("[", "1", "]", |n| format!("{{ __typename(a: {n}) }}")),
        1 => ("{a:", "1", "}", |n| format!("{{ __typename(a: {n}) }}")),
        2 => ("[", "Int", "]", |n| {
            format!("query($v: {n}) {{ __typename }}")
        }),
        3 => ("[", "1", "]", |n| {
            format!("query($v: Int = {n}) {{ __typename }}")
        }),
        4 => ("[", "true", "]", |n| {
            format!("{{ __typename @include(if: {n}) }}")
        }),
        5 => ("... on Query { ", "__typename", " }", |n| {
            format!("{{ {n} }}")
        }),
        6 => ("viewer { ", "id", " }", |n| format!("{{ {n} }}")),
        _ => ("(a: ", "1", ")", |n| format!("{{ __typename{n} }}")),
    };
    let closing = if rng.chance(5) { 0 } else { depth };
    let nested = open.repeat(depth) + inner + &close.repeat(closing);
    let line_end = *rng.pick(&["\r", "\n", "\r\n"]);
    let comment = format!("# {}{line_end}", rng.pick(&["", "{[(", "\"\"\"", "#"]));
    let mut document = format!("{comment}{}{line_end}", frame(nested));
    if rng.chance(3) {
        // A document whose only line ends are CRs.
        document = document.replace(['\n', ' '], "\r");
    }
    document
}

fn structural_document(rng: &mut Rng, corpus: &Corpus) -> String {
    let field = rng.pick(&corpus.words).clone();
    if rng.chance(2) {
        return nesting_document(rng);
    }
    match rng.below(9) {
        0 => {
            let depth = 1 + rng.below(5_000);
            format!(
                "{{{}}}",
                "viewer {".repeat(depth) + "id" + &"}".repeat(depth)
            )
        }
        1 => {
            let aliases: String = (0..1000)
                .map(|i| format!("a{i}: {field} "))
                .collect::<String>();
            format!("{{ {aliases} }}")
        }
        2 => "query { ...A } fragment A on Query { ...B } fragment B on Query { ...A }".into(),
        3 => "query { ...Self } fragment Self on Query { viewer { id } ...Self }".into(),
        4 => format!(
            "{{ __typename {} }}",
            "@include(if: true) ".repeat(1 + rng.below(500))
        ),
        5 => {
            let size = if rng.chance(2) { 60_000 } else { 1 << 20 };
            format!("{{ item(id: \"{}\") {{ id }} }}", "x".repeat(size))
        }
        6 => format!(
            "query Q($a: {field}!, $b: [[{field}]]) {{ {field}(a: $a, b: $b) {{ __typename }} }}"
        ),
        7 => format!(
            "{{ leaderboard(first: {}, offset: {}) {{ total }} }}",
            rng.pick(HOSTILE_JSON_VALUES),
            rng.pick(HOSTILE_JSON_VALUES)
        ),
        _ => {
            let fields = (0..1 + rng.below(50))
                .map(|_| rng.pick(&corpus.words).clone())
                .collect::<Vec<_>>()
                .join(" { ");
            format!("{{ {fields} }}")
        }
    }
}

fn random_variables(rng: &mut Rng, corpus: &Corpus) -> String {
    let names = [
        "itemId",
        "voucherId",
        "orderId",
        "remarkId",
        "id",
        "first",
        "x",
        "input",
    ];
    let entries: Vec<String> = (0..rng.below(4))
        .map(|_| {
            let value = if rng.chance(4) {
                format!("\"{}\"", rng.pick(&corpus.words))
            } else {
                rng.pick(HOSTILE_JSON_VALUES).to_string()
            };
            format!("\"{}\": {value}", rng.pick(&names))
        })
        .collect();
    match rng.below(8) {
        0 => rng.pick(HOSTILE_JSON_VALUES).to_string(), // variables that are not an object
        _ => format!("{{{}}}", entries.join(",")),
    }
}

fn request_body(rng: &mut Rng, document: &str, corpus: &Corpus) -> String {
    let query = serde_json::to_string(document).unwrap();
    let variables = random_variables(rng, corpus);
    let operation_name = match rng.below(4) {
        0 => "\"Missing\"".to_string(),
        1 => rng.pick(HOSTILE_JSON_VALUES).to_string(),
        _ => "null".to_string(),
    };
    let body = format!(
        "{{\"query\": {query}, \"variables\": {variables}, \"operationName\": {operation_name}}}"
    );
    match rng.below(12) {
        0 => format!("[{body}, {body}]"),
        // Truncated JSON, possibly inside a multi-byte character.
        1 => String::from_utf8_lossy(&body.as_bytes()[..rng.below(body.len() + 1)]).into_owned(),
        2 => format!("{{\"query\": {}}}", rng.pick(HOSTILE_JSON_VALUES)),
        3 => format!(
            "{{\"extensions\": {{\"persistedQuery\": {{\"version\": {}, \"sha256Hash\": {}}}}}}}",
            rng.pick(HOSTILE_JSON_VALUES),
            rng.pick(HOSTILE_JSON_VALUES)
        ),
        4 => rng.pick(HOSTILE_JSON_VALUES).to_string(),
        _ => body,
    }
}

fn generate(rng: &mut Rng, corpus: &Corpus) -> Case {
    let document = if rng.chance(4) {
        structural_document(rng, corpus)
    } else if rng.chance(5) {
        rng.pick(&corpus.operations).clone()
    } else {
        mutate_document(rng, corpus)
    };
    let with_token = rng.chance(2);
    if rng.chance(6) {
        // Longer URLs cannot even be built by the client; bodies carry the long documents.
        let document: String = document.chars().take(2_000).collect();
        let query = match rng.below(4) {
            0 => format!("query={}", percent_encode(&document)),
            1 => format!(
                "query={}&variables={}&operationName=%00",
                percent_encode(&document),
                percent_encode(&random_variables(rng, corpus))
            ),
            2 => "query=%ZZ&query=&variables=%7B".to_string(),
            _ => format!("{}=%ff%fe", rng.pick(&corpus.words)),
        };
        return Case {
            transport: Transport::Http,
            method: Method::GET,
            path_and_query: format!("/graphql?{query}"),
            content_type: None,
            body: Vec::new(),
            with_token,
        };
    }
    let content_type = if rng.chance(8) {
        Some(*rng.pick(CONTENT_TYPES))
    } else {
        Some("application/json")
    };
    let mut body = request_body(rng, &document, corpus).into_bytes();
    if rng.chance(20) {
        // Bytes that are not UTF-8.
        let at = rng.below(body.len() + 1);
        body.insert(at, 0xff);
    }
    let transport = if rng.chance(5) {
        Transport::WebSocket(*rng.pick(&[Via::TransportWs, Via::LegacyWs]))
    } else {
        Transport::Http
    };
    Case {
        transport,
        method: Method::POST,
        path_and_query: "/graphql".into(),
        content_type,
        body,
        with_token,
    }
}

/// Checks one answer; a description of what is wrong, if anything.
async fn check(app: &TestApp, token: &str, case: Case) -> Result<(), String> {
    if let Transport::WebSocket(via) = case.transport {
        return check_websocket(app, token, via, case).await;
    }
    let mut request = app
        .http
        .request(case.method.clone(), app.url(&case.path_and_query))
        .body(case.body.clone());
    if let Some(content_type) = case.content_type.filter(|c| !c.is_empty()) {
        request = request.header("content-type", content_type);
    }
    if case.with_token {
        request = request.bearer_auth(token);
    }
    let describe = || {
        let body = String::from_utf8_lossy(&case.body);
        let shown: String = body.chars().take(300).collect();
        format!(
            "{} {} ({:?}): {shown}",
            case.method, case.path_and_query, case.content_type
        )
    };
    let response = request
        .send()
        .await
        .map_err(|e| format!("connection failed ({e}) for {}", describe()))?;
    let status = response.status();
    let bytes = response
        .bytes()
        .await
        .map_err(|e| format!("body cut ({e}) for {}", describe()))?;
    if status.is_server_error() {
        return Err(format!("status {status} for {}", describe()));
    }
    let body: Value = serde_json::from_slice(&bytes).map_err(|_| {
        format!(
            "status {status}, body not JSON ({}) for {}",
            String::from_utf8_lossy(&bytes),
            describe()
        )
    })?;
    let answers = match &body {
        Value::Array(items) => items.clone(),
        _ => vec![body.clone()],
    };
    check_answers(&answers, &describe)
}

/// Close codes a server may answer a malformed message with: protocol error, too big, and
/// graphql-transport-ws's own (bad request, duplicate id, too many inits, unauthorised).
const WEBSOCKET_CLOSE_CODES: &[u16] = &[1002, 1009, 4400, 4403, 4409, 4429];

/// The same case as one operation on a fresh WebSocket: an answer with coded errors, or a
/// close with a protocol code, never a dropped socket.
async fn check_websocket(app: &TestApp, token: &str, via: Via, case: Case) -> Result<(), String> {
    let body = String::from_utf8_lossy(&case.body).into_owned();
    let describe = || {
        let shown: String = body.chars().take(300).collect();
        format!("{via:?}: {shown}")
    };
    let mut socket = via::open(app, via, case.with_token.then_some(token)).await;
    let start = if via == Via::LegacyWs {
        "start"
    } else {
        "subscribe"
    };
    // The body is spliced in as it is: a payload that is not JSON makes the message invalid.
    let message = format!("{{\"id\": \"1\", \"type\": \"{start}\", \"payload\": {body}}}");
    if socket.send(Message::text(message)).await.is_err() {
        return Err(format!("the socket refused a message for {}", describe()));
    }
    let answer = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        via::answer(&mut socket, "1"),
    )
    .await;
    let _ = socket.close(None).await;
    // A subscription may rightly stay quiet: only what arrives is judged.
    let Ok(answer) = answer else { return Ok(()) };
    if let Some(closed) = answer.get("closed") {
        let code = closed.as_u64().map(|c| c as u16);
        return match code {
            Some(code) if WEBSOCKET_CLOSE_CODES.contains(&code) => Ok(()),
            _ => Err(format!("closed with {closed} for {}", describe())),
        };
    }
    if answer.get("completed").is_some() {
        return Ok(());
    }
    check_answers(&[answer], &describe)
}

fn check_answers(answers: &[Value], describe: &dyn Fn() -> String) -> Result<(), String> {
    for answer in answers {
        if let Some(errors) = answer.get("errors") {
            let errors = errors
                .as_array()
                .ok_or_else(|| format!("errors is not a list: {answer}"))?;
            if errors.is_empty() {
                return Err(format!("empty errors list for {}", describe()));
            }
            for error in errors {
                if !error["extensions"]["code"].is_string() {
                    return Err(format!("error without a code: {error} for {}", describe()));
                }
            }
        } else if answer.get("data").is_none() {
            return Err(format!(
                "neither data nor errors: {answer} for {}",
                describe()
            ));
        }
    }
    Ok(())
}

#[tokio::test]
async fn thousands_of_random_and_mutated_requests_never_yield_a_5xx_or_an_error_without_a_code() {
    let cases: usize = std::env::var("ENGAGE_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3_000);
    let seed: u64 = std::env::var("ENGAGE_FUZZ_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0x5eed_2026);
    // Rate limits are proven elsewhere; here every request must reach the GraphQL layer.
    let app = TestApp::spawn_with(|config| {
        config.rate_limit_per_ip = 1_000_000;
        config.rate_limit_per_user = 1_000_000;
    })
    .await;
    let item_id = app.create_item().await;
    let corpus = Corpus::load();
    let token = app.user_token(77);
    let mut rng = Rng(seed);
    let generated: Vec<Case> = (0..cases).map(|_| generate(&mut rng, &corpus)).collect();

    let failures: Vec<String> = futures::stream::iter(generated)
        .map(|case| check(&app, &token, case))
        .buffer_unordered(16)
        .filter_map(|result| async move { result.err() })
        .collect()
        .await;
    assert!(
        failures.is_empty(),
        "seed {seed}: {} of {cases} requests misbehaved; first ones:\n{}",
        failures.len(),
        failures
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );

    // The server still answers, and still serves real work.
    let health = app.http.get(app.url("/healthz")).send().await.unwrap();
    assert!(health.status().is_success());
    let data = app
        .data(
            None,
            "query($id: ID!) { item(id: $id) { id } }",
            json!({ "id": item_id }),
        )
        .await;
    assert_eq!(data["item"]["id"], item_id.as_str());
}
