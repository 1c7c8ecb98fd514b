//! Chunks: the ordered entries of a session.
//!
//! ```
//! use rath_session::{Chunk, ChunkKind};
//!
//! let c = Chunk::user("How many words are in 'the quick brown fox'?");
//! assert_eq!(c.kind(), ChunkKind::User);
//! assert_eq!(
//!     serde_json::to_string(&c).unwrap(),
//!     r#"{"kind":"user","payload":{"content":"How many words are in 'the quick brown fox'?"}}"#
//! );
//! ```
//!
//! Four kinds are conversation, with OpenRath's payload shapes: `system`, `user`, `assistant`,
//! `tool_result`. The rest are evidence that never reaches a model: tool evidence, model calls,
//! route decisions, memory events, compression records, policy decisions, notes and run
//! failures. A chunk is
//! reference-counted, so copying one (as fork and merge do) never copies its text.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::Usage;

/// One entry of a session: a conversation message or a piece of evidence.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Chunk(Arc<Held>);

/// A chunk's data and its digest, computed at most once per allocation: every session that
/// shares the chunk (forks, merges, loop rounds) shares the digest too.
#[derive(Serialize, Deserialize)]
#[serde(transparent)]
struct Held {
    data: ChunkData,
    #[serde(skip)]
    digest: OnceLock<[u8; 32]>,
}

impl Held {
    fn new(data: ChunkData) -> Self {
        Self {
            data,
            digest: OnceLock::new(),
        }
    }
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        self.data == other.data
    }
}

impl std::ops::Deref for Held {
    type Target = ChunkData;
    fn deref(&self) -> &ChunkData {
        &self.data
    }
}

impl std::fmt::Debug for Chunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The shape the derived `Debug` of `Chunk(Arc<ChunkData>)` printed.
        f.debug_tuple("Chunk").field(&self.0.data).finish()
    }
}

/// The contents of a [`Chunk`]: its body and an optional branch tag.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChunkData {
    /// What the chunk says.
    #[serde(flatten)]
    pub body: ChunkBody,
    /// The session this chunk came from, set by [`crate::MergeStrategy::SharedPrefix`] on each
    /// branch's suffix so a reader can tell the branches apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
}

/// Every kind of chunk, serialised as `{"kind": ..., "payload": {...}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "payload", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ChunkBody {
    /// A system prompt.
    System(TextPayload),
    /// A user message.
    User(TextPayload),
    /// A model reply: text, tool calls, or both.
    Assistant(AssistantPayload),
    /// The answer to one tool call.
    ToolResult(ToolResultPayload),
    /// Where and how a tool ran.
    ToolEvidence(ToolEvidence),
    /// One provider request and its outcome.
    ModelCall(ModelCall),
    /// A selector's routing decision.
    RouteDecision(RouteDecision),
    /// A memory recall or commit.
    MemoryEvent(MemoryEvent),
    /// What a compressor dropped, by digest.
    CompressionRecord(CompressionRecord),
    /// A policy verdict on a tool call (allow, deny, approval requested, approved, rejected).
    PolicyDecision(PolicyDecision),
    /// A free-form annotation.
    Note(Note),
    /// Why a run stopped before it finished (the last chunk of a failed run's session).
    RunFailure(RunFailure),
}

/// The kind of a chunk, without its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ChunkKind {
    /// `system`
    System,
    /// `user`
    User,
    /// `assistant`
    Assistant,
    /// `tool_result`
    ToolResult,
    /// `tool_evidence`
    ToolEvidence,
    /// `model_call`
    ModelCall,
    /// `route_decision`
    RouteDecision,
    /// `memory_event`
    MemoryEvent,
    /// `compression_record`
    CompressionRecord,
    /// `policy_decision`
    PolicyDecision,
    /// `note`
    Note,
    /// `run_failure`
    RunFailure,
}

impl ChunkKind {
    /// The wire name, as in the `kind` field.
    pub fn as_str(self) -> &'static str {
        match self {
            ChunkKind::System => "system",
            ChunkKind::User => "user",
            ChunkKind::Assistant => "assistant",
            ChunkKind::ToolResult => "tool_result",
            ChunkKind::ToolEvidence => "tool_evidence",
            ChunkKind::ModelCall => "model_call",
            ChunkKind::RouteDecision => "route_decision",
            ChunkKind::MemoryEvent => "memory_event",
            ChunkKind::CompressionRecord => "compression_record",
            ChunkKind::PolicyDecision => "policy_decision",
            ChunkKind::Note => "note",
            ChunkKind::RunFailure => "run_failure",
        }
    }

    /// Parses a wire name.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "system" => ChunkKind::System,
            "user" => ChunkKind::User,
            "assistant" => ChunkKind::Assistant,
            "tool_result" => ChunkKind::ToolResult,
            "tool_evidence" => ChunkKind::ToolEvidence,
            "model_call" => ChunkKind::ModelCall,
            "route_decision" => ChunkKind::RouteDecision,
            "memory_event" => ChunkKind::MemoryEvent,
            "compression_record" => ChunkKind::CompressionRecord,
            "policy_decision" => ChunkKind::PolicyDecision,
            "note" => ChunkKind::Note,
            "run_failure" => ChunkKind::RunFailure,
            _ => return None,
        })
    }

    /// True for the four kinds a model sees.
    pub fn is_conversation(self) -> bool {
        matches!(
            self,
            ChunkKind::System | ChunkKind::User | ChunkKind::Assistant | ChunkKind::ToolResult
        )
    }
}

impl std::fmt::Display for ChunkKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `{"content": str}` — the payload of `system` and `user` chunks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TextPayload {
    /// The message text.
    pub content: String,
}

/// `{"content": str|null, "tool_calls": null|[...]}` — an assistant reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct AssistantPayload {
    /// Reply text, if any.
    pub content: Option<String>,
    /// Requested tool calls, if any (`null` on the wire when absent).
    pub tool_calls: Option<Vec<ToolCall>>,
}

/// One requested tool call: `{"id", "type": "function", "function": {"name", "arguments"}}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call id the matching `tool_result` answers.
    pub id: String,
    /// Always `"function"` in OpenRath files.
    #[serde(rename = "type")]
    pub call_type: String,
    /// The function name and its JSON-encoded arguments.
    pub function: FunctionCall,
}

impl ToolCall {
    /// A function call with `arguments` as raw JSON text (kept verbatim, even if malformed).
    pub fn function(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            call_type: "function".to_owned(),
            function: FunctionCall {
                name: name.into(),
                arguments: arguments.into(),
            },
        }
    }
}

/// The `function` part of a [`ToolCall`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FunctionCall {
    /// Tool name.
    pub name: String,
    /// Arguments as JSON text, exactly as the model produced them.
    pub arguments: String,
}

/// `{"tool_call_id", "name", "content"}` — a tool's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResultPayload {
    /// The call this answers.
    pub tool_call_id: String,
    /// The tool's name.
    pub name: String,
    /// The result text, usually JSON.
    pub content: String,
}

/// Where and how a tool call ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct ToolEvidence {
    /// The call this describes.
    pub tool_call_id: String,
    /// The tool's name.
    pub tool: String,
    /// Backend name (`local`, `isolated`, `opensandbox`, `mcp:<server>`, `in-process`).
    pub backend: Option<String>,
    /// The sandbox handle id, if the call touched a sandbox.
    pub sandbox_handle: Option<String>,
    /// Payload kind (`command`, `file_read`, `code`, ...).
    pub payload_kind: Option<String>,
    /// A short, secret-free summary of the arguments.
    pub summary: Option<String>,
    /// Process exit code, when there was a process.
    pub exit_code: Option<i64>,
    /// `ok`, or the error kind of the tool result.
    pub outcome: String,
    /// Elapsed milliseconds (0 in deterministic mode).
    pub elapsed_ms: f64,
    /// Bytes sent to the sandbox.
    pub bytes_in: u64,
    /// Bytes received from the sandbox.
    pub bytes_out: u64,
    /// Anything else the source wants on record.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub detail: BTreeMap<String, Value>,
}

/// One provider request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct ModelCall {
    /// The request id the provider call carried.
    pub request_id: String,
    /// The agent that made the call, if any.
    pub agent: Option<String>,
    /// Provider name (`openai-compatible`, `scripted`, `replay`, ...).
    pub provider: String,
    /// Model name.
    pub model: Option<String>,
    /// Why generation stopped (`stop`, `tool_calls`, `length`, ...).
    pub finish_reason: Option<String>,
    /// Usage reported for this call.
    pub usage: Option<Usage>,
    /// Number of conversation messages sent.
    pub messages_sent: u64,
    /// Elapsed milliseconds (0 in deterministic mode).
    pub elapsed_ms: f64,
    /// Anything else the provider wants on record (how the answer was fetched: `stream`,
    /// `stream_fallback`, `stream_skipped`, the `attempts` when there were several). Never
    /// headers or keys. Omitted when empty, so plain calls serialise as before.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub detail: BTreeMap<String, Value>,
}

/// A selector's decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct RouteDecision {
    /// The selector's name.
    pub selector: String,
    /// Candidate names offered.
    pub candidates: Vec<String>,
    /// The chosen candidate; `None` means "done".
    pub choice: Option<String>,
    /// Why.
    pub reason: String,
    /// `model:<name>` or `function`.
    pub decided_by: String,
}

/// A memory recall or commit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct MemoryEvent {
    /// `recall` or `commit` (or `read`, `write`, `delete`).
    pub operation: String,
    /// The memory store's id.
    pub store_id: String,
    /// The agent on whose behalf it ran.
    pub agent: Option<String>,
    /// The recall query.
    pub query: Option<String>,
    /// Scope (`user`, `agent`, `session`, `resources`).
    pub scope: Option<String>,
    /// Item URIs committed or read (`memory://<scope>/<path>`).
    #[serde(default)]
    pub uris: Vec<String>,
    /// Ranked hits of a recall.
    #[serde(default)]
    pub hits: Vec<MemoryHit>,
    /// The id of the commit this event made or (for recalled items) refers to.
    pub commit_id: Option<String>,
}

/// One recalled item.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct MemoryHit {
    /// Item id.
    pub id: String,
    /// `memory://<scope>/<path>`.
    pub uri: String,
    /// Relevance score.
    pub score: f64,
    /// A short excerpt.
    pub snippet: String,
    /// The commit that stored the item, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_id: Option<String>,
}

/// What a compressor removed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct CompressionRecord {
    /// The compressor's name.
    pub compressor: String,
    /// True when information was lost (a summary), false for pure dropping by rule.
    pub lossy: bool,
    /// Every dropped chunk: its index in the input session and the sha256 of its JSON.
    pub dropped: Vec<DroppedChunk>,
    /// Rows in the output session.
    pub rows_out: u64,
}

/// One dropped chunk in a [`CompressionRecord`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct DroppedChunk {
    /// Index in the input session.
    pub index: u64,
    /// Kind of the dropped chunk.
    pub kind: String,
    /// Hex sha256 of the chunk's canonical JSON (see [`Chunk::sha256`]).
    pub sha256: String,
}

/// A policy verdict about a tool call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct PolicyDecision {
    /// The agent whose policy applied.
    pub agent: Option<String>,
    /// The call concerned.
    pub tool_call_id: String,
    /// The tool concerned.
    pub tool: String,
    /// `allow`, `deny`, `require_approval`, `approved` or `rejected`.
    pub decision: String,
    /// Why.
    pub reason: String,
    /// `policy`, or who approved/rejected.
    pub decided_by: String,
}

/// A free-form annotation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Note {
    /// Who wrote it.
    pub author: String,
    /// What it says.
    pub text: String,
}

/// Why a run stopped before it finished: what failed, the error as the caller saw it, who was
/// running and what it was doing, and every provider attempt of a failed model call.
///
/// A failed workflow leaves this as the last chunk of the session it had reached, so the
/// session can be stored (closed, valid) and read back as failed. A session that continued
/// after one (a resumed run) is not failed: only a *last* `run_failure` chunk marks it.
///
/// ```
/// use rath_session::{Chunk, ChunkBody, FailedAttempt, RunFailure, Session, Stamper};
///
/// let s = Session::user_with("hi", Stamper::counter()).push(Chunk::new(ChunkBody::RunFailure(RunFailure {
///     kind: "provider".into(),
///     message: "HTTP 503 from provider: overloaded".into(),
///     agent: Some("hello".into()),
///     step: "model_call".into(),
///     attempts: vec![FailedAttempt { attempt: 1, outcome: "http".into(), status: Some(503), error: "overloaded".into() }],
///     ..RunFailure::default()
/// })));
/// assert_eq!(s.failure().map(|f| f.kind.as_str()), Some("provider"));
/// assert!(s.push(Chunk::assistant_text("resumed")).failure().is_none());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct RunFailure {
    /// What failed: `provider`, `budget_exhausted`, `cancelled` ([`RunFailure::CANCELLED`]:
    /// the run was stopped, not broken), `timed_out`, `backend`, `persist`, `session`,
    /// `memory` or `config`.
    pub kind: String,
    /// The error, as the caller saw it (one line).
    pub message: String,
    /// The agent, selector or compressor that was running, if any.
    pub agent: Option<String>,
    /// What it was doing: `model_call`, `tool_calls`, `route`, `compress`, `memory`,
    /// `fan_out`, `persist`, ...
    pub step: String,
    /// Tool rounds completed before the failure (session loops only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<u64>,
    /// The request id of the provider call that failed, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Every attempt of the failed provider call, first included (empty when no provider
    /// call failed).
    #[serde(default)]
    pub attempts: Vec<FailedAttempt>,
}

impl RunFailure {
    /// The kind of a run that was cancelled (by its caller, a signal, an operator), not one
    /// that failed: a session ending in it reads as `cancelled`, not `failed`.
    pub const CANCELLED: &'static str = "cancelled";

    /// True when this records a cancellation ([`RunFailure::CANCELLED`]).
    ///
    /// ```
    /// use rath_session::RunFailure;
    ///
    /// let f = RunFailure { kind: RunFailure::CANCELLED.into(), ..RunFailure::default() };
    /// assert!(f.is_cancellation());
    /// assert!(!RunFailure { kind: "provider".into(), ..f }.is_cancellation());
    /// ```
    pub fn is_cancellation(&self) -> bool {
        self.kind == Self::CANCELLED
    }
}

/// One failed attempt of a provider call, in a [`RunFailure`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct FailedAttempt {
    /// 1-based attempt number.
    pub attempt: u32,
    /// The kind of fault (`http`, `timeout`, `connection`, `invalid_response`,
    /// `empty_stream`, ...).
    pub outcome: String,
    /// The HTTP status, when the attempt got one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// What went wrong, for people (one line).
    pub error: String,
}

impl Chunk {
    /// Wraps a body with no branch tag.
    pub fn new(body: ChunkBody) -> Self {
        Self(Arc::new(Held::new(ChunkData { body, branch: None })))
    }

    /// A `system` chunk.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new(ChunkBody::System(TextPayload {
            content: content.into(),
        }))
    }

    /// A `user` chunk.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new(ChunkBody::User(TextPayload {
            content: content.into(),
        }))
    }

    /// An `assistant` chunk with text only.
    pub fn assistant_text(content: impl Into<String>) -> Self {
        Self::assistant(Some(content.into()), None)
    }

    /// An `assistant` chunk.
    pub fn assistant(content: Option<String>, tool_calls: Option<Vec<ToolCall>>) -> Self {
        Self::new(ChunkBody::Assistant(AssistantPayload {
            content,
            tool_calls,
        }))
    }

    /// A `tool_result` chunk.
    pub fn tool_result(
        tool_call_id: impl Into<String>,
        name: impl Into<String>,
        content: impl Into<String>,
    ) -> Self {
        Self::new(ChunkBody::ToolResult(ToolResultPayload {
            tool_call_id: tool_call_id.into(),
            name: name.into(),
            content: content.into(),
        }))
    }

    /// A `note` chunk.
    pub fn note(author: impl Into<String>, text: impl Into<String>) -> Self {
        Self::new(ChunkBody::Note(Note {
            author: author.into(),
            text: text.into(),
        }))
    }

    /// The body.
    pub fn body(&self) -> &ChunkBody {
        &self.0.body
    }

    /// The branch tag, if any.
    pub fn branch(&self) -> Option<&str> {
        self.0.branch.as_deref()
    }

    /// The same chunk tagged with a branch.
    pub fn with_branch(&self, branch: impl Into<String>) -> Self {
        Self(Arc::new(Held::new(ChunkData {
            body: self.0.body.clone(),
            branch: Some(branch.into()),
        })))
    }

    /// The same chunk without a branch tag (itself, shared, when it has none).
    pub fn untagged(&self) -> Self {
        match self.0.branch {
            None => self.clone(),
            Some(_) => Self(Arc::new(Held::new(ChunkData {
                body: self.0.body.clone(),
                branch: None,
            }))),
        }
    }

    /// The kind.
    pub fn kind(&self) -> ChunkKind {
        self.0.body.kind()
    }

    /// True for the four kinds a model sees.
    pub fn is_conversation(&self) -> bool {
        self.kind().is_conversation()
    }

    /// The text of a system, user or assistant chunk, or the content of a tool result.
    pub fn text(&self) -> Option<&str> {
        match &self.0.body {
            ChunkBody::System(p) | ChunkBody::User(p) => Some(&p.content),
            ChunkBody::Assistant(p) => p.content.as_deref(),
            ChunkBody::ToolResult(p) => Some(&p.content),
            _ => None,
        }
    }

    /// The tool calls of an assistant chunk (empty otherwise).
    pub fn tool_calls(&self) -> &[ToolCall] {
        match &self.0.body {
            ChunkBody::Assistant(AssistantPayload {
                tool_calls: Some(calls),
                ..
            }) => calls,
            _ => &[],
        }
    }

    /// True when both handles share one allocation (cheap identity, used to find shared
    /// prefixes of forks).
    pub fn ptr_eq(&self, other: &Chunk) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Hex sha256 of the chunk's canonical JSON: [`Chunk::digest`] in hex.
    pub fn sha256(&self) -> String {
        hex::encode(self.digest())
    }

    /// The chunk's content digest: the sha256 of its canonical JSON, the compact
    /// `{"kind":..,"payload":{..}}` (plus `"branch"` for a tagged chunk) that `serde_json`
    /// writes for it. `docs/formats.md` ("Digests and roots") says exactly how that canon
    /// differs from RFC 8785. Computed once per chunk allocation and cached there, so the
    /// sessions that share a chunk share its digest; the JSON is written straight into the
    /// hash, never held.
    ///
    /// ```
    /// use rath_session::Chunk;
    ///
    /// let c = Chunk::user("hi");
    /// assert_eq!(c.sha256(), "46bf22d065384629d62411eb51a214df7c5a902a24fe49d914ed46e399e0cb5d");
    /// assert_eq!(c.digest(), c.clone().digest());
    /// ```
    pub fn digest(&self) -> [u8; 32] {
        *self.0.digest.get_or_init(|| {
            let mut hash = Sha256::new();
            // Writing into a hash cannot fail, and a chunk always serialises.
            let _ = serde_json::to_writer(&mut hash, &self.0.data);
            hash.finalize().into()
        })
    }

    /// The chunk's digest computed again from its content, never from the cache: what a
    /// verifier that must not trust an earlier computation calls.
    pub fn digest_uncached(&self) -> [u8; 32] {
        let mut hash = Sha256::new();
        let _ = serde_json::to_writer(&mut hash, &self.0.data);
        hash.finalize().into()
    }
}

impl From<ChunkBody> for Chunk {
    fn from(body: ChunkBody) -> Self {
        Chunk::new(body)
    }
}

impl ChunkBody {
    /// The kind of this body.
    pub fn kind(&self) -> ChunkKind {
        match self {
            ChunkBody::System(_) => ChunkKind::System,
            ChunkBody::User(_) => ChunkKind::User,
            ChunkBody::Assistant(_) => ChunkKind::Assistant,
            ChunkBody::ToolResult(_) => ChunkKind::ToolResult,
            ChunkBody::ToolEvidence(_) => ChunkKind::ToolEvidence,
            ChunkBody::ModelCall(_) => ChunkKind::ModelCall,
            ChunkBody::RouteDecision(_) => ChunkKind::RouteDecision,
            ChunkBody::MemoryEvent(_) => ChunkKind::MemoryEvent,
            ChunkBody::CompressionRecord(_) => ChunkKind::CompressionRecord,
            ChunkBody::PolicyDecision(_) => ChunkKind::PolicyDecision,
            ChunkBody::Note(_) => ChunkKind::Note,
            ChunkBody::RunFailure(_) => ChunkKind::RunFailure,
        }
    }
}
