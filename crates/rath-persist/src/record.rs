//! The three record types of a session file, as written and as read.
//!
//! Writing borrows straight from the [`Session`] (no intermediate JSON values); reading goes
//! through one map visitor that deserialises a chunk's payload directly into its typed body
//! once it has seen `kind` (Python writes `kind` before `payload`), so loading 10k rows does
//! not build 10k `serde_json::Value` trees.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use rath_session::{
    ChunkBody, PendingCall, RunFailure, SandboxSpec, Session, SessionId, Timestamp, Usage,
};
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::ser::SerializeSeq;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// The format version this crate reads and writes (the header's `schema_version`).
pub const SCHEMA_VERSION: i64 = 1;

/// The name of the extension object this crate adds to records (Python ignores unknown keys).
pub const EXT_KEY: &str = "rath_ext";

// ------------------------------------------------------------------------------- writing

struct Extras<'a>(&'a [(String, Value)]);

impl Serialize for Extras<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for (k, v) in self.0 {
            seq.serialize_element(&(k, v))?;
        }
        seq.end()
    }
}

/// A chunk body's payload alone (what the `payload` field holds).
pub(crate) struct PayloadRef<'a>(pub &'a ChunkBody);

impl Serialize for PayloadRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            ChunkBody::System(p) | ChunkBody::User(p) => p.serialize(s),
            ChunkBody::Assistant(p) => p.serialize(s),
            ChunkBody::ToolResult(p) => p.serialize(s),
            ChunkBody::ToolEvidence(p) => p.serialize(s),
            ChunkBody::ModelCall(p) => p.serialize(s),
            ChunkBody::RouteDecision(p) => p.serialize(s),
            ChunkBody::MemoryEvent(p) => p.serialize(s),
            ChunkBody::CompressionRecord(p) => p.serialize(s),
            ChunkBody::PolicyDecision(p) => p.serialize(s),
            ChunkBody::Note(p) => p.serialize(s),
            ChunkBody::RunFailure(p) => p.serialize(s),
            other => {
                // A kind added to rath-session after this crate: use its own serde shape.
                let v = serde_json::to_value(other).map_err(serde::ser::Error::custom)?;
                v.get("payload").unwrap_or(&Value::Null).serialize(s)
            }
        }
    }
}

/// One evidence chunk riding in an extension object.
#[derive(Serialize)]
pub(crate) struct EvidenceOut<'a> {
    pub at: u64,
    pub kind: &'static str,
    pub payload: PayloadRef<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch: Option<&'a str>,
}

/// The `rath_ext` object: everything Python OpenRath has no field for.
#[derive(Serialize, Default)]
pub(crate) struct ExtOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch: Option<&'a str>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub evidence: &'a [EvidenceOut<'a>],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_usage: Option<&'a BTreeMap<String, Usage>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<&'a [PendingCall]>,
}

impl ExtOut<'_> {
    pub(crate) fn is_empty(&self) -> bool {
        self.branch.is_none()
            && self.evidence.is_empty()
            && self.agent_usage.is_none()
            && self.pending.is_none()
    }
}

/// The state extension of a header or trailer: per-agent usage and pending calls, only when
/// there are any (so a plain session's file is byte-identical to Python's).
pub(crate) fn state_ext<'a>(session: &'a Session, evidence: &'a [EvidenceOut<'a>]) -> ExtOut<'a> {
    ExtOut {
        branch: None,
        evidence,
        agent_usage: (!session.agent_usage().is_empty()).then(|| session.agent_usage()),
        pending: (!session.pending().is_empty()).then(|| session.pending()),
    }
}

#[derive(Serialize)]
pub(crate) struct HeaderOut<'a> {
    pub record_type: &'static str,
    pub schema_version: i64,
    pub id: &'a str,
    pub created_at: Timestamp,
    pub parent_session_ids: &'a [SessionId],
    pub lineage_operator: &'a str,
    pub lineage_kind: &'a str,
    lineage_extras: Extras<'a>,
    pub sandbox_backend: Option<&'a str>,
    pub sandbox_spec: Option<&'a SandboxSpec>,
    pub sandbox_handle_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rath_ext: Option<ExtOut<'a>>,
}

impl<'a> HeaderOut<'a> {
    pub(crate) fn new(session: &'a Session, created_at: Timestamp) -> Self {
        let lineage = session.lineage();
        let ext = state_ext(session, &[]);
        HeaderOut {
            record_type: "header",
            schema_version: SCHEMA_VERSION,
            id: session.id().as_str(),
            created_at,
            parent_session_ids: &lineage.parents,
            lineage_operator: &lineage.operator,
            lineage_kind: lineage.kind.as_str(),
            lineage_extras: Extras(&lineage.extras),
            sandbox_backend: session.placement().backend(),
            sandbox_spec: session.placement().spec(),
            sandbox_handle_id: session.placement().handle_id(),
            rath_ext: (!ext.is_empty()).then_some(ext),
        }
    }
}

#[derive(Serialize)]
pub(crate) struct ChunkOut<'a> {
    pub record_type: &'static str,
    pub index: u64,
    pub kind: &'static str,
    pub payload: PayloadRef<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rath_ext: Option<ExtOut<'a>>,
}

#[derive(Serialize)]
pub(crate) struct TrailerOut<'a> {
    pub record_type: &'static str,
    pub closed_at: Timestamp,
    pub final_chunk_count: u64,
    pub cumulative_usage: Option<Usage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rath_ext: Option<ExtOut<'a>>,
}

// ------------------------------------------------------------------------------- reading

/// A chunk payload as read: typed when `kind` came first, raw otherwise.
pub(crate) enum PayloadIn {
    Typed(ChunkBody),
    Raw(Value),
}

/// Usage with Python's leniency (a missing figure is 0).
#[derive(Deserialize, Default)]
pub(crate) struct UsageIn {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    total_tokens: u64,
}

impl From<UsageIn> for Usage {
    fn from(u: UsageIn) -> Self {
        Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u.total_tokens,
        }
    }
}

/// One evidence chunk read back from an extension object.
#[derive(Deserialize)]
pub(crate) struct EvidenceIn {
    pub at: u64,
    pub kind: String,
    pub payload: Value,
    #[serde(default)]
    pub branch: Option<String>,
}

/// The `rath_ext` object as read (unknown members are ignored, for forward compatibility).
#[derive(Deserialize, Default)]
pub(crate) struct ExtIn {
    #[serde(default)]
    pub branch: Option<String>,
    #[serde(default)]
    pub evidence: Vec<EvidenceIn>,
    #[serde(default)]
    pub agent_usage: Option<BTreeMap<String, Usage>>,
    #[serde(default)]
    pub pending: Option<Vec<PendingCall>>,
}

/// A string borrowed from the line when it has no escapes (no allocation), owned otherwise.
pub(crate) struct StrIn<'de>(pub Cow<'de, str>);

impl<'de> Deserialize<'de> for StrIn<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StrIn<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<StrIn<'de>, E> {
                Ok(StrIn(Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<StrIn<'de>, E> {
                Ok(StrIn(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<StrIn<'de>, E> {
                Ok(StrIn(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// Every field any record may carry; which ones matter depends on `record_type`.
/// `record_type` and `kind` borrow from the line (read for every row, kept by none).
#[derive(Default)]
pub(crate) struct RawLine<'de> {
    pub record_type: Option<Cow<'de, str>>,
    pub kind: Option<Cow<'de, str>>,
    pub payload: Option<PayloadIn>,
    /// Header and trailer fields, boxed: chunk records (the bulk of a file) carry none, and
    /// a small `RawLine` is cheap to move.
    pub rare: Option<Box<RareFields>>,
    pub rath_ext: Option<Box<ExtIn>>,
}

/// The fields of header and trailer records.
#[derive(Default)]
pub(crate) struct RareFields {
    pub schema_version: Option<Value>,
    pub id: Option<String>,
    pub created_at: Option<String>,
    pub parent_session_ids: Option<Vec<String>>,
    pub lineage_operator: Option<String>,
    pub lineage_kind: Option<String>,
    pub lineage_extras: Option<Value>,
    pub sandbox_backend: Option<String>,
    pub sandbox_spec: Option<SandboxSpec>,
    pub sandbox_handle_id: Option<String>,
    pub closed_at: Option<String>,
    pub final_chunk_count: Option<Value>,
    pub cumulative_usage: Option<UsageIn>,
}

impl RawLine<'_> {
    fn rare(&mut self) -> &mut RareFields {
        self.rare.get_or_insert_with(Box::default)
    }
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum Field {
    RecordType,
    Kind,
    Payload,
    SchemaVersion,
    Id,
    CreatedAt,
    ParentSessionIds,
    LineageOperator,
    LineageKind,
    LineageExtras,
    SandboxBackend,
    SandboxSpec,
    SandboxHandleId,
    ClosedAt,
    FinalChunkCount,
    CumulativeUsage,
    RathExt,
    #[serde(other)]
    Other,
}

/// Deserialises `payload` straight into the body for a known `kind`.
fn typed_payload<'de, A: MapAccess<'de>>(kind: &str, map: &mut A) -> Result<PayloadIn, A::Error> {
    Ok(PayloadIn::Typed(match kind {
        "system" => ChunkBody::System(map.next_value()?),
        "user" => ChunkBody::User(map.next_value()?),
        "assistant" => ChunkBody::Assistant(map.next_value()?),
        "tool_result" => ChunkBody::ToolResult(map.next_value()?),
        "tool_evidence" => ChunkBody::ToolEvidence(map.next_value()?),
        "model_call" => ChunkBody::ModelCall(map.next_value()?),
        "route_decision" => ChunkBody::RouteDecision(map.next_value()?),
        "memory_event" => ChunkBody::MemoryEvent(map.next_value()?),
        "compression_record" => ChunkBody::CompressionRecord(map.next_value()?),
        "policy_decision" => ChunkBody::PolicyDecision(map.next_value()?),
        "note" => ChunkBody::Note(map.next_value()?),
        "run_failure" => ChunkBody::RunFailure(map.next_value()?),
        _ => return Ok(PayloadIn::Raw(map.next_value()?)),
    }))
}

struct LineVisitor;

impl<'de> Visitor<'de> for LineVisitor {
    type Value = RawLine<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object (a header, chunk or trailer record)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawLine<'de>, A::Error> {
        let mut r = RawLine::default();
        while let Some(field) = map.next_key::<Field>()? {
            match field {
                Field::RecordType => {
                    r.record_type = map.next_value::<Option<StrIn<'de>>>()?.map(|s| s.0)
                }
                Field::Kind => r.kind = map.next_value::<Option<StrIn<'de>>>()?.map(|s| s.0),
                Field::Payload => {
                    r.payload = Some(match r.kind.as_deref() {
                        Some(kind) => typed_payload(kind, &mut map)?,
                        None => PayloadIn::Raw(map.next_value()?),
                    })
                }
                Field::SchemaVersion => r.rare().schema_version = map.next_value()?,
                Field::Id => r.rare().id = map.next_value()?,
                Field::CreatedAt => r.rare().created_at = map.next_value()?,
                Field::ParentSessionIds => r.rare().parent_session_ids = map.next_value()?,
                Field::LineageOperator => r.rare().lineage_operator = map.next_value()?,
                Field::LineageKind => r.rare().lineage_kind = map.next_value()?,
                Field::LineageExtras => r.rare().lineage_extras = map.next_value()?,
                Field::SandboxBackend => r.rare().sandbox_backend = map.next_value()?,
                Field::SandboxSpec => r.rare().sandbox_spec = map.next_value()?,
                Field::SandboxHandleId => r.rare().sandbox_handle_id = map.next_value()?,
                Field::ClosedAt => r.rare().closed_at = map.next_value()?,
                Field::FinalChunkCount => r.rare().final_chunk_count = map.next_value()?,
                Field::CumulativeUsage => r.rare().cumulative_usage = map.next_value()?,
                Field::RathExt => r.rath_ext = map.next_value::<Option<ExtIn>>()?.map(Box::new),
                Field::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(r)
    }
}

impl<'de> Deserialize<'de> for RawLine<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(LineVisitor)
    }
}

/// Only what a listing needs from a line.
#[derive(Deserialize)]
pub(crate) struct SkimLine {
    #[serde(default)]
    pub record_type: Option<String>,
    #[serde(default)]
    pub cumulative_usage: Option<UsageIn>,
    #[serde(default)]
    pub rath_ext: Option<SkimExt>,
}

/// Only the evidence entries' positions and kinds of an extension object (and the payload
/// of a `run_failure`, which a listing shows).
#[derive(Deserialize)]
pub(crate) struct SkimExt {
    #[serde(default)]
    pub evidence: Vec<SkimEvidence>,
}

/// An evidence entry as a listing sees it.
pub(crate) struct SkimEvidence {
    /// Position in the whole session.
    pub at: Option<u64>,
    /// The failure, for a `run_failure` entry (`None` for every other kind).
    pub failure: Option<RunFailure>,
}

impl<'de> Deserialize<'de> for SkimEvidence {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = SkimEvidence;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an evidence entry")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SkimEvidence, A::Error> {
                let (mut at, mut kind, mut failure, mut early) = (None, None, None, None);
                while let Some(key) = map.next_key::<StrIn<'de>>()? {
                    match &*key.0 {
                        "at" => at = map.next_value::<Option<u64>>()?,
                        "kind" => kind = Some(map.next_value::<StrIn<'de>>()?.0),
                        // Written after `kind`: only a failure's payload is built.
                        "payload" if kind.as_deref() == Some(RUN_FAILURE) => {
                            failure = Some(map.next_value::<RunFailure>()?);
                        }
                        "payload" if kind.is_some() => {
                            map.next_value::<IgnoredAny>()?;
                        }
                        "payload" => early = Some(map.next_value::<Value>()?),
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                if kind.as_deref() == Some(RUN_FAILURE)
                    && let Some(v) = early
                {
                    failure = serde_json::from_value(v).ok();
                }
                Ok(SkimEvidence { at, failure })
            }
        }
        d.deserialize_map(V)
    }
}

const RUN_FAILURE: &str = "run_failure";

/// Turns a `kind` + raw payload into a body (for payloads read before their kind, and for
/// evidence entries).
pub(crate) fn body_from_raw(kind: &str, payload: Value) -> Result<ChunkBody, String> {
    if rath_session::ChunkKind::parse(kind).is_none() {
        return Err(format!("unknown chunk kind {kind:?}"));
    }
    let mut obj = serde_json::Map::with_capacity(2);
    obj.insert("kind".to_owned(), Value::String(kind.to_owned()));
    obj.insert("payload".to_owned(), payload);
    serde_json::from_value(Value::Object(obj)).map_err(|e| format!("bad {kind} payload: {e}"))
}

/// Parses `lineage_extras` (`[[key, value], ...]`); like Python, entries that are not
/// string-keyed pairs are dropped.
pub(crate) fn extras_from_value(v: Option<Value>) -> Result<Vec<(String, Value)>, String> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => Ok(items
            .into_iter()
            .filter_map(|item| match item {
                Value::Array(mut pair) if pair.len() == 2 => {
                    let v = pair.pop()?;
                    match pair.pop()? {
                        Value::String(k) => Some((k, v)),
                        _ => None,
                    }
                }
                _ => None,
            })
            .collect()),
        Some(other) => Err(format!("lineage_extras must be a list, got {other}")),
    }
}

/// `schema_version` as an integer (Python accepts `1` and `1.0`; so do we).
pub(crate) fn schema_version_of(v: Option<&Value>) -> Option<i64> {
    match v {
        None => Some(0),
        Some(Value::Number(n)) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 1e15)
                .map(|f| f as i64)
        }),
        _ => None,
    }
}
