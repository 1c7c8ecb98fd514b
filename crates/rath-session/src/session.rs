//! The Session value and its operations.
//!
//! ```
//! use rath_session::{Chunk, Session, Stamper, Usage};
//!
//! let root = Session::user_with("How many words?", Stamper::counter()).to("local");
//! let a = root.fork().push(Chunk::assistant_text("four")).with_usage(None, Usage::new(10, 2));
//! let b = root.fork();
//! let merged = a.merge(&b)?;
//! assert_eq!(merged.len(), 3);
//! assert_eq!(merged.lineage().parents, vec![a.id().clone(), b.id().clone()]);
//! assert_eq!(merged.usage(), Some(Usage::new(10, 2)));
//! # Ok::<(), rath_session::SessionError>(())
//! ```

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use serde_json::Value;

use crate::SessionError;
use crate::chunk::{Chunk, ChunkBody, ToolCall};
use crate::lineage::{Lineage, LineageKind, Parents, SessionId};
use crate::list::ChunkList;
use crate::placement::{Placement, SandboxHandle, SandboxSpec};
use crate::stamp::{Stamper, Timestamp};
use crate::usage::{Usage, sum_optional};

/// A tool call requested but not yet answered (for example, waiting for approval).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PendingCall {
    /// The call as the model made it.
    pub call: ToolCall,
    /// The agent whose loop stopped on it.
    pub agent: Option<String>,
    /// Why it is pending (`require_approval`, ...).
    pub reason: String,
}

/// How [`Session::merge_with`] lays out the two sides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum MergeStrategy {
    /// `self` then `other`, as OpenRath does.
    #[default]
    Concat,
    /// The chunks both sides share (by identity, as forks of one parent do) once, then each
    /// side's suffix, every suffix chunk tagged with the id of the branch it came from.
    SharedPrefix,
}

#[derive(Clone, Debug)]
struct Meta {
    lineage: Lineage,
    created_at: Timestamp,
    placement: Placement,
    pending: Vec<PendingCall>,
    agent_usage: BTreeMap<String, Usage>,
}

/// The first-class runtime state of an agent system: ordered chunks, lineage, usage,
/// placement and pending work, as one immutable value.
///
/// Every operation returns a new `Session`; cloning is O(1) and so is [`Session::fork`].
/// Operations that change the session's place in the lineage graph (`fork`, `detach`,
/// `merge`, [`Session::derive`]) mint a new id from the session's [`Stamper`]; edits that grow
/// or annotate the same session (`push`, `with_usage`, `to`) keep the id.
#[derive(Clone, Debug)]
pub struct Session {
    id: SessionId,
    chunks: ChunkList,
    usage: Option<Usage>,
    meta: Arc<Meta>,
    stamper: Stamper,
}

/// Everything a session is made of, for building one from stored parts.
#[derive(Clone, Debug)]
pub struct SessionParts {
    /// Id (any string).
    pub id: SessionId,
    /// When it was created.
    pub created_at: Timestamp,
    /// Lineage.
    pub lineage: Lineage,
    /// Chunks.
    pub chunks: ChunkList,
    /// Cumulative usage (`None` when no model call was counted).
    pub usage: Option<Usage>,
    /// Usage per agent.
    pub agent_usage: BTreeMap<String, Usage>,
    /// Placement intent.
    pub placement: Placement,
    /// Pending tool calls.
    pub pending: Vec<PendingCall>,
}

impl Session {
    fn build(stamper: Stamper, id: SessionId, chunks: ChunkList, lineage: Lineage) -> Self {
        let created_at = stamper.now();
        Self {
            id,
            chunks,
            usage: None,
            meta: Arc::new(Meta {
                lineage,
                created_at,
                placement: Placement::none(),
                pending: Vec::new(),
                agent_usage: BTreeMap::new(),
            }),
            stamper,
        }
    }

    fn leaf(stamper: Stamper, chunk: Chunk, operator: &'static str, kind: LineageKind) -> Self {
        let id = stamper.next_id();
        let lineage = Lineage::new(Vec::new(), operator, kind).with_extra("source", operator);
        let mut chunks = ChunkList::new();
        chunks.push_back(chunk);
        Self::build(stamper, id, chunks, lineage)
    }

    /// A user leaf, stamped like OpenRath's `Session.create("user", text)`.
    pub fn user(text: impl Into<String>) -> Self {
        Self::user_with(text, Stamper::system())
    }

    /// [`Session::user`] with an explicit id/clock source.
    pub fn user_with(text: impl Into<String>, stamper: Stamper) -> Self {
        Self::leaf(
            stamper,
            Chunk::user(text),
            "Session.create",
            LineageKind::LeafUser,
        )
    }

    /// A system leaf, stamped like OpenRath's `create_system_session(text)`.
    pub fn system(text: impl Into<String>) -> Self {
        Self::system_with(text, Stamper::system())
    }

    /// [`Session::system`] with an explicit id/clock source.
    pub fn system_with(text: impl Into<String>, stamper: Stamper) -> Self {
        Self::leaf(
            stamper,
            Chunk::system(text),
            "create_system_session",
            LineageKind::LeafSystem,
        )
    }

    /// An empty session (`Session.empty`, kind `op_create`).
    pub fn empty() -> Self {
        Self::empty_with(Stamper::system())
    }

    /// [`Session::empty`] with an explicit id/clock source.
    pub fn empty_with(stamper: Stamper) -> Self {
        let id = stamper.next_id();
        let lineage = Lineage::new(Vec::new(), "Session.empty", LineageKind::OpCreate)
            .with_extra("source", "Session.empty");
        Self::build(stamper, id, ChunkList::new(), lineage)
    }

    /// A new root holding `chunks`, with the given lineage.
    pub fn from_chunks(
        chunks: impl IntoIterator<Item = Chunk>,
        lineage: Lineage,
        stamper: Stamper,
    ) -> Self {
        let id = stamper.next_id();
        Self::build(stamper, id, chunks.into_iter().collect(), lineage)
    }

    /// Rebuilds a session from stored parts (no id is minted; the handle slot starts empty).
    pub fn from_parts(parts: SessionParts, stamper: Stamper) -> Self {
        Self {
            id: parts.id,
            chunks: parts.chunks,
            usage: parts.usage,
            meta: Arc::new(Meta {
                lineage: parts.lineage,
                created_at: parts.created_at,
                placement: parts.placement,
                pending: parts.pending,
                agent_usage: parts.agent_usage,
            }),
            stamper,
        }
    }

    /// The parts of this session.
    pub fn to_parts(&self) -> SessionParts {
        SessionParts {
            id: self.id.clone(),
            created_at: self.meta.created_at,
            lineage: self.meta.lineage.clone(),
            chunks: self.chunks.clone(),
            usage: self.usage,
            agent_usage: self.meta.agent_usage.clone(),
            placement: self.meta.placement.clone(),
            pending: self.meta.pending.clone(),
        }
    }

    // ---------------------------------------------------------------- accessors

    /// The id.
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// All chunks, conversation and evidence, in order.
    pub fn chunks(&self) -> &ChunkList {
        &self.chunks
    }

    /// The session root (see [`crate::merkle`]): the Merkle root of its chunks bound to its
    /// parents' roots (`parent_roots`, in lineage order, as the caller knows them) and its
    /// operator, kind and extras. O(log n) once the chunks' roots are cached, which a fork
    /// shares with its parent.
    ///
    /// ```
    /// use rath_session::{Chunk, Session, Stamper};
    ///
    /// let s = Session::user_with("hi", Stamper::counter());
    /// let grown = s.push(Chunk::assistant_text("hello"));
    /// assert_ne!(grown.root(&[]), s.root(&[]));
    /// ```
    pub fn root(&self, parent_roots: &[crate::merkle::Digest]) -> crate::merkle::Digest {
        crate::merkle::session_root(&self.chunks.merkle_root(), parent_roots, self.lineage())
    }

    /// The text of the last assistant chunk that has content: the session's final answer, if
    /// any. Evidence chunks and assistant turns that only call tools are passed over.
    ///
    /// ```
    /// use rath_session::{Chunk, Session, Stamper};
    ///
    /// let s = Session::user_with("2 + 2?", Stamper::counter());
    /// assert_eq!(s.final_text(), None);
    /// let s = s.push(Chunk::assistant_text("4")).push(Chunk::user("thanks"));
    /// assert_eq!(s.final_text(), Some("4"));
    /// ```
    pub fn final_text(&self) -> Option<&str> {
        self.chunks.iter().rev().find_map(|c| match c.body() {
            ChunkBody::Assistant(p) => p.content.as_deref(),
            _ => None,
        })
    }

    /// Number of chunks (conversation and evidence).
    pub fn len(&self) -> usize {
        self.chunks.len()
    }

    /// True when there are no chunks.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Number of conversation chunks (what OpenRath counts).
    pub fn conversation_len(&self) -> usize {
        self.chunks.count_where(Chunk::is_conversation)
    }

    /// The chunk at `index`.
    pub fn get(&self, index: usize) -> Option<&Chunk> {
        self.chunks.get(index)
    }

    /// The last chunk.
    pub fn last(&self) -> Option<&Chunk> {
        self.chunks.last()
    }

    /// The failure that stopped this session's run: its last chunk, when that is a
    /// `run_failure` (see [`crate::RunFailure`]).
    pub fn failure(&self) -> Option<&crate::RunFailure> {
        match self.last().map(Chunk::body) {
            Some(ChunkBody::RunFailure(f)) => Some(f),
            _ => None,
        }
    }

    /// Lineage.
    pub fn lineage(&self) -> &Lineage {
        &self.meta.lineage
    }

    /// Cumulative usage; `None` when nothing was counted (OpenRath's `null`).
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    /// Usage attributed per agent.
    pub fn agent_usage(&self) -> &BTreeMap<String, Usage> {
        &self.meta.agent_usage
    }

    /// Placement intent and handle slot.
    pub fn placement(&self) -> &Placement {
        &self.meta.placement
    }

    /// Pending tool calls.
    pub fn pending(&self) -> &[PendingCall] {
        &self.meta.pending
    }

    /// Creation time.
    pub fn created_at(&self) -> Timestamp {
        self.meta.created_at
    }

    /// The id/clock source this session and everything derived from it use.
    pub fn stamper(&self) -> &Stamper {
        &self.stamper
    }

    // ---------------------------------------------------------------- lineage operations

    fn with_meta(&self, f: impl FnOnce(&mut Meta)) -> Self {
        let mut meta = Meta {
            lineage: self.meta.lineage.clone(),
            created_at: self.meta.created_at,
            placement: self.meta.placement.clone(),
            pending: self.meta.pending.clone(),
            agent_usage: self.meta.agent_usage.clone(),
        };
        f(&mut meta);
        Self {
            id: self.id.clone(),
            chunks: self.chunks.clone(),
            usage: self.usage,
            meta: Arc::new(meta),
            stamper: self.stamper.clone(),
        }
    }

    /// A new session with a fresh id and the given lineage, sharing this one's chunks,
    /// placement (slot included) and pending work; usage starts empty. This is what every
    /// lineage operation is built from; the flow layer uses it for loops and compression.
    #[inline]
    pub fn derive(&self, lineage: Lineage) -> Self {
        let id = self.stamper.next_id();
        let created_at = self.stamper.now();
        Self {
            id,
            chunks: self.chunks.clone(),
            usage: None,
            meta: Arc::new(Meta {
                lineage,
                created_at,
                placement: self.meta.placement.clone(),
                pending: self.meta.pending.clone(),
                agent_usage: BTreeMap::new(),
            }),
            stamper: self.stamper.clone(),
        }
    }

    /// `Session.fork`: parents `[self]`, kind `op_fork`; shares chunks and the sandbox slot;
    /// usage starts empty. O(1).
    #[inline]
    pub fn fork(&self) -> Self {
        self.derive(Lineage::new(
            Parents::one(self.id.clone()),
            "Session.fork",
            LineageKind::OpFork,
        ))
    }

    /// `Session.detach`: like fork but a new root (no parents), kind `op_detach`.
    pub fn detach(&self) -> Self {
        self.derive(Lineage::new(
            Parents::none(),
            "Session.detach",
            LineageKind::OpDetach,
        ))
    }

    /// Checks the strict merge rule without merging.
    pub fn check_merge(&self, other: &Session) -> Result<(), SessionError> {
        let (a, b) = (self.placement(), other.placement());
        let ok = match (a.handle(), b.handle()) {
            (Some(x), Some(y)) => x.id() == y.id() && x.is_live() && y.is_live(),
            (None, None) => a.backend() == b.backend(),
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            Err(SessionError::MergeRefused {
                left_id: self.id.to_string(),
                left: a.describe(),
                right_id: other.id.to_string(),
                right: b.describe(),
            })
        }
    }

    /// `Session.merge`: parents `[self, other]`, kind `op_merge`, content `self ++ other`,
    /// usage summed. Refused (typed error) unless both share one live sandbox handle, or both
    /// are unbound and name the same backend. O(log n).
    pub fn merge(&self, other: &Session) -> Result<Self, SessionError> {
        self.merge_with(other, MergeStrategy::Concat)
    }

    /// [`Session::merge`] with a chosen layout.
    pub fn merge_with(
        &self,
        other: &Session,
        strategy: MergeStrategy,
    ) -> Result<Self, SessionError> {
        self.check_merge(other)?;
        let mut lineage = Lineage::new(
            Parents::two(self.id.clone(), other.id.clone()),
            "Session.merge",
            LineageKind::OpMerge,
        );
        let chunks = match strategy {
            MergeStrategy::Concat => {
                let mut c = self.chunks.clone();
                c.append(other.chunks.clone());
                c
            }
            MergeStrategy::SharedPrefix => {
                let p = self.chunks.shared_prefix_len(&other.chunks);
                lineage = lineage
                    .with_extra("merge.strategy", "shared_prefix")
                    .with_extra("merge.shared_prefix", p as u64);
                let mut c = self.chunks.clone();
                let left_suffix = c.split_off(p);
                let left_tag = self.id.to_string();
                let right_tag = other.id.to_string();
                c.extend(
                    left_suffix
                        .iter()
                        .map(|ch| ch.with_branch(left_tag.as_str())),
                );
                c.extend(
                    other
                        .chunks
                        .iter()
                        .skip(p)
                        .map(|ch| ch.with_branch(right_tag.as_str())),
                );
                c
            }
        };
        let mut agent_usage = self.meta.agent_usage.clone();
        for (agent, u) in &other.meta.agent_usage {
            *agent_usage.entry(agent.clone()).or_default() += *u;
        }
        let mut pending = self.meta.pending.clone();
        pending.extend(other.meta.pending.iter().cloned());
        Ok(Self {
            id: self.stamper.next_id(),
            chunks,
            usage: sum_optional(self.usage, other.usage),
            meta: Arc::new(Meta {
                lineage,
                created_at: self.stamper.now(),
                placement: self.meta.placement.clone(),
                pending,
                agent_usage,
            }),
            stamper: self.stamper.clone(),
        })
    }

    /// The n-way [`Session::merge_with`] in the [`MergeStrategy::SharedPrefix`] layout: the
    /// chunks every session shares (by identity, as forks of one parent do) once, then each
    /// session's suffix in order, every suffix chunk tagged with the id of the session it
    /// came from. Parents are the sessions in order (operator `Session.merge`, kind
    /// `op_merge`); usage, per-agent usage and pending work are summed/concatenated as in
    /// `merge_with`; placement is the first session's. The strict rule holds between the
    /// first session and every other one, else [`SessionError::MergeRefused`]; an empty
    /// slice is [`SessionError::MergeRefused`] too. One id is minted, from the first
    /// session's stamper.
    ///
    /// ```
    /// use rath_session::{Chunk, Session, Stamper, Usage};
    ///
    /// let root = Session::user_with("task", Stamper::counter());
    /// let a = root.fork().push(Chunk::assistant_text("a")).with_usage(Some("a"), Usage::new(3, 1));
    /// let b = root.fork().push(Chunk::assistant_text("b")).with_usage(Some("b"), Usage::new(5, 2));
    /// let m = Session::merge_all(&[a.clone(), b.clone()])?;
    /// let texts: Vec<_> = m.chunks().iter().filter_map(|c| c.text()).collect();
    /// assert_eq!(texts, ["task", "a", "b"]);
    /// assert_eq!(m.chunks()[1].branch(), Some(a.id().as_str()));
    /// assert_eq!(m.lineage().parents, vec![a.id().clone(), b.id().clone()]);
    /// assert_eq!(m.usage().map(|u| u.total_tokens), Some(11));
    /// assert!(Session::merge_all(&[]).is_err());
    /// # Ok::<(), rath_session::SessionError>(())
    /// ```
    pub fn merge_all(sessions: &[Session]) -> Result<Self, SessionError> {
        let Some((first, rest)) = sessions.split_first() else {
            return Err(SessionError::MergeRefused {
                left_id: String::new(),
                left: "nothing".to_owned(),
                right_id: String::new(),
                right: "nothing".to_owned(),
            });
        };
        for other in rest {
            first.check_merge(other)?;
        }
        let p = rest
            .iter()
            .map(|o| first.chunks.shared_prefix_len(&o.chunks))
            .min()
            .unwrap_or(first.chunks.len());
        let mut chunks = first.chunks.clone().slice(0..p);
        let (mut usage, mut agent_usage, mut pending) = (None, BTreeMap::new(), Vec::new());
        for s in sessions {
            let tag = s.id.to_string();
            chunks.extend(s.chunks.iter().skip(p).map(|c| c.with_branch(tag.as_str())));
            usage = sum_optional(usage, s.usage);
            for (agent, u) in &s.meta.agent_usage {
                *agent_usage.entry(agent.clone()).or_default() += *u;
            }
            pending.extend(s.meta.pending.iter().cloned());
        }
        let parents = sessions.iter().map(|s| s.id.clone()).collect::<Vec<_>>();
        Ok(Self {
            id: first.stamper.next_id(),
            chunks,
            usage,
            meta: Arc::new(Meta {
                lineage: Lineage::new(parents, "Session.merge", LineageKind::OpMerge),
                created_at: first.stamper.now(),
                placement: first.meta.placement.clone(),
                pending,
                agent_usage,
            }),
            stamper: first.stamper.clone(),
        })
    }

    // ---------------------------------------------------------------- edits (same id)

    /// Appends a chunk.
    pub fn push(&self, chunk: impl Into<Chunk>) -> Self {
        let mut s = self.clone();
        s.chunks.push_back(chunk.into());
        s
    }

    /// Appends several chunks.
    pub fn extend(&self, chunks: impl IntoIterator<Item = Chunk>) -> Self {
        let mut s = self.clone();
        s.chunks.extend(chunks);
        s
    }

    /// Appends a chunk in place (for builders that own their value).
    pub fn push_mut(&mut self, chunk: impl Into<Chunk>) {
        self.chunks.push_back(chunk.into());
    }

    /// The same session with its chunk list replaced.
    pub fn with_chunks(&self, chunks: ChunkList) -> Self {
        let mut s = self.clone();
        s.chunks = chunks;
        s
    }

    /// Chunks in `range`, as a shared list (O(log n)).
    pub fn slice(&self, range: Range<usize>) -> Result<ChunkList, SessionError> {
        if range.start > range.end || range.end > self.chunks.len() {
            return Err(SessionError::RangeOutOfBounds {
                session_id: self.id.to_string(),
                start: range.start,
                end: range.end,
                len: self.chunks.len(),
            });
        }
        Ok(self.chunks.clone().slice(range))
    }

    /// [`Session::with_usage`] in place: the metadata is copied only when another value
    /// shares it.
    ///
    /// ```
    /// use rath_session::{Session, Stamper, Usage};
    ///
    /// let mut s = Session::user_with("hi", Stamper::counter());
    /// s.add_usage(Some("coder"), Usage::new(10, 2));
    /// assert_eq!(s.usage().map(|u| u.total_tokens), Some(12));
    /// assert_eq!(s.agent_usage()["coder"].prompt_tokens, 10);
    /// ```
    pub fn add_usage(&mut self, agent: Option<&str>, usage: Usage) {
        if let Some(a) = agent {
            let meta = Arc::make_mut(&mut self.meta);
            match meta.agent_usage.get_mut(a) {
                Some(u) => *u += usage,
                None => {
                    meta.agent_usage.insert(a.to_owned(), usage);
                }
            }
        }
        self.usage = sum_optional(self.usage, Some(usage));
    }

    /// Adds usage to the session, and to `agent`'s attribution when given.
    pub fn with_usage(&self, agent: Option<&str>, usage: Usage) -> Self {
        let mut s = self.clone();
        s.add_usage(agent, usage);
        s
    }

    /// Replaces cumulative usage and attribution (for loaders and usage-carrying operators).
    pub fn with_usage_totals(
        &self,
        usage: Option<Usage>,
        agent_usage: BTreeMap<String, Usage>,
    ) -> Self {
        let mut s = self.with_meta(|m| m.agent_usage = agent_usage);
        s.usage = usage;
        s
    }

    /// Records placement intent on `backend`, with no spec. Nothing is opened.
    pub fn to(&self, backend: impl Into<String>) -> Self {
        self.with_meta(|m| m.placement = Placement::new(backend, None))
    }

    /// Records placement intent on `backend` with `spec`. Nothing is opened.
    pub fn to_with(&self, backend: impl Into<String>, spec: SandboxSpec) -> Self {
        self.with_meta(|m| m.placement = Placement::new(backend, Some(spec)))
    }

    /// The same session bound to an opened sandbox handle (see [`crate::SandboxSlot::bind`] for
    /// binding a slot shared with forks instead).
    pub fn with_handle(&self, handle: SandboxHandle) -> Self {
        self.with_meta(|m| m.placement = m.placement.bound_to(handle))
    }

    /// Replaces the lineage, keeping the id (for loaders and for operators that stamp extras).
    pub fn with_lineage(&self, lineage: Lineage) -> Self {
        self.with_meta(|m| m.lineage = lineage)
    }

    /// Adds one lineage extra, keeping the id.
    pub fn with_extra(&self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        let (key, value) = (key.into(), value.into());
        self.with_meta(|m| m.lineage.extras.push((key, value)))
    }

    /// Adds a pending call.
    pub fn with_pending(&self, pending: PendingCall) -> Self {
        self.with_meta(|m| m.pending.push(pending))
    }

    /// Removes the pending call `call_id`, returning it and the new session.
    pub fn take_pending(&self, call_id: &str) -> Result<(PendingCall, Self), SessionError> {
        let pos = self
            .meta
            .pending
            .iter()
            .position(|p| p.call.id == call_id)
            .ok_or_else(|| SessionError::PendingNotFound {
                session_id: self.id.to_string(),
                call_id: call_id.to_owned(),
            })?;
        let taken = self.meta.pending[pos].clone();
        Ok((
            taken,
            self.with_meta(|m| {
                m.pending.remove(pos);
            }),
        ))
    }

    /// The same value with a different id/clock source for future derivations.
    pub fn with_stamper(&self, stamper: Stamper) -> Self {
        let mut s = self.clone();
        s.stamper = stamper;
        s
    }

    /// Conversation chunks only, in order.
    pub fn conversation(&self) -> impl Iterator<Item = &Chunk> {
        self.chunks.iter().filter(|c| c.is_conversation())
    }

    /// Evidence chunks only, in order.
    pub fn evidence(&self) -> impl Iterator<Item = &Chunk> {
        self.chunks.iter().filter(|c| !c.is_conversation())
    }

    /// True when `self` and `other` hold the same chunks by identity (cheap structural check).
    pub fn shares_chunks_with(&self, other: &Session) -> bool {
        self.chunks.len() == other.chunks.len()
            && self
                .chunks
                .iter()
                .zip(other.chunks.iter())
                .all(|(a, b)| a.ptr_eq(b))
    }

    /// Applies `f` to every chunk body of this session for which it returns `Some`, keeping the
    /// rest (used by redaction and tagging helpers).
    pub fn map_chunks(&self, mut f: impl FnMut(&Chunk) -> Option<Chunk>) -> Self {
        let chunks = self
            .chunks
            .iter()
            .map(|c| f(c).unwrap_or_else(|| c.clone()))
            .collect();
        self.with_chunks(chunks)
    }
}

/// Helpers for tool results.
impl Session {
    /// The tool calls of the last assistant chunk that have no `tool_result` after it.
    pub fn unanswered_tool_calls(&self) -> Vec<ToolCall> {
        let mut answered = std::collections::HashSet::new();
        for chunk in self.chunks.iter().rev() {
            match chunk.body() {
                ChunkBody::ToolResult(r) => {
                    answered.insert(r.tool_call_id.clone());
                }
                ChunkBody::Assistant(_) => {
                    return chunk
                        .tool_calls()
                        .iter()
                        .filter(|c| !answered.contains(&c.id))
                        .cloned()
                        .collect();
                }
                _ => {}
            }
        }
        Vec::new()
    }
}
