//! The WebSocket protocols as their specifications and client libraries expect them: how an
//! operation that fails before its first result ends (`error`, no `complete`), what a
//! query's field errors are (a result), and what `connection_init` accepts and refuses
//! before any `connection_ack`.

use engage::infra::auth::Role;
use serde_json::{json, Value};

use crate::{
    harness::{global_id, Socket, TestApp},
    via::{self, Via},
};

const BOTH: [Via; 2] = [Via::TransportWs, Via::LegacyWs];

/// Starts operation `id` (`subscribe`, or the legacy `start`).
async fn start(socket: &mut Socket, via: Via, id: &str, query: &str) {
    let kind = if via == Via::LegacyWs {
        "start"
    } else {
        "subscribe"
    };
    via::write(
        socket,
        json!({ "id": id, "type": kind, "payload": { "query": query } }),
    )
    .await;
}

/// The next message, keep-alives skipped.
async fn next(socket: &mut Socket) -> Value {
    loop {
        let message = via::next(socket).await.expect("the socket stays open");
        if message["type"] != "ka" {
            return message;
        }
    }
}

/// The next message of operation `id` (the others' skipped).
async fn next_of(socket: &mut Socket, id: &str) -> Value {
    loop {
        let message = next(socket).await;
        if message["id"] == id {
            return message;
        }
    }
}

/// The errors of the `error` message that ends operation `id`: a list in
/// `graphql-transport-ws`, one error in the legacy protocol.
async fn error_of(socket: &mut Socket, via: Via, id: &str) -> Value {
    let message = next_of(socket, id).await;
    assert_eq!(message["type"], "error", "{via:?}: {message}");
    match via {
        Via::LegacyWs => {
            assert!(message["payload"].is_object(), "{message}");
            json!([message["payload"]])
        }
        _ => {
            assert!(message["payload"].is_array(), "{message}");
            message["payload"].clone()
        }
    }
}

/// That operation `id` sends nothing more (no `complete` after its `error`): a later
/// operation's answer and end come, and nothing of `id` before them.
async fn nothing_more_of(socket: &mut Socket, via: Via, id: &str) {
    start(socket, via, "after", "{ __typename }").await;
    loop {
        let message = next(socket).await;
        assert_ne!(message["id"], id, "{via:?}: {message}");
        if message["id"] == "after" && message["type"] == "complete" {
            return;
        }
    }
}

fn codes(errors: &Value) -> Vec<&str> {
    errors
        .as_array()
        .expect("a list of errors")
        .iter()
        .map(|e| e["extensions"]["code"].as_str().expect("a coded error"))
        .collect()
}

#[tokio::test]
async fn a_document_that_does_not_parse_or_validate_is_an_error_with_no_complete() {
    let app = TestApp::spawn().await;
    for via in BOTH {
        let mut socket = via::open(&app, via, None).await;
        for (id, query, code) in [
            ("parse", "subscription {", "GRAPHQL_PARSE_FAILED"),
            (
                "validation",
                "subscription { noSuchField }",
                "GRAPHQL_VALIDATION_FAILED",
            ),
            (
                "query",
                "{ viewer { noSuchField } }",
                "GRAPHQL_VALIDATION_FAILED",
            ),
        ] {
            start(&mut socket, via, id, query).await;
            let errors = error_of(&mut socket, via, id).await;
            assert_eq!(codes(&errors)[0], code, "{via:?} {id}: {errors}");
            nothing_more_of(&mut socket, via, id).await;
        }
    }
}

#[tokio::test]
async fn an_operation_refused_by_admission_is_an_error_with_no_complete() {
    let app = TestApp::spawn_with(|config| {
        config.ws_max_operations = 1;
        config.max_mutations_per_request = 1;
    })
    .await;
    let too_long = format!(
        "{{ __typename }}{}",
        " ".repeat(app.config().max_query_bytes)
    );
    for via in BOTH {
        let mut socket = via::open(&app, via, None).await;
        // Past the operations a socket may run at once.
        start(
            &mut socket,
            via,
            "live",
            "subscription { serverTime(everySeconds: 60) }",
        )
        .await;
        assert!(next_of(&mut socket, "live").await["payload"]["data"]["serverTime"].is_string());
        start(&mut socket, via, "busy", "{ __typename }").await;
        let errors = error_of(&mut socket, via, "busy").await;
        assert_eq!(codes(&errors), ["RATE_LIMITED"], "{via:?}: {errors}");
        let stop = if via == Via::LegacyWs {
            "stop"
        } else {
            "complete"
        };
        via::write(&mut socket, json!({ "id": "live", "type": stop })).await;
        nothing_more_of(&mut socket, via, "busy").await;

        // Over the cost of a request, and longer than a query may be.
        for (id, query, code) in [
            (
                "writes",
                "mutation { a: signIn { __typename } b: signIn { __typename } }",
                "GRAPHQL_VALIDATION_FAILED",
            ),
            ("long", too_long.as_str(), "BAD_REQUEST"),
        ] {
            start(&mut socket, via, id, query).await;
            let errors = error_of(&mut socket, via, id).await;
            assert_eq!(codes(&errors), [code], "{via:?} {id}: {errors}");
            nothing_more_of(&mut socket, via, id).await;
        }
    }
}

#[tokio::test]
async fn a_subscription_failing_before_its_first_item_is_an_error_in_graphql_transport_ws() {
    let app = TestApp::spawn().await;
    let query = r#"subscription { likeCountChanged(remarkIds: ["987654321"]) { likeCount } }"#;

    let mut socket = via::open(&app, Via::TransportWs, None).await;
    start(&mut socket, Via::TransportWs, "1", query).await;
    let errors = error_of(&mut socket, Via::TransportWs, "1").await;
    assert_eq!(codes(&errors), ["NOT_FOUND"], "{errors}");
    assert!(errors[0]["message"].as_str().unwrap().contains("987654321"));
    nothing_more_of(&mut socket, Via::TransportWs, "1").await;

    // The legacy protocol's `error` is for operations that did not run: a resolver's
    // failure is a result with errors, and the operation completes.
    let mut socket = via::open(&app, Via::LegacyWs, None).await;
    start(&mut socket, Via::LegacyWs, "1", query).await;
    let message = next_of(&mut socket, "1").await;
    assert_eq!(message["type"], "data", "{message}");
    assert_eq!(codes(&message["payload"]["errors"]), ["NOT_FOUND"]);
    assert_eq!(next_of(&mut socket, "1").await["type"], "complete");
}

#[tokio::test]
async fn a_query_or_mutation_that_ran_with_field_errors_is_a_result_then_complete() {
    let app = TestApp::spawn().await;
    for via in BOTH {
        let mut socket = via::open(&app, via, None).await;
        for (id, query) in [
            ("query", "{ __typename pointsToday { points } }"),
            ("mutation", "mutation { signIn { __typename } }"),
        ] {
            start(&mut socket, via, id, query).await;
            let message = next_of(&mut socket, id).await;
            let result = if via == Via::LegacyWs { "data" } else { "next" };
            assert_eq!(message["type"], result, "{via:?} {id}: {message}");
            assert!(message["payload"].get("data").is_some(), "{message}");
            assert_eq!(
                codes(&message["payload"]["errors"]),
                ["UNAUTHENTICATED"],
                "{message}"
            );
            assert_eq!(next_of(&mut socket, id).await["type"], "complete");
        }
    }
}

/// Sends `connection_init` with `payload` (none for `None`) and returns the answer: the
/// message, or `{"closed": code, "reason": …}`.
async fn init_with(app: &TestApp, via: Via, payload: Option<Value>) -> (Socket, Value) {
    let mut socket = via::connect(app, via, &[]).await.expect("upgrade accepted");
    let mut init = json!({ "type": "connection_init" });
    if let Some(payload) = payload {
        init["payload"] = payload;
    }
    via::write(&mut socket, init).await;
    let answer = match via::next(&mut socket).await {
        Ok(message) => message,
        Err(frame) => {
            let frame = frame.expect("a close frame");
            json!({ "closed": u16::from(frame.code), "reason": frame.reason.as_str() })
        }
    };
    (socket, answer)
}

/// The viewer's id on an acknowledged socket, null when anonymous.
async fn viewer_on(socket: &mut Socket, via: Via) -> Value {
    start(socket, via, "me", "{ viewer { id } }").await;
    let message = next_of(socket, "me").await;
    message["payload"]["data"]["viewer"]["id"].clone()
}

/// That a `connection_init` was refused before any `connection_ack`: with `code` in
/// `graphql-transport-ws`, `connection_error` in the legacy protocol; returns the reason.
fn refused(via: Via, answer: &Value, code: u16) -> String {
    match via {
        Via::LegacyWs => {
            assert_eq!(answer["type"], "connection_error", "{answer}");
            answer["payload"]["message"].as_str().unwrap().to_string()
        }
        _ => {
            assert_eq!(answer["closed"], code, "{answer}");
            answer["reason"].as_str().unwrap().to_string()
        }
    }
}

#[tokio::test]
async fn an_expired_or_invalid_token_is_refused_before_any_ack() {
    let app = TestApp::spawn().await;
    let signer = app.signer();
    // Expired a moment ago (within the leeway a request is given), and long ago.
    let just_expired = signer.mint(9, Role::User, -2, None);
    let long_expired = signer.mint(9, Role::User, -3600, None);
    for via in BOTH {
        for (token, why) in [
            (just_expired.as_str(), "expired"),
            (long_expired.as_str(), "expired"),
            ("not-a-token", "malformed"),
        ] {
            let payload = json!({ "Authorization": format!("Bearer {token}") });
            let (_, answer) = init_with(&app, via, Some(payload)).await;
            let reason = refused(via, &answer, 4403);
            assert!(reason.contains(why), "{via:?}: {reason}");
        }
    }
}

#[tokio::test]
async fn connection_init_takes_the_token_at_the_top_or_in_headers() {
    let app = TestApp::spawn().await;
    let bearer = format!("Bearer {}", app.user_token(9));
    for via in BOTH {
        for payload in [
            json!({ "Authorization": bearer }),
            json!({ "authorization": bearer }),
            json!({ "headers": { "Authorization": bearer } }),
            json!({ "headers": { "authorization": bearer, "X-Client": "web" } }),
            json!({ "Authorization": bearer, "headers": { "Authorization": bearer } }),
        ] {
            let (mut socket, answer) = init_with(&app, via, Some(payload.clone())).await;
            assert_eq!(
                answer["type"], "connection_ack",
                "{via:?} {payload}: {answer}"
            );
            assert_eq!(
                viewer_on(&mut socket, via).await,
                global_id("User", 9),
                "{via:?} {payload}"
            );
        }
    }
}

#[tokio::test]
async fn a_credential_in_any_other_shape_is_refused_naming_the_accepted_ones() {
    let app = TestApp::spawn().await;
    let token = app.user_token(9);
    let bearer = format!("Bearer {token}");
    for via in BOTH {
        for payload in [
            json!({ "token": token }),
            json!({ "authToken": token }),
            json!({ "accessToken": token }),
            json!({ "Authorization": 42 }),
            json!({ "Authorization": token }),
            json!({ "headers": { "Authorization": bearer }, "Authorization": "Bearer other" }),
            json!({ "headers": bearer }),
            json!(bearer),
        ] {
            let (_, answer) = init_with(&app, via, Some(payload.clone())).await;
            let reason = refused(via, &answer, 4400);
            assert!(
                reason.contains(r#"{"headers":{"Authorization""#),
                "{via:?} {payload}: {reason}"
            );
        }
    }
}

#[tokio::test]
async fn connection_init_without_a_credential_is_anonymous() {
    let app = TestApp::spawn().await;
    for via in BOTH {
        for payload in [
            None,
            Some(Value::Null),
            Some(json!({})),
            Some(json!({ "clientName": "web", "clientVersion": "1.2" })),
            Some(json!({ "Authorization": null })),
            Some(json!({ "headers": {} })),
        ] {
            let (mut socket, answer) = init_with(&app, via, payload.clone()).await;
            assert_eq!(
                answer["type"], "connection_ack",
                "{via:?} {payload:?}: {answer}"
            );
            assert_eq!(viewer_on(&mut socket, via).await, Value::Null);
        }
    }
}
