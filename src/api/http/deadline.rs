//! The one deadline of a request body (`ENGAGE_BODY_READ_TIMEOUT_SECONDS`): from the moment
//! its headers were read, however the body trickles. A handler still reading it then reads
//! an error, and the request is answered 408 with `BAD_REQUEST` and `Connection: close`,
//! whatever the handler made of the error.
//!
//! tower-http's `TimeoutBody` was not used: its timer is an idle timer between frames,
//! restarted by every byte, so a body sent a byte every few seconds held its connection for
//! ever.

use std::{
    future::Future,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    task::{Context, Poll},
    time::Duration,
};

use axum::{
    body::{Body, Bytes},
    http::{header, HeaderValue, StatusCode},
    response::Response,
};
use hyper::body::{Body as _, Frame, Incoming, SizeHint};
use tokio::time::{Instant, Sleep};

use super::plain_error;
use crate::infra::error::{AppError, ErrorCode};

/// Whether a request's body ran out of time, for [`super::edge`] to answer 408.
#[derive(Clone)]
pub(crate) struct BodyWatch {
    expired: Arc<AtomicBool>,
    limit: Duration,
}

impl BodyWatch {
    pub(crate) fn expired(&self) -> bool {
        self.expired.load(Ordering::Acquire)
    }

    /// The answer to a request whose body did not arrive in time; the connection closes
    /// after it, since the rest of the body may still be on its way.
    pub(crate) fn response(&self) -> Response {
        let error = AppError::client(
            ErrorCode::BadRequest,
            format!(
                "the request body did not arrive within {} s",
                self.limit.as_secs()
            ),
        );
        let mut response = plain_error(StatusCode::REQUEST_TIMEOUT, &error);
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        response
    }
}

/// `body` with its deadline `limit` from now, and what tells whether it ran out. A request
/// without a body is handed on as it is (no timer, no allocation).
pub(crate) fn bound(body: Incoming, limit: Duration) -> (Body, Option<BodyWatch>) {
    if body.is_end_stream() {
        return (Body::new(body), None);
    }
    let watch = BodyWatch {
        expired: Arc::default(),
        limit,
    };
    let body = DeadlineBody {
        inner: body,
        deadline: Instant::now() + limit,
        timer: None,
        expired: watch.expired.clone(),
    };
    (Body::new(body), Some(watch))
}

/// The request body has been arriving for longer than its deadline.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive in time")]
pub(crate) struct BodyTimedOut;

struct DeadlineBody {
    inner: Incoming,
    deadline: Instant,
    /// Started the first time the body is not ready: a body that arrives at once, as
    /// nearly all do, costs no timer.
    timer: Option<Pin<Box<Sleep>>>,
    expired: Arc<AtomicBool>,
}

impl hyper::body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if this.expired.load(Ordering::Relaxed) {
            return Poll::Ready(Some(Err(BodyTimedOut.into())));
        }
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        let deadline = this.deadline;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                this.expired.store(true, Ordering::Release);
                Poll::Ready(Some(Err(BodyTimedOut.into())))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
