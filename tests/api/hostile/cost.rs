//! What a document costs is charged by its size, and trusted documents.
//!
//! The query text has its own cap; aliases, selections and variables are capped before
//! validation; a document's size is charged against the rates; complexity prices the
//! response's size; trusted documents run by text or hash, and alone when told to; one
//! address cannot push another's persisted queries out of the shared store.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::{
    harness::{client_from, websocket_from, Socket, TestApp},
    via::{self, code, Via},
};

const ATTACKER: &str = "127.0.0.3";
const VICTIM: &str = "127.0.0.2";

fn sha(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

fn persisted(text: &str) -> Value {
    json!({ "persistedQuery": { "version": 1, "sha256Hash": sha(text) } })
}

/// The code of an answer's first error, or `ok` when it has none.
fn outcome(answer: &Value) -> String {
    answer["errors"][0]["extensions"]["code"]
        .as_str()
        .unwrap_or("ok")
        .to_string()
}

/// POSTs a body from `client` and returns the JSON answer.
async fn post(app: &TestApp, client: &reqwest::Client, body: Value) -> Value {
    let response = client
        .post(app.url("/graphql"))
        .json(&body)
        .send()
        .await
        .expect("request sent");
    assert!(!response.status().is_server_error());
    response.json().await.expect("a JSON body")
}

/// An acknowledged WebSocket of `via`'s protocol whose connection leaves from `local`.
async fn open_from(app: &TestApp, via: Via, local: &str) -> Socket {
    let mut socket = websocket_from(app, local, via)
        .await
        .expect("upgrade accepted");
    let ack = via::init(&mut socket, None).await.expect("acknowledged");
    assert_eq!(ack["type"], "connection_ack", "{ack}");
    socket
}

#[tokio::test]
async fn the_query_text_has_its_own_cap_on_every_transport() {
    let app = TestApp::spawn_with(|config| {
        config.max_query_bytes = 2048;
        config.rate_limit_per_ip = 0;
    })
    .await;
    let long = format!("{{ __typename {} }}", " ".repeat(2100));
    let short = format!("{{ __typename {} }}", " ".repeat(1900));
    for via in via::ALL {
        let answer = via::send(&app, via, None, &long, json!({})).await;
        assert_eq!(code(&answer), "BAD_REQUEST", "{via:?}: {answer}");
        let answer = via::send(&app, via, None, &short, json!({})).await;
        assert_eq!(answer["data"]["__typename"], "Query", "{via:?}: {answer}");
    }
    // The body cap, not the query cap, still bounds the variables around a short query.
    let variables = json!({ "id": "1", "padding": "x".repeat(20_000) });
    for via in [Via::Post, Via::TransportWs, Via::LegacyWs] {
        let answer = via::send(
            &app,
            via,
            None,
            "query($id: ID!) { item(id: $id) { id } }",
            variables.clone(),
        )
        .await;
        assert!(answer["data"]["item"].is_null(), "{via:?}: {answer}");
        assert!(answer.get("errors").is_none(), "{via:?}: {answer}");
    }
}

#[tokio::test]
async fn aliases_selections_and_variables_are_capped_before_validation_on_every_transport() {
    let app = TestApp::spawn_with(|config| config.rate_limit_per_ip = 0).await;
    let aliases = format!(
        "{{ {} }}",
        (0..51)
            .map(|i| format!("a{i}: __typename"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let selections = format!("{{ {} }}", "__typename ".repeat(1001));
    let variables = format!(
        "query({}) {{ __typename }}",
        (0..51)
            .map(|i| format!("$v{i}: Int"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    for (name, document) in [
        ("aliases", aliases),
        ("selections", selections),
        ("variables", variables),
    ] {
        for via in via::ALL {
            let answer = via::send(&app, via, None, &document, json!({})).await;
            assert_eq!(
                code(&answer),
                "GRAPHQL_VALIDATION_FAILED",
                "{name} via {via:?}: {answer}"
            );
        }
    }
    // Within the caps, the same shapes run.
    let within = format!(
        "query({}) {{ {} }}",
        (0..40)
            .map(|i| format!("$v{i}: ID! = \"{}\"", i + 1))
            .collect::<Vec<_>>()
            .join(" "),
        (0..40)
            .map(|i| format!("a{i}: item(id: $v{i}) {{ id }}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    for via in via::ALL {
        let answer = via::send(&app, via, None, &within, json!({})).await;
        assert!(answer.get("errors").is_none(), "{via:?}: {answer}");
        assert!(answer["data"]["a39"].is_null(), "{via:?}: {answer}");
    }
}

/// A costly document within every cap: 700 selections in some 7.7 KB (cost 18).
fn costly() -> String {
    format!("{{ {} }}", "__typename ".repeat(700))
}

#[tokio::test]
async fn a_costly_document_spends_the_allowance_sooner_while_an_ordinary_one_costs_one() {
    // Per user, so that every transport has an allowance of its own: 20 a second, bursts
    // of 40.
    let app = TestApp::spawn_with(|config| {
        config.rate_limit_per_ip = 0;
        config.rate_limit_per_user = 20;
    })
    .await;
    let costly = costly();
    for (n, via) in via::ALL.into_iter().enumerate() {
        let token = app.user_token(9_500 + n as i64);
        let mut outcomes = Vec::new();
        if via.is_websocket() {
            let mut socket = via::open(&app, via, Some(&token)).await;
            for i in 0..4 {
                let payload = json!({ "query": costly });
                let answer = via::operation(&mut socket, via, &i.to_string(), payload).await;
                outcomes.push(outcome(&answer));
            }
        } else {
            for _ in 0..4 {
                outcomes.push(outcome(
                    &via::send(&app, via, Some(&token), &costly, json!({})).await,
                ));
            }
        }
        assert_eq!(outcomes[0], "ok", "{via:?}: {outcomes:?}");
        assert!(
            outcomes.iter().any(|c| c == "RATE_LIMITED"),
            "{via:?}: four costly documents within a burst of 40: {outcomes:?}"
        );
    }
    // Ordinary operations: 30 in a row fit the same burst (on one socket for WebSockets,
    // whose connection_init is charged once; by hash for persisted queries, registered
    // once beforehand as a client does).
    let ordinary = "{ __typename }";
    let answer = via::send(&app, Via::PersistedQuery, None, ordinary, json!({})).await;
    assert_eq!(answer["data"]["__typename"], "Query", "{answer}");
    for (n, via) in via::ALL.into_iter().enumerate() {
        let token = app.user_token(9_600 + n as i64);
        let mut outcomes = Vec::new();
        if via == Via::PersistedQuery {
            for _ in 0..30 {
                let request = app
                    .http
                    .post(app.url("/graphql"))
                    .bearer_auth(&token)
                    .json(&json!({ "extensions": persisted(ordinary) }));
                let answer: Value = request.send().await.unwrap().json().await.unwrap();
                outcomes.push(outcome(&answer));
            }
        } else if via.is_websocket() {
            let mut socket = via::open(&app, via, Some(&token)).await;
            for i in 0..30 {
                let payload = json!({ "query": ordinary });
                let answer = via::operation(&mut socket, via, &i.to_string(), payload).await;
                outcomes.push(outcome(&answer));
            }
        } else {
            for _ in 0..30 {
                outcomes.push(outcome(
                    &via::send(&app, via, Some(&token), ordinary, json!({})).await,
                ));
            }
        }
        assert!(outcomes.iter().all(|c| c == "ok"), "{via:?}: {outcomes:?}");
    }
}

#[tokio::test]
async fn a_costly_document_is_charged_to_its_address_not_to_others() {
    let app = TestApp::spawn_with(|config| config.rate_limit_per_ip = 20).await;
    let attacker = client_from(ATTACKER);
    let costly = json!({ "query": costly() });
    let mut outcomes = Vec::new();
    for _ in 0..4 {
        outcomes.push(outcome(&post(&app, &attacker, costly.clone()).await));
    }
    assert!(outcomes.iter().any(|c| c == "RATE_LIMITED"), "{outcomes:?}");
    let victim = client_from(VICTIM);
    for _ in 0..20 {
        let answer = post(&app, &victim, json!({ "query": "{ __typename }" })).await;
        assert_eq!(answer["data"]["__typename"], "Query", "{answer}");
    }
}

/// The query that answered 1.2 MB: six pages of 100 remarks' texts and images, 600 bytes.
fn megabytes_query() -> String {
    let page = |alias: &str| {
        format!(
            "{alias}: remarks(itemId: $item, first: 100) {{ edges {{ node {{ id content \
             images author {{ name }} }} }} }}"
        )
    };
    let pages: Vec<String> = ["a", "b", "c", "d", "e", "f"]
        .iter()
        .map(|alias| page(alias))
        .collect();
    format!("query($item: ID!) {{ {} }}", pages.join(" "))
}

#[tokio::test]
async fn complexity_prices_the_response_so_a_small_query_cannot_ask_for_megabytes() {
    let app = TestApp::spawn_with(|config| config.rate_limit_per_ip = 0).await;
    let item = app.create_item().await;
    let query = megabytes_query();
    assert!(query.len() < 700, "{}", query.len());
    let one_page = "query($item: ID!) { remarks(itemId: $item, first: 100) { edges { node { \
                    content } } } }";
    // `last` is priced like `first`.
    let one_page_back = "query($item: ID!) { remarks(itemId: $item, last: 100) { edges { node \
                         { content } } } }";
    for via in via::ALL {
        for document in [query.as_str(), one_page, one_page_back] {
            let answer = via::send(&app, via, None, document, json!({ "item": item })).await;
            assert_eq!(
                code(&answer),
                "GRAPHQL_VALIDATION_FAILED",
                "{via:?}: {answer}"
            );
            let message = answer["errors"][0]["message"].as_str().unwrap_or_default();
            assert!(message.contains("complex"), "{via:?}: {answer}");
        }
        // A page of 20 remarks with everything they have fits.
        let page = "query($item: ID!) { remarks(itemId: $item) { edges { cursor node { id \
                    itemId score content images createdAt likeCount likedByMe author { id \
                    name avatarUrl } likers { id name } } } pageInfo { hasNextPage endCursor \
                    } } }";
        let answer = via::send(&app, via, None, page, json!({ "item": item })).await;
        assert!(
            answer["data"]["remarks"]["edges"].is_array(),
            "{via:?}: {answer}"
        );
    }
}

#[tokio::test]
async fn every_saved_playground_operation_passes_within_the_default_limits() {
    let app = TestApp::spawn().await;
    let admin = app.admin_token();
    let mut files: Vec<_> = std::fs::read_dir("playground/operations")
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    let mut seen = 0;
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let (Some(kind @ ("query" | "mutation" | "subscription")), Some(name)) =
                (words.next(), words.next())
            else {
                continue;
            };
            let name: String = name
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            seen += 1;
            let payload = json!({ "query": text, "operationName": name });
            let run = || async {
                if kind == "subscription" {
                    // A refusal comes at once; a subscription with nothing to tell yet (the
                    // viewer's notifications) is accepted and silent.
                    let mut socket = via::connect(&app, Via::TransportWs, &[])
                        .await
                        .expect("upgrade accepted");
                    match via::init(&mut socket, Some(&admin)).await {
                        Ok(ack) => assert_eq!(ack["type"], "connection_ack", "{ack}"),
                        // The socket's `connection_init` counts against the same rate.
                        Err(refusal) if refusal["closed"] == 4429 => {
                            return json!({ "errors": [{ "extensions": { "code": "RATE_LIMITED" } }] });
                        }
                        Err(refusal) => panic!("refused instead of acknowledged: {refusal}"),
                    }
                    let first = via::operation(&mut socket, Via::TransportWs, "1", payload.clone());
                    tokio::time::timeout(std::time::Duration::from_secs(3), first)
                        .await
                        .unwrap_or_else(|_| json!({ "data": "accepted, nothing yet" }))
                } else {
                    let response = app
                        .http
                        .post(app.url("/graphql"))
                        .bearer_auth(&admin)
                        .json(&payload)
                        .send()
                        .await
                        .unwrap();
                    response.json::<Value>().await.unwrap()
                }
            };
            let mut answer = run().await;
            // One token runs every example back to back, faster than anyone clicks them: a
            // refusal for rate is waited out once (the allowance is whole again within two
            // seconds). Refused again, the example alone is over the default limit.
            if outcome(&answer) == "RATE_LIMITED" {
                tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
                answer = run().await;
            }
            let code = outcome(&answer);
            assert!(
                ![
                    "GRAPHQL_VALIDATION_FAILED",
                    "GRAPHQL_PARSE_FAILED",
                    "RATE_LIMITED"
                ]
                .contains(&code.as_str()),
                "{} {name}: {answer}",
                file.display()
            );
        }
    }
    assert!(seen >= 25, "{seen} operations found");
}

/// A manifest file of these documents, as graphql-codegen writes it.
fn manifest(documents: &[&str]) -> tempfile::NamedTempFile {
    let entries: serde_json::Map<String, Value> = documents
        .iter()
        .map(|text| (sha(text), Value::from(*text)))
        .collect();
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), Value::Object(entries).to_string()).unwrap();
    file
}

/// A trusted document, longer than the query cap of the tests below.
fn trusted_document() -> String {
    format!("query Trusted {{ __typename {} }}", " ".repeat(300))
}

#[tokio::test]
async fn trusted_documents_run_by_text_or_hash_even_past_the_query_cap_on_every_transport() {
    let trusted = trusted_document();
    let file = manifest(&[&trusted]);
    let path = file.path().to_path_buf();
    let app = TestApp::spawn_with(|config| {
        config.trusted_documents = Some(path);
        config.max_query_bytes = 256;
        config.rate_limit_per_ip = 0;
    })
    .await;
    for via in via::ALL {
        let answer = via::send(&app, via, None, &trusted, json!({})).await;
        assert_eq!(answer["data"]["__typename"], "Query", "{via:?}: {answer}");
    }
    // By hash alone, never registered: it is answered from the manifest.
    let by_hash = json!({ "extensions": persisted(&trusted) });
    let answer = post(&app, &app.http, by_hash.clone()).await;
    assert_eq!(answer["data"]["__typename"], "Query", "{answer}");
    for via in [Via::TransportWs, Via::LegacyWs] {
        let mut socket = via::open(&app, via, None).await;
        let answer = via::operation(&mut socket, via, "1", by_hash.clone()).await;
        assert_eq!(answer["data"]["__typename"], "Query", "{via:?}: {answer}");
    }
    // Other documents still run, within the cap.
    let other = "query Other { __typename }";
    for via in via::ALL {
        let answer = via::send(&app, via, None, other, json!({})).await;
        assert_eq!(answer["data"]["__typename"], "Query", "{via:?}: {answer}");
    }
}

#[tokio::test]
async fn only_trusted_documents_run_when_told_so_on_every_transport() {
    let trusted = trusted_document();
    let file = manifest(&[&trusted]);
    let path = file.path().to_path_buf();
    let app = TestApp::spawn_with(|config| {
        config.trusted_documents = Some(path);
        config.trusted_documents_only = true;
        config.rate_limit_per_ip = 0;
    })
    .await;
    let other = "query Other { __typename }";
    for via in via::ALL {
        let answer = via::send(&app, via, None, &trusted, json!({})).await;
        assert_eq!(answer["data"]["__typename"], "Query", "{via:?}: {answer}");
        let answer = via::send(&app, via, None, other, json!({})).await;
        assert_eq!(code(&answer), "DOCUMENT_NOT_TRUSTED", "{via:?}: {answer}");
        assert!(answer.get("data").is_none_or(Value::is_null), "{answer}");
    }
    // An unknown hash is not found, and the store is not asked.
    let unknown = json!({ "extensions": persisted(other) });
    let answer = post(&app, &app.http, unknown.clone()).await;
    assert_eq!(code(&answer), "PERSISTED_QUERY_NOT_FOUND", "{answer}");
    let known = json!({ "extensions": persisted(&trusted) });
    for via in [Via::TransportWs, Via::LegacyWs] {
        let mut socket = via::open(&app, via, None).await;
        let answer = via::operation(&mut socket, via, "1", unknown.clone()).await;
        assert_eq!(
            code(&answer),
            "PERSISTED_QUERY_NOT_FOUND",
            "{via:?}: {answer}"
        );
        let answer = via::operation(&mut socket, via, "2", known.clone()).await;
        assert_eq!(answer["data"]["__typename"], "Query", "{via:?}: {answer}");
    }
}

/// Runs `engage serve` with these settings and returns what it wrote to stderr, having
/// checked that it refused to start.
fn refused_to_start(env: &[(&str, &str)]) -> String {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_engage"));
    command.arg("serve").env("ENGAGE_BIND", "127.0.0.1:0");
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().expect("the binary runs");
    assert!(!output.status.success(), "started with {env:?}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test]
async fn a_bad_manifest_of_trusted_documents_refuses_to_start_with_a_clear_message() {
    let query = "query Hello { __typename }";
    let wrong_hash = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        wrong_hash.path(),
        json!({ "0".repeat(64): query }).to_string(),
    )
    .unwrap();
    let not_an_object = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(not_an_object.path(), json!([query]).to_string()).unwrap();
    let unparsable = manifest(&["query Broken {"]);
    for (file, says) in [
        (&wrong_hash, sha(query)),
        (&not_an_object, "JSON object".to_string()),
        (&unparsable, "refused".to_string()),
    ] {
        let path = file.path().to_str().unwrap();
        let stderr = refused_to_start(&[("ENGAGE_TRUSTED_DOCUMENTS", path)]);
        assert!(stderr.contains("ENGAGE_TRUSTED_DOCUMENTS"), "{stderr}");
        assert!(stderr.contains(&says), "{stderr}");
    }
    let stderr = refused_to_start(&[("ENGAGE_TRUSTED_DOCUMENTS", "/nonexistent/manifest.json")]);
    assert!(stderr.contains("cannot read"), "{stderr}");
    let stderr = refused_to_start(&[("ENGAGE_TRUSTED_DOCUMENTS_ONLY", "true")]);
    assert!(
        stderr.contains("needs ENGAGE_TRUSTED_DOCUMENTS"),
        "{stderr}"
    );
}

#[tokio::test]
async fn one_address_cannot_evict_another_address_persisted_query() {
    let app = TestApp::spawn_with(|config| {
        config.rate_limit_per_ip = 0;
        config.apq_max_bytes = 8 * 1024;
        // Bursts of 2 KiB: two registrations of the size below.
        config.apq_register_bytes_per_ip_per_minute = 1024;
    })
    .await;
    let victim = client_from(VICTIM);
    let kept = "query Kept { __typename }";
    let register = |text: &str| json!({ "query": text, "extensions": persisted(text) });
    let answer = post(&app, &victim, register(kept)).await;
    assert_eq!(answer["data"]["__typename"], "Query", "{answer}");

    // The attacker registers 100 texts of 500 bytes (75 KiB counted, nine times the store)
    // over every transport that registers: each runs, few are stored.
    let attacker = client_from(ATTACKER);
    let text = |i: usize| format!("query Evict{i} {{ __typename {} }}", " ".repeat(470));
    for i in 0..60 {
        let answer = post(&app, &attacker, register(&text(i))).await;
        assert_eq!(answer["data"]["__typename"], "Query", "{answer}");
    }
    for via in [Via::TransportWs, Via::LegacyWs] {
        let mut socket = open_from(&app, via, ATTACKER).await;
        for i in 0..20 {
            let text = text(if via == Via::LegacyWs { 80 + i } else { 60 + i });
            let answer = via::operation(&mut socket, via, &i.to_string(), register(&text)).await;
            assert_eq!(answer["data"]["__typename"], "Query", "{via:?}: {answer}");
        }
    }
    let answer = post(
        &app,
        &attacker,
        json!({ "extensions": persisted(&text(50)) }),
    )
    .await;
    assert_eq!(code(&answer), "PERSISTED_QUERY_NOT_FOUND", "{answer}");

    // The victim's query is still there, from its own address and over a socket too.
    let by_hash = json!({ "extensions": persisted(kept) });
    let answer = post(&app, &victim, by_hash.clone()).await;
    assert_eq!(answer["data"]["__typename"], "Query", "{answer}");
    let mut socket = open_from(&app, Via::TransportWs, VICTIM).await;
    let answer = via::operation(&mut socket, Via::TransportWs, "1", by_hash).await;
    assert_eq!(answer["data"]["__typename"], "Query", "{answer}");
}

/// A bulk write takes at most its cap of inputs on every transport that carries writes; past
/// it nothing is scheduled. The body cap is raised here so that the inputs' own cap is what
/// refuses (at the default 64 KB, 1,000 jobs fit only with little data each).
#[tokio::test]
async fn a_bulk_schedule_past_its_cap_is_refused_whole_on_every_transport() {
    let app = TestApp::spawn_with(|config| {
        config.rate_limit_per_ip = 0;
        config.max_body_bytes = 512 * 1024;
    })
    .await;
    app.handle_topic("bulk");
    let admin = app.admin_token();
    let inputs = |count: usize, tag: &str| -> Value {
        (0..count)
            .map(|n| json!({ "id": format!("{tag}{n}"), "topic": "bulk", "data": {}, "delaySeconds": 600 }))
            .collect()
    };
    let bulk =
        "mutation($inputs: [ScheduleJobInput!]!) { scheduleJobs(inputs: $inputs) { jobId } }";
    // GET carries no mutation; the others are refused past the cap, before anything is written.
    for via in [
        Via::Post,
        Via::PersistedQuery,
        Via::TransportWs,
        Via::LegacyWs,
    ] {
        let tag = format!("{via:?}-");
        let answer = via::send(
            &app,
            via,
            Some(&admin),
            bulk,
            json!({ "inputs": inputs(1001, &tag) }),
        )
        .await;
        assert_eq!(code(&answer), "BAD_USER_INPUT", "{via:?}: {answer}");
    }
    let counts = app
        .data(
            Some(&admin),
            "{ topic(name: \"bulk\") { counts { delayed ready } } }",
            json!({}),
        )
        .await;
    assert_eq!(counts["topic"]["counts"]["delayed"], 0, "{counts}");
    // At the cap, one call schedules them all.
    let answer = via::send(
        &app,
        Via::Post,
        Some(&admin),
        bulk,
        json!({ "inputs": inputs(1000, "at-cap-") }),
    )
    .await;
    assert_eq!(
        answer["data"]["scheduleJobs"].as_array().map(Vec::len),
        Some(1000),
        "{}",
        answer["errors"]
    );
}
