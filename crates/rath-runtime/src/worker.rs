//! Workers: claim a run, heartbeat its lease, run its workflow under the journal and
//! ledger, persist its session, and record where it ended.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rath_flow::{CancellationToken, FlowContext, FlowError};
use rath_persist::{Fence, Write, WriteBatch};
use rath_session::{Session, Stamper};

use crate::journal::RunScope;
use crate::model::{Lease, Run, RunId, RunStatus};
use crate::store::{Transition, now_ms};
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
    /// Sleep between empty claims.
    pub poll: Duration,
    /// Run a workflow whose definition changed since the run was submitted.
    pub accept_changed_definitions: bool,
    /// On shutdown, how long in-flight runs may go on before they are handed back.
    pub grace: Duration,
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
    /// Accepts runs whose workflow definition changed.
    pub fn accept_changed_definitions(mut self, yes: bool) -> Self {
        self.accept_changed_definitions = yes;
        self
    }
}

/// Where one claimed run ended on this worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The run moved to this status.
    Moved(RunStatus),
    /// The lease passed to someone else; nothing more was written.
    Fenced,
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
        self.claim_and_run(&never).await
    }

    async fn claim_and_run(
        &self,
        shutdown: &CancellationToken,
    ) -> Result<Option<(RunId, Outcome)>, RuntimeError> {
        let Some((run, lease)) = self.rt.runs.claim(&self.opts.name, self.opts.lease).await? else {
            return Ok(None);
        };
        tracing::info!(run = %run.id, worker = %self.opts.name, token = lease.token, "claimed");
        let id = run.id.clone();
        let outcome = match self.execute(run, &lease, shutdown).await {
            Ok(o) => o,
            Err(RuntimeError::Fenced { .. }) => Outcome::Fenced,
            Err(e) => return Err(e),
        };
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
        for _ in 0..self.opts.concurrency {
            let me = self.clone();
            let shutdown = shutdown.clone();
            set.spawn(async move {
                while !shutdown.is_cancelled() {
                    match me.claim_and_run(&shutdown).await {
                        Ok(Some(_)) => {}
                        Ok(None) => {
                            tokio::select! {
                                _ = tokio::time::sleep(me.opts.poll) => {}
                                _ = shutdown.cancelled() => {}
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "worker loop");
                            tokio::time::sleep(me.opts.poll).await;
                        }
                    }
                }
            });
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
        if let Some(d) = run.options.deadline
            && now_ms() > run.submitted_ms + i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
        {
            runs.finish(lease, Transition::to(RunStatus::TimedOut))
                .await?;
            return Ok(Outcome::Moved(RunStatus::TimedOut));
        }
        let def = match self.rt.registry.get(&run.workflow) {
            Some(d) => d.clone(),
            None => {
                let e = RuntimeError::UnknownWorkflow(run.workflow.clone());
                return self.fail_final(lease, &e).await;
            }
        };
        if def.definition_hash != run.definition_hash && !self.opts.accept_changed_definitions {
            let e = RuntimeError::DefinitionChanged {
                name: run.workflow.clone(),
                submitted: run.definition_hash.clone(),
                registered: def.definition_hash.clone(),
            };
            return self.fail_final(lease, &e).await;
        }
        let from = run.resume_session.as_deref().unwrap_or(&run.input_session);
        let loaded = self
            .rt
            .sessions
            .load(&rath_session::SessionId::new(from))
            .await?;
        let stamper = Stamper::seeded(run.id.seed() ^ (run.segment as u64).wrapping_mul(0x9E37));
        let session = loaded.session.with_stamper(stamper);

        let cancel = CancellationToken::new();
        let scope =
            RunScope::load(runs.clone(), lease.clone(), run.segment, cancel.clone()).await?;
        let workflow = match (def.constructor)(&scope) {
            Ok(w) => w,
            Err(e) => return self.fail_final(lease, &RuntimeError::Flow(e)).await,
        };
        let fenced = Arc::new(AtomicBool::new(false));
        let beat = self.heartbeat(lease.clone(), cancel.clone(), fenced.clone());
        let handed_back = Arc::new(AtomicBool::new(false));
        let grace = self.grace_watch(shutdown.clone(), cancel.clone(), handed_back.clone());
        let cx = FlowContext::new().with_cancel(cancel.clone());
        let out = workflow.forward(session, &cx).await;
        scope.settle().await;
        beat.abort();
        grace.abort();
        if fenced.load(Ordering::SeqCst) {
            return Ok(Outcome::Fenced);
        }
        if let Some(fatal) = scope.take_fatal() {
            return self.stop_on(lease, &run, fatal).await;
        }
        if handed_back.load(Ordering::SeqCst) {
            runs.finish(lease, Transition::to(RunStatus::Queued))
                .await?;
            return Ok(Outcome::Moved(RunStatus::Queued));
        }
        match out {
            Ok(out) => {
                self.persist(lease, &out).await?;
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
                runs.finish(lease, to).await?;
                Ok(Outcome::Moved(status))
            }
            Err(e) => self.failed_attempt(lease, &run, &e).await,
        }
    }

    async fn failed_attempt(
        &self,
        lease: &Lease,
        run: &Run,
        e: &FlowError,
    ) -> Result<Outcome, RuntimeError> {
        let text = e.to_string();
        let retry = run.failures + 1 < i64::from(run.options.retry.max_attempts);
        let status = if retry {
            RunStatus::Queued
        } else {
            RunStatus::Failed
        };
        let to = Transition {
            detail: Some(&text),
            failed: true,
            ..Transition::to(status)
        };
        self.rt.runs.finish(lease, to).await?;
        Ok(Outcome::Moved(status))
    }

    async fn fail_final(&self, lease: &Lease, e: &RuntimeError) -> Result<Outcome, RuntimeError> {
        let text = e.to_string();
        let to = Transition {
            detail: Some(&text),
            failed: true,
            ..Transition::to(RunStatus::Failed)
        };
        self.rt.runs.finish(lease, to).await?;
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
                self.rt.runs.finish(lease, to).await?;
                tracing::warn!(run = %run.id, %call_id, "ambiguous call: needs review");
                Ok(Outcome::Moved(RunStatus::NeedsReview))
            }
            other => self.fail_final(lease, &other).await,
        }
    }

    /// Stores the session (append when a shorter version is stored), fenced where the
    /// session store checks fences, else after a lease check.
    async fn persist(&self, lease: &Lease, out: &Session) -> Result<(), RuntimeError> {
        let sessions = &self.rt.sessions;
        let write = match sessions.stored_len(out.id()).await? {
            Some(n) if n < out.len() => Write::Append {
                session: out,
                expected_len: n,
            },
            _ => Write::Save(out),
        };
        let mut batch = WriteBatch::new().with(write);
        if sessions.capabilities().fencing {
            let token = u64::try_from(lease.token).unwrap_or(0);
            batch = batch.fenced(Fence::new(lease.run.as_str(), token));
        } else {
            self.rt.runs.check(lease).await?;
        }
        sessions.write(batch).await?;
        Ok(())
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
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match runs.heartbeat(&lease, length).await {
                    Ok(_) => {}
                    Err(RuntimeError::Fenced { .. }) => {
                        tracing::warn!(run = %lease.run, "lease lost: stopping the run");
                        fenced.store(true, Ordering::SeqCst);
                        cancel.cancel();
                        return;
                    }
                    Err(e) => tracing::warn!(run = %lease.run, error = %e, "heartbeat"),
                }
            }
        })
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
