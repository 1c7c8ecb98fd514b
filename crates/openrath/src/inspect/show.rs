//! One session's transcript with its evidence, for people (`render`) and scripts (JSON).

use std::fmt::Write as _;

use rath_persist::LoadedSession;
use rath_session::{Chunk, ChunkBody, RunFailure, Session, SessionId, Usage};
use serde::Serialize;
use serde_json::Value;

use super::{failure_text, file_name, session_status, usage_text};

/// One chunk of a [`Transcript`].
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct TranscriptEntry {
    /// Position in the session.
    pub index: usize,
    /// Wire kind (`user`, `tool_evidence`, `route_decision`, ...).
    pub kind: String,
    /// True for the four kinds a model sees.
    pub conversation: bool,
    /// The branch tag set by a shared-prefix merge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// A one-line label: who or what (`assistant`, `tool_result word_count`, ...).
    pub label: String,
    /// The readable body (may span lines).
    pub text: String,
    /// The payload exactly as stored.
    pub payload: Value,
}

/// A session laid out for reading: header facts, then every chunk in order.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Transcript {
    /// Session id.
    pub id: SessionId,
    /// File name in the store.
    pub file: String,
    /// Header `created_at`.
    pub created_at: String,
    /// Trailer `closed_at`, when closed.
    pub closed_at: Option<String>,
    /// `closed` or `not closed` (crashed or still being written).
    pub closed: bool,
    /// `failed`, `closed`, `crashed` or `open` (see [`super::session_status`]).
    pub status: &'static str,
    /// Why the run failed, when it did: the session's last chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<RunFailure>,
    /// True when a torn last line was skipped on load.
    pub torn_line_skipped: bool,
    /// Parent ids.
    pub parents: Vec<SessionId>,
    /// Lineage operator.
    pub operator: String,
    /// Lineage kind.
    pub kind: String,
    /// Lineage extras.
    pub extras: Vec<(String, Value)>,
    /// Sandbox placement, as recorded.
    pub placement: String,
    /// Cumulative usage.
    pub usage: Option<Usage>,
    /// Usage per agent.
    pub agent_usage: Vec<(String, Usage)>,
    /// Tool calls waiting (for approval, ...), as `name (id): reason`.
    pub pending: Vec<String>,
    /// Every chunk.
    pub chunks: Vec<TranscriptEntry>,
}

impl Transcript {
    /// Builds the transcript of a loaded session.
    pub fn new(loaded: &LoadedSession) -> Self {
        let mut t = Self::from_session(&loaded.session);
        t.file = file_name(&loaded.path);
        t.created_at = loaded.created_at.to_string();
        t.closed_at = loaded.closed_at.map(|t| t.to_string());
        t.closed = loaded.closed;
        let crashed = !loaded.closed && t.file.ends_with(rath_persist::PARTIAL_SUFFIX);
        t.status = session_status(loaded.closed, crashed, t.failure.as_ref());
        t.torn_line_skipped = loaded.torn_line_skipped;
        t
    }

    /// Builds the transcript of an in-memory session (no file; counted as closed).
    pub fn from_session(s: &Session) -> Self {
        let l = s.lineage();
        let p = s.placement();
        let placement = match (p.backend(), p.handle_id()) {
            (Some(b), Some(h)) => format!("{b} (sandbox {h})"),
            (Some(b), None) => b.to_owned(),
            (None, Some(h)) => format!("sandbox {h}"),
            (None, None) => "none".to_owned(),
        };
        let chunks = s
            .chunks()
            .iter()
            .enumerate()
            .map(|(index, c)| entry(index, c))
            .collect();
        Transcript {
            id: s.id().clone(),
            file: String::new(),
            created_at: s.created_at().to_string(),
            closed_at: None,
            closed: true,
            status: session_status(true, false, s.failure()),
            failure: s.failure().cloned(),
            torn_line_skipped: false,
            parents: l.parents.to_vec(),
            operator: l.operator.to_string(),
            kind: l.kind.as_str().to_owned(),
            extras: l.extras.clone(),
            placement,
            usage: s.usage(),
            agent_usage: s
                .agent_usage()
                .iter()
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
            pending: s
                .pending()
                .iter()
                .map(|p| format!("{} ({}): {}", p.call.function.name, p.call.id, p.reason))
                .collect(),
            chunks,
        }
    }

    /// The transcript as text: a header block, then one numbered entry per chunk. Evidence
    /// (what the model never saw) is marked with `~`.
    pub fn render(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "session   {}", self.id);
        if !self.file.is_empty() {
            let _ = writeln!(o, "file      {}", self.file);
        }
        let status = match (&self.closed_at, self.closed) {
            (Some(t), _) => format!("closed at {t}"),
            (None, true) => "closed".to_owned(),
            (None, false) => "NOT closed (crashed, or still being written)".to_owned(),
        };
        let _ = writeln!(o, "created   {}; {status}", self.created_at);
        if let Some(f) = &self.failure {
            let _ = writeln!(o, "FAILED    {}", failure_text(f));
            for a in &f.attempts {
                let _ = writeln!(o, "  attempt {}: {}", a.attempt, a.error);
            }
        }
        if self.torn_line_skipped {
            let _ = writeln!(o, "warning   a torn last line was skipped");
        }
        let parents = if self.parents.is_empty() {
            "(root)".to_owned()
        } else {
            self.parents
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            o,
            "lineage   {} / {}; parents {parents}",
            self.operator, self.kind
        );
        if !self.extras.is_empty() {
            let ex: Vec<String> = self
                .extras
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let _ = writeln!(o, "extras    {}", ex.join(", "));
        }
        let _ = writeln!(o, "placement {}", self.placement);
        let _ = writeln!(o, "usage     {}", usage_text(self.usage));
        for (agent, u) in &self.agent_usage {
            let _ = writeln!(o, "  {agent}: {}", usage_text(Some(*u)));
        }
        for p in &self.pending {
            let _ = writeln!(o, "pending   {p}");
        }
        let conv = self.chunks.iter().filter(|c| c.conversation).count();
        let _ = writeln!(
            o,
            "chunks    {} ({conv} conversation, {} evidence)",
            self.chunks.len(),
            self.chunks.len() - conv
        );
        o.push('\n');
        for c in &self.chunks {
            let mark = if c.conversation { ' ' } else { '~' };
            let branch = c
                .branch
                .as_deref()
                .map(|b| format!(" [branch {b}]"))
                .unwrap_or_default();
            let _ = writeln!(o, "{mark}[{}] {}{branch}", c.index, c.label);
            for line in c.text.lines() {
                let _ = writeln!(o, "      {line}");
            }
        }
        o
    }
}

fn entry(index: usize, c: &Chunk) -> TranscriptEntry {
    let (label, text) = describe_chunk(c);
    let payload = serde_json::to_value(c)
        .ok()
        .and_then(|v| v.get("payload").cloned())
        .unwrap_or(Value::Null);
    TranscriptEntry {
        index,
        kind: c.kind().as_str().to_owned(),
        conversation: c.is_conversation(),
        branch: c.branch().map(str::to_owned),
        label,
        text,
        payload,
    }
}

/// A chunk as `(label, body text)` for people: `("assistant", "...")`,
/// `("tool_result word_count (call_1)", "{...}")`, `("route_decision team", "-> qa: ...")`.
pub fn describe_chunk(c: &Chunk) -> (String, String) {
    match c.body() {
        ChunkBody::System(p) => ("system".into(), p.content.clone()),
        ChunkBody::User(p) => ("user".into(), p.content.clone()),
        ChunkBody::Assistant(p) => {
            let mut text = p.content.clone().unwrap_or_default();
            for call in p.tool_calls.iter().flatten() {
                if !text.is_empty() {
                    text.push('\n');
                }
                let _ = write!(
                    text,
                    "-> {}({}) [{}]",
                    call.function.name, call.function.arguments, call.id
                );
            }
            ("assistant".into(), text)
        }
        ChunkBody::ToolResult(p) => (
            format!("tool_result {} ({})", p.name, p.tool_call_id),
            p.content.clone(),
        ),
        ChunkBody::ToolEvidence(e) => {
            let mut parts = vec![format!("outcome={}", e.outcome)];
            if let Some(b) = &e.backend {
                parts.push(format!("backend={b}"));
            }
            if let Some(h) = &e.sandbox_handle {
                parts.push(format!("sandbox={h}"));
            }
            if let Some(k) = &e.payload_kind {
                parts.push(format!("payload={k}"));
            }
            if let Some(x) = e.exit_code {
                parts.push(format!("exit={x}"));
            }
            parts.push(format!("{}ms", fmt_ms(e.elapsed_ms)));
            let mut text = parts.join(" ");
            if let Some(s) = &e.summary {
                let _ = write!(text, "\n{s}");
            }
            (
                format!("tool_evidence {} ({})", e.tool, e.tool_call_id),
                text,
            )
        }
        ChunkBody::ModelCall(m) => {
            let who = m.agent.as_deref().unwrap_or("-");
            let mut text = format!(
                "agent={who} provider={} model={} finish={} usage={} messages={} {}ms",
                m.provider,
                m.model.as_deref().unwrap_or("-"),
                m.finish_reason.as_deref().unwrap_or("-"),
                usage_text(m.usage),
                m.messages_sent,
                fmt_ms(m.elapsed_ms)
            );
            // How the answer was fetched, when the provider recorded anything notable.
            for key in ["stream_fallback", "stream_skipped"] {
                if let Some(v) = m.detail.get(key).and_then(|v| v.as_str()) {
                    text.push_str(&format!(" {key}={v}"));
                }
            }
            if let Some(a) = m.detail.get("attempts").and_then(|v| v.as_array()) {
                text.push_str(&format!(" attempts={}", a.len()));
            }
            (format!("model_call {}", m.request_id), text)
        }
        ChunkBody::RouteDecision(r) => {
            let choice = r.choice.as_deref().unwrap_or("(done)");
            let text = format!(
                "-> {choice} of [{}] by {}: {}",
                r.candidates.join(", "),
                r.decided_by,
                r.reason
            );
            (format!("route_decision {}", r.selector), text)
        }
        ChunkBody::MemoryEvent(m) => {
            let mut text = format!("store={}", m.store_id);
            if let Some(a) = &m.agent {
                let _ = write!(text, " agent={a}");
            }
            if let Some(s) = &m.scope {
                let _ = write!(text, " scope={s}");
            }
            if let Some(q) = &m.query {
                let _ = write!(text, " query={q:?}");
            }
            if let Some(c) = &m.commit_id {
                let _ = write!(text, " commit={c}");
            }
            for u in &m.uris {
                let _ = write!(text, "\n{u}");
            }
            for h in &m.hits {
                let _ = write!(text, "\n{:.3} {} {}", h.score, h.uri, h.snippet);
            }
            (format!("memory_event {}", m.operation), text)
        }
        ChunkBody::CompressionRecord(r) => {
            let text = format!(
                "dropped {} chunk(s) ({}), {} rows out",
                r.dropped.len(),
                if r.lossy { "lossy" } else { "lossless" },
                r.rows_out
            );
            (format!("compression_record {}", r.compressor), text)
        }
        ChunkBody::PolicyDecision(p) => {
            let text = format!("{} by {}: {}", p.decision, p.decided_by, p.reason);
            (
                format!("policy_decision {} ({})", p.tool, p.tool_call_id),
                text,
            )
        }
        ChunkBody::Note(n) => (format!("note {}", n.author), n.text.clone()),
        ChunkBody::RunFailure(f) => {
            let mut text = failure_text(f);
            for a in &f.attempts {
                let _ = write!(text, "\nattempt {}: {}", a.attempt, a.error);
            }
            (format!("run_failure {}", f.kind), text)
        }
        _ => (c.kind().as_str().to_owned(), String::new()),
    }
}

fn fmt_ms(ms: f64) -> String {
    if ms.fract() == 0.0 {
        format!("{ms:.0}")
    } else {
        format!("{ms:.1}")
    }
}
