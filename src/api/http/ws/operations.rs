//! The operations of one WebSocket: what they share ([`Connection`]) and how each
//! `subscribe` runs ([`Admitter`]): the same [`admission`] as an HTTP request first (token
//! still valid, rates, size, parse, cost), a cap on the operations running at once, then
//! the schema, until the resolver delivers directly (see
//! [`Direct::hold`](crate::api::live::Direct::hold)).
//!
//! An operation answers with results ([`Reply::Next`]) or, when it fails before its first
//! result, with its errors ([`Reply::Error`], the protocol's `error`): when nothing ran
//! (admission refused it, its document failed validation), and when a subscription's
//! resolver failed before yielding anything. A query or mutation that ran answers with a
//! result even when its fields failed, and so does each update of a running subscription.

use std::{
    net::IpAddr,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, OnceLock,
    },
};

use async_graphql::{parser::types::OperationType, Data, Request, Response, ServerError};
use futures::{stream::BoxStream, StreamExt};

use crate::{
    api::http::{
        admission::{self, Caller, RawOperation, Transport},
        apq,
        validated::Validation,
        Gateway, HttpState,
    },
    api::live::{DirectOutlet, Payloads},
    api::schema::errors::assign_codes,
    infra::{
        error::{AppError, AppResult, ErrorCode},
        metrics,
    },
};

/// What one socket's operations share.
pub(super) struct Connection {
    pub(super) id: String,
    pub(super) ip: IpAddr,
    /// Set by a successful `connection_init`.
    pub(super) caller: OnceLock<Caller>,
    in_flight: AtomicUsize,
    max_in_flight: usize,
    pub(super) max_subscriptions: usize,
}

impl Connection {
    pub(super) fn new(ip: IpAddr, http: &HttpState) -> Self {
        Self {
            id: uuid::Uuid::new_v4().to_string(),
            ip,
            caller: OnceLock::new(),
            in_flight: AtomicUsize::new(0),
            max_in_flight: http.gateway.config.ws_max_operations,
            max_subscriptions: http.gateway.config.max_subscriptions_per_connection,
        }
    }
}

/// Runs the operations of a socket: admission first, then the schema.
#[derive(Clone)]
pub(super) struct Admitter {
    pub(super) http: HttpState,
    pub(super) connection: Arc<Connection>,
}

/// One running operation of a socket; dropping it (when the operation's stream ends or the
/// client stops it) frees its place.
struct InFlight(Arc<Connection>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Admitter {
    async fn admit(&self, request: Request) -> AppResult<(admission::Admitted, InFlight)> {
        let connection = &self.connection;
        let held = connection.in_flight.fetch_add(1, Ordering::AcqRel);
        let in_flight = InFlight(connection.clone());
        if held >= connection.max_in_flight {
            return Err(AppError::client(
                ErrorCode::RateLimited,
                format!(
                    "a connection may run at most {} operations at once",
                    connection.max_in_flight
                ),
            ));
        }
        let caller = connection
            .caller
            .get()
            .ok_or_else(|| AppError::unauthenticated("send connection_init first"))?;
        let extensions = (!request.extensions.is_empty())
            .then(|| serde_json::to_value(&request.extensions).ok())
            .flatten();
        let operation = RawOperation {
            query: Some(request.query).filter(|q| !q.is_empty()),
            operation_name: request.operation_name,
            variables: request.variables,
            extensions,
        };
        let admitted =
            admission::admit(&self.http.gateway, caller, operation, Transport::WebSocket).await?;
        Ok((admitted, in_flight))
    }
}

/// What an operation gives its socket.
pub(super) enum Reply {
    /// A result: a GraphQL response in JSON (`next`, the legacy protocol's `data`).
    Next(String),
    /// The operation's end without a result (`error`, with no `complete` after it).
    /// `executed`: a subscription's resolver failed before its first item; otherwise
    /// nothing ran (admission refused the operation, or its document was not valid).
    Error {
        errors: Vec<ServerError>,
        executed: bool,
    },
}

/// A refused operation, its error in the wire form every other error takes.
fn refusal(error: &AppError) -> Reply {
    metrics::record_error(error.code());
    let mut server_error = ServerError::new(error.public_message(), None);
    error.write_extensions(server_error.extensions.get_or_insert_with(Default::default));
    Reply::Error {
        errors: vec![server_error],
        executed: false,
    }
}

fn payload(response: &Response) -> String {
    serde_json::to_string(response).expect("a response serialises")
}

impl Admitter {
    /// Runs one operation of the socket: its responses (a query's or mutation's one, a
    /// subscription's many) as JSON, each a message's payload, or its errors.
    pub(super) fn run(
        &self,
        request: Request,
        session: Arc<Data>,
        outlet: DirectOutlet,
    ) -> BoxStream<'static, Reply> {
        let this = self.clone();
        // The operation's span covers its admission and every poll of its stream: a
        // query's one response, or a subscription's life.
        let span = admission::operation_span(Transport::WebSocket);
        let admission_span = span.clone();
        let stream = futures::stream::once(async move {
            match this.admit(request).await {
                Ok((admitted, in_flight)) => {
                    admission::record(&admission_span, &admitted);
                    let subscription = admitted.operation_type == Some(OperationType::Subscription);
                    let request = admitted.request.data(outlet.clone());
                    let schema = this.http.schemas.for_request(&admitted.validation);
                    Operation {
                        graphql: Some(schema.execute_stream_with_session_data(request, session)),
                        direct: None,
                        answered: false,
                        subscription,
                        early: None,
                        outlet,
                        connection: this.connection.clone(),
                        register: admitted.register.map(|r| (this.http.gateway.clone(), r)),
                        validation: Some(admitted.validation),
                        _in_flight: in_flight,
                    }
                    .boxed()
                }
                Err(error) => futures::stream::once(async move { refusal(&error) }).boxed(),
            }
        })
        .flatten()
        .boxed();
        if span.is_disabled() {
            return stream;
        }
        // Polled inside its span.
        let mut stream = stream;
        futures::stream::poll_fn(move |cx| {
            let _entered = span.enter();
            stream.poll_next_unpin(cx)
        })
        .boxed()
    }
}

/// An admitted operation: async-graphql's responses, until the resolver delivers directly;
/// from then on what [`Direct::hold`](crate::api::live::Direct::hold) was given, kept until
/// the operation ends.
struct Operation {
    graphql: Option<BoxStream<'static, Response>>,
    direct: Option<Payloads>,
    /// Whether async-graphql gave its first response.
    answered: bool,
    subscription: bool,
    /// A response that came while telling a subscription's failure from its first update
    /// (see [`Operation::failed_before_first_item`]), the next to give.
    early: Option<Response>,
    outlet: DirectOutlet,
    connection: Arc<Connection>,
    /// A persisted query to store once the operation has passed validation.
    register: Option<(Arc<Gateway>, (String, String))>,
    /// Where to remember that the operation passed validation.
    validation: Option<Validation>,
    _in_flight: InFlight,
}

impl Operation {
    /// Called with the operation's first answer: if it was valid, remembers so and stores
    /// its persisted query.
    fn settle(&mut self, valid: bool) {
        let validation = self.validation.take();
        let register = self.register.take();
        if !valid {
            return;
        }
        if let Some(validation) = validation {
            validation.passed();
        }
        if let Some((gateway, (hash, query))) = register {
            tokio::spawn(async move {
                if let Err(error) = apq::register(&gateway, &hash, &query).await {
                    tracing::warn!(%error, "could not store a persisted query");
                }
            });
        }
    }

    /// What async-graphql's response becomes: the operation's end with an `error` when
    /// nothing ran, or when it is a subscription's first and its resolver failed.
    fn reply(&mut self, mut response: Response, cx: &mut std::task::Context<'_>) -> Reply {
        assign_codes(&mut response, &self.connection.id);
        let first = !std::mem::replace(&mut self.answered, true);
        let request_error = admission::is_request_error(&response);
        if first {
            self.settle(!request_error);
        }
        if request_error || (first && self.failed_before_first_item(&response, cx)) {
            self.graphql = None;
            self.early = None;
            return Reply::Error {
                errors: response.errors,
                executed: !request_error,
            };
        }
        Reply::Next(payload(&response))
    }

    /// Whether a subscription's first response is its resolver's failure rather than its
    /// first update (a failed update has errors and no data too): async-graphql ends the
    /// operation's stream right after a resolver's error, while a subscription whose update
    /// failed goes on. The stream is asked once more, now; what else it gives is kept.
    fn failed_before_first_item(
        &mut self,
        response: &Response,
        cx: &mut std::task::Context<'_>,
    ) -> bool {
        if !self.subscription
            || response.errors.is_empty()
            || response.data != async_graphql::Value::Null
        {
            return false;
        }
        let Some(graphql) = &mut self.graphql else {
            return false;
        };
        match graphql.poll_next_unpin(cx) {
            std::task::Poll::Ready(None) => true,
            std::task::Poll::Ready(Some(response)) => {
                self.early = Some(response);
                false
            }
            std::task::Poll::Pending => false,
        }
    }
}

impl futures::Stream for Operation {
    type Item = Reply;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Reply>> {
        use std::task::Poll;
        let this = self.get_mut();
        if let Some(direct) = &mut this.direct {
            return direct.poll_next_unpin(cx).map(|p| p.map(Reply::Next));
        }
        if let Some(response) = this.early.take() {
            return Poll::Ready(Some(this.reply(response, cx)));
        }
        let Some(graphql) = &mut this.graphql else {
            return Poll::Ready(None);
        };
        match graphql.poll_next_unpin(cx) {
            Poll::Ready(Some(response)) => Poll::Ready(Some(this.reply(response, cx))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match this.outlet.take() {
                Some(direct) => {
                    // The resolver's stream now lives in `direct`; async-graphql's is idle.
                    this.graphql = None;
                    this.answered = true;
                    this.settle(true);
                    this.direct
                        .insert(direct)
                        .poll_next_unpin(cx)
                        .map(|p| p.map(Reply::Next))
                }
                None => Poll::Pending,
            },
        }
    }
}
