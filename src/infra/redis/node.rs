//! engage's own connection to one Redis node over TCP: the one every request shares
//! (`ENGAGE_REDIS_MODE=shared`, the default), whose commands of concurrent requests leave
//! pipelined on one socket, and each stream consumer's own ([`super::own_connection`]). A
//! broken connection is made again by the next command.
//!
//! It replaces the `redis` crate's `ConnectionManager` and `MultiplexedConnection` for one
//! reason, measured: they read replies with a general parser-combinator decoder that cost
//! about 7,400 instructions a reply, 11 % of a like's instructions and 8 % of a sign-in's
//! (`bench/instructions`; BENCHMARKS.md, "What each change bought"). engage speaks RESP2;
//! [`resp::read`] reads a reply in one loop over its bytes. Commands are still built, and
//! replies still converted, by the crate.
//!
//! TLS and Unix-socket targets keep the crate's connections, as do the pool mode, the
//! cluster's links and the live hub's pub/sub.

mod resp;

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use redis::{aio::ConnectionLike, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Value};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    sync::{mpsc, oneshot},
};

// After a refused connection, commands fail at once for a moment rather than each waiting
// on a connection attempt of its own, as the cluster's links do.
use super::{cluster::CONNECT_COOLDOWN, CONNECTION_TIMEOUT};

/// Bytes of commands gathered into one write; more wait for the next.
const WRITE_BATCH: usize = 64 * 1024;
/// What one read asks of the socket at least.
const READ_CHUNK: usize = 16 * 1024;

/// A reconnecting connection to one node: cheap to clone, every clone the same socket.
#[derive(Clone)]
pub(crate) struct NodeConnection {
    inner: Arc<Inner>,
}

struct Inner {
    host: String,
    port: u16,
    settings: redis::RedisConnectionInfo,
    /// How long a command waits for its reply before it fails.
    response_timeout: Duration,
    link: Mutex<Link>,
    /// One connection attempt at a time; the others wait for its outcome.
    connecting: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Link {
    /// The running connection's queue of commands, closed once it has ended.
    requests: Option<mpsc::UnboundedSender<Request>>,
    refused_at: Option<Instant>,
}

/// Commands to send and how their replies are answered.
struct Request {
    packed: Vec<u8>,
    /// Replies the commands bring back.
    replies: usize,
    /// Leading replies that are not answered (a transaction's `MULTI` and `QUEUED`s).
    skip: usize,
    answer: oneshot::Sender<redis::RedisResult<Vec<Value>>>,
}

impl NodeConnection {
    /// The connection to `client`'s node, made by its first command; `None` for a node
    /// reached over TLS or a Unix socket.
    pub(crate) fn of(client: &redis::Client, response_timeout: Duration) -> Option<Self> {
        let info = client.get_connection_info();
        let redis::ConnectionAddr::Tcp(host, port) = info.addr() else {
            return None;
        };
        Some(Self {
            inner: Arc::new(Inner {
                host: host.clone(),
                port: *port,
                settings: info.redis_settings().clone(),
                response_timeout,
                link: Mutex::default(),
                connecting: tokio::sync::Mutex::new(()),
            }),
        })
    }

    async fn send(
        &self,
        packed: Vec<u8>,
        replies: usize,
        skip: usize,
    ) -> redis::RedisResult<Vec<Value>> {
        if replies == 0 {
            return Ok(Vec::new());
        }
        let requests = self.requests().await?;
        let (answer, answered) = oneshot::channel();
        let request = Request {
            packed,
            replies,
            skip,
            answer,
        };
        if requests.send(request).is_err() {
            return Err(broken("closed before the command was sent"));
        }
        match tokio::time::timeout(self.inner.response_timeout, answered).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => Err(broken("closed before the reply came")),
            Err(_) => Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()),
        }
    }

    /// The running connection's queue, connecting first if there is none.
    async fn requests(&self) -> redis::RedisResult<mpsc::UnboundedSender<Request>> {
        if let Some(requests) = self.running() {
            return Ok(requests);
        }
        let _one = self.inner.connecting.lock().await;
        if let Some(requests) = self.running() {
            return Ok(requests);
        }
        let refused_lately = self
            .inner
            .link
            .lock()
            .expect("poisoned")
            .refused_at
            .is_some_and(|at| at.elapsed() < CONNECT_COOLDOWN);
        if refused_lately {
            return Err(broken("refused a connection just now"));
        }
        let connected = tokio::time::timeout(CONNECTION_TIMEOUT, self.connect()).await;
        let mut link = self.inner.link.lock().expect("poisoned");
        match connected {
            Ok(Ok(stream)) => {
                let (requests, queue) = mpsc::unbounded_channel();
                tokio::spawn(drive(stream, queue));
                link.requests = Some(requests.clone());
                link.refused_at = None;
                Ok(requests)
            }
            Ok(Err(error)) => {
                link.refused_at = Some(Instant::now());
                Err(error)
            }
            Err(_) => {
                link.refused_at = Some(Instant::now());
                Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into())
            }
        }
    }

    fn running(&self) -> Option<mpsc::UnboundedSender<Request>> {
        let link = self.inner.link.lock().expect("poisoned");
        link.requests
            .as_ref()
            .filter(|requests| !requests.is_closed())
            .cloned()
    }

    /// A connected socket past its handshake: `AUTH` and `SELECT` as the target says.
    async fn connect(&self) -> redis::RedisResult<TcpStream> {
        let mut stream = TcpStream::connect((self.inner.host.as_str(), self.inner.port)).await?;
        stream.set_nodelay(true)?;
        let settings = &self.inner.settings;
        if let Some(password) = settings.password() {
            let mut auth = redis::cmd("AUTH");
            if let Some(username) = settings.username() {
                auth.arg(username);
            }
            auth.arg(password);
            handshake(&mut stream, &auth).await.map_err(|error| {
                RedisError::from((
                    ErrorKind::AuthenticationFailed,
                    "Redis refused the credentials",
                    error.to_string(),
                ))
            })?;
        }
        if settings.db() != 0 {
            handshake(&mut stream, redis::cmd("SELECT").arg(settings.db())).await?;
        }
        Ok(stream)
    }
}

/// Sends one command on a socket not yet shared and reads its reply: an error reply is the
/// error.
async fn handshake(stream: &mut TcpStream, cmd: &Cmd) -> redis::RedisResult<()> {
    stream.write_all(&cmd.get_packed_command()).await?;
    let mut input = Vec::with_capacity(256);
    loop {
        if stream.read_buf(&mut input).await? == 0 {
            return Err(broken("closed during the handshake"));
        }
        if let Some((reply, _)) = resp::read(&input)? {
            return reply.extract_error().map(drop);
        }
    }
}

/// A request's replies as they come.
struct Waiting {
    replies: Vec<Value>,
    expected: usize,
    skip: usize,
    answer: oneshot::Sender<redis::RedisResult<Vec<Value>>>,
}

impl Waiting {
    /// Its answer: the replies past the skipped ones; a skipped reply that is an error
    /// (a transaction's command refused when queued) is the answer.
    fn answer(mut self) {
        let answer = match self.replies[..self.skip]
            .iter()
            .find(|reply| matches!(reply, Value::ServerError(_)))
        {
            Some(refused) => refused.clone().extract_error().map(|_| Vec::new()),
            None => Ok(self.replies.split_off(self.skip)),
        };
        // A requester that gave up (its timeout) no longer listens.
        let _ = self.answer.send(answer);
    }
}

/// Runs one socket: writes the queued commands in batches, reads the replies and answers
/// each request in turn. Ends when the socket breaks (every request waiting is answered
/// with the error) or when every handle to it is gone.
async fn drive(mut stream: TcpStream, mut requests: mpsc::UnboundedReceiver<Request>) {
    let (mut reader, mut writer) = stream.split();
    let mut waiting: VecDeque<Waiting> = VecDeque::new();
    let mut output: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut written = 0;
    let mut input: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut start = 0;
    let failure: RedisError = loop {
        tokio::select! {
            biased;
            read = reader.read_buf(&mut input) => match read {
                Ok(0) => break broken("closed by Redis"),
                Ok(_) => {
                    match answer_read(&input[start..], &mut waiting) {
                        Ok(used) => start += used,
                        Err(error) => break error,
                    }
                    if start == input.len() {
                        input.clear();
                        start = 0;
                    } else if start > input.capacity() / 2 {
                        input.drain(..start);
                        start = 0;
                    }
                    input.reserve(READ_CHUNK);
                }
                Err(error) => break error.into(),
            },
            wrote = writer.write(&output[written..]), if written < output.len() => match wrote {
                Ok(0) => break broken("closed while writing"),
                Ok(n) => {
                    written += n;
                    if written == output.len() {
                        output.clear();
                        written = 0;
                    }
                }
                Err(error) => break error.into(),
            },
            request = requests.recv(), if output.len() < WRITE_BATCH => {
                let Some(mut request) = request else { return };
                loop {
                    output.extend_from_slice(&request.packed);
                    waiting.push_back(Waiting {
                        replies: Vec::with_capacity(request.replies),
                        expected: request.replies,
                        skip: request.skip,
                        answer: request.answer,
                    });
                    if output.len() >= WRITE_BATCH {
                        break;
                    }
                    match requests.try_recv() {
                        Ok(next) => request = next,
                        Err(_) => break,
                    }
                }
            },
        }
    };
    tracing::debug!(%failure, "a Redis connection ended");
    // Dropped with its queue: the requests not taken yet are answered "closed".
    requests.close();
    for request in waiting {
        let _ = request.answer.send(Err(failure.clone()));
    }
}

/// Reads every whole reply at the front of `input` and gives each to the request waiting
/// for it: the bytes read.
fn answer_read(input: &[u8], waiting: &mut VecDeque<Waiting>) -> redis::RedisResult<usize> {
    let mut used = 0;
    while let Some((reply, length)) = resp::read(&input[used..])? {
        used += length;
        let Some(front) = waiting.front_mut() else {
            return Err(RedisError::from((
                ErrorKind::Parse,
                "a reply nobody asked for",
            )));
        };
        front.replies.push(reply);
        if front.replies.len() == front.expected {
            waiting.pop_front().expect("a front").answer();
        }
    }
    Ok(used)
}

fn broken(what: &str) -> RedisError {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        format!("the Redis connection {what}"),
    )
    .into()
}

impl ConnectionLike for NodeConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut replies = self.send(cmd.get_packed_command(), 1, 0).await?;
            replies.pop().ok_or_else(|| broken("answered nothing"))
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(self.send(pipeline.get_packed_pipeline(), offset + count, offset))
    }

    fn get_db(&self) -> i64 {
        self.inner.settings.db()
    }
}

#[cfg(test)]
mod tests {
    use redis::{aio::ConnectionLike, ErrorKind, ServerErrorKind};

    use super::NodeConnection;

    /// This machine's Redis: every test runs against a real one.
    const URL: &str = "redis://127.0.0.1:6379";

    fn node(url: &str) -> NodeConnection {
        let client = redis::Client::open(url).unwrap();
        NodeConnection::of(&client, super::super::RESPONSE_TIMEOUT).expect("a TCP address")
    }

    /// Keys of one test, and their removal.
    struct Scratch(String);

    impl Scratch {
        fn new() -> Self {
            Self(format!("engage-node-test:{}:", uuid::Uuid::new_v4()))
        }

        fn key(&self, name: impl std::fmt::Display) -> String {
            format!("{}{name}", self.0)
        }

        async fn remove(&self, conn: &mut impl ConnectionLike) {
            let keys = super::super::scan_node(conn, &format!("{}*", self.0))
                .await
                .unwrap();
            if !keys.is_empty() {
                let () = redis::cmd("UNLINK")
                    .arg(keys)
                    .query_async(conn)
                    .await
                    .unwrap();
            }
        }
    }

    #[tokio::test]
    async fn concurrent_commands_and_pipelines_each_get_their_own_replies() {
        let node = node(URL);
        let scratch = Scratch::new();
        let requests = (0..600_i64).map(|i| {
            let mut conn = node.clone();
            let key = scratch.key(i);
            tokio::spawn(async move {
                if i % 2 == 0 {
                    let count: i64 = redis::cmd("INCRBY")
                        .arg(&key)
                        .arg(i)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    assert_eq!(count, i);
                } else {
                    let (count, text, missing): (i64, String, Option<String>) = redis::pipe()
                        .cmd("INCRBY")
                        .arg(&key)
                        .arg(i)
                        .cmd("GET")
                        .arg(&key)
                        .cmd("GET")
                        .arg(format!("{key}:none"))
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    assert_eq!((count, text, missing), (i, i.to_string(), None));
                }
            })
        });
        for request in futures::future::join_all(requests).await {
            request.unwrap();
        }
        scratch.remove(&mut node.clone()).await;
    }

    #[tokio::test]
    async fn an_error_reply_answers_its_own_command_and_the_connection_goes_on() {
        let mut conn = node(URL);
        let scratch = Scratch::new();
        let missing = redis::cmd("EVALSHA")
            .arg("0".repeat(40))
            .arg(0)
            .query_async::<()>(&mut conn)
            .await
            .unwrap_err();
        assert_eq!(missing.kind(), ErrorKind::Server(ServerErrorKind::NoScript));
        let text = scratch.key("text");
        let wrong_type = redis::pipe()
            .cmd("SET")
            .arg(&text)
            .arg("a")
            .ignore()
            .cmd("LPUSH")
            .arg(&text)
            .arg("b")
            .query_async::<(i64,)>(&mut conn)
            .await
            .unwrap_err();
        assert!(wrong_type.to_string().contains("WRONGTYPE"), "{wrong_type}");
        // A transaction with a command refused when queued is refused whole.
        let refused = redis::pipe()
            .atomic()
            .cmd("SET")
            .arg(&text)
            .arg("c")
            .cmd("NO-SUCH-COMMAND")
            .query_async::<()>(&mut conn)
            .await;
        assert!(refused.is_err());
        let (set, value): (String, String) = redis::pipe()
            .atomic()
            .cmd("SET")
            .arg(&text)
            .arg("d")
            .cmd("GET")
            .arg(&text)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!((set.as_str(), value.as_str()), ("OK", "d"));
        let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
        assert_eq!(pong, "PONG");
        scratch.remove(&mut conn).await;
    }

    #[tokio::test]
    async fn replies_larger_than_a_read_come_whole() {
        let mut conn = node(URL);
        let scratch = Scratch::new();
        let big: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 251) as u8).collect();
        let list = scratch.key("list");
        let () = redis::cmd("SET")
            .arg(scratch.key("big"))
            .arg(&big)
            .query_async(&mut conn)
            .await
            .unwrap();
        let mut push = redis::pipe();
        for chunk in (0..20_000).collect::<Vec<i64>>().chunks(1000) {
            push.cmd("RPUSH").arg(&list).arg(chunk).ignore();
        }
        let () = push.query_async(&mut conn).await.unwrap();
        let (read, items): (Vec<u8>, Vec<i64>) = redis::pipe()
            .cmd("GET")
            .arg(scratch.key("big"))
            .cmd("LRANGE")
            .arg(&list)
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(read == big);
        assert_eq!(items, (0..20_000).collect::<Vec<i64>>());
        scratch.remove(&mut conn).await;
    }

    #[tokio::test]
    async fn a_killed_connection_is_made_again_by_a_later_command() {
        let mut conn = node(URL);
        let first: i64 = redis::cmd("CLIENT")
            .arg("ID")
            .query_async(&mut conn)
            .await
            .unwrap();
        let mut other = redis::Client::open(URL)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let killed: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(first)
            .query_async(&mut other)
            .await
            .unwrap();
        assert_eq!(killed, 1);
        // A command may still meet the closed socket; one that follows connects again.
        let mut again = None;
        for _ in 0..40 {
            match redis::cmd("CLIENT")
                .arg("ID")
                .query_async::<i64>(&mut conn)
                .await
            {
                Ok(id) => {
                    again = Some(id);
                    break;
                }
                Err(error) => assert!(error.is_io_error(), "{error}"),
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let again = again.expect("connected again");
        assert_ne!(again, first);
    }

    #[tokio::test]
    async fn a_node_that_refuses_connections_fails_commands_at_once() {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let mut conn = node(&format!("redis://127.0.0.1:{port}"));
        for _ in 0..3 {
            let error = redis::cmd("PING")
                .query_async::<String>(&mut conn)
                .await
                .unwrap_err();
            assert!(error.is_io_error(), "{error}");
        }
    }

    #[tokio::test]
    async fn a_database_in_the_url_is_selected() {
        let mut conn = node(&format!("{URL}/3"));
        assert_eq!(conn.get_db(), 3);
        let scratch = Scratch::new();
        let () = redis::cmd("SET")
            .arg(scratch.key("db"))
            .arg(1)
            .query_async(&mut conn)
            .await
            .unwrap();
        let mut db3 = redis::Client::open(format!("{URL}/3"))
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let seen: Option<i64> = redis::cmd("GET")
            .arg(scratch.key("db"))
            .query_async(&mut db3)
            .await
            .unwrap();
        assert_eq!(seen, Some(1));
        scratch.remove(&mut conn).await;
    }
}
