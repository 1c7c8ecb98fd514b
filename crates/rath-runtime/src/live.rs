//! The run's sessions written as they grow: a [`rath_flow::SessionSink`] whose writes go,
//! in order and coalesced, to the session store as fenced appends. The worker uses it on
//! session stores with transactional writes (the SQL stores: each append is one
//! transaction that adds only the new chunks); on a directory of JSONL files (which
//! rewrites a session per write and leaves a partial file when the writer is killed) the
//! session is written when the attempt ends.
//!
//! The session loop tells its sink about every round (`begin`, `append`, `finish`); the
//! sink cannot wait (its methods are synchronous), so it hands the grown session to a
//! writer task. The task writes the newest version of each session it was handed as a
//! [`Write::Append`] of what the store does not have yet, carrying the lease's fencing token
//! ([`Fence`]) where the session store checks fences, after a lease check in the run store
//! where it does not. A worker fenced out stops writing at its first refused write. The
//! journal stays the durable record of each step (it commits before the workflow goes
//! on); these writes make a run that failed, was cancelled or was killed visible in the
//! session store as far as it got, and leave the final persist only the last rounds.
//! A version closed with a `run_failure` chunk is not written here: the worker stores it
//! once the attempt's end is known to be final for that session (a failure, retried or
//! not, or a timeout), not when the run continues the same session on its next claim
//! (review, takeover, hand-back). The first write of each session adds a `session` event (`{"session": id}`) to the run's
//! stream.

use std::collections::HashMap;
use std::sync::Arc;

use rath_flow::{CancellationToken, FlowError, SessionSink};
use rath_persist::{Fence, LineageJournal, PersistError, SessionStore, Write, WriteBatch};
use rath_session::{ChunkKind, Session, SessionId, Stamper};
use tokio::sync::mpsc;

use crate::RuntimeError;
use crate::model::Lease;
use crate::store::{Barrier, RunStore};

/// What the writer task did, for the worker and its tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LiveReport {
    /// Appends stored.
    pub writes: u64,
    /// Sessions written, in the order they were first written.
    pub sessions: Vec<String>,
    /// The write was refused by a fence (the worker lost its lease).
    pub fenced: bool,
    /// Chunks stored per session this writer wrote (as far as it knows).
    pub stored: HashMap<SessionId, usize>,
}

/// The sink side: hands grown sessions to the writer task.
#[derive(Debug)]
pub(crate) struct LiveSink {
    tx: mpsc::UnboundedSender<Option<Session>>,
    /// The claim's cancellation: once the attempt is stopping (a call found ambiguous, a
    /// fence, the deadline, a shutdown), what the workflow still reports is the stop's
    /// artefact (an interrupted round, a tool answered with the stop's error), not part of
    /// the run: the next claim or the worker's final persist writes what the run keeps.
    stopping: CancellationToken,
    /// Wakes the writer from its pause between writes once nothing more comes.
    closing: Arc<tokio::sync::Notify>,
    /// The session whose last versions the writer leaves alone once closed (the worker
    /// stores it next).
    leave: Arc<std::sync::Mutex<Option<SessionId>>>,
}

/// The least time between two writes of one claim's writer, and from its start to its
/// first: what queues up meanwhile is coalesced into one append per session (a claim that
/// ends sooner leaves all of its output session to the worker's one final write). The live
/// writes are for visibility (a failed or killed run is stored about as far as it got);
/// durability is the journal's, so spacing them costs no guarantee and saves the session
/// store one transaction per round. 100 ms keeps a session a reader watches at most a tenth
/// of a second behind its run; at 25 ms a run of fast steps wrote its session about once a
/// step, which took 15% of the durable bench's SQLite throughput.
const GAP: std::time::Duration = std::time::Duration::from_millis(100);

impl LiveSink {
    fn send(&self, s: &Session) -> Result<(), FlowError> {
        // A session closed with a `run_failure` chunk is left to the worker: whether it is
        // the session's last word depends on how the attempt ends (a run taken over, put in
        // review or handed back continues the same session on its next claim).
        if self.stopping.is_cancelled()
            || s.last().is_some_and(|c| c.kind() == ChunkKind::RunFailure)
        {
            return Ok(());
        }
        // The writer ends after a fence (then the heartbeat or the next journal write stops
        // the run) or once closed: a closed channel is no error.
        let _ = self.tx.send(Some(s.clone()));
        Ok(())
    }

    /// Tells the writer that nothing more comes: it writes what it was handed and ends,
    /// but for the versions of `leave` still queued (the worker stores that one itself).
    pub(crate) fn close(&self, leave: Option<SessionId>) {
        *self.leave.lock().unwrap_or_else(|p| p.into_inner()) = leave;
        let _ = self.tx.send(None);
        self.closing.notify_one();
    }
}

impl SessionSink for LiveSink {
    fn begin(&self, session: &Session) -> Result<(), FlowError> {
        self.send(session)
    }
    fn append(&self, session: &Session) -> Result<(), FlowError> {
        self.send(session)
    }
    fn finish(&self, session: &Session) -> Result<(), FlowError> {
        self.send(session)
    }
}

/// What the writer of one claim knows of the sessions it may write.
pub(crate) struct Claimed {
    /// The session the claim was handed (stored, as is everything it descends from).
    pub input: SessionId,
    /// The run's first claim: every session the writer writes but `input` was minted by
    /// the claim, so stored by nobody yet (its first write is an append to nothing, not a
    /// lookup of its length and an append).
    pub fresh: bool,
    /// The claim's lineage journal: before a session's first write, the sessions it
    /// descends from are written from it (a parent a stored session names is stored).
    pub journal: LineageJournal,
}

/// Starts the writer for one claim: the sink for the workflow's context, and the task to
/// await (after [`LiveSink::close`]) for what it wrote.
pub(crate) fn start(
    sessions: Arc<dyn SessionStore>,
    runs: RunStore,
    lease: Lease,
    claimed: Claimed,
    barrier: Arc<Barrier>,
    stopping: CancellationToken,
) -> (Arc<LiveSink>, tokio::task::JoinHandle<LiveReport>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let closing = Arc::new(tokio::sync::Notify::new());
    let leave = Arc::new(std::sync::Mutex::new(None));
    let writer = Writer {
        closing: closing.clone(),
        leave: leave.clone(),
        sessions,
        runs,
        lease,
        fresh: claimed.fresh.then(|| claimed.input.clone()),
        input: claimed.input,
        journal: claimed.journal,
        barrier,
        stored: HashMap::new(),
        report: LiveReport::default(),
    };
    (
        Arc::new(LiveSink {
            tx,
            stopping,
            closing,
            leave,
        }),
        tokio::spawn(writer.drain(rx)),
    )
}

/// `s` as the runtime hands it to the session store: with a stamper of its own, fresh for
/// every write, whose clock reads the session's own `created_at` (from the run's stamper:
/// when the run's execution first ran) every time. The store stamps a session's stored
/// times (its header's `created_at`, which a load returns as the session's, and the
/// trailer's `closed_at`) from the session's stamper. Drawing them from the run's would
/// take readings of the run's own clock, and give a stored session times that depend on
/// which write created its row (this writer, or the worker's final persist when the run
/// ended before this writer got to it): timing. This gives every write the same times, the
/// ones a re-execution of the run makes again.
pub(crate) fn for_store(s: &Session, run: &crate::RunId) -> Session {
    s.clone()
        .with_stamper(Stamper::seeded_at(run.seed(), s.created_at(), 0))
}

/// Writes one session write of the run `lease` holds: fenced with the lease's token where
/// the session store checks fences, else after a lease check in the run store (the live
/// writer's appends and the worker's final persist both go through here).
pub(crate) async fn write_held(
    sessions: &dyn SessionStore,
    runs: &RunStore,
    lease: &Lease,
    write: Write<'_>,
) -> Result<(), RuntimeError> {
    write_all_held(sessions, runs, lease, vec![write]).await
}

/// [`write_held`] for several writes in one batch (one transaction where the session store
/// has them).
pub(crate) async fn write_all_held(
    sessions: &dyn SessionStore,
    runs: &RunStore,
    lease: &Lease,
    writes: Vec<Write<'_>>,
) -> Result<(), RuntimeError> {
    let mut batch = WriteBatch::new();
    for w in writes {
        batch = batch.with(w);
    }
    if sessions.capabilities().fencing {
        let token = u64::try_from(lease.token).unwrap_or(0);
        batch = batch.fenced(Fence::new(lease.run.as_str(), token));
    } else {
        runs.check(lease).await?;
    }
    let _quiet = crate::journal::quiet_share().await;
    sessions.write(batch).await?;
    Ok(())
}

struct Writer {
    sessions: Arc<dyn SessionStore>,
    runs: RunStore,
    lease: Lease,
    /// On a run's first claim, the session it was handed (see [`Claimed::fresh`]).
    fresh: Option<SessionId>,
    /// See [`Claimed::input`].
    input: SessionId,
    /// See [`Claimed::journal`].
    journal: LineageJournal,
    /// The run's journal writes: a session version is stored only once what it shows of
    /// the journal (the replies and answers in it) is committed.
    barrier: Arc<Barrier>,
    closing: Arc<tokio::sync::Notify>,
    /// See [`LiveSink::close`].
    leave: Arc<std::sync::Mutex<Option<SessionId>>>,
    /// Chunks known stored per session (`None`: the session is left alone).
    stored: HashMap<SessionId, Option<usize>>,
    report: LiveReport,
}

impl Writer {
    async fn drain(mut self, mut rx: mpsc::UnboundedReceiver<Option<Session>>) -> LiveReport {
        let mut open = true;
        let mut closed = false;
        let mut last = tokio::time::Instant::now();
        while open {
            // Wait out the gap since the last write (unless the claim is closing).
            if !closed {
                tokio::select! {
                    () = tokio::time::sleep_until(last + GAP) => {}
                    () = self.closing.notified() => closed = true,
                }
            }
            let Some(Some(first)) = rx.recv().await else {
                break;
            };
            // Coalesce what queued up meanwhile: the newest version of each session, in
            // the order the sessions first appeared.
            let mut batch: Vec<Session> = vec![first];
            while let Ok(next) = rx.try_recv() {
                let Some(s) = next else {
                    open = false;
                    break;
                };
                match batch.iter_mut().find(|b| b.id() == s.id()) {
                    Some(b) if s.len() >= b.len() => *b = s,
                    Some(_) => {}
                    None => batch.push(s),
                }
            }
            if !open {
                let leave = self.leave.lock().unwrap_or_else(|p| p.into_inner()).clone();
                if let Some(id) = leave {
                    batch.retain(|s| *s.id() != id);
                }
            }
            last = tokio::time::Instant::now();
            let bw = self.barrier.wait().await;
            if let Err(e) = bw {
                self.report.fenced = matches!(e, RuntimeError::Fenced { .. });
                return self.report;
            }
            for s in batch {
                if let Err(e) = self.write(&s).await {
                    if matches!(
                        e,
                        RuntimeError::Fenced { .. }
                            | RuntimeError::Persist(PersistError::Fenced { .. })
                    ) {
                        self.report.fenced = true;
                        return self.report;
                    }
                    tracing::warn!(run = %self.lease.run, session = %s.id(), error = %e,
                        "live session write: the session is left to the final persist");
                    self.stored.insert(s.id().clone(), None);
                }
            }
        }
        self.report.stored = self
            .stored
            .iter()
            .filter_map(|(id, n)| n.map(|n| (id.clone(), n)))
            .collect();
        self.report
    }

    async fn write(&mut self, s: &Session) -> Result<(), RuntimeError> {
        if !self.stored.contains_key(s.id()) {
            // Its first write: what it descends from goes first, so no stored session
            // names a parent the store lacks.
            for a in crate::worker::ancestors(&self.journal, s, self.input.as_str()) {
                if !self.stored.contains_key(a.id()) {
                    self.write_one(&a, false).await?;
                }
            }
        }
        self.write_one(s, true).await
    }

    /// Writes `s` as [`Writer::write`] does, without its ancestors; `announce`: its first
    /// write adds a `session` event to the run's stream (a session the run works on, not
    /// one written as an ancestor).
    async fn write_one(&mut self, s: &Session, announce: bool) -> Result<(), RuntimeError> {
        // `guessed`: taken for unstored because the claim minted it (see `start`).
        let (known, guessed) = match self.stored.get(s.id()) {
            Some(None) => return Ok(()),
            Some(Some(n)) => (*n, false),
            None if self.fresh.as_ref().is_some_and(|handed| handed != s.id()) => (0, true),
            None => (self.sessions.stored_len(s.id()).await?.unwrap_or(0), false),
        };
        match self.append(s, known, announce).await {
            // Guessed and stored after all (a workflow writing a session it did not mint):
            // written again after asking the store.
            Err(RuntimeError::Persist(PersistError::Conflict { .. })) if guessed => {
                let known = self.sessions.stored_len(s.id()).await?.unwrap_or(0);
                self.append(s, known, announce).await
            }
            r => r,
        }
    }

    async fn append(
        &mut self,
        s: &Session,
        known: usize,
        announce: bool,
    ) -> Result<(), RuntimeError> {
        if known >= s.len() {
            self.stored.insert(s.id().clone(), Some(known));
            return Ok(());
        }
        let copy = for_store(s, &self.lease.run);
        let write = Write::Append {
            session: &copy,
            expected_len: known,
        };
        write_held(&*self.sessions, &self.runs, &self.lease, write).await?;
        if announce && !self.report.sessions.iter().any(|w| w == s.id().as_str()) {
            self.report.sessions.push(s.id().to_string());
            let detail = serde_json::json!({"session": s.id().as_str()}).to_string();
            self.runs.event(&self.lease, "session", &detail).await?;
        }
        self.stored.insert(s.id().clone(), Some(s.len()));
        self.report.writes += 1;
        Ok(())
    }
}
