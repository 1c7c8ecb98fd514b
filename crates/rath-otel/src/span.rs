//! The span value both sources (a live run and a store) produce, and its conversion to the
//! SDK's [`SpanData`] for export.
//!
//! ```
//! use rath_otel::{Span, SpanKind, TraceId};
//!
//! let trace = TraceId::for_root("s1");
//! let span = Span::new("invoke_agent lead", SpanKind::Internal, trace, trace.span("agent:lead"))
//!     .attr("gen_ai.agent.name", "lead");
//! assert_eq!(span.attribute("gen_ai.agent.name"), Some(&rath_otel::Value::from("lead")));
//! ```

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{
    SpanContext, SpanId as OtelSpanId, SpanKind as OtelKind, Status as OtelStatus, TraceFlags,
    TraceId as OtelTraceId, TraceState,
};
use opentelemetry::{Array, InstrumentationScope, KeyValue, StringValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use serde::Serialize;
use sha2::{Digest, Sha256};

/// A trace id: 16 bytes, derived from a lineage root so every span of a run (and of its
/// resumption) lands in one trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TraceId(pub [u8; 16]);

/// A span id: 8 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpanId(pub [u8; 8]);

impl TraceId {
    /// The trace of the run whose lineage root is `root` (the first 16 bytes of
    /// `sha256("rath-otel trace\0" + root)`): the same root gives the same trace.
    pub fn for_root(root: &str) -> Self {
        let d = digest(&["rath-otel trace", root]);
        let mut b = [0u8; 16];
        b.copy_from_slice(&d[..16]);
        Self(b)
    }

    /// The trace of a stored run re-exported from its store (`rath export otel`): derived from
    /// the same lineage root, but distinct from the live run's trace, so a store export never
    /// collides with the spans the run sent live (trace UIs keep a trace in one project and
    /// refuse a span id twice).
    pub fn for_stored_root(root: &str) -> Self {
        let d = digest(&["rath-otel stored trace", root]);
        let mut b = [0u8; 16];
        b.copy_from_slice(&d[..16]);
        Self(b)
    }

    /// A span id inside this trace named by `key` (stable: the same trace and key give the
    /// same id).
    pub fn span(&self, key: &str) -> SpanId {
        let d = digest(&["rath-otel span", &hex::encode(self.0), key]);
        let mut b = [0u8; 8];
        b.copy_from_slice(&d[..8]);
        if b == [0; 8] {
            b[7] = 1;
        }
        SpanId(b)
    }

    /// Lower-case hex, as OTLP/JSON and trace UIs show it.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl SpanId {
    /// Lower-case hex.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

fn digest(parts: &[&str]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0u8]);
    }
    h.finalize().into()
}

/// A span's kind (the GenAI conventions use these two).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SpanKind {
    /// Work inside the process: workflows, agents, tools, lineage operations.
    Internal,
    /// A call to a model server.
    Client,
}

/// An attribute value.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Value {
    /// A string.
    Str(String),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// An array of strings.
    Strs(Vec<String>),
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Str(v.to_owned())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Str(v)
    }
}
impl From<&String> for Value {
    fn from(v: &String) -> Self {
        Value::Str(v.clone())
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}
impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}
impl From<Vec<String>> for Value {
    fn from(v: Vec<String>) -> Self {
        Value::Strs(v)
    }
}

impl Value {
    fn to_otel(&self) -> opentelemetry::Value {
        match self {
            Value::Str(s) => opentelemetry::Value::String(s.clone().into()),
            Value::Int(i) => opentelemetry::Value::I64(*i),
            Value::Float(f) => opentelemetry::Value::F64(*f),
            Value::Bool(b) => opentelemetry::Value::Bool(*b),
            Value::Strs(v) => opentelemetry::Value::Array(Array::String(
                v.iter().cloned().map(StringValue::from).collect(),
            )),
        }
    }
}

/// Ordered attributes (`(name, value)`; a name set twice keeps the last value).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Attributes(pub Vec<(String, Value)>);

impl Attributes {
    /// Sets `name` to `value`.
    pub fn set(&mut self, name: &str, value: impl Into<Value>) {
        let value = value.into();
        match self.0.iter_mut().find(|(k, _)| k == name) {
            Some(slot) => slot.1 = value,
            None => self.0.push((name.to_owned(), value)),
        }
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    fn to_otel(&self) -> Vec<KeyValue> {
        self.0
            .iter()
            .map(|(k, v)| KeyValue::new(k.clone(), v.to_otel()))
            .collect()
    }
}

/// A span event: a selector's decision, a compression record.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Event {
    /// The event name.
    pub name: String,
    /// When, in microseconds since the Unix epoch.
    pub time_unix_micros: i64,
    /// Its attributes.
    pub attributes: Attributes,
}

/// A link to another span: a fork's or a merge's parent session.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Link {
    /// The linked span's trace.
    #[serde(serialize_with = "ser_trace")]
    pub trace_id: TraceId,
    /// The linked span.
    #[serde(serialize_with = "ser_span")]
    pub span_id: SpanId,
    /// Its attributes (`rath.session.id`, `rath.link.role`, `rath.link.index`).
    pub attributes: Attributes,
}

/// A span's status.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "code", content = "message")]
pub enum Status {
    /// Not set (success).
    Unset,
    /// Failed, with a message.
    Error(String),
}

/// One span, as openrath produces it from a live run or a stored session.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Span {
    /// The span name (`chat gpt-4o`, `invoke_agent lead`, ...).
    pub name: String,
    /// Its kind.
    pub kind: SpanKind,
    /// Its trace.
    #[serde(serialize_with = "ser_trace")]
    pub trace_id: TraceId,
    /// Its id.
    #[serde(serialize_with = "ser_span")]
    pub span_id: SpanId,
    /// Its parent span, `None` for the root.
    #[serde(serialize_with = "ser_opt_span")]
    pub parent: Option<SpanId>,
    /// Start, microseconds since the Unix epoch.
    pub start_unix_micros: i64,
    /// End, microseconds since the Unix epoch.
    pub end_unix_micros: i64,
    /// Attributes.
    pub attributes: Attributes,
    /// Events.
    pub events: Vec<Event>,
    /// Links.
    pub links: Vec<Link>,
    /// Status.
    pub status: Status,
}

fn ser_trace<S: serde::Serializer>(t: &TraceId, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&t.to_hex())
}
fn ser_span<S: serde::Serializer>(t: &SpanId, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&t.to_hex())
}
fn ser_opt_span<S: serde::Serializer>(t: &Option<SpanId>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&t.to_hex()),
        None => s.serialize_none(),
    }
}

impl Span {
    /// A span with no parent, no attributes and zero times.
    pub fn new(
        name: impl Into<String>,
        kind: SpanKind,
        trace_id: TraceId,
        span_id: SpanId,
    ) -> Self {
        Self {
            name: name.into(),
            kind,
            trace_id,
            span_id,
            parent: None,
            start_unix_micros: 0,
            end_unix_micros: 0,
            attributes: Attributes::default(),
            events: Vec::new(),
            links: Vec::new(),
            status: Status::Unset,
        }
    }

    /// Sets an attribute.
    pub fn attr(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.attributes.set(name, value);
        self
    }

    /// The value of attribute `name`.
    pub fn attribute(&self, name: &str) -> Option<&Value> {
        self.attributes.get(name)
    }

    /// The span as the SDK's export record (scope `rath-otel`).
    pub fn to_span_data(&self) -> SpanData {
        let context = |t: &TraceId, s: &SpanId| {
            SpanContext::new(
                OtelTraceId::from_bytes(t.0),
                OtelSpanId::from_bytes(s.0),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            )
        };
        let mut events = SpanEvents::default();
        events.events = self
            .events
            .iter()
            .map(|e| {
                opentelemetry::trace::Event::new(
                    e.name.clone(),
                    system_time(e.time_unix_micros),
                    e.attributes.to_otel(),
                    0,
                )
            })
            .collect();
        let mut links = SpanLinks::default();
        links.links = self
            .links
            .iter()
            .map(|l| {
                opentelemetry::trace::Link::new(
                    context(&l.trace_id, &l.span_id),
                    l.attributes.to_otel(),
                    0,
                )
            })
            .collect();
        SpanData {
            span_context: context(&self.trace_id, &self.span_id),
            parent_span_id: self
                .parent
                .map_or(OtelSpanId::INVALID, |p| OtelSpanId::from_bytes(p.0)),
            parent_span_is_remote: false,
            span_kind: match self.kind {
                SpanKind::Internal => OtelKind::Internal,
                SpanKind::Client => OtelKind::Client,
            },
            name: Cow::Owned(self.name.clone()),
            start_time: system_time(self.start_unix_micros),
            end_time: system_time(self.end_unix_micros.max(self.start_unix_micros)),
            attributes: self.attributes.to_otel(),
            dropped_attributes_count: 0,
            events,
            links,
            status: match &self.status {
                Status::Unset => OtelStatus::Unset,
                Status::Error(m) => OtelStatus::error(m.clone()),
            },
            instrumentation_scope: scope(),
        }
    }
}

/// The instrumentation scope every span carries.
pub(crate) fn scope() -> InstrumentationScope {
    InstrumentationScope::builder("rath-otel")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}

fn system_time(micros: i64) -> SystemTime {
    if micros <= 0 {
        return UNIX_EPOCH;
    }
    UNIX_EPOCH + Duration::from_micros(micros as u64)
}
