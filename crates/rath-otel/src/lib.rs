//! **rath-otel**: OpenTelemetry GenAI traces of openrath sessions, live as a workflow runs
//! and afterwards from a session store, exported over OTLP.
//!
//! - [`Traced`] wraps a workflow: every forward is an `invoke_workflow` span with an
//!   `invoke_agent {agent}` span per agent, a `chat {model}` span (kind CLIENT) per model
//!   call and an `execute_tool {tool}` span per tool call, carrying the GenAI semantic
//!   conventions' attributes ([`conv`]); forks and merges are spans linked to their parents,
//!   selector decisions and compression records are events; the trace id is derived from the
//!   lineage root, so a resumed run lands in the same trace.
//! - [`store::spans_from_sessions`] makes the same kinds of spans from stored sessions.
//! - [`OtlpExporter`] sends spans over OTLP (HTTP/protobuf or gRPC, `OTEL_EXPORTER_OTLP_*`),
//!   in batches, never blocking or failing a run; it also carries `tracing` spans
//!   ([`OtlpExporter::tracing_layer`]): the stores' and the worker's, a durable run's worker
//!   span in the run's trace with the agent spans under it ([`bridge`]).
//!
//! ```
//! use rath_otel::{SpanBuffer, Traced, TraceOptions, Clock};
//! use rath_flow::{Agent, WorkflowExt};
//! use rath_provider::{ScriptedProvider, ScriptedResponse};
//! use rath_session::{Session, Stamper};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let model = ScriptedProvider::new(vec![ScriptedResponse::text("hi").usage(3, 1)]);
//! let spans = SpanBuffer::new();
//! let options = TraceOptions::default().clock(Clock::Stamper(Stamper::counter()));
//! let agent = Traced::new(Agent::new("greeter", "Greet.", model), spans.clone()).with_options(options);
//! agent.run(Session::user_with("hello", Stamper::counter())).await?;
//! let chat = &spans.spans()[0];
//! assert_eq!(chat.attribute("gen_ai.usage.input_tokens"), Some(&rath_otel::Value::Int(3)));
//! # Ok::<(), rath_flow::FlowError>(())
//! # }).unwrap();
//! ```

#![warn(missing_docs)]

use std::sync::{Arc, Mutex};

pub mod bridge;
pub mod conv;
pub mod export;
mod genai;
pub mod live;
pub mod span;
pub mod store;

pub use export::{ExportReport, OtlpConfig, OtlpExporter, Protocol};
pub use genai::{capture_opted_in, provider_name};
pub use live::{Clock, TraceOptions, Traced};
pub use span::{Attributes, Event, Link, Span, SpanId, SpanKind, Status, TraceId, Value};

/// Every failure of this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtelError {
    /// An `OTEL_*` variable has a value this crate cannot use.
    #[error("{var}: {message}")]
    Config {
        /// The variable.
        var: String,
        /// What is wrong.
        message: String,
    },
    /// The OTLP exporter could not be built.
    #[error("OTLP exporter: {0}")]
    Build(String),
    /// Reading the session store failed.
    #[error(transparent)]
    Store(#[from] rath_persist::PersistError),
    /// No stored session matches the id asked for.
    #[error("no stored session {0:?}")]
    NotFound(String),
}

/// Receives finished spans.
pub trait SpanSink: Send + Sync {
    /// Takes one finished span (must not block).
    fn emit(&self, span: Span);
}

impl<S: SpanSink + ?Sized> SpanSink for Arc<S> {
    fn emit(&self, span: Span) {
        (**self).emit(span)
    }
}

/// Keeps spans in memory, in the order they finished (tests, evidence, inspection).
#[derive(Clone, Debug, Default)]
pub struct SpanBuffer(Arc<Mutex<Vec<Span>>>);

impl SpanBuffer {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// The spans so far.
    pub fn spans(&self) -> Vec<Span> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl SpanSink for SpanBuffer {
    fn emit(&self, span: Span) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(span);
    }
}

/// Loads the sessions of the JSONL directory `store` to export: all of them, or with `id`,
/// that session and every ancestor stored with it (so its trace is whole). Crashed partial
/// files are read like closed ones. (`rath export otel` reads any kind of store, SQLite and
/// PostgreSQL too, through `rath_inspect::StoreView::load_with_ancestors`.)
pub fn load_for_export(
    store: &rath_persist::Store,
    id: Option<&str>,
) -> Result<Vec<rath_persist::LoadedSession>, OtelError> {
    let summaries = store.list()?;
    let Some(id) = id else {
        return summaries
            .iter()
            .map(|s| rath_persist::load_file(&s.path).map_err(OtelError::from))
            .collect();
    };
    let by_id: std::collections::HashMap<&str, &rath_persist::SessionSummary> =
        summaries.iter().map(|s| (s.id.as_str(), s)).collect();
    if !by_id.contains_key(id) {
        return Err(OtelError::NotFound(id.to_owned()));
    }
    let mut wanted = vec![id.to_owned()];
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    while let Some(next) = wanted.pop() {
        if !seen.insert(next.clone()) {
            continue;
        }
        if let Some(s) = by_id.get(next.as_str()) {
            wanted.extend(s.parents.iter().map(|p| p.as_str().to_owned()));
            out.push(rath_persist::load_file(&s.path)?);
        }
    }
    out.sort_by(|a, b| a.session.id().as_str().cmp(b.session.id().as_str()));
    Ok(out)
}
