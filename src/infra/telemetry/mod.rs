//! Logs and traces: the process's one `tracing` subscriber.
//!
//! - **Logs** go to stderr, as text (`ENGAGE_LOG_FORMAT=text`, colour codes only at a
//!   terminal) or as one JSON object a line (`json`, see `json.rs`), filtered by `RUST_LOG`.
//!   A JSON line written while a request is served carries its `request_id`, and while a
//!   trace is recorded its `trace_id` and `span_id`.
//! - **Traces** are exported over OTLP (HTTP/protobuf) when `OTEL_EXPORTER_OTLP_ENDPOINT`
//!   (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set; the other standard `OTEL_` variables
//!   of the SDK apply (service name, headers, timeout, sampler, batch sizes). The spans:
//!   `request` (the HTTP request, continuing the caller's W3C `traceparent`), under it
//!   `graphql.operation`, under that one span per Redis round trip (`redis`, made where
//!   every command passes: `infra::redis::counting`, `infra::redis::spans`) and per SQL
//!   statement (`sql.rs`, from sqlx's own events); a WebSocket operation and a stream
//!   consumer's batch are traces of their own (`stream.batch`, with `sql.transaction`
//!   under it).
//!
//! Unset, no span is built: every span of this crate is at DEBUG under one of the
//! [`SPAN_TARGETS`], which the default filter leaves off (a disabled callsite costs a load
//! and a branch), and the Redis and SQL spans are not even asked for outside a sampled
//! trace ([`in_trace`]). The one exception is the JSON log: a light request span (its id
//! only) per request, the log lines' way to their request id. The exporter batches spans
//! on a thread of its own and sends them from there; [`Telemetry`] flushes what is left
//! when dropped.

mod json;
mod sql;

use std::sync::{
    atomic::{AtomicBool, Ordering},
    OnceLock,
};

use anyhow::Context as _;
use opentelemetry::{
    propagation::{Extractor, TextMapPropagator},
    trace::{TraceContextExt, TracerProvider as _},
    Context,
};
use opentelemetry_sdk::{propagation::TraceContextPropagator, trace::SdkTracerProvider, Resource};
use tracing::{Level, Metadata};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::{
    filter::{filter_fn, FilterExt},
    layer::SubscriberExt,
    util::SubscriberInitExt,
    EnvFilter, Layer,
};

/// How log lines are written (`ENGAGE_LOG_FORMAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// For people: `2026-05-01T10:00:00.123456Z  INFO engage::access: served method=POST …`.
    #[default]
    Text,
    /// For collectors: one JSON object a line.
    Json,
}

/// The access log: a line per HTTP request (info; probes at debug).
pub(crate) const ACCESS: &str = "engage::access";
/// The targets of this crate's spans, all at DEBUG.
pub(crate) const REQUEST: &str = "engage::request";
pub(crate) const GRAPHQL: &str = "engage::graphql";
pub(crate) const REDIS: &str = "engage::redis";
pub(crate) const SQL: &str = "engage::sql";
pub(crate) const STREAM: &str = "engage::stream";
pub(crate) const SPAN_TARGETS: [&str; 5] = [REQUEST, GRAPHQL, REDIS, SQL, STREAM];

/// The filter when `RUST_LOG` is unset. The exporter's own complaints (a collector that
/// does not answer) come under `opentelemetry`.
pub(crate) const DEFAULT_FILTER: &str = "engage=info,tower_http=warn,opentelemetry=warn";

/// Whether spans are exported (set once, by [`init`]).
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// The SQL backend, for the `db.system.name` of statement spans (set by `Db::connect`).
static SQL_SYSTEM: OnceLock<&'static str> = OnceLock::new();

/// The subscriber's handles: dropping it flushes the spans not yet exported.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        let Some(provider) = self.provider.take() else {
            return;
        };
        // The batch processor's thread sends what it holds and stops; waiting for it would
        // block an async worker, so the wait happens on a thread of its own.
        let flushed = std::thread::spawn(move || provider.shutdown()).join();
        if let Ok(Err(error)) = flushed {
            eprintln!("engage: traces not flushed: {error}");
        }
    }
}

/// Installs the process's subscriber: logs in `format`, and OTLP traces when configured.
pub fn init(format: LogFormat) -> anyhow::Result<Telemetry> {
    let (provider, notes) = tracer_provider()?;
    let env_filter =
        || EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let logs = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            // Colour codes only for a person at a terminal, never into a file or a collector.
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(env_filter())
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .event_format(json::JsonLines)
            // The request span is what gives a line its request id, whatever RUST_LOG says.
            .with_filter(
                env_filter().or(filter_fn(|meta| meta.is_span() && meta.target() == REQUEST)
                    .with_max_level_hint(Level::DEBUG)),
            )
            .boxed(),
    };
    let traces = provider.as_ref().map(|provider| {
        let tracer = provider.tracer("engage");
        let spans = tracing_opentelemetry::layer()
            .with_tracer(tracer.clone())
            // Spans carry their own fields only: no source location, thread, target, nor
            // the busy/idle clock (two clock reads per poll).
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            .with_filter(filter_fn(exported).with_max_level_hint(Level::DEBUG));
        let statements = sql::StatementSpans::new(tracer).with_filter(
            filter_fn(|meta| meta.target() == "sqlx::query").with_max_level_hint(Level::DEBUG),
        );
        spans.and_then(statements)
    });
    tracing_subscriber::registry()
        .with(logs)
        .with(traces)
        .try_init()
        .context("installing the log subscriber")?;
    EXPORTING.store(provider.is_some(), Ordering::Relaxed);
    for note in notes {
        tracing::warn!("{note}");
    }
    Ok(Telemetry { provider })
}

/// What the span exporter receives: this crate's spans, and its events at INFO and above
/// (as events of the span they happen in; an ERROR marks the span failed). Never the
/// exporter's own events, which would feed themselves.
fn exported(meta: &Metadata<'_>) -> bool {
    exported_from(meta.target(), *meta.level())
}

fn exported_from(target: &str, level: Level) -> bool {
    if !target.starts_with("engage") || target == ACCESS {
        return false;
    }
    level <= Level::INFO || SPAN_TARGETS.contains(&target)
}

/// The tracer provider, when an OTLP endpoint is configured; and what to warn about once
/// logging is set up.
fn tracer_provider() -> anyhow::Result<(Option<SdkTracerProvider>, Vec<String>)> {
    let set = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let mut notes = Vec::new();
    if set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
        || set("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim().eq_ignore_ascii_case("none"))
    {
        return Ok((None, notes));
    }
    if set("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
        && set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none()
    {
        return Ok((None, notes));
    }
    // The exporter would quietly send to localhost:4318 instead of a URL it cannot read.
    for variable in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ] {
        if let Some(url) = set(variable) {
            let parsed = reqwest::Url::parse(url.trim());
            if !parsed.is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.has_host()) {
                anyhow::bail!("{variable}={url} is not an http:// or https:// URL");
            }
        }
    }
    for variable in [
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    ] {
        if let Some(protocol) = set(variable).filter(|p| p.trim() != "http/protobuf") {
            notes.push(format!(
                "{variable}={protocol} is not supported: exporting traces over http/protobuf"
            ));
        }
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .context("the OTLP trace exporter (OTEL_EXPORTER_OTLP_ENDPOINT)")?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource())
        .build();
    Ok((Some(provider), notes))
}

/// `service.name` from `OTEL_SERVICE_NAME` (or `OTEL_RESOURCE_ATTRIBUTES`), else `engage`;
/// `service.version` the crate's.
fn resource() -> Resource {
    let detected = Resource::builder().build();
    let named = detected
        .get(&opentelemetry::Key::new("service.name"))
        .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
    let builder = Resource::builder().with_attribute(opentelemetry::KeyValue::new(
        "service.version",
        env!("CARGO_PKG_VERSION"),
    ));
    if named {
        builder.build()
    } else {
        builder.with_service_name("engage").build()
    }
}

/// Whether spans are exported at all.
pub(crate) fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// Whether the code running now belongs to a trace that is recorded (sampled): the Redis
/// and SQL spans are only worth building then (a stream worker's idle polls, or a request
/// the sampler left out, are not).
#[inline]
pub(crate) fn in_trace() -> bool {
    exporting() && Context::map_current(|cx| cx.span().span_context().is_sampled())
}

/// Makes `span` continue the trace of the caller's W3C `traceparent`, if it sent one.
pub(crate) fn continue_trace(span: &tracing::Span, carrier: &dyn Extractor) {
    if !exporting() || span.is_disabled() || carrier.get("traceparent").is_none() {
        return;
    }
    static PROPAGATOR: OnceLock<TraceContextPropagator> = OnceLock::new();
    let parent = PROPAGATOR
        .get_or_init(TraceContextPropagator::new)
        .extract(carrier);
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
}

/// Notes the SQL backend for the statement spans.
pub(crate) fn set_sql_system(system: &'static str) {
    let _ = SQL_SYSTEM.set(system);
}

fn sql_system() -> &'static str {
    SQL_SYSTEM.get().copied().unwrap_or("other_sql")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exporter_takes_this_crates_spans_and_notable_events_only() {
        assert!(exported_from(REDIS, Level::DEBUG));
        assert!(exported_from("engage::infra::streams", Level::WARN));
        assert!(!exported_from("engage::infra::streams", Level::DEBUG));
        assert!(!exported_from(ACCESS, Level::INFO));
        assert!(!exported_from("opentelemetry_sdk", Level::ERROR));
        assert!(!exported_from("sqlx::query", Level::DEBUG));
    }
}
