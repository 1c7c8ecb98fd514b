//! The store contract: [`SessionStore`], what every session store does, whatever it keeps
//! sessions in (the JSONL directory here; SQLite and PostgreSQL in `rath-store-sql`).
//!
//! ```
//! use rath_persist::{SessionStore, Store, Write, WriteBatch};
//! use rath_session::{Chunk, Session, Stamper};
//!
//! # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
//! let dir = tempfile::tempdir()?;
//! let store: Box<dyn SessionStore> = Box::new(Store::at(dir.path()));
//! let s = Session::user_with("hi", Stamper::counter());
//! store.save(&s).await?;
//! // A loop round: append what is new, saying how many chunks the writer saw stored.
//! let s = s.push(Chunk::assistant_text("hello"));
//! store.append(&s, 1).await?;
//! assert_eq!(store.stored_len(s.id()).await?, Some(2));
//! // A second writer that still thinks one chunk is stored gets a typed conflict.
//! let late = store.append(&s.push(Chunk::user("again")), 1).await;
//! assert!(matches!(late, Err(rath_persist::PersistError::Conflict { found: Some(2), .. })));
//! assert_eq!(store.load(s.id()).await?.session.len(), 2);
//! // A window of a long session, without holding the rest (cut to what is stored).
//! let tail = store.read_chunks(s.id(), 1..10).await?;
//! assert_eq!(tail[0].text(), Some("hello"));
//! // Several writes at once (atomic where the store has transactions).
//! let f = s.fork();
//! store.write(WriteBatch::new().with(Write::Save(&f))).await?;
//! assert_eq!(store.list().await?.len(), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The methods are `async` (the runtime is tokio, database drivers are async) and the trait
//! is object safe, so a store chosen at run time by URL is a `Box<dyn SessionStore>`. The
//! JSONL directory does its file I/O inline (small, local reads and writes, as the rest of
//! the crate does).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use rath_session::{Chunk, Session, SessionId, StampSource, Stamper, Timestamp};

use crate::PersistError;
use crate::journal::LineageRow;
use crate::loader::LoadedSession;
use crate::spans::{self, StoreKind};
use crate::store::{SessionSummary, Store};
use crate::writer::WriterOptions;

/// One chunk as a store holds it (see [`SessionStore::chunk_docs`]): its document, or what
/// makes it unreadable.
pub type StoredDoc = Result<Vec<u8>, String>;

/// One write of a [`WriteBatch`].
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum Write<'a> {
    /// Store the session whole. Saving the very session already stored (same lineage,
    /// chunks, usage, per-agent usage, pending calls, placement) is a no-op; a different
    /// session under a stored id is [`PersistError::Exists`].
    Save(&'a Session),
    /// Store the chunks `session` has after the first `expected_len` (and its new usage,
    /// pending calls and placement). The store must hold exactly `expected_len` chunks for it
    /// (0: not stored yet), else [`PersistError::Conflict`] and nothing is written: a second
    /// writer that raced the first learns it lost. The store checks the length and the last
    /// stored chunk ([`PersistError::NotAContinuation`] when `session` does not continue it),
    /// not every chunk: a loop round costs what it adds.
    Append {
        /// The grown session.
        session: &'a Session,
        /// How many of its chunks the writer knows to be stored.
        expected_len: usize,
    },
    /// Store a session read from another store as it was: its `created_at`, `closed_at` and
    /// whether it was closed (a crashed writer's session stays unclosed). What `rath store
    /// copy` does; the JSONL bytes written from it are those of the original file.
    Restore(&'a LoadedSession),
}

impl Write<'_> {
    /// The session written.
    pub fn session(&self) -> &Session {
        match self {
            Write::Save(s) | Write::Append { session: s, .. } => s,
            Write::Restore(l) => &l.session,
        }
    }
}

/// A fencing token a write carries: the store refuses it ([`PersistError::Fenced`]) once it
/// has accepted a newer token for the same key. A durable runtime's worker carries its
/// lease's token, so a worker paused past its lease cannot write when it wakes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    /// What the token guards (a run or lease id).
    pub key: String,
    /// The token: leases hand out increasing tokens.
    pub token: u64,
}

impl Fence {
    /// A fence for `key` at `token`.
    pub fn new(key: impl Into<String>, token: u64) -> Self {
        Self {
            key: key.into(),
            token,
        }
    }
}

/// Writes that go together: on a store with transactions ([`Capabilities::atomic_batch`])
/// all of them are stored or none, and the optional [`Fence`] is checked in the same
/// transaction.
#[derive(Clone, Debug, Default)]
pub struct WriteBatch<'a> {
    /// The writes, in order.
    pub writes: Vec<Write<'a>>,
    /// The fence every write of the batch is checked against.
    pub fence: Option<Fence>,
}

impl<'a> WriteBatch<'a> {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a write.
    pub fn with(mut self, write: Write<'a>) -> Self {
        self.writes.push(write);
        self
    }

    /// Sets the fence.
    pub fn fenced(mut self, fence: Fence) -> Self {
        self.fence = Some(fence);
        self
    }
}

/// What one write did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriteReport {
    /// The session.
    pub id: SessionId,
    /// Its chunks now stored.
    pub len: usize,
    /// Chunk documents (or JSONL rows) written: what the write added to the store's chunk
    /// data. A store that shares structure writes none for a fork.
    pub chunks_written: usize,
    /// True when the session was already stored as it is and nothing was written.
    pub unchanged: bool,
}

impl WriteReport {
    /// A report for a write of `id` that leaves `len` chunks stored, having written none
    /// (set [`WriteReport::chunks_written`] and [`WriteReport::unchanged`] as it happened).
    pub fn new(id: SessionId, len: usize) -> Self {
        Self {
            id,
            len,
            chunks_written: 0,
            unchanged: false,
        }
    }
}

/// What [`SessionStore::gc`] freed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GcReport {
    /// Deleted sessions whose rows were kept for a sharer and are now unreachable.
    pub sessions: u64,
    /// Chunk documents no session reaches any more.
    pub chunks: u64,
    /// Bytes of chunk documents freed.
    pub bytes: u64,
}

/// What a store can promise beyond the contract.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// A [`WriteBatch`] is one transaction: all or nothing.
    pub atomic_batch: bool,
    /// [`WriteBatch::fence`] is checked (else a fenced batch is [`PersistError::Unsupported`]).
    pub fencing: bool,
    /// Chunks are stored once and shared by every session that holds them (a fork writes no
    /// chunk data).
    pub shared_structure: bool,
}

impl Capabilities {
    /// Capabilities with each promise given.
    pub const fn new(atomic_batch: bool, fencing: bool, shared_structure: bool) -> Self {
        Self {
            atomic_batch,
            fencing,
            shared_structure,
        }
    }
}

/// A session store. See the [module docs](self).
///
/// Every error names the store ([`SessionStore::name`]); a failed write leaves what was
/// stored before it, and no partial session is ever visible.
#[async_trait]
pub trait SessionStore: Send + Sync + std::fmt::Debug {
    /// The store's name in messages: `jsonl:<dir>`, `sqlite:<file>`, `postgres://host/db`
    /// (never a password).
    fn name(&self) -> String;

    /// What the store promises beyond the contract.
    fn capabilities(&self) -> Capabilities;

    /// Performs a batch of writes (see [`Write`]); one report per write, in order.
    async fn write(&self, batch: WriteBatch<'_>) -> Result<Vec<WriteReport>, PersistError>;

    /// Loads a session by id ([`PersistError::NotFound`] when it is not stored).
    async fn load(&self, id: &SessionId) -> Result<LoadedSession, PersistError>;

    /// How many chunks are stored for `id` (`None`: not stored): what an appender passes as
    /// `expected_len`.
    async fn stored_len(&self, id: &SessionId) -> Result<Option<usize>, PersistError>;

    /// True when the store knows, from how it keeps them, that stored session `id` starts
    /// with every chunk stored for `prefix` (one stores the other's chunks as its own first
    /// ones, or they are the same session); false when it does not know, and then the
    /// chunks may still be equal (a caller that must know compares them with
    /// [`SessionStore::read_chunks`]). One cheap read; the default knows only `id == prefix`.
    async fn known_to_extend(
        &self,
        id: &SessionId,
        prefix: &SessionId,
    ) -> Result<bool, PersistError> {
        Ok(id == prefix)
    }

    /// Chunks `range` of stored session `id`, the range cut to its stored length
    /// ([`PersistError::NotFound`] when it is not stored): what a reader that answers a long
    /// session page by page reads, so that it holds one page at a time. The default loads
    /// the whole session and keeps the window; a store that can read part of a session
    /// overrides it (the SQL stores read only the segments the window covers).
    async fn read_chunks(
        &self,
        id: &SessionId,
        range: std::ops::Range<usize>,
    ) -> Result<Vec<Chunk>, PersistError> {
        let loaded = self.load(id).await?;
        let chunks = loaded.session.chunks();
        let end = range.end.min(chunks.len());
        let start = range.start.min(end);
        Ok(chunks.range(start..end).iter().cloned().collect())
    }

    /// The documents of stored session `id`'s chunks in order, as the store holds them and
    /// without decoding them: each the bytes [`crate::doc::encode_chunk`] wrote for it, or
    /// why it cannot be read (a segment that does not inflate, a file line that is not that
    /// chunk's record), so that one damaged chunk leaves the others readable. What a
    /// verifier reads: it decodes each, encodes it again and compares, so a change that
    /// decodes to the same chunk (a space become a tab) is still seen. The default answers
    /// [`PersistError::Unsupported`].
    async fn chunk_docs(&self, id: &SessionId) -> Result<Vec<StoredDoc>, PersistError> {
        let _ = id;
        Err(PersistError::Unsupported {
            store: self.name(),
            what: "reading stored chunk documents",
        })
    }

    /// Replaces every stored chunk document equal to `old` (as [`crate::doc::encode_chunk`]
    /// writes it) by `new`, in every session that holds it, and leaves no copy of `old` in
    /// the store's files; returns how many stored chunks were replaced. What erasure does
    /// (`rath erase`): the only write that changes a stored chunk. The default answers
    /// [`PersistError::Unsupported`].
    async fn replace_chunk_doc(&self, old: &[u8], new: &[u8]) -> Result<u64, PersistError> {
        let _ = (old, new);
        Err(PersistError::Unsupported {
            store: self.name(),
            what: "replacing stored chunks",
        })
    }

    /// A token that changes whenever what [`SessionStore::load`] returns for `id` changes
    /// (an append, a close, a delete and a new save under the same id), with one cheap read:
    /// what a cache of loaded or rendered sessions checks before it answers from memory.
    /// `None`: not stored. A store that cannot say it cheaply answers
    /// [`PersistError::Unsupported`] (the default), and a caller loads instead.
    async fn revision(&self, id: &SessionId) -> Result<Option<Vec<u8>>, PersistError> {
        let _ = id;
        Err(PersistError::Unsupported {
            store: self.name(),
            what: "a session's revision",
        })
    }

    /// Summaries of every stored session, oldest `created_at` first (ties by id).
    async fn list(&self) -> Result<Vec<SessionSummary>, PersistError>;

    /// [`SessionStore::list`], and the stored sessions it leaves out because they cannot be
    /// read (each as the error naming it): what a lossless copy checks before it writes.
    /// The default, for a store whose listing reads every session it holds, leaves out none.
    async fn list_with_unreadable(
        &self,
    ) -> Result<(Vec<SessionSummary>, Vec<PersistError>), PersistError> {
        Ok((self.list().await?, Vec::new()))
    }

    /// Deletes a session; true when it was stored. Sessions that share its chunks keep them.
    async fn delete(&self, id: &SessionId) -> Result<bool, PersistError>;

    /// Reclaims what no stored session reaches any more.
    async fn gc(&self) -> Result<GcReport, PersistError>;

    /// Stores a session whole (see [`Write::Save`]).
    async fn save(&self, session: &Session) -> Result<WriteReport, PersistError> {
        one(self
            .write(WriteBatch::new().with(Write::Save(session)))
            .await?)
    }

    /// Appends a session's new chunks (see [`Write::Append`]).
    async fn append(
        &self,
        session: &Session,
        expected_len: usize,
    ) -> Result<WriteReport, PersistError> {
        let w = Write::Append {
            session,
            expected_len,
        };
        one(self.write(WriteBatch::new().with(w)).await?)
    }

    /// Stores a session read from another store as it was (see [`Write::Restore`]).
    async fn restore(&self, loaded: &LoadedSession) -> Result<WriteReport, PersistError> {
        one(self
            .write(WriteBatch::new().with(Write::Restore(loaded)))
            .await?)
    }

    /// Lineage export rows of every stored session, in [`SessionStore::list`] order.
    async fn lineage_rows(&self) -> Result<Vec<LineageRow>, PersistError> {
        Ok(self
            .list()
            .await?
            .iter()
            .map(SessionSummary::lineage_row)
            .collect())
    }

    /// Deletes the sessions created before `now - older_than`; returns their ids.
    async fn prune(
        &self,
        older_than: Duration,
        now: Timestamp,
    ) -> Result<Vec<SessionId>, PersistError> {
        let micros = i64::try_from(older_than.as_micros()).unwrap_or(i64::MAX);
        let cutoff = now.plus_micros(-micros);
        let mut removed = Vec::new();
        for s in self.list().await? {
            if s.created_at < cutoff && self.delete(&s.id).await? {
                removed.push(s.id);
            }
        }
        Ok(removed)
    }
}

fn one(mut reports: Vec<WriteReport>) -> Result<WriteReport, PersistError> {
    reports.pop().ok_or_else(|| PersistError::Unsupported {
        store: String::new(),
        what: "a write that reports nothing",
    })
}

/// A clock that hands out given instants first, then defers to a stamper: how a store writes
/// a session's file with the timestamps it already has.
#[derive(Debug)]
pub(crate) struct GivenTimes {
    times: Mutex<VecDeque<Timestamp>>,
    then: Stamper,
}

impl GivenTimes {
    pub(crate) fn stamper(times: impl IntoIterator<Item = Timestamp>, then: &Stamper) -> Stamper {
        Stamper::new(GivenTimes {
            times: Mutex::new(times.into_iter().collect()),
            then: then.clone(),
        })
    }
}

impl StampSource for GivenTimes {
    fn next_id(&self) -> SessionId {
        self.then.next_id()
    }
    fn next_token(&self, prefix: &str) -> String {
        self.then.next_token(prefix)
    }
    fn now(&self) -> Timestamp {
        let next = self.times.lock().ok().and_then(|mut t| t.pop_front());
        next.unwrap_or_else(|| self.then.now())
    }
    fn is_deterministic(&self) -> bool {
        self.then.is_deterministic()
    }
}

#[async_trait]
impl SessionStore for Store {
    fn name(&self) -> String {
        format!("jsonl:{}", self.dir().display())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }

    /// Writes one at a time, each file atomically (rename on close); a batch is not atomic
    /// and a fenced batch is [`PersistError::Unsupported`].
    async fn write(&self, batch: WriteBatch<'_>) -> Result<Vec<WriteReport>, PersistError> {
        let span = spans::write_op(StoreKind::Jsonl, &batch);
        let result = span.in_scope(|| {
            if batch.fence.is_some() {
                return Err(PersistError::Unsupported {
                    store: SessionStore::name(self),
                    what: "a fenced write",
                });
            }
            batch.writes.iter().map(|w| self.write_one(w)).collect()
        });
        spans::record_written(&span, &result);
        result
    }

    async fn load(&self, id: &SessionId) -> Result<LoadedSession, PersistError> {
        let span = spans::session_op(StoreKind::Jsonl, "load", id.as_str());
        let result = span.in_scope(|| Store::load(self, id));
        spans::record_loaded(&span, result.as_ref().ok().map(|l| l.session.len()));
        spans::record_outcome(&span, &result);
        result
    }

    async fn stored_len(&self, id: &SessionId) -> Result<Option<usize>, PersistError> {
        let span = spans::session_op(StoreKind::Jsonl, "stored_len", id.as_str());
        let result = span.in_scope(|| match Store::load(self, id) {
            Ok(l) => Ok(Some(l.session.len())),
            Err(PersistError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        });
        spans::record_outcome(&span, &result);
        result
    }

    /// Each chunk record decoded alone and compared with what the writer writes for it; a
    /// line that differs is an `Err` for every chunk it carries (see `raw.rs`).
    async fn chunk_docs(&self, id: &SessionId) -> Result<Vec<StoredDoc>, PersistError> {
        let mut path = self.path_of(id);
        if !path.is_file() {
            path = self.partial_path_of(id);
        }
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(PersistError::NotFound {
                    id: id.to_string(),
                    dir: self.dir().to_path_buf(),
                });
            }
            Err(source) => {
                return Err(PersistError::Io {
                    op: "read",
                    path,
                    source,
                });
            }
        };
        Ok(crate::raw::chunk_docs(&path, &bytes))
    }

    /// Rewrites each file holding `old` as a chunk line (closed and partial files alike; a
    /// writer still appending to a partial file is not coordinated with) through a
    /// temporary file renamed over it.
    async fn replace_chunk_doc(&self, old: &[u8], new: &[u8]) -> Result<u64, PersistError> {
        Store::replace_chunk_doc(self, old, new)
    }

    async fn list(&self) -> Result<Vec<SessionSummary>, PersistError> {
        let span = spans::store_op(StoreKind::Jsonl, "list");
        let result = span.in_scope(|| Store::list(self));
        spans::record_outcome(&span, &result);
        result
    }

    async fn list_with_unreadable(
        &self,
    ) -> Result<(Vec<SessionSummary>, Vec<PersistError>), PersistError> {
        let span = spans::store_op(StoreKind::Jsonl, "list");
        let result = span.in_scope(|| Store::scan(self));
        spans::record_outcome(&span, &result);
        result
    }

    async fn delete(&self, id: &SessionId) -> Result<bool, PersistError> {
        let span = spans::session_op(StoreKind::Jsonl, "delete", id.as_str());
        let result = span.in_scope(|| Store::delete(self, id));
        spans::record_outcome(&span, &result);
        result
    }

    /// Files share nothing: deleting one frees it at once, so there is nothing to collect.
    async fn gc(&self) -> Result<GcReport, PersistError> {
        Ok(GcReport::default())
    }

    async fn prune(
        &self,
        older_than: Duration,
        now: Timestamp,
    ) -> Result<Vec<SessionId>, PersistError> {
        Store::prune(self, older_than, now)
    }
}

impl Store {
    fn write_one(&self, w: &Write<'_>) -> Result<WriteReport, PersistError> {
        let s = w.session();
        let report = |written: usize, unchanged: bool| WriteReport {
            id: s.id().clone(),
            len: s.len(),
            chunks_written: written,
            unchanged,
        };
        match *w {
            Write::Save(s) => {
                let existed = self.path_of(s.id()).is_file();
                self.save(s)?;
                Ok(report(if existed { 0 } else { s.len() }, existed))
            }
            Write::Restore(l) => {
                let existed = self.path_of(l.session.id()).is_file();
                let clock = GivenTimes::stamper(
                    std::iter::once(l.created_at).chain(l.closed_at),
                    l.session.stamper(),
                );
                let options = WriterOptions::default().clock(clock);
                if l.closed {
                    self.save_with(&l.session, options)?;
                } else {
                    if existed {
                        return Err(PersistError::Exists {
                            path: self.path_of(l.session.id()),
                        });
                    }
                    let mut writer = self.writer(&l.session, options)?;
                    writer.sync_to(&l.session)?;
                    writer.abandon()?;
                }
                Ok(report(if existed { 0 } else { s.len() }, existed))
            }
            Write::Append {
                session,
                expected_len,
            } => self.append_one(session, expected_len),
        }
    }

    /// Append on a directory of files: under the session file's lock, check what is stored,
    /// then write the grown session whole (a JSONL file is rewritten, not patched; the SQL
    /// stores write only the new chunks).
    fn append_one(&self, s: &Session, expected: usize) -> Result<WriteReport, PersistError> {
        let name = SessionStore::name(self);
        let conflict = |found: Option<usize>| PersistError::Conflict {
            store: name.clone(),
            id: s.id().to_string(),
            expected,
            found,
        };
        let stored = match Store::load(self, s.id()) {
            Ok(l) => Some(l),
            Err(PersistError::NotFound { .. }) => None,
            Err(e) => return Err(e),
        };
        let found = stored.as_ref().map(|l| l.session.len());
        if found.unwrap_or(0) != expected || (stored.is_none() && expected != 0) {
            return Err(conflict(found));
        }
        if let Some(l) = &stored {
            check_continues(&name, &l.session, s, expected)?;
        }
        let created_at = stored.as_ref().map(|l| l.created_at);
        let clock = GivenTimes::stamper(created_at, s.stamper());
        let options = WriterOptions::default().replace(true).clock(clock);
        let writer = match self.writer(s, options) {
            Ok(w) => w,
            Err(PersistError::Locked { .. }) => return Err(conflict(found)),
            Err(e) => return Err(e),
        };
        // Holding the lock: nobody else closed the file meanwhile?
        let now = match crate::loader::load_file(&self.path_of(s.id())) {
            Ok(l) => Some(l.session.len()),
            Err(PersistError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                None
            }
            Err(e) => return Err(e),
        };
        let closed_before = stored.as_ref().is_some_and(|l| l.closed);
        if (closed_before && now != found) || (!closed_before && now.is_some()) {
            let partial = writer.abandon()?;
            let _ = std::fs::remove_file(partial);
            return Err(conflict(now));
        }
        writer.close_with(s)?;
        Ok(WriteReport {
            id: s.id().clone(),
            len: s.len(),
            chunks_written: s.len() - expected,
            unchanged: false,
        })
    }
}

/// [`PersistError::NotAContinuation`] unless `grown` has at least `expected` chunks and its
/// chunk at `expected - 1` is the last one stored.
pub(crate) fn check_continues(
    store: &str,
    stored: &Session,
    grown: &Session,
    expected: usize,
) -> Result<(), PersistError> {
    let ok = grown.len() >= expected
        && (expected == 0 || stored.chunks().get(expected - 1) == grown.chunks().get(expected - 1));
    if ok {
        Ok(())
    } else {
        Err(PersistError::NotAContinuation {
            path: store.into(),
            message: format!(
                "session {} does not continue the {expected} chunks stored",
                grown.id()
            ),
        })
    }
}
