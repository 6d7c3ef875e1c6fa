//! Logs and traces of the real binary, in a process of its own (the subscriber is
//! process-wide): `engage serve` with `ENGAGE_LOG_FORMAT=json` and an OTLP endpoint that is
//! a small collector run by the test, which decodes what arrives with `opentelemetry-proto`.

use std::{
    collections::HashMap,
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{body::Bytes, extract::State, http::header, response::IntoResponse, routing::post};
use clap::Parser as _;
use engage::infra::{
    auth::{Role, Tokens},
    redis::RedisTarget,
};
use futures::{SinkExt, StreamExt};
use opentelemetry_proto::tonic::{
    collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse},
    common::v1::{any_value, KeyValue},
    trace::v1::Span,
};
use prost::Message as _;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_tungstenite::tungstenite::{client::IntoClientRequest, Message};

/// A span as received, with the service that sent it.
#[derive(Clone, Debug)]
struct Received {
    service: String,
    span: Span,
}

impl Received {
    fn attribute(&self, key: &str) -> Option<String> {
        attribute(&self.span.attributes, key)
    }
}

fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    let value = attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?;
    Some(match value.value.as_ref()? {
        any_value::Value::StringValue(text) => text.clone(),
        any_value::Value::IntValue(n) => n.to_string(),
        any_value::Value::BoolValue(b) => b.to_string(),
        any_value::Value::DoubleValue(x) => x.to_string(),
        other => format!("{other:?}"),
    })
}

type Collected = Arc<Mutex<Vec<Received>>>;

/// `POST /v1/traces`, as an OpenTelemetry collector answers it.
async fn collect(State(collected): State<Collected>, body: Bytes) -> impl IntoResponse {
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf body");
    let mut collected = collected.lock().unwrap();
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .as_ref()
            .and_then(|resource| attribute(&resource.attributes, "service.name"))
            .unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                collected.push(Received {
                    service: service.clone(),
                    span,
                });
            }
        }
    }
    (
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
}

/// The engage process, its stderr gathered line by line.
struct Engage {
    child: tokio::process::Child,
    base: String,
    stderr: Arc<Mutex<Vec<String>>>,
    redis_prefix: String,
    database_url: String,
    _dir: tempfile::TempDir,
}

impl Engage {
    async fn start(collector: &str, secret: &str) -> Self {
        let unique = uuid::Uuid::new_v4().simple().to_string();
        let dir = tempfile::tempdir().unwrap();
        let redis_prefix = format!("engage-test:{unique}:");
        let database_url = format!("sqlite://{}/engage.db", dir.path().display());
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_engage"))
            .arg("serve")
            .env("ENGAGE_BIND", "127.0.0.1:0")
            .env("ENGAGE_REDIS_PREFIX", &redis_prefix)
            .env("DATABASE_URL", &database_url)
            .env("ENGAGE_JWT_SECRET", secret)
            .env("ENGAGE_ARCHIVE_LINGER_MS", "20")
            .env("ENGAGE_LOG_FORMAT", "json")
            .env("RUST_LOG", "engage=info")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{collector}"))
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .env_remove("OTEL_SDK_DISABLED")
            .env_remove("OTEL_TRACES_EXPORTER")
            .env_remove("OTEL_TRACES_SAMPLER")
            .env_remove("OTEL_RESOURCE_ATTRIBUTES")
            .env("OTEL_SERVICE_NAME", "engage-under-test")
            // No export before the exit: the spans must be flushed when engage stops.
            .env("OTEL_BSP_SCHEDULE_DELAY", "600000")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the binary runs");

        let stderr = Arc::new(Mutex::new(Vec::new()));
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let gathered = stderr.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                gathered.lock().unwrap().push(line);
            }
        });
        // The start-up lines are log lines: the address is in the message of the one that
        // says where engage listens.
        let base = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                let address = stderr.lock().unwrap().iter().find_map(|line| {
                    let message: serde_json::Value = serde_json::from_str(line).ok()?;
                    let message = message["message"].as_str()?;
                    let rest = message.split_once("listening on ")?.1;
                    Some(rest.split_whitespace().next()?.to_string())
                });
                if let Some(address) = address {
                    return address;
                }
                if let Ok(Some(status)) = child.try_wait() {
                    panic!(
                        "engage stopped before listening ({status}): {:?}",
                        stderr.lock().unwrap()
                    );
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .expect("engage listens within a minute");
        // Nothing is expected on stdout; it must not fill up and block the process.
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        tokio::spawn(async move { while let Ok(Some(_)) = stdout.next_line().await {} });
        Self {
            child,
            base,
            stderr,
            redis_prefix,
            database_url,
            _dir: dir,
        }
    }

    /// Stops the process as an orchestrator would (SIGTERM) and waits for it.
    async fn stop(&mut self) {
        let pid = self.child.id().expect("still running") as libc::pid_t;
        // SAFETY: sends a signal to the child this test started.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("engage stops within 30 s of SIGTERM")
            .unwrap();
        assert!(status.success(), "{status}");
        // The reader gets the last lines once the pipe closes.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    async fn remove_keys(&self) {
        let config = engage::app::cli::Cli::try_parse_from(["engage"])
            .expect("defaults parse")
            .config;
        let target = RedisTarget::new(
            &config.redis_url,
            config.redis_mode,
            config.redis_ca_file.as_deref(),
        )
        .unwrap();
        if let Ok(mut conn) = engage::infra::redis::dedicated(&target).await {
            let pattern = format!("{}*", self.redis_prefix);
            let _ = engage::infra::redis::unlink_matching(&mut conn, &pattern).await;
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// Waits until the vote archive has written `votes` rows to SQL.
/// The id of what the mutation `field` created, from a response `body`.
fn created_id(body: &Value, field: &str) -> String {
    body["data"][field]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{body}"))
        .to_string()
}

async fn archived(database_url: &str, votes: i64) {
    let pool = sqlx::SqlitePool::connect(database_url).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let written: Result<i64, _> = sqlx::query_scalar("SELECT COUNT(*) FROM vote_log")
            .fetch_one(&pool)
            .await;
        if written.is_ok_and(|n| n >= votes) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the like was not archived within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_and_otlp_traces_follow_a_request_from_the_caller_to_redis_and_sql() {
    let collected: Collected = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let collector = listener.local_addr().unwrap().to_string();
    let receiver = axum::Router::new()
        .route("/v1/traces", post(collect))
        .with_state(collected.clone());
    tokio::spawn(async move { axum::serve(listener, receiver).await.unwrap() });

    let secret = format!("telemetry-test-{}", uuid::Uuid::new_v4().simple());
    let mut engage = Engage::start(&collector, &secret).await;
    let tokens = Tokens::new(&secret);
    let http = reqwest::Client::new();
    let graphql =
        |token: String, query: &'static str, variables: Value, traceparent: Option<String>| {
            let mut request = http
                .post(format!("{}/graphql", engage.base))
                .bearer_auth(token)
                .json(&json!({ "query": query, "variables": variables }));
            if let Some(traceparent) = traceparent {
                request = request.header("traceparent", traceparent);
            }
            request.send()
        };
    // The body of an untraced request.
    let body_of = |token: String, query: &'static str, variables: Value| {
        let sent = graphql(token, query, variables, None);
        async move { sent.await.unwrap().json::<Value>().await.unwrap() }
    };

    // The caller's trace: its id, and the id of the caller's span.
    let trace_id = hex(&rand::random::<[u8; 16]>());
    let caller_span = hex(&rand::random::<[u8; 8]>());
    let response = graphql(
        tokens.mint(1, Role::Admin, 600, None),
        "mutation Create { createItem(input: { name: \"Traced\", lat: 31.2, lng: 121.4 }) { id } }",
        json!({}),
        Some(format!("00-{trace_id}-{caller_span}-01")),
    )
    .await
    .unwrap();
    let request_id = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    let body: Value = response.json().await.unwrap();
    let item = created_id(&body, "createItem");

    // A like: an event the vote archive moves to SQL in a batch of its own.
    let remark = body_of(
        tokens.mint(7, Role::User, 600, None),
        "mutation($item: ID!) { createRemark(input: { itemId: $item, score: 5, content: \"fine\" }) { id } }",
        json!({ "item": item }),
    )
    .await;
    let remark = created_id(&remark, "createRemark");
    let liked = body_of(
        tokens.mint(8, Role::User, 600, None),
        "mutation($remark: ID!) { likeRemark(remarkId: $remark) { liked } }",
        json!({ "remark": remark }),
    )
    .await;
    assert_eq!(liked["data"]["likeRemark"]["liked"], true, "{liked}");

    // An operation over a WebSocket (graphql-transport-ws).
    let mut upgrade = format!("{}/graphql", engage.base.replacen("http", "ws", 1))
        .into_client_request()
        .unwrap();
    upgrade.headers_mut().insert(
        "sec-websocket-protocol",
        "graphql-transport-ws".parse().unwrap(),
    );
    let (mut socket, _) = tokio_tungstenite::connect_async(upgrade).await.unwrap();
    let mut exchange = async |message: Value, awaited: &str| {
        socket
            .send(Message::text(message.to_string()))
            .await
            .unwrap();
        loop {
            let Some(Ok(Message::Text(text))) = socket.next().await else {
                panic!("the socket closed");
            };
            let answer: Value = serde_json::from_str(&text).unwrap();
            if answer["type"] == awaited {
                return answer;
            }
        }
    };
    exchange(
        json!({ "type": "connection_init", "payload": {} }),
        "connection_ack",
    )
    .await;
    let answer = exchange(
        json!({ "id": "1", "type": "subscribe", "payload": { "query": "query OverWs { __typename }" } }),
        "next",
    )
    .await;
    assert_eq!(answer["payload"]["data"]["__typename"], "Query", "{answer}");
    drop(socket);

    // Once the like is in SQL, engage is stopped: what it recorded is flushed on the way
    // out (nothing was exported before, the batch delay being ten minutes).
    archived(&engage.database_url, 1).await;
    engage.stop().await;
    engage.remove_keys().await;
    let received = collected.lock().unwrap().clone();
    let names = || {
        received
            .iter()
            .map(|r| format!("{} ({})", r.span.name, hex(&r.span.trace_id)))
            .collect::<Vec<_>>()
    };
    assert!(
        received.iter().all(|r| r.service == "engage-under-test"),
        "OTEL_SERVICE_NAME names the service"
    );

    // The caller's trace: the request under the caller's span, the operation under the
    // request, Redis and SQL under the operation.
    let spans: Vec<&Received> = received
        .iter()
        .filter(|r| hex(&r.span.trace_id) == trace_id)
        .collect();
    let named = |name: &str| {
        spans
            .iter()
            .find(|r| r.span.name == name)
            .copied()
            .unwrap_or_else(|| panic!("no span {name} in the caller's trace: {:?}", names()))
    };
    let request = named("POST /graphql");
    assert_eq!(hex(&request.span.parent_span_id), caller_span);
    assert_eq!(
        request.attribute("request_id").as_deref(),
        Some(request_id.as_str())
    );
    assert_eq!(
        request.attribute("http.response.status_code").as_deref(),
        Some("200")
    );
    let operation = named("graphql.operation");
    assert_eq!(operation.span.parent_span_id, request.span.span_id);
    assert_eq!(
        operation.attribute("engage.operation").as_deref(),
        Some("createItem")
    );
    assert_eq!(
        operation.attribute("graphql.operation.type").as_deref(),
        Some("mutation")
    );
    assert_eq!(
        operation.attribute("graphql.operation.name").as_deref(),
        Some("Create")
    );
    let under_operation: Vec<&Received> = spans
        .iter()
        .filter(|r| r.span.parent_span_id == operation.span.span_id)
        .copied()
        .collect();
    let system = |r: &Received| r.attribute("db.system.name");
    assert!(
        under_operation
            .iter()
            .any(|r| r.span.name == "INSERT items" && system(r).as_deref() == Some("sqlite")),
        "{:?}",
        names()
    );
    assert!(
        under_operation
            .iter()
            .any(|r| system(r).as_deref() == Some("redis")
                && (r.span.name.starts_with("EVALSHA ") || r.span.name == "GEOADD")),
        "{:?}",
        names()
    );

    // A WebSocket operation: a trace of its own.
    let over_ws = received
        .iter()
        .find(|r| r.attribute("graphql.operation.name").as_deref() == Some("OverWs"))
        .unwrap_or_else(|| panic!("no span of the WebSocket operation: {:?}", names()));
    assert_eq!(over_ws.span.name, "graphql.operation");
    assert_eq!(
        over_ws.attribute("engage.transport").as_deref(),
        Some("websocket")
    );
    assert_eq!(
        over_ws.attribute("graphql.operation.type").as_deref(),
        Some("query")
    );
    assert!(over_ws.span.parent_span_id.is_empty());

    // The vote archive's batch: a trace of its own, its transaction and statements under it.
    let batch = received
        .iter()
        .find(|r| r.span.name == "vote-archive batch")
        .unwrap_or_else(|| panic!("no vote-archive batch: {:?}", names()));
    assert!(
        batch.span.parent_span_id.is_empty(),
        "a batch begins a trace"
    );
    let transaction = received
        .iter()
        .find(|r| r.span.name == "sql.transaction" && r.span.parent_span_id == batch.span.span_id)
        .unwrap_or_else(|| panic!("no transaction under the batch: {:?}", names()));
    assert!(
        received.iter().any(|r| r.span.name == "INSERT vote_log"
            && r.span.parent_span_id == transaction.span.span_id),
        "{:?}",
        names()
    );

    // Every line is one JSON object; the request's access line carries its request id and
    // the caller's trace id.
    let lines = engage.stderr.lock().unwrap().clone();
    let lines: Vec<Value> = lines
        .iter()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    for line in &lines {
        assert!(
            line["timestamp"].is_string()
                && line["level"].is_string()
                && line["target"].is_string(),
            "{line}"
        );
    }
    let access: Vec<&Value> = lines
        .iter()
        .filter(|line| line["target"] == "engage::access")
        .collect();
    assert_eq!(access.len(), 4, "one access line per request: {access:?}");
    let created = access
        .iter()
        .find(|line| line["request_id"] == request_id.as_str())
        .unwrap_or_else(|| panic!("no access line for {request_id}: {access:?}"));
    assert_eq!(created["method"], "POST");
    assert_eq!(created["path"], "/graphql");
    assert_eq!(created["operation"], "createItem");
    assert_eq!(created["status"], 200);
    assert!(created["duration_ms"].as_f64().is_some(), "{created}");
    assert_eq!(created["trace_id"], trace_id.as_str(), "{created}");
    let operations: HashMap<&str, &str> = access
        .iter()
        .map(|line| {
            (
                line["operation"].as_str().unwrap(),
                line["request_id"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(
        operations.contains_key("createRemark") && operations.contains_key("likeRemark"),
        "{operations:?}"
    );
    let upgraded = access
        .iter()
        .find(|line| line["status"] == 101)
        .unwrap_or_else(|| panic!("no access line for the upgrade: {access:?}"));
    assert_eq!(upgraded["method"], "GET");
    assert_eq!(upgraded["operation"], "-");
}
