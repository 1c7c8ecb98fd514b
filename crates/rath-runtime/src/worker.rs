//! Workers: claim a run, heartbeat its lease, run its workflow under the journal and
//! ledger, persist its session, and record where it ended.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rath_flow::{CancellationToken, FlowContext, FlowError};
use rath_persist::{LineageJournal, PersistError, Write};
use rath_session::{Session, Stamper};
use tracing::Instrument as _;
use tracing::field::Empty;
use tracing::instrument::WithSubscriber as _;

use crate::journal::RunScope;
use crate::model::{Lease, Run, RunId, RunStatus};
use crate::registry::WorkflowDef;
use crate::store::Transition;
use crate::{Runtime, RuntimeError};

/// How a worker behaves.
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    /// Its name in leases and events (unique per worker process).
    pub name: String,
    /// Runs at once.
    pub concurrency: usize,
    /// Lease length; heartbeats renew it every third of it.
    pub lease: Duration,
    /// Sleep between empty claims (one loop of an idle worker polls; its others wait for
    /// it to find a run). A run submitted through the same [`crate::RunStore`] (an embedded
    /// worker beside its server) ends the sleep at once. An idle worker also sweeps for runs
    /// past their deadline, at most once a second.
    pub poll: Duration,
    /// Run a workflow whose definition changed since the run was submitted.
    pub accept_changed_definitions: bool,
    /// On shutdown, how long in-flight runs may go on before they are handed back.
    pub grace: Duration,
    /// The clock a run's first execution reads its start time from, the time its sessions
    /// carry (`None`: the run store's clock, [`crate::RunStore::clock`]). A re-execution
    /// reads the time the journal recorded instead. A manual clock makes a run's sessions
    /// byte for byte the same wherever and whenever it runs (tests, evidence).
    pub session_clock: Option<crate::RunClock>,
}

impl WorkerOptions {
    /// Options for a worker named `name`: one run at a time, a 5 s lease, 50 ms polls.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            concurrency: 1,
            lease: Duration::from_secs(5),
            poll: Duration::from_millis(50),
            accept_changed_definitions: false,
            grace: Duration::from_secs(30),
            session_clock: None,
        }
    }
    /// Sets the concurrency.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }
    /// Sets the lease length.
    pub fn lease(mut self, d: Duration) -> Self {
        self.lease = d;
        self
    }
    /// Sets the poll interval.
    pub fn poll(mut self, d: Duration) -> Self {
        self.poll = d;
        self
    }
    /// Sets how long in-flight runs may go on after shutdown before they are handed back.
    pub fn grace(mut self, d: Duration) -> Self {
        self.grace = d;
        self
    }
    /// Sets the clock a run's first execution reads the time its sessions carry from (see
    /// [`WorkerOptions::session_clock`]).
    pub fn session_clock(mut self, clock: crate::RunClock) -> Self {
        self.session_clock = Some(clock);
        self
    }
    /// Accepts runs whose workflow definition changed.
    pub fn accept_changed_definitions(mut self, yes: bool) -> Self {
        self.accept_changed_definitions = yes;
        self
    }
}

/// How far a durable run's stamper clock moves per reading: a millisecond, so the ids it
/// mints (UUIDv7, their time field from that clock) sort in the order they were made and
/// the times stay within a run's own span of its real start.
pub const SESSION_CLOCK_STEP_MICROS: i64 = 1_000;

/// Where one claimed run ended on this worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The run moved to this status.
    Moved(RunStatus),
    /// The lease passed to someone else; nothing more was written.
    Fenced,
}

impl Outcome {
    /// The `rath.run.outcome` of a worker's `worker.execute` span: the status the run moved
    /// to, or `fenced`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Moved(status) => status.as_str(),
            Outcome::Fenced => "fenced",
        }
    }
}

/// The span of one claimed run on one worker, `worker.execute`: the parent of everything the
/// run does there (session loads and writes, heartbeats, the release, the workflow's own
/// spans). Its `gen_ai.conversation.id` is the run's input session, the run's lineage root:
/// rath-otel's `tracing` bridge puts a root span carrying it in that conversation's trace,
/// so every claim and every resumed segment of a run is in one trace, with the run's agent
/// spans under the worker span that ran them.
fn execute_span(worker: &str, run: &Run, lease: &Lease) -> tracing::Span {
    tracing::info_span!(
        parent: None,
        "worker.execute",
        rath.worker.name = %worker,
        rath.run.id = %run.id,
        rath.run.workflow = %run.workflow,
        rath.run.segment = run.segment,
        rath.run.attempt = run.attempts,
        rath.lease.token = lease.token,
        gen_ai.conversation.id = %run.input_session,
        rath.run.outcome = Empty,
        error.type = Empty,
        otel.status_code = Empty,
    )
}

/// Records `e` on `span` as `error.type` (a kind, never the message) and an error status.
fn record_error(span: &tracing::Span, e: &RuntimeError) {
    let kind = match e {
        RuntimeError::Db { .. } => "db",
        RuntimeError::NoSuchRun(_) => "no_such_run",
        RuntimeError::Fenced { .. } => "fenced",
        RuntimeError::UnknownWorkflow(_) => "unknown_workflow",
        RuntimeError::DefinitionChanged { .. } => "definition_changed",
        RuntimeError::ReplayMismatch { .. } => "replay_mismatch",
        RuntimeError::Ambiguous { .. } => "ambiguous",
        RuntimeError::BadState { .. } => "bad_state",
        RuntimeError::Persist(p) => p.kind(),
        RuntimeError::Flow(f) => f.failure_kind(),
        _ => "runtime",
    };
    span.record("error.type", kind);
    span.record("otel.status_code", "error");
}

/// Milliseconds as a span field (`i64`: OpenTelemetry has no unsigned integer).
/// True when `e` says the lease has passed to another worker (from the run store or from a
/// session store that checks fences).
fn is_fenced(e: &RuntimeError) -> bool {
    matches!(
        e,
        RuntimeError::Fenced { .. } | RuntimeError::Persist(PersistError::Fenced { .. })
    )
}

/// True when `e` is a store that did not answer (an I/O failure, a lock held too long, a
/// database that refused or dropped the connection): worth trying again later as it is.
fn is_outage(e: &RuntimeError) -> bool {
    matches!(
        e,
        RuntimeError::Db { .. }
            | RuntimeError::Persist(
                PersistError::Io { .. }
                    | PersistError::Locked { .. }
                    | PersistError::Backend { .. }
                    | PersistError::Busy { .. }
                    | PersistError::Unreachable { .. }
            )
    )
}

/// What a claim knows of how much of a session is stored before it writes it.
#[derive(Clone, Copy, Debug)]
enum Known {
    /// This many chunks (what the claim's live writer stored).
    Len(usize),
    /// None: the claim minted the session (a first claim's sessions other than its
    /// input are stored by nobody else). A write refused as a conflict is retried as
    /// [`Known::Ask`].
    New,
    /// Unknown: the store is asked.
    Ask,
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A worker (in-process; `rath worker` runs one as a process).
#[derive(Clone, Debug)]
pub struct Worker {
    rt: Runtime,
    opts: WorkerOptions,
    hurry: CancellationToken,
}

impl Worker {
    /// A worker over `rt`.
    pub fn new(rt: Runtime, opts: WorkerOptions) -> Self {
        Self {
            rt,
            opts,
            hurry: CancellationToken::new(),
        }
    }

    /// Ends the shutdown grace early when `hurry` is cancelled (a second signal): in-flight
    /// runs are handed back at once.
    pub fn with_hurry(mut self, hurry: CancellationToken) -> Self {
        self.hurry = hurry;
        self
    }

    /// Claims one run and runs it to where it stops; `None` when nothing was claimable.
    pub async fn run_once(&self) -> Result<Option<(RunId, Outcome)>, RuntimeError> {
        let never = CancellationToken::new();
        self.claim_and_run(&never, None).await
    }

    /// `idle`: the worker's idle loops and whether this claim is their poll (told what
    /// the claim found before the run is executed).
    async fn claim_and_run(
        &self,
        shutdown: &CancellationToken,
        idle: Option<(&Idle, bool)>,
    ) -> Result<Option<(RunId, Outcome)>, RuntimeError> {
        let claim = tracing::debug_span!(
            "worker.claim",
            rath.worker.name = %self.opts.name,
            rath.lease.ms = ms(self.opts.lease),
            rath.claim.outcome = Empty,
            rath.run.id = Empty,
            rath.lease.token = Empty,
            error.type = Empty,
            otel.status_code = Empty,
        );
        let claimed = self
            .rt
            .runs
            .claim(&self.opts.name, self.opts.lease)
            .instrument(claim.clone())
            .await;
        if let Some((idle, poll)) = idle {
            idle.claimed(matches!(claimed, Ok(Some(_))), poll);
        }
        let claimed = claimed.inspect_err(|e| record_error(&claim, e))?;
        let Some((run, lease)) = claimed else {
            claim.record("rath.claim.outcome", "empty");
            return Ok(None);
        };
        claim.record("rath.claim.outcome", "claimed");
        claim.record("rath.run.id", run.id.as_str());
        claim.record("rath.lease.token", lease.token);
        tracing::info!(run = %run.id, worker = %self.opts.name, token = lease.token, "claimed");
        let span = execute_span(&self.opts.name, &run, &lease);
        span.follows_from(&claim);
        drop(claim);
        let id = run.id.clone();
        let done = self
            .execute(run, &lease, shutdown)
            .instrument(span.clone())
            .await;
        let outcome = match done {
            Ok(o) => o,
            Err(RuntimeError::Fenced { .. }) => Outcome::Fenced,
            Err(e) => {
                record_error(&span, &e);
                return Err(e);
            }
        };
        span.record("rath.run.outcome", outcome.as_str());
        match &outcome {
            Outcome::Moved(RunStatus::Queued) => {
                tracing::info!(run = %id, worker = %self.opts.name, token = lease.token, "handed back")
            }
            Outcome::Moved(status) => {
                tracing::info!(run = %id, worker = %self.opts.name, token = lease.token, status = %status, "finished")
            }
            Outcome::Fenced => {
                tracing::warn!(run = %id, worker = %self.opts.name, token = lease.token, "fenced: lease lost")
            }
        }
        Ok(Some((id, outcome)))
    }

    /// Runs `concurrency` claim loops until `shutdown` is cancelled; in-flight runs then get
    /// [`WorkerOptions::grace`] to finish and are handed back (`queued`) after it.
    pub async fn run(&self, shutdown: CancellationToken) -> Result<(), RuntimeError> {
        let mut set = tokio::task::JoinSet::new();
        let idle = Arc::new(Idle::default());
        for _ in 0..self.opts.concurrency {
            let me = self.clone();
            let shutdown = shutdown.clone();
            let idle = idle.clone();
            set.spawn(
                async move {
                    while !shutdown.is_cancelled() {
                        let found = idle.found.notified();
                        tokio::pin!(found);
                        found.as_mut().enable();
                        let turn = idle.turn();
                        match turn {
                            Turn::Claim => {}
                            Turn::Poll => {
                                // A run queued by this process is claimed at once, not
                                // at the next poll.
                                tokio::select! {
                                    _ = tokio::time::sleep(me.opts.poll) => {}
                                    _ = me.rt.runs.queued_here() => {}
                                    _ = shutdown.cancelled() => break,
                                }
                            }
                            Turn::Wait => {
                                tokio::select! {
                                    _ = found => {}
                                    _ = shutdown.cancelled() => break,
                                }
                                continue;
                            }
                        }
                        let poll = matches!(turn, Turn::Poll);
                        match me.claim_and_run(&shutdown, Some((&idle, poll))).await {
                            Ok(Some(_)) => {}
                            Ok(None) => {
                                if poll && idle.sweep_due() {
                                    me.sweep().await;
                                }
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "worker loop");
                                tokio::time::sleep(me.opts.poll).await;
                            }
                        }
                    }
                }
                .with_current_subscriber(),
            );
        }
        while set.join_next().await.is_some() {}
        Ok(())
    }

    async fn execute(
        &self,
        run: Run,
        lease: &Lease,
        shutdown: &CancellationToken,
    ) -> Result<Outcome, RuntimeError> {
        let runs = &self.rt.runs;
        let def = match self.admit(&run, lease).await? {
            ControlFlow::Continue(def) => def,
            ControlFlow::Break(outcome) => return Ok(outcome),
        };
        let from = run.resume_session.as_deref().unwrap_or(&run.input_session);
        let loaded = match self
            .rt
            .sessions
            .load(&rath_session::SessionId::new(from))
            .await
        {
            Ok(l) => l,
            Err(e) => return self.store_failed(lease, &run, e.into()).await,
        };
        let cancel = CancellationToken::new();
        // The first claim of a run (attempt 1) follows no holder: nothing to replay, and
        // nothing it mints (but what it was handed) is stored yet.
        let fresh_claim = run.attempts == 1;
        let scope = if fresh_claim {
            RunScope::first(runs.clone(), lease.clone(), run.segment, cancel.clone())
        } else {
            RunScope::load(runs.clone(), lease.clone(), run.segment, cancel.clone()).await?
        };
        let session = loaded
            .session
            .with_stamper(self.session_stamper(&run, &scope));

        let workflow = match (def.constructor)() {
            Ok(w) => w,
            Err(e) => return self.fail_final(lease, &RuntimeError::Flow(e)).await,
        };
        let watch = self.watch(&run, lease, shutdown, &cancel);
        // Every session the workflow makes is recorded here: what a stored session names
        // as a parent is stored from it (the agents' system sessions, forks, annotations).
        let journal = LineageJournal::new();
        let (cx, live) = self.flow_context(
            lease,
            loaded.session.id(),
            fresh_claim,
            &journal,
            &scope,
            &cancel,
        );
        let out = workflow.forward(session, &cx).await;
        scope.settle().await;
        watch.timer.abort();
        let live = close_live(live, &out, &cancel).await;
        watch.beat.abort();
        watch.grace.abort();
        if watch.fenced.load(Ordering::SeqCst) || live.fenced {
            return Ok(Outcome::Fenced);
        }
        let lineage = Lineage {
            journal: &journal,
            input: from,
            fresh: fresh_claim,
            live: &live,
        };
        self.conclude(lease, &run, out, &lineage, &scope, &watch)
            .await
    }

    /// Whether a claimed run may execute here: a run past its deadline is timed out, and one
    /// whose workflow is not registered, or changed since the run was submitted (unless
    /// changed definitions are accepted), fails for good; either is where the run ended.
    /// Otherwise the workflow's registered definition.
    async fn admit(
        &self,
        run: &Run,
        lease: &Lease,
    ) -> Result<ControlFlow<Outcome, WorkflowDef>, RuntimeError> {
        if run.overdue(self.rt.runs.clock().now_ms()) {
            self.release(lease, Transition::to(RunStatus::TimedOut))
                .await?;
            return Ok(ControlFlow::Break(Outcome::Moved(RunStatus::TimedOut)));
        }
        let def = match self.rt.registry.get(&run.workflow) {
            Some(d) => d.clone(),
            None => {
                let e = RuntimeError::UnknownWorkflow(run.workflow.clone());
                return self.fail_final(lease, &e).await.map(ControlFlow::Break);
            }
        };
        if def.definition_hash != run.definition_hash && !self.opts.accept_changed_definitions {
            let e = RuntimeError::DefinitionChanged {
                name: run.workflow.clone(),
                submitted: run.definition_hash.clone(),
                registered: def.definition_hash.clone(),
            };
            return self.fail_final(lease, &e).await.map(ControlFlow::Break);
        }
        Ok(ControlFlow::Continue(def))
    }

    /// The stamper of the sessions this execution of `run` makes. A retry after a failure
    /// writes a session of its own (the failed attempt's stays stored as far as it got); a
    /// resume after a crash mints the same ids again. The stamper's clock starts when this
    /// execution first ran (now, on a first execution; the journal's record of it in
    /// `scope` on a re-execution), a millisecond a reading.
    fn session_stamper(&self, run: &Run, scope: &RunScope) -> Stamper {
        let now = match &self.opts.session_clock {
            Some(clock) => clock.now_ms(),
            None => self.rt.runs.clock().now_ms(),
        };
        let started = scope.started_at(run.failures, now);
        Stamper::seeded_at(
            run.id.seed()
                ^ (run.segment as u64).wrapping_mul(0x9E37)
                ^ (run.failures as u64).wrapping_mul(0x85EB_CA6B_C2B2_AE35),
            rath_session::Timestamp::from_unix_micros(started.saturating_mul(1000)),
            SESSION_CLOCK_STEP_MICROS,
        )
    }

    /// Starts what watches a running attempt of `run` from outside, each stopping it through
    /// `cancel`: the heartbeat of `lease`, the grace after `shutdown`, the run's deadline.
    fn watch(
        &self,
        run: &Run,
        lease: &Lease,
        shutdown: &CancellationToken,
        cancel: &CancellationToken,
    ) -> Watch {
        let fenced = Arc::new(AtomicBool::new(false));
        let beat = self.heartbeat(lease.clone(), cancel.clone(), fenced.clone());
        let handed_back = Arc::new(AtomicBool::new(false));
        let grace = self.grace_watch(shutdown.clone(), cancel.clone(), handed_back.clone());
        let timed_out = Arc::new(AtomicBool::new(false));
        let now = self.rt.runs.clock().now_ms();
        let timer = deadline_watch(run, now, cancel.clone(), timed_out.clone());
        Watch {
            fenced,
            beat,
            handed_back,
            grace,
            timed_out,
            timer,
        }
    }

    /// The context the workflow of a claimed run runs in (`input`: the session the claim
    /// loaded; `fresh`: the run's first claim), with the claim's live writer when there is
    /// one (to close when the workflow returns).
    fn flow_context(
        &self,
        lease: &Lease,
        input: &rath_session::SessionId,
        fresh: bool,
        journal: &LineageJournal,
        scope: &RunScope,
        cancel: &CancellationToken,
    ) -> (FlowContext, Option<Live>) {
        let runs = &self.rt.runs;
        // Sessions are written as they grow on transactional stores (SQL); a directory of
        // files rewrites a session per write and a killed writer leaves a partial file, so
        // there the session is written when the attempt ends.
        let live = self.rt.sessions.capabilities().atomic_batch.then(|| {
            crate::live::start(
                self.rt.sessions.clone(),
                runs.clone(),
                lease.clone(),
                crate::live::Claimed {
                    input: input.clone(),
                    fresh,
                    journal: journal.clone(),
                },
                scope.barrier(),
                cancel.clone(),
            )
        });
        // Every model and tool call of the workflow goes through the scope's journal and
        // ledger: the workflow cannot make one that a re-execution would repeat.
        // What the run does as it happens goes to this process's watchers of it; its model
        // calls are streamed while someone watches.
        let feed = crate::feed::FeedObserver::new(self.rt.feed().publisher(&lease.run));
        let mut cx = FlowContext::new()
            .with_journal(journal.clone())
            .with_cancel(cancel.clone())
            .with_layer(scope.clone())
            .with_observer(feed)
            .with_text_deltas(true);
        if let Some((sink, _)) = &live {
            cx = cx.with_shared_sink(sink.clone());
        }
        (cx, live)
    }

    /// Where the attempt ends once the workflow returned `out` and its lease is still held:
    /// timed out when its deadline stopped it, stopped on a fatal call (`scope`), handed
    /// back when the shutdown grace ran out, else stored and finished (or waiting), or a
    /// failed attempt.
    async fn conclude(
        &self,
        lease: &Lease,
        run: &Run,
        out: Result<Session, FlowError>,
        lineage: &Lineage<'_>,
        scope: &RunScope,
        watch: &Watch,
    ) -> Result<Outcome, RuntimeError> {
        if watch.timed_out.load(Ordering::SeqCst)
            && let Err(e) = &out
        {
            return self.deadline_passed(lease, e, lineage).await;
        }
        if let Some(fatal) = scope.take_fatal() {
            return self.stop_on(lease, run, fatal).await;
        }
        if watch.handed_back.load(Ordering::SeqCst) {
            self.release(lease, Transition::to(RunStatus::Queued))
                .await?;
            return Ok(Outcome::Moved(RunStatus::Queued));
        }
        match out {
            Ok(out) => self.finished(lease, run, &out, lineage).await,
            Err(e) => self.failed_attempt(lease, run, &e, lineage).await,
        }
    }

    /// Ends an attempt its deadline stopped (the workflow failed with `e`): the session it
    /// reached is stored as timed out, and the run moves to `timed_out`.
    async fn deadline_passed(
        &self,
        lease: &Lease,
        e: &FlowError,
        lineage: &Lineage<'_>,
    ) -> Result<Outcome, RuntimeError> {
        // The loop saw its deadline as a cancellation; the session says what it was.
        let stored = match e.partial_session() {
            Some(s) => {
                self.persist_with_lineage(lease, &timed_out_at(s), Known::Ask, lineage)
                    .await
            }
            None => Ok(()),
        };
        let detail = match &stored {
            Ok(()) => "deadline passed while running".to_string(),
            Err(e) => format!("deadline passed while running; its session was not stored: {e}"),
        };
        if let Err(e) = stored
            && is_fenced(&e)
        {
            return Ok(Outcome::Fenced);
        }
        let to = Transition {
            detail: Some(&detail),
            ..Transition::to(RunStatus::TimedOut)
        };
        self.release(lease, to).await?;
        Ok(Outcome::Moved(RunStatus::TimedOut))
    }

    /// Ends an attempt whose workflow returned `out`: stores it (with what it descends from)
    /// and moves the run to `succeeded`, or `waiting` when calls in it wait for a decision.
    async fn finished(
        &self,
        lease: &Lease,
        run: &Run,
        out: &Session,
        lineage: &Lineage<'_>,
    ) -> Result<Outcome, RuntimeError> {
        let known = lineage.live.stored.get(out.id()).copied();
        let known = match known {
            Some(n) => Known::Len(n),
            None if lineage.fresh && out.id().as_str() != lineage.input => Known::New,
            None => Known::Ask,
        };
        let p = self.persist_with_lineage(lease, out, known, lineage).await;
        if let Err(e) = p {
            return self.store_failed(lease, run, e).await;
        }
        let id = out.id().to_string();
        let status = if out.pending().is_empty() {
            RunStatus::Succeeded
        } else {
            RunStatus::Waiting
        };
        let to = Transition {
            output: Some(&id),
            ..Transition::to(status)
        };
        self.release(lease, to).await?;
        Ok(Outcome::Moved(status))
    }

    /// Hands the run back to the store in `to`'s status and lets the lease go, in a
    /// `worker.release` span.
    async fn release(&self, lease: &Lease, to: Transition<'_>) -> Result<(), RuntimeError> {
        let span = tracing::info_span!(
            "worker.release",
            rath.worker.name = %self.opts.name,
            rath.run.id = %lease.run,
            rath.lease.token = lease.token,
            rath.run.status = to.status.as_str(),
            error.type = Empty,
            otel.status_code = Empty,
        );
        let done = self
            .rt
            .runs
            .finish(lease, to)
            .instrument(span.clone())
            .await;
        done.inspect_err(|e| record_error(&span, e))
    }

    async fn failed_attempt(
        &self,
        lease: &Lease,
        run: &Run,
        e: &FlowError,
        lineage: &Lineage<'_>,
    ) -> Result<Outcome, RuntimeError> {
        let text = match self.persist_failed(lease, Some(e), lineage).await {
            Ok(()) => e.to_string(),
            Err(stored) if is_fenced(&stored) => return Ok(Outcome::Fenced),
            Err(stored) => format!("{e}; the failed attempt's session was not stored: {stored}"),
        };
        self.retry_or_fail(lease, run, &text).await
    }

    /// A session-store failure on the way in (loading the run's session) or out (storing
    /// its result). Left unanswered, the error would end the attempt with the lease still
    /// held, and every later claim would meet it again: so a fence is a lost lease, an
    /// outage (the store did not answer) hands the run back for a later claim without
    /// spending an attempt, and anything else (a session that cannot be loaded or stored)
    /// is a failed attempt under the run's retry policy.
    async fn store_failed(
        &self,
        lease: &Lease,
        run: &Run,
        e: RuntimeError,
    ) -> Result<Outcome, RuntimeError> {
        if is_fenced(&e) {
            return Ok(Outcome::Fenced);
        }
        let text = format!("session store: {e}");
        tracing::warn!(run = %run.id, error = %e, "session store failed");
        if is_outage(&e) {
            let wait = run.options.retry.delay_after(1);
            let wait = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
            let to = Transition {
                detail: Some(&text),
                not_before_ms: Some(self.rt.runs.clock().now_ms().saturating_add(wait)),
                ..Transition::to(RunStatus::Queued)
            };
            self.release(lease, to).await?;
            return Ok(Outcome::Moved(RunStatus::Queued));
        }
        self.retry_or_fail(lease, run, &text).await
    }

    /// Ends a failed attempt: queued again after the policy's backoff while attempts are
    /// left, failed for good after the last.
    async fn retry_or_fail(
        &self,
        lease: &Lease,
        run: &Run,
        text: &str,
    ) -> Result<Outcome, RuntimeError> {
        let policy = run.options.retry;
        let failures = run.failures + 1;
        let retry = policy.retries_after(failures);
        let status = if retry {
            RunStatus::Queued
        } else {
            RunStatus::Failed
        };
        let wait = i64::try_from(policy.delay_after(failures).as_millis()).unwrap_or(i64::MAX);
        let to = Transition {
            detail: Some(text),
            failed: true,
            not_before_ms: retry.then(|| self.rt.runs.clock().now_ms().saturating_add(wait)),
            ..Transition::to(status)
        };
        self.release(lease, to).await?;
        Ok(Outcome::Moved(status))
    }

    async fn fail_final(&self, lease: &Lease, e: &RuntimeError) -> Result<Outcome, RuntimeError> {
        let text = e.to_string();
        let to = Transition {
            detail: Some(&text),
            failed: true,
            ..Transition::to(RunStatus::Failed)
        };
        self.release(lease, to).await?;
        Ok(Outcome::Moved(RunStatus::Failed))
    }

    async fn stop_on(
        &self,
        lease: &Lease,
        run: &Run,
        fatal: RuntimeError,
    ) -> Result<Outcome, RuntimeError> {
        match fatal {
            RuntimeError::Fenced { .. } => Ok(Outcome::Fenced),
            RuntimeError::Ambiguous { tool, call_id, .. } => {
                let detail = serde_json::json!({"ambiguous": {"tool": tool, "call_id": call_id}})
                    .to_string();
                let to = Transition {
                    detail: Some(&detail),
                    ..Transition::to(RunStatus::NeedsReview)
                };
                self.release(lease, to).await?;
                tracing::warn!(run = %run.id, %call_id, "ambiguous call: needs review");
                Ok(Outcome::Moved(RunStatus::NeedsReview))
            }
            other => self.fail_final(lease, &other).await,
        }
    }

    /// Stores the session a failed attempt reached, with its `run_failure` chunk: a retry
    /// writes a session of its own, so this one is final.
    async fn persist_failed(
        &self,
        lease: &Lease,
        e: Option<&FlowError>,
        lineage: &Lineage<'_>,
    ) -> Result<(), RuntimeError> {
        match e.and_then(FlowError::partial_session) {
            Some(s) => {
                self.persist_with_lineage(lease, s, Known::Ask, lineage)
                    .await
            }
            None => Ok(()),
        }
    }

    /// Stores `out` ([`Worker::persist`]) after the sessions of the claim's journal it
    /// descends from that the store may lack (the agents' system sessions, forks, route
    /// annotations, earlier steps), parents first: every parent a stored session names is
    /// stored. The session the claim loaded, and what it descends from, were stored before.
    async fn persist_with_lineage(
        &self,
        lease: &Lease,
        out: &Session,
        known: Known,
        lineage: &Lineage<'_>,
    ) -> Result<(), RuntimeError> {
        let mut all: Vec<(Session, Known)> = Vec::new();
        for a in ancestors(lineage.journal, out, lineage.input) {
            let written = lineage.live.stored.get(a.id()).copied();
            let known = match written {
                Some(n) if n >= a.len() => continue,
                Some(n) => Known::Len(n),
                None if lineage.fresh => Known::New,
                None => Known::Ask,
            };
            all.push((a, known));
        }
        all.push((out.clone(), known));
        // What the claim knows of every one of them: one write of the lot (one transaction
        // where the store has them), as a run with nothing but its output wrote that.
        if all.len() > 1 && !all.iter().any(|(_, k)| matches!(k, Known::Ask)) {
            let copies: Vec<(Session, Known)> = all
                .iter()
                .map(|(s, k)| (crate::live::for_store(s, &lease.run), *k))
                .collect();
            let writes = copies
                .iter()
                .map(|(s, k)| match *k {
                    Known::Len(n) if n < s.len() => Write::Append {
                        session: s,
                        expected_len: n,
                    },
                    _ => Write::Save(s),
                })
                .collect();
            match crate::live::write_all_held(&*self.rt.sessions, &self.rt.runs, lease, writes)
                .await
            {
                // One of them stored after all (or differently): each asked on its own.
                Err(RuntimeError::Persist(
                    PersistError::Exists { .. } | PersistError::Conflict { .. },
                )) => {}
                r => return r,
            }
            for (_, k) in &mut all {
                *k = Known::Ask;
            }
        }
        for (s, known) in &all {
            self.persist(lease, s, *known).await?;
        }
        Ok(())
    }

    /// Stores the session (append when a shorter version is stored), fenced where the
    /// session store checks fences, else after a lease check. `known`: what this claim
    /// knows of the session's stored chunks (its live writer's count, or that it minted
    /// the session itself); the store is asked otherwise.
    async fn persist(
        &self,
        lease: &Lease,
        out: &Session,
        mut known: Known,
    ) -> Result<(), RuntimeError> {
        let sessions = &self.rt.sessions;
        let out = &crate::live::for_store(out, &lease.run);
        loop {
            let stored = match known {
                Known::Len(n) => Some(n),
                Known::New => None,
                Known::Ask => sessions.stored_len(out.id()).await?,
            };
            let write = match stored {
                Some(n) if n < out.len() => Write::Append {
                    session: out,
                    expected_len: n,
                },
                _ => Write::Save(out),
            };
            match crate::live::write_held(&**sessions, &self.rt.runs, lease, write).await {
                // Assumed new and found stored after all (a workflow that returns a session
                // it was handed): written again after asking.
                Err(RuntimeError::Persist(
                    PersistError::Exists { .. } | PersistError::Conflict { .. },
                )) if matches!(known, Known::New) => known = Known::Ask,
                r => return r,
            }
        }
    }

    /// Times out the overdue runs no live worker is on (see [`crate::RunStore::expire_overdue`]);
    /// an idle worker loop does it between claims, at most once a second.
    pub async fn sweep(&self) {
        match self.rt.runs.expire_overdue().await {
            Ok(moved) if !moved.is_empty() => {
                tracing::info!(worker = %self.opts.name, runs = moved.len(), "timed out overdue runs");
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "deadline sweep"),
        }
    }

    fn heartbeat(
        &self,
        lease: Lease,
        cancel: CancellationToken,
        fenced: Arc<AtomicBool>,
    ) -> tokio::task::JoinHandle<()> {
        let runs = self.rt.runs.clone();
        let every = self.opts.lease / 3;
        let length = self.opts.lease;
        // Each beat is a span under the run's `worker.execute` span (the current one).
        let execute = tracing::Span::current();
        let worker = self.opts.name.clone();
        tokio::spawn(
            async move {
                loop {
                    tokio::time::sleep(every).await;
                    let beat = tracing::debug_span!(
                        parent: &execute,
                        "worker.heartbeat",
                        rath.worker.name = %worker,
                        rath.run.id = %lease.run,
                        rath.lease.token = lease.token,
                        rath.lease.ms = ms(length),
                        rath.heartbeat.outcome = Empty,
                        error.type = Empty,
                        otel.status_code = Empty,
                    );
                    let renewed = runs
                        .heartbeat(&lease, length)
                        .instrument(beat.clone())
                        .await;
                    match renewed {
                        Ok(_) => {
                            beat.record("rath.heartbeat.outcome", "renewed");
                        }
                        Err(RuntimeError::Fenced { .. }) => {
                            beat.record("rath.heartbeat.outcome", "fenced");
                            tracing::warn!(run = %lease.run, "lease lost: stopping the run");
                            fenced.store(true, Ordering::SeqCst);
                            cancel.cancel();
                            return;
                        }
                        Err(e) => {
                            beat.record("rath.heartbeat.outcome", "error");
                            record_error(&beat, &e);
                            tracing::warn!(run = %lease.run, error = %e, "heartbeat")
                        }
                    }
                }
            }
            .with_current_subscriber(),
        )
    }

    fn grace_watch(
        &self,
        shutdown: CancellationToken,
        cancel: CancellationToken,
        handed: Arc<AtomicBool>,
    ) -> tokio::task::JoinHandle<()> {
        let grace = self.opts.grace;
        let hurry = self.hurry.clone();
        tokio::spawn(async move {
            shutdown.cancelled().await;
            let start = Instant::now();
            tokio::select! {
                () = tokio::time::sleep(grace.saturating_sub(start.elapsed())) => {}
                () = hurry.cancelled() => {}
            }
            handed.store(true, Ordering::SeqCst);
            cancel.cancel();
        })
    }
}

/// What the claim knows of its sessions' lineage, for storing a session's ancestors with
/// it ([`Worker::persist_with_lineage`]).
struct Lineage<'a> {
    /// Every session the workflow made (the latest version of each).
    journal: &'a LineageJournal,
    /// The session the claim loaded (stored, as is everything it descends from).
    input: &'a str,
    /// The run's first claim: the sessions it minted are stored by nobody yet.
    fresh: bool,
    /// What the claim's live writer stored.
    live: &'a crate::live::LiveReport,
}

/// A claim's live session writer: the sink the workflow's sessions go to and the task that
/// writes them, which reports what it stored.
type Live = (
    Arc<crate::live::LiveSink>,
    tokio::task::JoinHandle<crate::live::LiveReport>,
);

/// What watches a running attempt from outside, each task with the flag it raises when it
/// stops the attempt.
struct Watch {
    /// Raised when a heartbeat found the lease lost.
    fenced: Arc<AtomicBool>,
    /// The lease's heartbeat.
    beat: tokio::task::JoinHandle<()>,
    /// Raised when the shutdown grace ran out: the run is handed back.
    handed_back: Arc<AtomicBool>,
    /// The shutdown grace.
    grace: tokio::task::JoinHandle<()>,
    /// Raised when the run's deadline passed.
    timed_out: Arc<AtomicBool>,
    /// The run's deadline.
    timer: tokio::task::JoinHandle<()>,
}

/// Closes the claim's live writer, when it has one, once the workflow returned `out`, and
/// waits for its report (an empty one without a writer).
async fn close_live(
    live: Option<Live>,
    out: &Result<Session, FlowError>,
    cancel: &CancellationToken,
) -> crate::live::LiveReport {
    match live {
        Some((sink, task)) => {
            // A run that ended well stores its output session next (`persist`): the
            // writer leaves that session's last version to it (one write, not two).
            let leave = match out {
                Ok(o) if !cancel.is_cancelled() => Some(o.id().clone()),
                _ => None,
            };
            sink.close(leave);
            task.await.unwrap_or_default()
        }
        None => crate::live::LiveReport::default(),
    }
}

/// The sessions of `journal` that `top` descends from, parents first (in the order the
/// journal first saw them), up to `input` (excluded, as is what it descends from).
pub(crate) fn ancestors(journal: &LineageJournal, top: &Session, input: &str) -> Vec<Session> {
    let mut wanted: std::collections::HashSet<rath_session::SessionId> = Default::default();
    let mut queue: Vec<rath_session::SessionId> = top.lineage().parents.to_vec();
    while let Some(id) = queue.pop() {
        if id.as_str() == input || id == *top.id() || wanted.contains(&id) {
            continue;
        }
        let Some(s) = journal.get(&id) else {
            continue; // not made by this claim: stored before it
        };
        queue.extend(s.lineage().parents.iter().cloned());
        wanted.insert(id);
    }
    journal
        .visit_order()
        .into_iter()
        .filter(|id| wanted.contains(id))
        .filter_map(|id| journal.get(&id))
        .collect()
}

/// `s` as the session of a run stopped by its deadline: a last `run_failure` chunk of kind
/// `cancelled` (how the loop saw the stop) becomes one of kind `timed_out`, so the stored
/// session reads `failed` (timed out), not `cancelled`.
fn timed_out_at(s: &Session) -> Session {
    let Some(f) = s.failure().filter(|f| f.is_cancellation()) else {
        return s.clone();
    };
    let record = rath_session::RunFailure {
        kind: "timed_out".to_owned(),
        message: "the run's deadline passed while it ran".to_owned(),
        ..f.clone()
    };
    let mut chunks = s.chunks().range(..s.len() - 1);
    chunks.push_back(rath_session::Chunk::new(
        rath_session::ChunkBody::RunFailure(record),
    ));
    s.with_chunks(chunks)
}

/// Stops the run (through `cancel`) when its deadline passes while it runs (`now`: the run
/// store's clock, in ms since the Unix epoch).
fn deadline_watch(
    run: &Run,
    now: i64,
    cancel: CancellationToken,
    timed_out: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    let left = run
        .deadline_ms
        .map(|d| Duration::from_millis(u64::try_from(d.saturating_sub(now)).unwrap_or(0)));
    tokio::spawn(async move {
        let Some(left) = left else {
            return;
        };
        tokio::time::sleep(left).await;
        timed_out.store(true, Ordering::SeqCst);
        cancel.cancel();
    })
}

/// The claim loops of one worker while its store has nothing to claim: one loop polls (a
/// claim every [`WorkerOptions::poll`], and the deadline sweep) and the others wait until a
/// claim finds a run, when every loop claims again. An idle worker asks its store once a
/// poll, not once a poll for each of its loops.
#[derive(Debug, Default)]
struct Idle {
    state: std::sync::Mutex<IdleState>,
    /// Told when a claim found a run after the store was found empty.
    found: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct IdleState {
    /// The last claim found nothing.
    empty: bool,
    /// A loop has taken the poll.
    polling: bool,
    /// When the worker last swept for overdue runs.
    swept: Option<std::time::Instant>,
}

/// How often an idle worker sweeps for runs past their deadline at most (see
/// [`Worker::sweep`]): a sweep is a transaction of its own, and an idle fleet polling every
/// 50 ms would otherwise run one per worker per poll.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// What a claim loop does next.
#[derive(Clone, Copy, Debug)]
enum Turn {
    /// Claim now (the last claim found a run).
    Claim,
    /// Claim after a poll interval, for the idle worker.
    Poll,
    /// Wait until a claim finds a run.
    Wait,
}

impl Idle {
    fn lock(&self) -> std::sync::MutexGuard<'_, IdleState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn turn(&self) -> Turn {
        let mut s = self.lock();
        if !s.empty {
            Turn::Claim
        } else if !s.polling {
            s.polling = true;
            Turn::Poll
        } else {
            Turn::Wait
        }
    }

    /// True when the idle worker's sweep is due (none yet, or [`SWEEP_EVERY`] since the
    /// last); the caller sweeps.
    fn sweep_due(&self) -> bool {
        let mut s = self.lock();
        let now = std::time::Instant::now();
        if s.swept.is_some_and(|t| now.duration_since(t) < SWEEP_EVERY) {
            return false;
        }
        s.swept = Some(now);
        true
    }

    /// A claim came back (`found`: with a run); `poll`: it was the idle worker's poll.
    fn claimed(&self, found: bool, poll: bool) {
        let mut s = self.lock();
        if poll {
            s.polling = false;
        }
        if !found {
            s.empty = true;
        } else if s.empty {
            s.empty = false;
            self.found.notify_waiters();
        }
    }
}
