//! The two WebSocket protocols' messages as the server writes them, and their close codes.
//! Client messages are read with async-graphql's [`ClientMessage`], which accepts both
//! protocols' names (`subscribe`/`start`, `complete`/`stop`).
//!
//! - `graphql-transport-ws` (the `graphql-ws` library): `connection_ack`, `next`, `error`,
//!   `complete`, `pong`; a broken rule closes the socket with the protocol's 44xx code.
//! - `graphql-ws` (the legacy `subscriptions-transport-ws`): `connection_ack`, `data`,
//!   `error`, `complete`, and `connection_error` where the newer protocol closes the socket.

pub(crate) use async_graphql::http::ClientMessage;
use async_graphql::{http::WebSocketProtocols, ServerError};

/// Close code of `graphql-transport-ws` for a message it cannot read.
pub(crate) const BAD_REQUEST: u16 = 4400;
/// Close code of `graphql-transport-ws` for a `subscribe` before `connection_ack`.
pub(crate) const UNAUTHORIZED: u16 = 4401;
/// Close code of `graphql-transport-ws` for a refused `connection_init` or an expired token.
pub(crate) const FORBIDDEN: u16 = 4403;
/// Close code of `graphql-transport-ws` when `connection_init` does not come in time.
pub(crate) const INIT_TIMED_OUT: u16 = 4408;
/// Close code of `graphql-transport-ws` for a `subscribe` reusing a running operation's id.
pub(crate) const DUPLICATE_ID: u16 = 4409;
/// Close code of `graphql-transport-ws` for a second `connection_init`.
pub(crate) const TOO_MANY_INITS: u16 = 4429;
/// The same code for a `connection_init` past the client's rate or its cap of sockets (on
/// both protocols): `graphql-ws` clients do not retry it at once.
pub(crate) const TOO_MANY_REQUESTS: u16 = 4429;
/// The WebSocket close code for a protocol error (the legacy protocol's only one).
pub(crate) const PROTOCOL_ERROR: u16 = 1002;

/// The longest close reason a frame carries (125 bytes of payload, 2 of them the code).
const MAX_REASON: usize = 123;

/// What the server writes: a text message, or a close frame (after which nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outgoing {
    Text(String),
    Close(u16, String),
}

/// A protocol rule the client broke: how the socket ends. The newer protocol closes it with
/// `code`; the legacy one has no codes of its own and sends `connection_error` first.
pub(crate) fn violation(protocol: WebSocketProtocols, code: u16, reason: &str) -> Vec<Outgoing> {
    match protocol {
        WebSocketProtocols::GraphQLWS => vec![close(code, reason)],
        WebSocketProtocols::SubscriptionsTransportWS => {
            vec![connection_error(reason), close(PROTOCOL_ERROR, reason)]
        }
    }
}

pub(crate) fn close(code: u16, reason: &str) -> Outgoing {
    let mut end = reason.len().min(MAX_REASON);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    Outgoing::Close(code, reason[..end].to_string())
}

pub(crate) fn connection_ack() -> Outgoing {
    Outgoing::Text(r#"{"type":"connection_ack"}"#.to_string())
}

pub(crate) fn connection_error(message: &str) -> Outgoing {
    Outgoing::Text(
        serde_json::json!({ "type": "connection_error", "payload": { "message": message } })
            .to_string(),
    )
}

pub(crate) fn pong() -> Outgoing {
    Outgoing::Text(r#"{"type":"pong"}"#.to_string())
}

/// An operation's id as a JSON string, written once per operation into each message.
pub(crate) fn quoted(id: &str) -> String {
    serde_json::to_string(id).expect("a string serialises")
}

/// One result of an operation: `payload` is a GraphQL response in JSON.
pub(crate) fn next(protocol: WebSocketProtocols, quoted_id: &str, payload: &str) -> Outgoing {
    let mut text = String::with_capacity(payload.len() + quoted_id.len() + 32);
    write_next_head(protocol, quoted_id, &mut text);
    text.push_str(payload);
    text.push_str(NEXT_TAIL);
    Outgoing::Text(text)
}

/// What comes before the payload in each result message of operation `quoted_id`, written
/// once per operation for the results delivered directly (the head of its
/// [`Envelope`](crate::api::live::Envelope)); [`NEXT_TAIL`] comes after it.
pub(crate) fn next_head(protocol: WebSocketProtocols, quoted_id: &str) -> String {
    let mut head = String::with_capacity(quoted_id.len() + 32);
    write_next_head(protocol, quoted_id, &mut head);
    head
}

/// What comes after the payload in a result message.
pub(crate) const NEXT_TAIL: &str = "}";

fn write_next_head(protocol: WebSocketProtocols, quoted_id: &str, text: &mut String) {
    let kind = match protocol {
        WebSocketProtocols::GraphQLWS => "next",
        WebSocketProtocols::SubscriptionsTransportWS => "data",
    };
    text.push_str(r#"{"type":""#);
    text.push_str(kind);
    text.push_str(r#"","id":"#);
    text.push_str(quoted_id);
    text.push_str(r#","payload":"#);
}

/// The end of an operation that failed before its first result; no `complete` follows.
/// `graphql-transport-ws`'s `payload` is the list of errors; the legacy protocol's
/// (`GQL_ERROR`) is one error, the first.
pub(crate) fn error(
    protocol: WebSocketProtocols,
    quoted_id: &str,
    errors: &[ServerError],
) -> Outgoing {
    let payload = match protocol {
        WebSocketProtocols::GraphQLWS => serde_json::to_string(errors),
        WebSocketProtocols::SubscriptionsTransportWS => serde_json::to_string(&errors.first()),
    }
    .expect("errors serialise");
    Outgoing::Text(format!(
        r#"{{"type":"error","id":{quoted_id},"payload":{payload}}}"#
    ))
}

pub(crate) fn complete(quoted_id: &str) -> Outgoing {
    Outgoing::Text(format!(r#"{{"type":"complete","id":{quoted_id}}}"#))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_next_message_wraps_the_payload_as_it_is() {
        let id = quoted("a\"1");
        let Outgoing::Text(text) = next(WebSocketProtocols::GraphQLWS, &id, r#"{"data":{}}"#)
        else {
            panic!("a text message")
        };
        let parsed: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            parsed,
            serde_json::json!({ "type": "next", "id": "a\"1", "payload": { "data": {} } })
        );
    }

    #[test]
    fn a_result_written_directly_is_the_same_message_as_next() {
        let id = quoted("7");
        for protocol in [
            WebSocketProtocols::GraphQLWS,
            WebSocketProtocols::SubscriptionsTransportWS,
        ] {
            let payload = r#"{"data":{"n":1}}"#;
            let direct = format!("{}{payload}{NEXT_TAIL}", next_head(protocol, &id));
            assert_eq!(next(protocol, &id, payload), Outgoing::Text(direct));
        }
    }

    #[test]
    fn a_close_reason_is_cut_to_what_a_frame_holds_on_a_char_boundary() {
        let Outgoing::Close(_, reason) = close(PROTOCOL_ERROR, &"é".repeat(100)) else {
            panic!("a close")
        };
        assert!(reason.len() <= MAX_REASON);
        assert_eq!(reason.len(), 122);
    }
}
