//! `rath export otel`: the spans of stored sessions, over OTLP (a `rath-otel` call).

use std::path::Path;

use rath_otel::store::spans_from_sessions;
use rath_otel::{OtlpConfig, OtlpExporter, SpanSink, load_for_export};

use crate::{Failure, Output, json};

impl From<rath_otel::OtelError> for Failure {
    fn from(e: rath_otel::OtelError) -> Self {
        Failure(e.to_string())
    }
}

/// Loads the sessions, makes their spans and sends them (or prints them with `print`).
pub(crate) fn otel(
    sessions_dir: &Path,
    id: Option<&str>,
    endpoint: Option<&str>,
    print: bool,
    as_json: bool,
) -> Result<Output, Failure> {
    let store = rath_persist::Store::at(sessions_dir);
    let loaded = load_for_export(&store, id)?;
    let spans = spans_from_sessions(&loaded);
    if print {
        return Ok(Output::ok(json(&spans)?));
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
    Ok(out)
}
