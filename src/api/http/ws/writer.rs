//! The sending half of one WebSocket, shared by its session and by the tasks that follow
//! counters for its subscriptions (the [`Socket`] of their direct delivery, see
//! [`crate::api::live`]). The session waits for the socket as any writer would; the counter
//! tasks never wait: they write if the socket takes the message now, and otherwise leave it
//! to the session to drain the socket and then call them back ([`SocketWriter::catch_up`]).
//! At most one message beyond what the kernel took is ever buffered for a client that does
//! not read.

use std::{
    future::poll_fn,
    sync::{Mutex, Weak},
    task::{Context, Poll},
};

use axum::extract::ws::{Message, Utf8Bytes, WebSocket};
use futures::{stream::SplitSink, Sink};
use tokio::sync::Notify;

use crate::api::live::{DirectWatcher, Socket};

pub(super) struct SocketWriter {
    state: Mutex<WriterState>,
    /// Told when a message was left in the buffer for the session to write out.
    stalled: Notify,
    /// Watchers that could not send, to be called back once the socket drained.
    behind: Mutex<Vec<Weak<DirectWatcher>>>,
}

struct WriterState {
    sink: SplitSink<WebSocket, Message>,
    /// A message waits in the buffer for the socket: nothing more until it is out.
    stalled: bool,
    /// The socket failed; the session is ending and nothing more is sent.
    broken: bool,
}

/// A socket that failed while being written.
#[derive(Debug)]
pub(super) struct Broken;

impl SocketWriter {
    pub(super) fn new(sink: SplitSink<WebSocket, Message>) -> Self {
        Self {
            state: Mutex::new(WriterState {
                sink,
                stalled: false,
                broken: false,
            }),
            stalled: Notify::new(),
            behind: Mutex::new(Vec::new()),
        }
    }

    /// Sends `message` once the socket takes it (the session's own messages).
    pub(super) async fn send(&self, message: Message) -> Result<(), Broken> {
        let mut message = Some(message);
        poll_fn(|cx| {
            let mut state = self.state.lock().expect("poisoned");
            if state.broken {
                return Poll::Ready(Err(Broken));
            }
            if message.is_some() {
                match state.offer(cx, || message.take().expect("offered once")) {
                    Poll::Ready(Ok(())) => {}
                    other => return other,
                }
            }
            state.poll_out(cx)
        })
        .await?;
        self.catch_up();
        Ok(())
    }

    /// Waits until the socket is told to stall (a counter's message is waiting in the
    /// buffer), then until it has been written out, then calls back who could not send.
    pub(super) async fn drain(&self) -> Result<(), Broken> {
        self.stalled.notified().await;
        poll_fn(|cx| self.state.lock().expect("poisoned").poll_out(cx)).await?;
        self.catch_up();
        Ok(())
    }

    pub(super) async fn close(&self) {
        let _ = poll_fn(|cx| {
            let mut state = self.state.lock().expect("poisoned");
            state.broken = true;
            std::pin::Pin::new(&mut state.sink).poll_close(cx)
        })
        .await;
    }

    /// Hands the watchers that could not send another try.
    fn catch_up(&self) {
        let behind = std::mem::take(&mut *self.behind.lock().expect("poisoned"));
        for watcher in behind {
            if let Some(watcher) = watcher.upgrade() {
                watcher.catch_up();
            }
        }
    }
}

impl Socket for SocketWriter {
    /// A message the kernel did not take at once stays buffered and counts as sent: the
    /// session writes it out.
    fn try_send(&self, message: &dyn Fn() -> Utf8Bytes) -> bool {
        let mut state = self.state.lock().expect("poisoned");
        if state.broken {
            return true; // the session is ending: nothing to keep for later
        }
        if state.stalled {
            return false;
        }
        // Whoever waits on the socket is the session (see `drain`), never this caller.
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        match state.offer(&mut cx, || Message::Text(message())) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(Broken)) => return true,
            Poll::Pending => {
                self.stalled.notify_one();
                return false;
            }
        }
        if state.poll_out(&mut cx).is_pending() {
            self.stalled.notify_one();
        }
        true
    }

    /// Remembers a watcher that could not send, for [`SocketWriter::catch_up`].
    fn wait_for_drain(&self, watcher: Weak<DirectWatcher>) {
        self.behind.lock().expect("poisoned").push(watcher);
        // It may have drained meanwhile: make sure the session looks.
        self.stalled.notify_one();
    }
}

impl WriterState {
    /// Hands the sink `message` once it is ready for one (until then `message` is not
    /// called, and the socket counts as stalled).
    fn offer(
        &mut self,
        cx: &mut Context<'_>,
        message: impl FnOnce() -> Message,
    ) -> Poll<Result<(), Broken>> {
        match std::pin::Pin::new(&mut self.sink).poll_ready(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(_)) => return self.fail(),
            Poll::Pending => {
                self.stalled = true;
                return Poll::Pending;
            }
        }
        if std::pin::Pin::new(&mut self.sink)
            .start_send(message())
            .is_err()
        {
            return self.fail();
        }
        Poll::Ready(Ok(()))
    }

    /// Writes out what is buffered.
    fn poll_out(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Broken>> {
        match std::pin::Pin::new(&mut self.sink).poll_flush(cx) {
            Poll::Ready(Ok(())) => {
                self.stalled = false;
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(_)) => self.fail(),
            Poll::Pending => {
                self.stalled = true;
                Poll::Pending
            }
        }
    }

    fn fail(&mut self) -> Poll<Result<(), Broken>> {
        self.broken = true;
        Poll::Ready(Err(Broken))
    }
}
