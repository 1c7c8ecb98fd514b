//! The `tracing` bridge: the runtime's own spans (session and run stores, the worker) as
//! OpenTelemetry spans on the same exporter as the GenAI spans, and in the same trace.
//!
//! ```
//! use rath_otel::bridge::trace_of_root_span;
//! use rath_otel::TraceId;
//!
//! // A root `tracing` span carrying `gen_ai.conversation.id` lands in that conversation's
//! // trace, the trace `Traced` puts the run's agent spans in.
//! let attrs = [opentelemetry::KeyValue::new("gen_ai.conversation.id", "sess_1")];
//! assert_eq!(trace_of_root_span(&attrs), Some(TraceId::for_root("sess_1")));
//! assert_eq!(trace_of_root_span(&[]), None);
//! ```
//!
//! **How the traces fit together.** A worker runs each claimed run in a root `worker.execute`
//! span whose `gen_ai.conversation.id` is the run's input session (its lineage root). The
//! tracer behind [`OtlpExporter::tracing_layer`](crate::OtlpExporter::tracing_layer) gives a
//! root span with that attribute the trace id [`TraceId::for_root`] of its value, instead of
//! a random one; its children (store loads and writes, heartbeats, the release) inherit it.
//! A [`Traced`](crate::Traced) workflow forwarded inside such a span nests its
//! `invoke_workflow` span under it, in its trace. So one run is one trace, whichever worker
//! claimed it, however often it was re-claimed after a crash, and across its resumed
//! segments: each claim is one `worker.execute` root in it. A claim itself
//! (`worker.claim`, before the run is known) is a trace of its own, linked from the
//! `worker.execute` span it led to.

use opentelemetry::trace::{SpanBuilder, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};

use crate::conv::GEN_AI_CONVERSATION_ID;
use crate::span::TraceId;

/// The trace a root span with these attributes belongs to: the conversation's
/// ([`TraceId::for_root`] of `gen_ai.conversation.id`), or `None` (a fresh random trace).
pub fn trace_of_root_span(attributes: &[KeyValue]) -> Option<TraceId> {
    attributes
        .iter()
        .find(|kv| kv.key.as_str() == GEN_AI_CONVERSATION_ID)
        .map(|kv| TraceId::for_root(&kv.value.as_str()))
}

/// The SDK's tracer, except that a root span carrying `gen_ai.conversation.id` is put in
/// that conversation's trace ([`trace_of_root_span`]).
#[derive(Clone, Debug)]
pub struct LineageTracer {
    inner: opentelemetry_sdk::trace::Tracer,
}

impl LineageTracer {
    /// Wraps the SDK's tracer.
    pub fn new(inner: opentelemetry_sdk::trace::Tracer) -> Self {
        Self { inner }
    }
}

impl Tracer for LineageTracer {
    type Span = opentelemetry_sdk::trace::Span;

    fn build_with_context(&self, mut builder: SpanBuilder, parent_cx: &Context) -> Self::Span {
        if builder.trace_id.is_none()
            && !parent_cx.has_active_span()
            && let Some(trace) = builder.attributes.as_deref().and_then(trace_of_root_span)
        {
            builder.trace_id = Some(opentelemetry::trace::TraceId::from_bytes(trace.0));
        }
        self.inner.build_with_context(builder, parent_cx)
    }
}

/// The OpenTelemetry span enclosing the caller, when a `tracing` span with an OpenTelemetry
/// layer is current: `(trace, span)`.
pub(crate) fn enclosing_span() -> Option<(TraceId, crate::span::SpanId)> {
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let current = tracing::Span::current();
    if current.is_none() {
        return None;
    }
    let cx = current.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| {
        (
            TraceId(sc.trace_id().to_bytes()),
            crate::span::SpanId(sc.span_id().to_bytes()),
        )
    })
}
