//! One session's transcript with its evidence, for people (`render`) and scripts (JSON).

use std::fmt::Write as _;
use std::io::Write;

use rath_persist::LoadedSession;
use rath_persist::stream::SessionStream;
use rath_session::{
    AssistantPayload, Chunk, ChunkBody, MemoryEvent, ModelCall, PendingCall, Placement, RunFailure,
    Session, SessionId, ToolEvidence, Usage,
};
use serde::Serialize;
use serde_json::Value;

use super::{
    FileFacts, FileWarning, InspectError, SessionStatus, StoreView, failure_text, file_facts,
    file_name, usage_text,
};

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

impl TranscriptEntry {
    /// The entry as text: a numbered label line (evidence marked `~`), then the body
    /// indented.
    pub fn render(&self) -> String {
        let mut o = String::new();
        let mark = if self.conversation { ' ' } else { '~' };
        let branch = self
            .branch
            .as_deref()
            .map(|b| format!(" [branch {b}]"))
            .unwrap_or_default();
        let _ = writeln!(o, "{mark}[{}] {}{branch}", self.index, self.label);
        for line in self.text.lines() {
            let _ = writeln!(o, "      {line}");
        }
        o
    }
}

/// Which chunks to show: from chunk index `from`, at most `limit` of them (all when `None`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Page {
    /// First chunk index shown.
    pub from: usize,
    /// How many chunks at most.
    pub limit: Option<usize>,
}

impl Page {
    /// Chunks `from..from + limit`.
    pub fn new(from: usize, limit: Option<usize>) -> Self {
        Page { from, limit }
    }

    /// The shown range of a session with `total` chunks.
    fn range(self, total: usize) -> (usize, usize) {
        let from = self.from.min(total);
        let to = match self.limit {
            Some(n) => from.saturating_add(n).min(total),
            None => total,
        };
        (from, to)
    }
}

/// A session laid out for reading: header facts, then its chunks in order (all of them, or
/// one page).
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
    /// True when closed (false: crashed or still being written).
    pub closed: bool,
    /// See [`SessionStatus`].
    pub status: SessionStatus,
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
    /// Chunks in the session (conversation and evidence), shown or not.
    pub chunk_count: usize,
    /// Conversation chunks in the session.
    pub conversation_count: usize,
    /// Index of the first chunk shown.
    pub from: usize,
    /// One past the index of the last chunk shown (`chunk_count` when shown to the end).
    pub to: usize,
    /// The chunks shown, each with its index: normally the run `from..to`; the HTML viewer
    /// leaves out the middle of a long session (the indices show the gap).
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
        t.status = SessionStatus::of(loaded.closed, &t.file, t.failure.as_ref());
        t.torn_line_skipped = loaded.torn_line_skipped;
        t
    }

    /// Builds the transcript of an in-memory session (no file; counted as closed).
    pub fn from_session(s: &Session) -> Self {
        let l = s.lineage();
        let chunks: Vec<TranscriptEntry> = s
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
            status: SessionStatus::from_flags(true, false, s.failure()),
            failure: s.failure().cloned(),
            torn_line_skipped: false,
            parents: l.parents.to_vec(),
            operator: l.operator.to_string(),
            kind: l.kind.as_str().to_owned(),
            extras: l.extras.clone(),
            placement: placement_text(s.placement()),
            usage: s.usage(),
            agent_usage: s
                .agent_usage()
                .iter()
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
            pending: pending_text(s.pending()),
            chunk_count: chunks.len(),
            conversation_count: s.conversation_len(),
            from: 0,
            to: chunks.len(),
            chunks,
        }
    }

    /// The header of a stored file's transcript (no chunks yet) for the chunks `page` picks.
    pub fn head(f: &FileFacts, page: Page) -> Self {
        let total = f.chunks();
        let (from, to) = page.range(total);
        Transcript {
            id: f.id.clone(),
            file: f.file.clone(),
            created_at: f.created_at.to_string(),
            closed_at: f.closed_at.map(|t| t.to_string()),
            closed: f.closed,
            status: SessionStatus::of(f.closed, &f.file, f.failure.as_ref()),
            failure: f.failure.clone(),
            torn_line_skipped: f.torn_line_skipped,
            parents: f.lineage.parents.to_vec(),
            operator: f.lineage.operator.to_string(),
            kind: f.lineage.kind.as_str().to_owned(),
            extras: f.lineage.extras.clone(),
            placement: placement_text(&f.placement),
            usage: f.usage,
            agent_usage: f.agent_usage.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            pending: pending_text(&f.pending),
            chunk_count: total,
            conversation_count: f.conversation as usize,
            from,
            to,
            chunks: Vec::new(),
        }
    }

    /// The transcript as text: a header block, then one numbered entry per chunk shown.
    /// Evidence (what the model never saw) is marked with `~`.
    pub fn render(&self) -> String {
        let mut o = self.render_head();
        for c in &self.chunks {
            o.push_str(&c.render());
        }
        o.push_str(&self.render_foot());
        o
    }

    /// The header block and the blank line after it.
    pub fn render_head(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "session   {}", self.id);
        if !self.file.is_empty() {
            let _ = writeln!(o, "file      {}", self.file);
        }
        let status = SessionStatus::describe(self.closed, self.closed_at.as_deref());
        let _ = writeln!(o, "created   {}; {status}", self.created_at);
        if let Some(f) = &self.failure {
            let head = if f.is_cancellation() {
                "CANCELLED"
            } else {
                "FAILED   "
            };
            let _ = writeln!(o, "{head} {}", failure_text(f));
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
        let _ = writeln!(o, "chunks    {}", self.counts().describe());
        if self.is_paged() {
            let _ = if self.from == self.to {
                writeln!(o, "shown     none of the {} chunks", self.chunk_count)
            } else {
                writeln!(
                    o,
                    "shown     chunks {} to {} of {}",
                    self.from,
                    self.to - 1,
                    self.chunk_count
                )
            };
        }
        o.push('\n');
        o
    }

    /// The session's chunk counts (see [`crate::ChunkCounts`]): `chunk_count` in all,
    /// `conversation_count` of them conversation.
    pub fn counts(&self) -> crate::ChunkCounts {
        let conversation = self.conversation_count.min(self.chunk_count);
        crate::ChunkCounts::new(
            conversation as u64,
            (self.chunk_count - conversation) as u64,
        )
    }

    /// After the chunks: how to see the rest, when a page stopped before the end.
    pub fn render_foot(&self) -> String {
        match self.next_command() {
            Some(cmd) => format!("... {} more chunk(s): {cmd}\n", self.chunk_count - self.to),
            None => String::new(),
        }
    }

    /// True when not every chunk is shown.
    pub fn is_paged(&self) -> bool {
        self.from > 0 || self.to < self.chunk_count
    }

    /// `rath show ID --from K`, the command that continues after the last chunk shown.
    pub fn next_command(&self) -> Option<String> {
        (self.to < self.chunk_count).then(|| show_command(&self.id, self.to, None))
    }

    /// The transcript as pretty JSON (what `rath show --json` prints), ending in a newline.
    pub fn to_json(&self) -> String {
        let mut out = Vec::new();
        let _ = write_json_parts(self, self.chunks.iter().cloned().map(Ok), &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// `rath show ID --from K [--limit N]`, with the id quoted for a POSIX shell when needed.
pub fn show_command(id: &SessionId, from: usize, limit: Option<usize>) -> String {
    let mut cmd = format!("rath show {} --from {from}", shell_word(id.as_str()));
    if let Some(n) = limit {
        let _ = write!(cmd, " --limit {n}");
    }
    cmd
}

fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.,:/+@%=".contains(c));
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn placement_text(p: &Placement) -> String {
    match (p.backend(), p.handle_id()) {
        (Some(b), Some(h)) => format!("{b} (sandbox {h})"),
        (Some(b), None) => b.to_owned(),
        (None, Some(h)) => format!("sandbox {h}"),
        (None, None) => "none".to_owned(),
    }
}

fn pending_text(pending: &[PendingCall]) -> Vec<String> {
    pending
        .iter()
        .map(|p| format!("{} ({}): {}", p.call.function.name, p.call.id, p.reason))
        .collect()
}

fn write_err(source: std::io::Error) -> InspectError {
    InspectError::Write { source }
}

/// Writes `head` as pretty JSON with `entries` as its `chunks`, one entry at a time: the
/// same bytes `serde_json::to_string_pretty` gives for the whole transcript, plus a newline.
fn write_json_parts(
    head: &Transcript,
    entries: impl Iterator<Item = Result<TranscriptEntry, InspectError>>,
    out: &mut dyn Write,
) -> Result<(), InspectError> {
    let mut bare = head.clone();
    bare.chunks.clear();
    let text = serde_json::to_string_pretty(&bare).map_err(|e| InspectError::Write {
        source: std::io::Error::other(e),
    })?;
    // `chunks` is the last field: the text ends `"chunks": []\n}`.
    let open = text
        .strip_suffix("[]\n}")
        .ok_or_else(|| write_err(std::io::Error::other("unexpected transcript JSON layout")))?;
    out.write_all(open.as_bytes()).map_err(write_err)?;
    let mut any = false;
    for e in entries {
        let e = e?;
        let body = serde_json::to_string_pretty(&e).map_err(|e| InspectError::Write {
            source: std::io::Error::other(e),
        })?;
        out.write_all(if any { b",\n    " } else { b"[\n    " })
            .map_err(write_err)?;
        out.write_all(body.replace('\n', "\n    ").as_bytes())
            .map_err(write_err)?;
        any = true;
    }
    out.write_all(if any { b"\n  ]\n}\n" } else { b"[]\n}\n" })
        .map_err(write_err)?;
    Ok(())
}

enum Chunks {
    Stream(Box<SessionStream>),
    Loaded(std::vec::IntoIter<(usize, Chunk)>),
}

/// A stored session's transcript read chunk by chunk: [`Transcript::head`] first (from a
/// read-through of the file), then the chunks of the page from a second read. Memory stays
/// bounded by the largest chunk, whatever the file size. (A hand-edited file whose evidence
/// cannot be placed while streaming is loaded whole instead; see
/// [`rath_persist::stream`].)
pub struct TranscriptStream {
    head: Transcript,
    chunks: Chunks,
    done: bool,
}

impl std::fmt::Debug for TranscriptStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TranscriptStream")
            .field("id", &self.head.id)
            .field("from", &self.head.from)
            .field("to", &self.head.to)
            .finish_non_exhaustive()
    }
}

impl TranscriptStream {
    /// Opens the transcript of the file `facts` describes, for the chunks `page` picks.
    pub fn open(facts: &FileFacts, page: Page) -> Result<Self, InspectError> {
        if !facts.in_order {
            let loaded = rath_persist::load_file(&facts.path)?;
            return Ok(Self::loaded(facts, &loaded, page));
        }
        Ok(TranscriptStream {
            head: Transcript::head(facts, page),
            chunks: Chunks::Stream(Box::new(SessionStream::open(&facts.path)?)),
            done: false,
        })
    }

    /// The transcript of a session already loaded whole (from any store), for the chunks
    /// `page` picks.
    pub fn loaded(facts: &FileFacts, loaded: &LoadedSession, page: Page) -> Self {
        let head = Transcript::head(facts, page);
        let picked: Vec<(usize, Chunk)> = loaded
            .session
            .chunks()
            .iter()
            .enumerate()
            .skip(head.from)
            .take(head.to - head.from)
            .map(|(i, c)| (i, c.clone()))
            .collect();
        TranscriptStream {
            head,
            chunks: Chunks::Loaded(picked.into_iter()),
            done: false,
        }
    }

    /// The transcript of the session `facts` describes, from `view`'s store.
    pub(crate) fn of(
        view: &StoreView,
        facts: &FileFacts,
        page: Page,
    ) -> Result<Self, InspectError> {
        if view.db.is_some() {
            let loaded = view.load(&facts.id)?;
            return Ok(Self::loaded(facts, &loaded, page));
        }
        Self::open(facts, page)
    }

    /// The transcript's header facts (its `chunks` are empty).
    pub fn head(&self) -> &Transcript {
        &self.head
    }

    /// The next chunk of the page.
    pub fn next_entry(&mut self) -> Result<Option<TranscriptEntry>, InspectError> {
        if self.done {
            return Ok(None);
        }
        let (from, to) = (self.head.from, self.head.to);
        loop {
            let next = match &mut self.chunks {
                Chunks::Stream(s) => s.next_chunk()?,
                Chunks::Loaded(it) => it.next(),
            };
            match next {
                Some((i, _)) if i < from => continue,
                Some((i, c)) if i < to => return Ok(Some(entry(i, &c))),
                _ => {
                    self.done = true;
                    return Ok(None);
                }
            }
        }
    }

    /// Writes [`Transcript::render`]'s text, chunk by chunk.
    pub fn write_text(mut self, out: &mut dyn Write) -> Result<(), InspectError> {
        out.write_all(self.head.render_head().as_bytes())
            .map_err(write_err)?;
        while let Some(e) = self.next_entry()? {
            out.write_all(e.render().as_bytes()).map_err(write_err)?;
        }
        out.write_all(self.head.render_foot().as_bytes())
            .map_err(write_err)
    }

    /// Writes [`Transcript::to_json`]'s text, chunk by chunk.
    pub fn write_json(mut self, out: &mut dyn Write) -> Result<(), InspectError> {
        let head = self.head.clone();
        let entries = std::iter::from_fn(|| self.next_entry().transpose());
        write_json_parts(&head, entries, out)
    }

    /// The whole page in memory.
    pub fn collect(mut self) -> Result<Transcript, InspectError> {
        let mut chunks = Vec::new();
        while let Some(e) = self.next_entry()? {
            chunks.push(e);
        }
        let mut t = self.head;
        t.chunks = chunks;
        Ok(t)
    }

    /// The first `n` and the last `n` chunks of the page in memory (all of them when there
    /// are at most `2n`); the viewer's bounded transcript.
    pub fn collect_ends(mut self, n: usize) -> Result<Transcript, InspectError> {
        let mut first = Vec::new();
        // Grown as chunks come, never reserved for `n` up front: `n` is the caller's number
        // (a command-line option), the session may hold far fewer.
        let mut last = std::collections::VecDeque::new();
        while let Some(e) = self.next_entry()? {
            if first.len() < n {
                first.push(e);
            } else if n > 0 {
                if last.len() == n {
                    last.pop_front();
                }
                last.push_back(e);
            }
        }
        let mut t = self.head;
        first.extend(last);
        t.chunks = first;
        Ok(t)
    }
}

impl StoreView {
    /// One page of a stored session's transcript, to read chunk by chunk (the session is
    /// found by header id), and warnings about other files holding the same id.
    pub fn transcript_stream(
        &self,
        id: &SessionId,
        page: Page,
    ) -> Result<(TranscriptStream, Vec<FileWarning>), InspectError> {
        let (file, warnings) = self.locate(id)?;
        if self.db.is_some() {
            let loaded = self.load(id)?;
            let facts = crate::db::facts_of(&loaded);
            return Ok((TranscriptStream::loaded(&facts, &loaded, page), warnings));
        }
        let facts = file_facts(&file.path)?;
        Ok((TranscriptStream::open(&facts, page)?, warnings))
    }

    /// One page of a stored session's transcript, in memory.
    pub fn transcript_page(&self, id: &SessionId, page: Page) -> Result<Transcript, InspectError> {
        self.transcript_stream(id, page)?.0.collect()
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
        ChunkBody::Assistant(p) => ("assistant".into(), assistant_text(p)),
        ChunkBody::ToolResult(p) => (
            format!("tool_result {} ({})", p.name, p.tool_call_id),
            p.content.clone(),
        ),
        ChunkBody::ToolEvidence(e) => (
            format!("tool_evidence {} ({})", e.tool, e.tool_call_id),
            evidence_text(e),
        ),
        ChunkBody::ModelCall(m) => (format!("model_call {}", m.request_id), model_call_text(m)),
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
        ChunkBody::MemoryEvent(m) => (
            format!("memory_event {}", m.operation),
            memory_event_text(m),
        ),
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

/// An assistant message's body: its text, then one `-> name(arguments) [id]` line per tool
/// call.
fn assistant_text(p: &AssistantPayload) -> String {
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
    text
}

/// A tool evidence chunk's body: `outcome=... backend=... ... 12ms`, then its summary.
fn evidence_text(e: &ToolEvidence) -> String {
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
    text
}

/// A model call chunk's body: agent, provider, model, finish reason, usage, messages sent
/// and time, then how the answer was fetched when the provider recorded anything notable.
fn model_call_text(m: &ModelCall) -> String {
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
    text
}

/// A memory event's body: the store and what it was asked (agent, scope, query, commit),
/// then one line per URI and per hit.
fn memory_event_text(m: &MemoryEvent) -> String {
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
    text
}

fn fmt_ms(ms: f64) -> String {
    if ms.fract() == 0.0 {
        format!("{ms:.0}")
    } else {
        format!("{ms:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rath_persist::Store;
    use rath_session::{Stamper, ToolCall};

    #[test]
    fn streamed_output_equals_the_in_memory_transcript() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = Session::system_with("sys\nline two", Stamper::counter());
        for i in 0..25 {
            s = s.push(Chunk::user(format!("q{i} \"quoted\"\n\tnext")));
            s = s.push(Chunk::assistant(
                None,
                Some(vec![ToolCall::function(format!("c{i}"), "f", "{\"a\": 1}")]),
            ));
            s = s.push(Chunk::note("monitor", format!("evidence {i}")));
            s = s.push(Chunk::tool_result(format!("c{i}"), "f", "{}"));
        }
        Store::at(dir.path()).save(&s).expect("save");
        let view = StoreView::open(dir.path()).expect("open");
        for page in [
            Page::default(),
            Page::new(7, Some(13)),
            Page::new(0, Some(0)),
            Page::new(99, None),
            Page::new(100, Some(1)),
        ] {
            let full = view.transcript(s.id()).expect("transcript");
            let mut want = full.clone();
            let (from, to) = page.range(full.chunk_count);
            want.chunks = full.chunks[from..to].to_vec();
            want.from = from;
            want.to = to;
            let got = view.transcript_page(s.id(), page).expect("page");
            assert_eq!(got, want, "{page:?}");
            let (stream, warnings) = view.transcript_stream(s.id(), page).expect("stream");
            assert!(warnings.is_empty());
            let mut json = Vec::new();
            stream.write_json(&mut json).expect("json");
            let expected = serde_json::to_string_pretty(&want).expect("pretty") + "\n";
            assert_eq!(
                String::from_utf8(json).expect("utf-8"),
                expected,
                "{page:?}"
            );
            assert_eq!(want.to_json(), expected);
            let (stream, _) = view.transcript_stream(s.id(), page).expect("stream");
            let mut text = Vec::new();
            stream.write_text(&mut text).expect("text");
            assert_eq!(
                String::from_utf8(text).expect("utf-8"),
                want.render(),
                "{page:?}"
            );
        }
    }
}
