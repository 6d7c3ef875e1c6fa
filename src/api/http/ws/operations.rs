//! The operations of one WebSocket: what they share ([`Connection`]) and how each
//! `subscribe` runs ([`Admitter`]): the same [`admission`] as an HTTP request first (token
//! still valid, rates, size, parse, cost), a cap on the operations running at once, then
//! the schema, until the resolver delivers directly (see [`DirectOutlet::hold`]).

use std::{
    net::IpAddr,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, OnceLock,
    },
};

use async_graphql::{Data, Request, Response, ServerError};
use futures::{stream::BoxStream, StreamExt};

use super::direct::{DirectOutlet, Payloads};
use crate::{
    api::http::{
        admission::{self, Caller, RawOperation, Transport},
        apq, Gateway, HttpState,
    },
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

/// A refused operation, in the wire form every other error takes.
fn refusal(error: &AppError) -> String {
    metrics::record_error(error.code());
    let mut server_error = ServerError::new(error.public_message(), None);
    error.write_extensions(server_error.extensions.get_or_insert_with(Default::default));
    payload(&Response::from_errors(vec![server_error]))
}

fn payload(response: &Response) -> String {
    serde_json::to_string(response).expect("a response serialises")
}

impl Admitter {
    /// Runs one operation of the socket: its responses (a query's or mutation's one, a
    /// subscription's many) as JSON, each a message's payload.
    pub(super) fn run(
        &self,
        request: Request,
        session: Arc<Data>,
        outlet: DirectOutlet,
    ) -> BoxStream<'static, String> {
        let this = self.clone();
        // The operation's span covers its admission and every poll of its stream: a
        // query's one response, or a subscription's life.
        let span = admission::operation_span(Transport::WebSocket);
        let admission_span = span.clone();
        let stream = futures::stream::once(async move {
            match this.admit(request).await {
                Ok((admitted, in_flight)) => {
                    admission::record(&admission_span, &admitted);
                    let request = admitted.request.data(outlet.clone());
                    Operation {
                        graphql: Some(
                            this.http
                                .schema
                                .execute_stream_with_session_data(request, session),
                        ),
                        direct: None,
                        outlet,
                        connection: this.connection.clone(),
                        register: admitted.register.map(|r| (this.http.gateway.clone(), r)),
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
/// from then on what [`DirectOutlet::hold`] was given, kept until the operation ends.
struct Operation {
    graphql: Option<BoxStream<'static, Response>>,
    direct: Option<Payloads>,
    outlet: DirectOutlet,
    connection: Arc<Connection>,
    /// A persisted query to store once the operation has passed validation.
    register: Option<(Arc<Gateway>, (String, String))>,
    _in_flight: InFlight,
}

impl Operation {
    /// Called with the operation's first answer: stores its persisted query if it was valid.
    fn settle(&mut self, valid: bool) {
        let Some((gateway, (hash, query))) = self.register.take() else {
            return;
        };
        if valid {
            tokio::spawn(async move {
                if let Err(error) = apq::register(&gateway, &hash, &query).await {
                    tracing::warn!(%error, "could not store a persisted query");
                }
            });
        }
    }
}

impl futures::Stream for Operation {
    type Item = String;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<String>> {
        use std::task::Poll;
        let this = self.get_mut();
        if let Some(direct) = &mut this.direct {
            return direct.poll_next_unpin(cx);
        }
        let Some(graphql) = &mut this.graphql else {
            return Poll::Ready(None);
        };
        match graphql.poll_next_unpin(cx) {
            Poll::Ready(Some(mut response)) => {
                assign_codes(&mut response, &this.connection.id);
                this.settle(!admission::is_request_error(&response));
                Poll::Ready(Some(payload(&response)))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match this.outlet.take() {
                Some(direct) => {
                    // The resolver's stream now lives in `direct`; async-graphql's is idle.
                    this.graphql = None;
                    this.settle(true);
                    this.direct.insert(direct).poll_next_unpin(cx)
                }
                None => Poll::Pending,
            },
        }
    }
}
