//! Reading a store through the [`SessionStore`] contract (SQLite, PostgreSQL, or any other
//! implementation), for a [`StoreView`] opened on a URL.
//!
//! A JSONL directory is read file by file (torn lines, duplicate ids and stray files are
//! facts of files, reported as such); every other store is read through its trait object.
//! The contract is `async`; this crate is not, so the view owns a small runtime and drives
//! each call on it (on a helper thread when the caller is itself inside a runtime, where
//! blocking would not be allowed).

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use rath_persist::{LoadedSession, SessionStore, SessionSummary};
use rath_session::SessionId;

use crate::verify::{FileCheck, FileStatus, VerifyReport};
use crate::{FileFacts, InspectError, StoreIndex, StoredFile};

/// A store read through its [`SessionStore`] trait object.
#[derive(Clone)]
pub(crate) struct Db {
    store: Arc<dyn SessionStore>,
    rt: Arc<OwnedRuntime>,
}

/// The view's runtime; dropped with `shutdown_background`, which (unlike a plain drop) is
/// allowed inside another runtime, where a view may be dropped.
pub(crate) struct OwnedRuntime(Option<tokio::runtime::Runtime>);

impl Drop for OwnedRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("store", &self.store.name())
            .finish_non_exhaustive()
    }
}

/// A current-thread runtime for the store's calls.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, InspectError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| InspectError::Io {
            path: PathBuf::from("<tokio runtime>"),
            source,
        })
}

/// Runs `fut` to completion on `rt`, from a helper thread when the calling thread is already
/// inside a runtime.
pub(crate) fn block_on<F>(rt: &tokio::runtime::Runtime, fut: F) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    if tokio::runtime::Handle::try_current().is_ok() {
        std::thread::scope(|s| {
            s.spawn(|| rt.block_on(fut))
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    } else {
        rt.block_on(fut)
    }
}

impl Db {
    /// A view of `store`, whose calls run on `rt` (the runtime the store was opened on).
    pub(crate) fn new(store: Arc<dyn SessionStore>, rt: tokio::runtime::Runtime) -> Self {
        Db {
            store,
            rt: Arc::new(OwnedRuntime(Some(rt))),
        }
    }

    /// The store's name (`sqlite:<file>`, `postgres://host/db`).
    pub(crate) fn name(&self) -> String {
        self.store.name()
    }

    /// The trait object.
    pub(crate) fn store(&self) -> &Arc<dyn SessionStore> {
        &self.store
    }

    fn run<F>(&self, fut: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        match &self.rt.0 {
            Some(rt) => block_on(rt, fut),
            None => unreachable!("the runtime lives as long as the view"),
        }
    }

    pub(crate) fn list(&self) -> Result<Vec<SessionSummary>, InspectError> {
        Ok(self.run(self.store.list())?)
    }

    pub(crate) fn load(&self, id: &SessionId) -> Result<LoadedSession, InspectError> {
        Ok(self.run(self.store.load(id))?)
    }

    pub(crate) fn lineage_rows(&self) -> Result<Vec<rath_persist::LineageRow>, InspectError> {
        Ok(self.run(self.store.lineage_rows())?)
    }

    /// One entry per stored session: the id stands in for a file name.
    pub(crate) fn index(&self) -> Result<StoreIndex, InspectError> {
        let files = self
            .list()?
            .into_iter()
            .map(|s| StoredFile {
                file: s.id.to_string(),
                id: s.id,
                path: PathBuf::new(),
            })
            .collect();
        Ok(StoreIndex {
            files,
            warnings: Vec::new(),
        })
    }

    /// The facts of every stored session, from whole loads, in listing order; a session that
    /// lists but does not load is left out with a warning.
    pub(crate) fn facts(&self) -> Result<(Vec<FileFacts>, Vec<crate::FileWarning>), InspectError> {
        let mut facts = Vec::new();
        let mut warnings = Vec::new();
        for s in self.list()? {
            match self.load(&s.id) {
                Ok(l) => facts.push(facts_of(&l)),
                Err(e) => warnings.push(crate::FileWarning::unreadable_text(
                    s.id.to_string(),
                    e.to_string(),
                )),
            }
        }
        facts.sort_by_key(|f| f.created_at);
        Ok((facts, warnings))
    }

    /// Loads every listed session; one check per session.
    pub(crate) fn verify(&self) -> Result<VerifyReport, InspectError> {
        let mut files = Vec::new();
        for s in self.list()? {
            let check = match self.load(&s.id) {
                Ok(l) => {
                    let conversation = l.session.conversation_len() as u64;
                    let status = if !l.closed {
                        FileStatus::Partial
                    } else if l.final_chunk_count.is_some_and(|n| n != conversation) {
                        FileStatus::Inconsistent
                    } else {
                        FileStatus::Ok
                    };
                    FileCheck {
                        file: s.id.to_string(),
                        status,
                        chunks: Some(l.session.len()),
                        message: (status != FileStatus::Ok).then(|| match status {
                            FileStatus::Partial => "not closed (its writer never closed it)".into(),
                            _ => format!(
                                "final_chunk_count {:?} but {conversation} conversation chunks",
                                l.final_chunk_count
                            ),
                        }),
                    }
                }
                Err(e) => FileCheck {
                    file: s.id.to_string(),
                    status: FileStatus::Unreadable,
                    chunks: None,
                    message: Some(e.to_string()),
                },
            };
            files.push(check);
        }
        Ok(VerifyReport { files })
    }
}

/// The facts a listing and a transcript header need, from a session loaded whole.
pub(crate) fn facts_of(l: &LoadedSession) -> FileFacts {
    let s = &l.session;
    let conversation = s.conversation_len() as u64;
    FileFacts {
        id: s.id().clone(),
        file: s.id().to_string(),
        path: PathBuf::new(),
        created_at: l.created_at,
        lineage: s.lineage().clone(),
        placement: s.placement().clone(),
        conversation,
        evidence: s.len() as u64 - conversation,
        closed: l.closed,
        closed_at: l.closed_at,
        final_chunk_count: l.final_chunk_count,
        usage: if l.closed { s.usage() } else { None },
        agent_usage: s.agent_usage().clone(),
        pending: s.pending().to_vec(),
        torn_line_skipped: l.torn_line_skipped,
        // Shown from the whole load, never streamed from a file.
        in_order: false,
        failure: s.failure().cloned(),
    }
}
