//! Durable runs: a run queue, workers with leases and fencing tokens, a replay journal and
//! an effect ledger, on SQLite (one machine) or PostgreSQL (a fleet).
//!
//! ```
//! use std::sync::Arc;
//! use rath_flow::{Agent, SharedWorkflow};
//! use rath_provider::{ScriptedProvider, ScriptedResponse};
//! use rath_runtime::{Runtime, RunOptions, RunStatus, Worker, WorkerOptions, WorkflowRegistry};
//! use rath_session::{Session, Stamper};
//!
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(async {
//! let dir = tempfile::tempdir()?;
//! let registry = WorkflowRegistry::new().register("greet", "greet v1", || {
//!     let model = ScriptedProvider::new(vec![ScriptedResponse::text("hello")]);
//!     Ok(Arc::new(Agent::new("greeter", "Greet.", model)) as SharedWorkflow)
//! });
//! let sessions = Arc::new(rath_persist::Store::at(dir.path().join("sessions")));
//! let url = format!("sqlite:{}", dir.path().join("runs.db").display());
//! let rt = Runtime::connect(&url, sessions, registry).await?;
//! let input = Session::user_with("hi", Stamper::seeded(1));
//! let id = rt.submit(&Stamper::seeded(2), "greet", &input, RunOptions::default()).await?;
//! Worker::new(rt.clone(), WorkerOptions::named("w1")).run_once().await?;
//! let run = rt.runs().get(&id).await?;
//! assert_eq!(run.status, RunStatus::Succeeded);
//! let out = rt.output(&id).await?.expect("an output session");
//! assert_eq!(rath_flow::final_text(&out), Some("hello"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **The journal is the session.** A run is its input session, its workflow (by name and
//! definition hash) and what its providers and tools answered. A worker that claims a run
//! forwards the input again with ids and clock from a stamper seeded by the run id; the
//! [`journal`] layer it installs on the run's context serves every reply and tool answer
//! recorded by earlier claims under their keys, so the re-executed session is byte-identical up to where the last worker
//! stopped, and the run goes on live from there without asking a model twice or repeating
//! a side effect. The output session lands in any [`rath_persist::SessionStore`].
//!
//! - [`RunStore`]: runs, leases with fencing tokens, journal, ledger and events (`rt_*`
//!   tables with their own migrations) in SQLite or PostgreSQL through sqlx.
//! - [`Worker`]: claim, heartbeat, run, persist, release; a pool of `concurrency` loops.
//! - [`journal`]: [`RunScope`], the layer of journal and ledger every model and tool call
//!   of a run goes through, [`current_call`] (the idempotency key a tool hands to the
//!   outside world) and the test crash points.
//! - [`events`]: a run's events pushed to an [`EventSubscription`] (PostgreSQL
//!   `LISTEN/NOTIFY`, an in-process hub), resumable after any event id.
//! - [`feed`]: what a run does as it happens (streamed reply text, agent steps) for
//!   watchers in the same process; not stored.
//! - [`Runtime`]: submit, wait, output, approve/reject a waiting run, over both stores.
//! - [`serve_worker`]: a worker process's main loop (until SIGTERM/ctrl-c, then runs are
//!   handed back); [`bundled`]: the workflows `rath worker` registers.

#![warn(missing_docs)]

pub mod bundled;
mod cancel;
mod canon;
mod clock;
mod error;
pub mod events;
mod failpoint;
pub mod feed;
pub mod journal;
mod live;
mod model;
mod registry;
mod serve;
mod store;
mod worker;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rath_persist::{PersistError, SessionStore};
use rath_session::{Session, SessionId, Stamper};
use sha2::{Digest, Sha256};

pub use clock::RunClock;
pub use error::RuntimeError;
pub use events::EventSubscription;
pub use feed::{FEED_CAPACITY, FeedEvent, FeedObserver, FeedPublisher, FeedReceiver, RunFeed};
pub use journal::{CLOCK_STEP, CallInfo, RunScope, current_call, idempotency_key};
pub use model::{
    Effect, EffectState, Lease, RetryPolicy, Run, RunEvent, RunId, RunOptions, RunStatus,
};
pub use registry::{Constructor, WorkflowDef, WorkflowRegistry, definition_hash};
pub use serve::{ServeReport, serve_worker};
pub use store::{
    JournalEntry, MAX_LEASE, MIGRATIONS, PG_MIGRATIONS, Resolution, RunStore, SCHEMA_VERSION,
    Transition, now_ms,
};
pub use worker::{Outcome, SESSION_CLOCK_STEP_MICROS, Worker, WorkerOptions};

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The run store, a session store and the workflows: what submitters, operators and
/// workers share. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Runtime {
    runs: RunStore,
    sessions: Arc<dyn SessionStore>,
    registry: Arc<WorkflowRegistry>,
    feed: RunFeed,
}

impl Runtime {
    /// A runtime over `runs`, `sessions` and `registry`.
    pub fn new(
        runs: RunStore,
        sessions: Arc<dyn SessionStore>,
        registry: WorkflowRegistry,
    ) -> Self {
        Self {
            runs,
            sessions,
            registry: Arc::new(registry),
            feed: RunFeed::new(),
        }
    }

    /// Connects the run store at `url` (see [`RunStore::connect`]).
    pub async fn connect(
        url: &str,
        sessions: Arc<dyn SessionStore>,
        registry: WorkflowRegistry,
    ) -> Result<Self, RuntimeError> {
        Ok(Self::new(RunStore::connect(url).await?, sessions, registry))
    }

    /// The run store.
    pub fn runs(&self) -> &RunStore {
        &self.runs
    }

    /// The feed of the runs this process executes: subscribe to watch one as it happens
    /// (its workers publish to it; see [`feed`]).
    pub fn feed(&self) -> &RunFeed {
        &self.feed
    }

    /// The session store.
    pub fn sessions(&self) -> &Arc<dyn SessionStore> {
        &self.sessions
    }

    /// The registry.
    pub fn registry(&self) -> &WorkflowRegistry {
        &self.registry
    }

    /// Stores `input` and submits a run of the registered `workflow` on it; the run id is
    /// `run_` and an id from `stamper`.
    pub async fn submit(
        &self,
        stamper: &Stamper,
        workflow: &str,
        input: &Session,
        options: RunOptions,
    ) -> Result<RunId, RuntimeError> {
        let def = self
            .registry
            .get(workflow)
            .ok_or_else(|| RuntimeError::UnknownWorkflow(workflow.to_owned()))?;
        self.sessions.save(input).await?;
        let id = RunId(format!("run_{}", stamper.next_id()));
        self.runs
            .submit(
                id,
                workflow,
                &def.definition_hash,
                input.id().as_str(),
                &options,
            )
            .await
    }

    /// Waits until the run is final, waiting or in review, or `timeout` passed; returns the
    /// run as it is then. It looks again when a write of this process moves the run's
    /// status, and every `poll` (for workers elsewhere).
    pub async fn wait(
        &self,
        id: &RunId,
        timeout: Duration,
        poll: Duration,
    ) -> Result<Run, RuntimeError> {
        let mut runs = self
            .wait_all(std::slice::from_ref(id), timeout, poll)
            .await?;
        runs.pop()
            .ok_or_else(|| RuntimeError::NoSuchRun(id.to_string()))
    }

    /// [`Runtime::wait`] for many runs at once (`wait` is this for one run): their runs in
    /// the order of `ids` once each has settled (or the state each is in when `timeout`
    /// passes). The runs are read together, first and then as this process's writes move
    /// their statuses (a claim aside: no run settles by it), or every `poll` for changes
    /// made by other processes, so waiting for a thousand runs costs a few reads, not a
    /// thousand.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use std::time::Duration;
    /// # use rath_flow::{Agent, CancellationToken, SharedWorkflow};
    /// # use rath_provider::{ScriptedProvider, ScriptedResponse};
    /// # use rath_runtime::{Runtime, RunOptions, RunStatus, Worker, WorkerOptions, WorkflowRegistry};
    /// # use rath_session::{Session, Stamper};
    /// # tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// # let registry = WorkflowRegistry::new().register("greet", "greet v1", || {
    /// #     let model = ScriptedProvider::new(vec![ScriptedResponse::text("hello")]);
    /// #     Ok(Arc::new(Agent::new("greeter", "Greet.", model)) as SharedWorkflow)
    /// # });
    /// # let sessions = Arc::new(rath_persist::Store::at(dir.path().join("sessions")));
    /// # let url = format!("sqlite:{}", dir.path().join("runs.db").display());
    /// # let rt = Runtime::connect(&url, sessions, registry).await?;
    /// let mut ids = Vec::new();
    /// for i in 0..3 {
    ///     let input = Session::user_with(format!("hi {i}"), Stamper::seeded(2 * i));
    ///     ids.push(rt.submit(&Stamper::seeded(2 * i + 1), "greet", &input, RunOptions::default()).await?);
    /// }
    /// let stop = CancellationToken::new();
    /// let worker = Worker::new(rt.clone(), WorkerOptions::named("w"));
    /// let worker = tokio::spawn({
    ///     let stop = stop.clone();
    ///     async move { worker.run(stop).await }
    /// });
    /// let runs = rt.wait_all(&ids, Duration::from_secs(30), Duration::from_millis(100)).await?;
    /// assert!(runs.iter().all(|r| r.status == RunStatus::Succeeded));
    /// stop.cancel();
    /// worker.await??;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn wait_all(
        &self,
        ids: &[RunId],
        timeout: Duration,
        poll: Duration,
    ) -> Result<Vec<Run>, RuntimeError> {
        let start = Instant::now();
        let mut events = self.runs.local_moves();
        let mut settled: std::collections::HashMap<RunId, Run> =
            std::collections::HashMap::with_capacity(ids.len());
        let mut pending: std::collections::HashSet<&RunId> = ids.iter().collect();
        // What to read next: every pending run at first and on each poll, else the pending
        // runs this process's writes touched since the last read.
        let mut read: Vec<RunId> = pending.iter().map(|id| (*id).clone()).collect();
        // The next read of every pending run (what other processes changed), kept apart
        // from the event-driven reads so a steady flow of local events cannot postpone it.
        let mut read_all_at = later(poll);
        loop {
            let found = self.runs.get_many(&read).await?;
            settle_found(found, &read, start, timeout, &mut pending, &mut settled)?;
            if pending.is_empty() {
                return Ok(ids
                    .iter()
                    .filter_map(|id| settled.get(id).cloned())
                    .collect());
            }
            read.clear();
            let left = timeout.saturating_sub(start.elapsed());
            let next = tokio::time::sleep_until(read_all_at.min(later(left)));
            tokio::pin!(next);
            // True when every pending run is to be read.
            let all = tokio::select! {
                () = &mut next => true,
                got = events.recv() => match got {
                    Ok(run) => read_queued_moves(run, &mut events, &pending, &mut read),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => true,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                        (&mut next).await;
                        true
                    }
                },
            };
            if all || start.elapsed() >= timeout {
                read = pending.iter().map(|id| (*id).clone()).collect();
                read_all_at = later(poll);
            }
        }
    }

    /// The run's output session (its latest, for a waiting run), if it has one.
    pub async fn output(&self, id: &RunId) -> Result<Option<Session>, RuntimeError> {
        let run = self.runs.get(id).await?;
        match run.output_session {
            None => Ok(None),
            Some(s) => Ok(Some(self.sessions.load(&SessionId::new(s)).await?.session)),
        }
    }

    /// Approves the pending call `call_id` of a waiting run as `by` (from any process): the
    /// decision is appended to its stopped session and the run is queued for any worker.
    pub async fn approve(&self, id: &RunId, call_id: &str, by: &str) -> Result<(), RuntimeError> {
        self.decide(id, |s| rath_flow::approve(s, call_id, by))
            .await
    }

    /// Rejects the pending call `call_id` of a waiting run (the call is answered with a
    /// `denied_by_policy` result when the run resumes).
    pub async fn reject(
        &self,
        id: &RunId,
        call_id: &str,
        by: &str,
        reason: &str,
    ) -> Result<(), RuntimeError> {
        self.decide(id, |s| rath_flow::reject(s, call_id, by, reason))
            .await
    }

    async fn decide(
        &self,
        id: &RunId,
        f: impl FnOnce(&Session) -> Result<Session, rath_flow::FlowError>,
    ) -> Result<(), RuntimeError> {
        let run = self.runs.get(id).await?;
        let (RunStatus::Waiting, Some(out)) = (run.status, run.output_session.as_deref()) else {
            return Err(RuntimeError::BadState {
                run: id.to_string(),
                status: run.status.to_string(),
                what: "decide a pending call".into(),
            });
        };
        let stopped = self.sessions.load(&SessionId::new(out)).await?.session;
        let decided = f(&stopped)?;
        match self.sessions.append(&decided, stopped.len()).await {
            Ok(_) => {}
            Err(PersistError::Conflict { .. }) => {
                return Err(RuntimeError::BadState {
                    run: id.to_string(),
                    status: run.status.to_string(),
                    what: "decide: the stopped session changed meanwhile".into(),
                });
            }
            Err(e) => return Err(e.into()),
        }
        self.runs.requeue_decided(id, out).await
    }
}

/// `wait` from now, checked: a wait past what an `Instant` holds (a caller's `Duration::MAX`)
/// is a year, never an overflow panic.
pub(crate) fn later(wait: std::time::Duration) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now.checked_add(wait)
        .or_else(|| now.checked_add(std::time::Duration::from_secs(365 * 24 * 60 * 60)))
        .unwrap_or(now)
}

/// Moves each run of `found` (what a read of `read` returned) that has settled (final,
/// waiting or in review), or any run once `timeout` has passed since `start`, from
/// `pending` to `settled`. A run of `read` not found is [`RuntimeError::NoSuchRun`].
fn settle_found(
    found: Vec<Run>,
    read: &[RunId],
    start: Instant,
    timeout: Duration,
    pending: &mut std::collections::HashSet<&RunId>,
    settled: &mut std::collections::HashMap<RunId, Run>,
) -> Result<(), RuntimeError> {
    let mut seen = std::collections::HashSet::with_capacity(found.len());
    for run in found {
        seen.insert(run.id.clone());
        let done = run.status.is_final()
            || matches!(run.status, RunStatus::Waiting | RunStatus::NeedsReview);
        if done || start.elapsed() >= timeout {
            pending.remove(&run.id);
            settled.insert(run.id.clone(), run);
        }
    }
    if let Some(missing) = read.iter().find(|id| !seen.contains(*id)) {
        return Err(RuntimeError::NoSuchRun(missing.to_string()));
    }
    Ok(())
}

/// Adds to `read` the runs of `pending` that the local move `first`, or any move already
/// queued behind it in `events`, touched: one read for all of them. True when the queue
/// lagged (moves were lost, so every pending run is to be read).
fn read_queued_moves(
    first: Arc<str>,
    events: &mut tokio::sync::broadcast::Receiver<Arc<str>>,
    pending: &std::collections::HashSet<&RunId>,
    read: &mut Vec<RunId>,
) -> bool {
    let mut all = false;
    // Take every event already queued: one read for all of them.
    let mut touched = vec![first];
    loop {
        match events.try_recv() {
            Ok(r) => touched.push(r),
            Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => {
                all = true;
                break;
            }
            Err(_) => break,
        }
    }
    let touched: std::collections::HashSet<&str> = touched.iter().map(|r| &**r).collect();
    read.extend(
        pending
            .iter()
            .filter(|id| touched.contains(id.as_str()))
            .map(|id| (*id).clone()),
    );
    all
}
