//! The operations of one WebSocket: what they share ([`Connection`]) and the executor
//! async-graphql hands each `subscribe` ([`Admitter`]): the same [`admission`] as an HTTP
//! request first (token still valid, rates, size, parse, cost), a cap on the operations
//! running at once, then the schema.

use std::{
    net::IpAddr,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, OnceLock,
    },
};

use async_graphql::{BatchRequest, BatchResponse, Data, Executor, Request, Response, ServerError};
use futures::{stream::BoxStream, StreamExt};
use tracing::Instrument;

use crate::{
    api::http::{
        admission::{self, Caller, RawOperation, Transport},
        apq, HttpState,
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
    /// A `connection_init` was refused for its token (closed with 4403, not 1002).
    pub(super) refused: AtomicBool,
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
            refused: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            max_in_flight: http.gateway.config.ws_max_operations,
            max_subscriptions: http.gateway.config.max_subscriptions_per_connection,
        }
    }
}

/// The executor async-graphql hands each operation of a socket: admission first, then the
/// schema.
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
fn refusal(error: &AppError) -> Response {
    metrics::record_error(error.code());
    let mut server_error = ServerError::new(error.public_message(), None);
    error.write_extensions(server_error.extensions.get_or_insert_with(Default::default));
    Response::from_errors(vec![server_error])
}

impl Executor for Admitter {
    async fn execute(&self, request: Request) -> Response {
        let span = admission::operation_span(Transport::WebSocket);
        let recorded = span.clone();
        async {
            match self.admit(request).await {
                Ok((admitted, _in_flight)) => {
                    admission::record(&recorded, &admitted);
                    let mut response = self.http.schema.execute(admitted.request).await;
                    assign_codes(&mut response, &self.connection.id);
                    response
                }
                Err(error) => refusal(&error),
            }
        }
        .instrument(span)
        .await
    }

    async fn execute_batch(&self, batch: BatchRequest) -> BatchResponse {
        match batch {
            BatchRequest::Single(request) => BatchResponse::Single(self.execute(request).await),
            BatchRequest::Batch(_) => BatchResponse::Single(refusal(&AppError::client(
                ErrorCode::BadRequest,
                "batched requests are not supported",
            ))),
        }
    }

    fn execute_stream(
        &self,
        request: Request,
        session_data: Option<Arc<Data>>,
    ) -> BoxStream<'static, Response> {
        let this = self.clone();
        // The operation's span covers its admission and every poll of its stream: a
        // query's one response, or a subscription's life.
        let span = admission::operation_span(Transport::WebSocket);
        let admission_span = span.clone();
        let stream = futures::stream::once(async move {
            match this.admit(request).await {
                Ok((admitted, in_flight)) => {
                    admission::record(&admission_span, &admitted);
                    let mut register = admitted.register.map(|r| (this.http.gateway.clone(), r));
                    let connection = this.connection.clone();
                    this.http
                        .schema
                        .execute_stream_with_session_data(
                            admitted.request,
                            session_data.unwrap_or_default(),
                        )
                        .map(move |mut response| {
                            let _held = &in_flight;
                            assign_codes(&mut response, &connection.id);
                            // A persisted query is stored once it has passed validation.
                            if let Some((gateway, (hash, query))) = register.take() {
                                if !admission::is_request_error(&response) {
                                    tokio::spawn(async move {
                                        if let Err(error) = apq::register(&gateway, &hash, &query).await {
                                            tracing::warn!(%error, "could not store a persisted query");
                                        }
                                    });
                                }
                            }
                            response
                        })
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
        InSpan { stream, span }.boxed()
    }
}

/// A stream polled inside its span.
struct InSpan {
    stream: BoxStream<'static, Response>,
    span: tracing::Span,
}

impl futures::Stream for InSpan {
    type Item = Response;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Response>> {
        let this = self.get_mut();
        let _entered = this.span.enter();
        this.stream.poll_next_unpin(cx)
    }
}
