//! `rath export otel`: the spans of stored sessions, over OTLP (a `rath-otel` call).
//!
//! The sessions are read through [`StoreView`], as every other reading command reads them,
//! so a JSONL directory, SQLite and PostgreSQL give the same spans for the same sessions.

use rath_inspect::StoreView;
use rath_otel::store::spans_from_sessions;
use rath_otel::{OtlpConfig, OtlpExporter, SpanSink};
use rath_session::SessionId;

use crate::{Failure, Output, json};

impl From<rath_otel::OtelError> for Failure {
    fn from(e: rath_otel::OtelError) -> Self {
        Failure(e.to_string())
    }
}

/// Loads the sessions (all, or `id` and its ancestors), makes their spans and sends them
/// (or prints them with `print`). A store with no session to export says so: a `warning:`
/// line and exit code 1, whether printing or sending.
pub(crate) fn otel(
    store: &StoreView,
    id: Option<&SessionId>,
    endpoint: Option<&str>,
    print: bool,
    as_json: bool,
) -> Result<Output, Failure> {
    let (loaded, warnings) = store.load_with_ancestors(id)?;
    let spans = spans_from_sessions(&loaded);
    if loaded.is_empty() {
        let mut out = Output::ok(match (print, as_json) {
            (true, _) => json(&spans)?,
            (false, true) => json(&serde_json::json!({
                "sessions": 0,
                "spans": 0,
                "exported": 0,
                "dropped": 0,
            }))?,
            (false, false) => "0 spans of 0 sessions: nothing sent\n".to_owned(),
        });
        out.stderr.push(format!(
            "warning: nothing to export: {} holds no readable session",
            store.dir().display()
        ));
        out.code = 1;
        return Ok(out.warn(&warnings, true));
    }
    if print {
        return Ok(Output::ok(json(&spans)?).warn(&warnings, true));
    }
    let mut config = OtlpConfig::from_env()?;
    if let Some(e) = endpoint {
        config = OtlpConfig::from_lookup(|k| match k {
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" => Some(e.to_owned()),
            _ => std::env::var(k).ok(),
        })?;
    }
    let exporter = OtlpExporter::new(&config)?;
    for s in &spans {
        exporter.emit(s.clone());
    }
    let report = exporter.shutdown();
    let text = if as_json {
        json(&serde_json::json!({
            "sessions": loaded.len(),
            "spans": spans.len(),
            "endpoint": config.endpoint,
            "exported": report.exported,
            "dropped": report.dropped,
        }))?
    } else {
        format!(
            "{} spans of {} sessions to {}: {report}\n",
            spans.len(),
            loaded.len(),
            config.endpoint
        )
    };
    let mut out = Output::ok(text);
    if report.dropped > 0 {
        out.stderr.push(format!(
            "warning: {} of {} spans were dropped (is the collector at {} up?)",
            report.dropped,
            spans.len(),
            config.endpoint
        ));
        out.code = 1;
    }
    Ok(out.warn(&warnings, true))
}
