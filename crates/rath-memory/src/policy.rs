//! An agent's memory policy: recall-and-inject before a model call, commit-on-forward after.
//!
//! ```
//! use rath_memory::{CommitPolicy, LocalMemory, MemoryPolicy, RecallPolicy, Scope};
//! use rath_session::{Chunk, ChunkKind, Session, Stamper};
//!
//! let dir = tempfile::tempdir()?;
//! let mem = LocalMemory::open_at(dir.path(), "notes", Default::default())?;
//! let policy = MemoryPolicy {
//!     recall: Some(RecallPolicy::new(Scope::Agent, 3)),
//!     commit: Some(CommitPolicy::new(Scope::Agent, "answers")),
//! };
//!
//! // A forward: the flow layer runs the model between these two calls.
//! let input = Session::user_with("How often should I descale the kettle?", Stamper::counter());
//! let output = input.push(Chunk::assistant_text("Descale the kettle monthly."));
//! let committed = policy.commit_on_forward(&input, &output, &mem, Some("helper"))?;
//! assert_eq!(committed.last().unwrap().kind(), ChunkKind::MemoryEvent);
//!
//! // Next time, before the model call:
//! let next = Session::user_with("kettle descale schedule?", Stamper::counter());
//! let ready = policy.recall_and_inject(&next, &mem, Some("helper"))?;
//! let kinds: Vec<ChunkKind> = ready.chunks().iter().map(|c| c.kind()).collect();
//! assert_eq!(kinds, [ChunkKind::User, ChunkKind::MemoryEvent, ChunkKind::System]);
//! assert!(ready.last().unwrap().text().unwrap().contains("monthly"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Everything here is a pure function of the session, the store and the stamper, so
//! deterministic runs produce byte-identical sessions.

use rath_session::{Chunk, ChunkBody, ChunkKind, Session};

use crate::{Hit, Memory, MemoryError, MemoryUri, NewItem, Scope, commit_from, recall_into};

/// What text a recall searches for.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuerySource {
    /// The text of the last `user` chunk.
    LastUser,
    /// The texts of the last `n` conversation chunks, joined by newlines.
    LastConversation(usize),
    /// A fixed query.
    Fixed(String),
}

/// The role of the injected chunk (the model sees it; the recall event beside it it does not).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum InjectRole {
    /// A `system` chunk.
    #[default]
    System,
    /// A `user` chunk.
    User,
}

/// How recalled hits become a chunk the model sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InjectFormat {
    /// The role of the injected chunk.
    pub role: InjectRole,
    /// The first line of the chunk.
    pub header: String,
    /// Whether each line names the item's address.
    pub show_uris: bool,
}

impl Default for InjectFormat {
    fn default() -> Self {
        Self {
            role: InjectRole::System,
            header: "Relevant memory (recalled, may be outdated):".to_owned(),
            show_uris: true,
        }
    }
}

impl InjectFormat {
    /// The text of the chunk for `hits`: the header, then one `- ` line per hit.
    pub fn render(&self, hits: &[Hit]) -> String {
        let mut out = self.header.clone();
        for h in hits {
            out.push_str("\n- ");
            if self.show_uris {
                out.push('[');
                out.push_str(&h.uri.to_string());
                out.push_str("] ");
            }
            out.push_str(&h.snippet.replace('\n', " "));
        }
        out
    }

    /// The chunk for `hits`.
    pub fn chunk(&self, hits: &[Hit]) -> Chunk {
        let text = self.render(hits);
        match self.role {
            InjectRole::System => Chunk::system(text),
            InjectRole::User => Chunk::user(text),
        }
    }
}

/// Recall before a model call.
#[derive(Clone, Debug, PartialEq)]
pub struct RecallPolicy {
    /// Where the query comes from.
    pub query: QuerySource,
    /// The scope searched (`None`: all).
    pub scope: Option<Scope>,
    /// How many hits at most.
    pub k: usize,
    /// Hits scoring below this are dropped before injection (they still appear in the event).
    pub min_score: f64,
    /// How hits are shown to the model.
    pub inject: InjectFormat,
}

impl RecallPolicy {
    /// Recall the last user message in `scope`, `k` hits, injected as a system chunk.
    pub fn new(scope: Scope, k: usize) -> Self {
        Self {
            query: QuerySource::LastUser,
            scope: Some(scope),
            k,
            min_score: 0.0,
            inject: InjectFormat::default(),
        }
    }
}

/// Which chunks a forward's commit stores.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChunkSelection {
    /// The last `assistant` chunk with text that the forward added.
    LastAssistant,
    /// The last `user` chunk of the session and the last `assistant` text after it, as one
    /// item (`Q: ...\nA: ...`), when the forward added that answer.
    LastExchange,
    /// Every `user`, `assistant` (with text) and `tool_result` chunk the forward added.
    NewConversation,
}

/// Commit after a forward.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitPolicy {
    /// Which chunks.
    pub select: ChunkSelection,
    /// The scope they go to.
    pub scope: Scope,
    /// Path prefix: items go to `memory://<scope>/<prefix>/<session-id>/<chunk-index>`.
    pub prefix: String,
}

impl CommitPolicy {
    /// Commit the last exchange under `memory://<scope>/<prefix>/...`.
    pub fn new(scope: Scope, prefix: impl Into<String>) -> Self {
        Self {
            select: ChunkSelection::LastExchange,
            scope,
            prefix: prefix.into(),
        }
    }
}

/// An agent's memory behaviour: both halves optional.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemoryPolicy {
    /// Recall-and-inject before a model call.
    pub recall: Option<RecallPolicy>,
    /// Commit-on-forward after one.
    pub commit: Option<CommitPolicy>,
}

impl MemoryPolicy {
    /// Before a model call: recalls per the policy, appends the recall event and (when there
    /// are hits at or above `min_score`) the injected chunk. Unchanged when there is no recall
    /// policy or the query is empty.
    pub fn recall_and_inject(
        &self,
        session: &Session,
        memory: &dyn Memory,
        agent: Option<&str>,
    ) -> Result<Session, MemoryError> {
        let Some(p) = &self.recall else {
            return Ok(session.clone());
        };
        let query = query_text(session, &p.query);
        if query.trim().is_empty() {
            return Ok(session.clone());
        }
        let (s, hits) = recall_into(session, memory, &query, p.scope, p.k, agent)?;
        let shown: Vec<Hit> = hits
            .into_iter()
            .filter(|h| h.score >= p.min_score)
            .collect();
        if shown.is_empty() {
            return Ok(s);
        }
        Ok(s.push(p.inject.chunk(&shown)))
    }

    /// After a forward from `input` to `output`: commits the selected chunks of what the
    /// forward added and appends the commit event to `output`. Unchanged when there is no
    /// commit policy or nothing was selected.
    pub fn commit_on_forward(
        &self,
        input: &Session,
        output: &Session,
        memory: &dyn Memory,
        agent: Option<&str>,
    ) -> Result<Session, MemoryError> {
        let Some(p) = &self.commit else {
            return Ok(output.clone());
        };
        let start = forward_start(input, output);
        let items = select_items(output, start, p)?;
        if items.is_empty() {
            return Ok(output.clone());
        }
        Ok(commit_from(output, memory, items, agent)?.0)
    }
}

/// Where the forward's new chunks begin: after `input`'s chunks when `output` extends them.
fn forward_start(input: &Session, output: &Session) -> usize {
    let n = input.len();
    let extends = n <= output.len()
        && input
            .chunks()
            .iter()
            .zip(output.chunks().iter())
            .all(|(a, b)| a.ptr_eq(b) || a == b);
    if extends { n } else { 0 }
}

fn query_text(session: &Session, source: &QuerySource) -> String {
    match source {
        QuerySource::Fixed(q) => q.clone(),
        QuerySource::LastUser => session
            .chunks()
            .iter()
            .rev()
            .find(|c| c.kind() == ChunkKind::User)
            .and_then(|c| c.text())
            .unwrap_or_default()
            .to_owned(),
        QuerySource::LastConversation(n) => {
            let mut texts: Vec<&str> = session
                .chunks()
                .iter()
                .rev()
                .filter(|c| c.is_conversation())
                .filter_map(Chunk::text)
                .take(*n)
                .collect();
            texts.reverse();
            texts.join("\n")
        }
    }
}

/// The items a commit policy selects from `session`'s chunks at `start..`.
pub fn select_items(
    session: &Session,
    start: usize,
    policy: &CommitPolicy,
) -> Result<Vec<NewItem>, MemoryError> {
    if start > session.len() {
        return Err(MemoryError::BadSelection {
            session_id: session.id().to_string(),
            reason: format!(
                "start {start} is past the session's {} chunks",
                session.len()
            ),
        });
    }
    let uri = |index: usize| {
        let prefix = policy.prefix.trim_matches('/');
        let path = if prefix.is_empty() {
            format!("{}/{index}", session.id())
        } else {
            format!("{prefix}/{}/{index}", session.id())
        };
        MemoryUri::new(policy.scope, path)
    };
    let chunks = session.chunks();
    let last_assistant = (start..chunks.len()).rev().find(|&i| {
        chunks[i].kind() == ChunkKind::Assistant && chunks[i].text().is_some_and(|t| !t.is_empty())
    });
    let mut items = Vec::new();
    match policy.select {
        ChunkSelection::LastAssistant => {
            if let Some(i) = last_assistant {
                items.push(NewItem::new(uri(i)?, chunks[i].text().unwrap_or_default()));
            }
        }
        ChunkSelection::LastExchange => {
            if let Some(a) = last_assistant {
                let answer = chunks[a].text().unwrap_or_default();
                let question = (0..a)
                    .rev()
                    .find(|&i| chunks[i].kind() == ChunkKind::User)
                    .and_then(|i| chunks[i].text());
                let text = match question {
                    Some(q) => format!("Q: {q}\nA: {answer}"),
                    None => answer.to_owned(),
                };
                items.push(NewItem::new(uri(a)?, text));
            }
        }
        ChunkSelection::NewConversation => {
            for (i, c) in chunks.iter().enumerate().skip(start) {
                let keep = matches!(
                    c.body(),
                    ChunkBody::User(_) | ChunkBody::Assistant(_) | ChunkBody::ToolResult(_)
                );
                if let (true, Some(t)) = (keep, c.text().filter(|t| !t.is_empty())) {
                    items.push(NewItem::new(uri(i)?, t));
                }
            }
        }
    }
    Ok(items)
}
