//! A span per SQL statement, made from the event sqlx writes when a statement finishes
//! (target `sqlx::query`: its first words, its text, rows, elapsed time).
//!
//! The statements are run from a hundred places through sqlx's executors; sqlx has no
//! hook around a statement, but it reports each one, on the thread that ran it and inside
//! the caller's span (SQLite's worker thread enters it). So the span is made afterwards,
//! with the statement's own start and end times, under the OpenTelemetry context current
//! at that moment: the operation or the stream batch that ran it. Statements outside a
//! recorded trace (background work, pool housekeeping) make none.

use std::{
    fmt,
    time::{Duration, SystemTime},
};

use opentelemetry::{
    trace::{Span as _, SpanKind, Tracer as _},
    Context, KeyValue,
};
use opentelemetry_sdk::trace::SdkTracer;
use tracing::{
    field::{Field, Visit},
    Event, Subscriber,
};
use tracing_subscriber::{layer::Context as LayerContext, Layer};

/// The longest statement text kept on a span: an archive's batch insert repeats its row of
/// placeholders hundreds of times.
const MAX_TEXT: usize = 1024;

pub(crate) struct StatementSpans {
    tracer: SdkTracer,
}

impl StatementSpans {
    pub(crate) fn new(tracer: SdkTracer) -> Self {
        Self { tracer }
    }
}

impl<S: Subscriber> Layer<S> for StatementSpans {
    fn on_event(&self, event: &Event<'_>, _: LayerContext<'_, S>) {
        if !super::in_trace() {
            return;
        }
        let mut statement = Statement::default();
        event.record(&mut statement);
        let end = SystemTime::now();
        let start = Duration::try_from_secs_f64(statement.elapsed_secs)
            .ok()
            .and_then(|elapsed| end.checked_sub(elapsed))
            .unwrap_or(end);
        let text = if statement.text.trim().is_empty() {
            statement.summary.as_str()
        } else {
            statement.text.trim()
        };
        let mut attributes = vec![
            KeyValue::new("db.system.name", super::sql_system()),
            KeyValue::new("db.query.text", truncate(text, MAX_TEXT).to_string()),
            KeyValue::new("db.response.returned_rows", statement.rows_returned as i64),
            KeyValue::new("engage.rows_affected", statement.rows_affected as i64),
        ];
        let name = span_name(text);
        if let Some(operation) = name.split(' ').next() {
            attributes.push(KeyValue::new("db.operation.name", operation.to_string()));
        }
        let cx = Context::current();
        let mut span = self
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Client)
            .with_start_time(start)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &cx);
        span.end_with_timestamp(end);
    }
}

/// The fields of sqlx's event.
#[derive(Default)]
struct Statement {
    summary: String,
    text: String,
    rows_returned: u64,
    rows_affected: u64,
    elapsed_secs: f64,
}

impl Visit for Statement {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "summary" => self.summary = value.to_string(),
            "db.statement" => self.text = value.to_string(),
            _ => {}
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "rows_returned" => self.rows_returned = value,
            "rows_affected" => self.rows_affected = value,
            _ => {}
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        if field.name() == "elapsed_secs" {
            self.elapsed_secs = value;
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `summary` and the text are Strings, recorded as such; a version of sqlx that
        // formats them instead still names the span.
        match field.name() {
            "summary" if self.summary.is_empty() => self.summary = format!("{value:?}"),
            "db.statement" if self.text.is_empty() => self.text = format!("{value:?}"),
            _ => {}
        }
    }
}

/// `{operation} {table}` (`INSERT vote_log`, `SELECT items`), as OpenTelemetry names
/// database spans: the statement's first word, and the table after its first `INTO`,
/// `FROM` or `UPDATE`.
fn span_name(sql: &str) -> String {
    let mut words = sql.split_whitespace();
    let Some(first) = words.next() else {
        return "SQL".into();
    };
    let operation = first.to_ascii_uppercase();
    let mut words = std::iter::once(first).chain(words).peekable();
    while let Some(word) = words.next() {
        let keyword = word.eq_ignore_ascii_case("into")
            || word.eq_ignore_ascii_case("from")
            || word.eq_ignore_ascii_case("update");
        if keyword {
            if let Some(table) = words.peek() {
                let table: String = table
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
                    .collect();
                if !table.is_empty() {
                    return format!("{operation} {table}");
                }
            }
        }
    }
    operation
}

fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_span_is_named_by_its_operation_and_table() {
        assert_eq!(
            span_name("INSERT INTO vote_log (a, b) VALUES (?, ?)"),
            "INSERT vote_log"
        );
        assert_eq!(
            span_name("select id, name from items WHERE id IN (1)"),
            "SELECT items"
        );
        assert_eq!(
            span_name("UPDATE remarks SET like_count = $1"),
            "UPDATE remarks"
        );
        assert_eq!(span_name("SELECT 1"), "SELECT");
        assert_eq!(span_name("  "), "SQL");
        assert_eq!(truncate("héllo", 2), "h");
    }
}
