//! A span per Redis round trip (target `engage::redis`), made only inside a recorded trace:
//! `EVALSHA remarks_like` for a script (named from its SHA-1), the command's name for
//! another command, `PIPELINE` for a pipeline (its commands listed in
//! `engage.commands`). Outside a trace the reply's future passes through untouched, so an
//! untraced round trip costs one load and a branch.

use std::{collections::HashMap, fmt::Write as _, sync::LazyLock};

use redis::{Arg, Cmd, Pipeline, RedisFuture};
use tracing::Instrument;

use super::scripts;
use crate::infra::telemetry;

/// Most commands of a pipeline named in its span.
const MAX_LISTED: usize = 8;

/// `reply`, inside the span `span()` makes when a trace is being recorded.
pub(crate) fn traced<'a, T: Send + 'a>(
    reply: RedisFuture<'a, T>,
    span: impl FnOnce() -> tracing::Span,
) -> RedisFuture<'a, T> {
    if !telemetry::in_trace() {
        return reply;
    }
    Box::pin(reply.instrument(span()))
}

/// The span of one command.
pub(crate) fn command(cmd: &Cmd) -> tracing::Span {
    let name = label(cmd);
    tracing::debug_span!(
        target: telemetry::REDIS,
        "redis",
        otel.name = name.as_str(),
        otel.kind = "client",
        db.system.name = "redis",
        db.operation.name = first_word(&name),
    )
}

/// The span of one pipeline.
pub(crate) fn pipeline(pipeline: &Pipeline) -> tracing::Span {
    let mut listed = String::new();
    let mut count = 0;
    for cmd in pipeline.cmd_iter() {
        if count < MAX_LISTED {
            if count > 0 {
                listed.push_str(", ");
            }
            listed.push_str(&label(cmd));
        } else if count == MAX_LISTED {
            listed.push_str(", …");
        }
        count += 1;
    }
    tracing::debug_span!(
        target: telemetry::REDIS,
        "redis",
        otel.name = "PIPELINE",
        otel.kind = "client",
        db.system.name = "redis",
        db.operation.name = "PIPELINE",
        db.operation.batch.size = count as i64,
        engage.commands = listed.as_str(),
    )
}

/// `EVALSHA remarks_like`, `XACK`.
fn label(cmd: &Cmd) -> String {
    let mut args = cmd.args_iter().filter_map(|arg| match arg {
        Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let mut label = String::from_utf8_lossy(args.next().unwrap_or(b"?")).to_ascii_uppercase();
    if label == "EVALSHA" {
        let script = args
            .next()
            .and_then(|sha| std::str::from_utf8(sha).ok())
            .and_then(|sha| SCRIPTS.get(sha).copied())
            .unwrap_or("unknown");
        let _ = write!(label, " {script}");
    }
    label
}

fn first_word(label: &str) -> &str {
    label.split(' ').next().unwrap_or(label)
}

/// The embedded scripts by SHA-1.
static SCRIPTS: LazyLock<HashMap<String, &'static str>> = LazyLock::new(|| {
    scripts::all()
        .into_iter()
        .map(|script| (script.hash().to_string(), script.name))
        .collect()
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_call_is_named_after_its_script() {
        let mut cmd = redis::cmd("evalsha");
        cmd.arg(scripts::REMARKS_LIKE.hash()).arg(1).arg("key");
        assert_eq!(label(&cmd), "EVALSHA remarks_like");
        assert_eq!(label(redis::cmd("XACK").arg("s")), "XACK");
        assert_eq!(first_word("EVALSHA remarks_like"), "EVALSHA");
    }
}
