//! Cancelling a run from any process ([`crate::Runtime::cancel`]): the run store moves it to
//! `cancelled` (a worker on it is fenced at its next write), and the sessions it was working
//! on get the record of it, so a reader of the session store (`rath sessions`) sees them
//! `cancelled`, as it sees a failed run's sessions `failed`.
//!
//! The sessions marked are those the run left open: the ones its live writer stored that no
//! other stored session of the run continues (each loop it was running), and its output
//! session (a waiting run's, stopped on a call to approve). Each gets a `run_failure` chunk
//! of kind [`RunFailure::CANCELLED`] appended, written under the lease token the cancel
//! handed out: on a session store that checks fences, the fenced-out worker cannot append
//! after it. A session that already ends in a failure is left as it is; the run's input is
//! never touched.

use std::collections::HashSet;

use rath_persist::{PersistError, Write};
use rath_session::{Chunk, ChunkBody, RunFailure, Session, SessionId};

use crate::model::{Lease, Run, RunId};
use crate::{Runtime, RuntimeError};

/// Attempts to append the record to a session a worker is still appending to, before the
/// fence stops it.
const ATTEMPTS: usize = 5;

/// The `run_failure` chunk of a cancelled run.
pub(crate) fn cancelled_chunk() -> Chunk {
    Chunk::new(ChunkBody::RunFailure(RunFailure {
        kind: RunFailure::CANCELLED.to_owned(),
        message: "the run was cancelled by an operator".to_owned(),
        step: "cancel".to_owned(),
        ..RunFailure::default()
    }))
}

impl Runtime {
    /// The sessions `run` left open (see the module docs), loaded.
    async fn open_sessions(&self, run: &Run) -> Result<Vec<Session>, RuntimeError> {
        let mut ids: Vec<String> = Vec::new();
        for e in self.runs.events(&run.id, 0).await? {
            if e.kind != "session" {
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(&e.detail).unwrap_or_default();
            if let Some(id) = v.get("session").and_then(|s| s.as_str()) {
                ids.push(id.to_owned());
            }
        }
        ids.extend(run.output_session.iter().cloned());
        let mut seen = HashSet::new();
        let mut stored = Vec::new();
        for id in ids {
            if id == run.input_session || !seen.insert(id.clone()) {
                continue;
            }
            match self.sessions.load(&SessionId::new(&id)).await {
                Ok(l) => stored.push(l.session),
                Err(PersistError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let continued: HashSet<&SessionId> = stored
            .iter()
            .flat_map(|s| s.lineage().parents.iter())
            .collect();
        Ok(stored
            .iter()
            .filter(|s| !continued.contains(s.id()) && s.failure().is_none())
            .cloned()
            .collect())
    }

    /// Appends the cancellation record to `s` under `lease` (the cancel's token), again on
    /// the newest version while a worker not yet fenced out still appends.
    async fn mark_cancelled(&self, lease: &Lease, mut s: Session) -> Result<(), RuntimeError> {
        for _ in 0..ATTEMPTS {
            let marked = crate::live::for_store(&s.push(cancelled_chunk()), &lease.run);
            let write = Write::Append {
                session: &marked,
                expected_len: s.len(),
            };
            match crate::live::write_held(&*self.sessions, &self.runs, lease, write).await {
                Err(RuntimeError::Persist(PersistError::Conflict { .. })) => {
                    s = self.sessions.load(s.id()).await?.session;
                    if s.failure().is_some() {
                        return Ok(());
                    }
                }
                r => return r,
            }
        }
        tracing::warn!(run = %lease.run, session = %s.id(),
            "cancel: the session kept growing; it is not marked cancelled");
        Ok(())
    }

    /// Cancels the run `id` (queued, running, waiting or in review; a finished run is
    /// [`RuntimeError::BadState`]), from any process. Its status becomes `cancelled`, a
    /// worker running it is fenced out at its next write, and the sessions it left open
    /// (each stored loop no other stored session of the run continues, and a waiting run's
    /// output) end in a `run_failure` chunk of kind `cancelled`, written under the cancel's
    /// lease token, so `rath sessions` lists them `cancelled`. The run's input is never
    /// touched, nor a session that already ends in a failure.
    pub async fn cancel(&self, id: &RunId) -> Result<(), RuntimeError> {
        self.runs.cancel(id).await?;
        let run = self.runs.get(id).await?;
        let lease = self.runs.lease(id).await?;
        for s in self.open_sessions(&run).await? {
            self.mark_cancelled(&lease, s).await?;
        }
        Ok(())
    }
}
