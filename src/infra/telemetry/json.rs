//! `ENGAGE_LOG_FORMAT=json`: one JSON object a line, flat, for a log collector:
//!
//! ```json
//! {"timestamp":"2026-05-01T10:00:00.123456Z","level":"INFO","target":"engage::access",
//!  "message":"served","duration_ms":1.234,"method":"POST","operation":"likeRemark",
//!  "path":"/graphql","request_id":"5f3a9c1e-2a","status":200,
//!  "trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7"}
//! ```
//!
//! `timestamp`, `level`, `target`, `message`; the event's other fields by name; the
//! `request_id` of the request span it happened in (an event's own field of that name
//! wins); while a trace is recorded, the ids of the current OpenTelemetry span. tracing-subscriber's own JSON format nests span fields in a list
//! and knows nothing of trace ids.

use std::fmt;

use opentelemetry::{trace::TraceContextExt, Context};
use serde::ser::{SerializeMap, Serializer as _};
use serde_json::{Map, Value};
use tracing::{
    field::{Field, Visit},
    Event, Subscriber,
};
use tracing_log::NormalizeEvent;
use tracing_subscriber::{
    fmt::{format::Writer, FmtContext, FormatEvent, FormatFields, FormattedFields},
    registry::LookupSpan,
};

/// The event formatter of the JSON log.
pub(crate) struct JsonLines;

/// The field of the request span that every line written inside it carries.
const REQUEST_ID: &str = "request_id";
/// Keys every line begins with; fields of these names are dropped.
const FIXED: [&str; 3] = ["timestamp", "level", "target"];
/// Keys every line ends with while a trace is recorded.
const TRACE: [&str; 2] = ["trace_id", "span_id"];

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let normalized = event.normalized_metadata();
        let meta = normalized.as_ref().unwrap_or_else(|| event.metadata());

        let mut fields = Fields(Map::new());
        event.record(&mut fields);
        let mut fields = fields.0;
        // The request id of the request span it happened in, unless the event has its own.
        if !fields.contains_key(REQUEST_ID) {
            if let Some(id) = ctx.event_scope().and_then(|scope| {
                scope.into_iter().find_map(|span| {
                    let extensions = span.extensions();
                    let formatted = extensions.get::<FormattedFields<N>>()?;
                    let Ok(Value::Object(mut span_fields)) =
                        serde_json::from_str::<Value>(&formatted.fields)
                    else {
                        return None;
                    };
                    span_fields.remove(REQUEST_ID)
                })
            }) {
                fields.insert(REQUEST_ID.into(), id);
            }
        }
        let trace = super::exporting()
            .then(|| {
                Context::map_current(|cx| {
                    let span = cx.span();
                    let context = span.span_context();
                    context.is_valid().then(|| {
                        [
                            context.trace_id().to_string(),
                            context.span_id().to_string(),
                        ]
                    })
                })
            })
            .flatten();

        let mut line = Vec::with_capacity(256);
        let mut serializer = serde_json::Serializer::new(&mut line);
        let mut map = serializer.serialize_map(None).map_err(|_| fmt::Error)?;
        let timestamp = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        let head = [timestamp.as_str(), meta.level().as_str(), meta.target()];
        for (key, value) in FIXED.iter().zip(head) {
            map.serialize_entry(key, value).map_err(|_| fmt::Error)?;
        }
        // The message first, then the rest in the order of their names.
        if let Some(message) = fields.remove("message") {
            map.serialize_entry("message", &message)
                .map_err(|_| fmt::Error)?;
        }
        for (key, value) in &fields {
            let key = key.as_str();
            if FIXED.contains(&key) || TRACE.contains(&key) || key.starts_with("log.") {
                continue;
            }
            map.serialize_entry(key, value).map_err(|_| fmt::Error)?;
        }
        if let Some(ids) = &trace {
            for (key, value) in TRACE.iter().zip(ids) {
                map.serialize_entry(key, value).map_err(|_| fmt::Error)?;
            }
        }
        map.end().map_err(|_| fmt::Error)?;
        let line = std::str::from_utf8(&line).map_err(|_| fmt::Error)?;
        writer.write_str(line)?;
        writer.write_char('\n')
    }
}

/// An event's fields as JSON values.
struct Fields(Map<String, Value>);

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        self.0.insert(field.name().to_string(), value);
    }
}

impl Visit for Fields {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Value::from(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::from(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::from(value));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, Value::from(value.to_string()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::from(format!("{value:?}")));
    }
}

#[cfg(test)]
mod tests {
    use std::{
        io,
        sync::{Arc, Mutex},
    };

    use tracing_subscriber::{fmt::MakeWriter, layer::SubscriberExt};

    use super::*;

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Lines {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Lines {
        type Writer = Lines;

        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    #[test]
    fn each_line_is_one_flat_object_with_the_request_id_of_its_span() {
        let lines = Lines::default();
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
                .event_format(JsonLines)
                .with_writer(lines.clone()),
        );
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(answer = 42, "outside \"any\"\nrequest");
            let span = tracing::info_span!("request", request_id = "abc-1", method = "POST");
            span.in_scope(|| {
                tracing::warn!(method = "GET", error = %"boom", "inside");
            });
        });
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).expect(line))
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0]["message"], "outside \"any\"\nrequest");
        assert_eq!(lines[0]["answer"], 42);
        assert_eq!(lines[0]["level"], "INFO");
        assert!(lines[0].get("request_id").is_none());
        assert_eq!(lines[1]["request_id"], "abc-1");
        assert_eq!(
            lines[1]["method"], "GET",
            "the span's other fields stay out"
        );
        assert_eq!(lines[1]["error"], "boom");
        assert!(lines[1]["timestamp"].as_str().unwrap().ends_with('Z'));
        assert!(text.starts_with("{\"timestamp\":"), "{text}");
    }
}
