//! Runtime internals: retry with backoff, deadlines (queued, claimed, running), the run's
//! session written as it goes (and not by a fenced worker), and the pushed event stream
//! under concurrent writers on SQLite and PostgreSQL.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rath_flow::{Agent, SharedWorkflow, ToolContext, ToolError, typed_tool};
use rath_persist::{PersistError, SessionStore};
use rath_provider::{
    Provider, ProviderError, ProviderManifest, ProviderRequest, ProviderResponse, ScriptedProvider,
    ScriptedResponse,
};
use rath_runtime::{
    MAX_LEASE, Outcome, RetryPolicy, RunClock, RunEvent, RunId, RunOptions, RunStatus, RunStore,
    Runtime, RuntimeError, Worker, WorkerOptions, WorkflowRegistry, now_ms,
};
use rath_session::{ChunkKind, Role, Session, SessionId, Stamper};
use serde_json::json;
use tokio::sync::{Notify, Semaphore};

/// What the test tells the model to do, by the number of its call (1, 2, ... over every
/// claim of every run).
#[derive(Debug)]
struct Control {
    calls: AtomicU32,
    /// Calls that fail (a provider error the workflow does not survive).
    fail: Mutex<Vec<u32>>,
    /// The call that hangs (until the run is cancelled).
    hang: AtomicU32,
    /// The call that waits for `gate` after telling `reached`.
    held: AtomicU32,
    reached: Notify,
    gate: Semaphore,
}

impl Default for Control {
    fn default() -> Self {
        Self {
            calls: AtomicU32::new(0),
            fail: Mutex::new(Vec::new()),
            hang: AtomicU32::new(0),
            held: AtomicU32::new(0),
            reached: Notify::new(),
            gate: Semaphore::new(0),
        }
    }
}

#[derive(Debug)]
struct ControlModel {
    ctl: Arc<Control>,
}

#[async_trait]
impl Provider for ControlModel {
    fn name(&self) -> &str {
        "control"
    }
    async fn complete(&self, req: &ProviderRequest) -> Result<ProviderResponse, ProviderError> {
        let n = self.ctl.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if self.ctl.fail.lock().unwrap().contains(&n) {
            return Err(ProviderError::Connection(format!("call {n} refused")));
        }
        if self.ctl.hang.load(Ordering::SeqCst) == n {
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        if self.ctl.held.load(Ordering::SeqCst) == n {
            self.ctl.reached.notify_one();
            self.ctl.gate.acquire().await.unwrap().forget();
        }
        let rounds = req.messages.iter().filter(|m| m.role == Role::Tool).count();
        let reply = if rounds < 2 {
            ScriptedResponse::tool_calls(vec![(format!("call_{rounds}"), "noop", json!({}))])
        } else {
            ScriptedResponse::text("done")
        };
        ScriptedProvider::new(vec![reply.usage(7, 2)])
            .complete(req)
            .await
    }
    fn manifest(&self) -> ProviderManifest {
        ProviderManifest::new("control")
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

fn registry(ctl: Arc<Control>) -> WorkflowRegistry {
    WorkflowRegistry::new().register("flow", "flow v1: agent(noop x2)", move || {
        let noop = typed_tool(
            "noop",
            "Do nothing.",
            |_cx: ToolContext, _a: NoArgs| async { Ok::<_, ToolError>(json!({})) },
        )
        .idempotent(true);
        let agent = Agent::new("a", "Work.", ControlModel { ctl: ctl.clone() }).with_tool(noop)?;
        Ok(Arc::new(agent) as SharedWorkflow)
    })
}

struct Env {
    _dir: tempfile::TempDir,
    rt: Runtime,
    ctl: Arc<Control>,
    sessions: Arc<dyn SessionStore>,
    /// The run store's clock: the system clock, or (from [`env_manual`]) a manual one the
    /// test moves, so backoffs and deadlines pass when the test says, not with the machine.
    clock: RunClock,
    /// When set, the time (ms) its workers' runs start at (`WorkerOptions::session_clock`):
    /// the same sessions, times and ids in two environments.
    session_ms: Option<i64>,
}

/// An environment whose run store reads a manual clock, started at the system time.
async fn env_manual() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let sessions: Arc<dyn SessionStore> = Arc::new(
        rath_store_sql::SqliteStore::open(dir.path().join("sessions.db"))
            .await
            .unwrap(),
    );
    env_with(dir, sessions, RunClock::manual(now_ms())).await
}

async fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    // A SQL session store: the worker writes the run's sessions as they grow there.
    let sessions: Arc<dyn SessionStore> = Arc::new(
        rath_store_sql::SqliteStore::open(dir.path().join("sessions.db"))
            .await
            .unwrap(),
    );
    env_on(dir, sessions).await
}

/// An environment whose sessions go to `sessions` (its runs to a SQLite file in `dir`).
async fn env_on(dir: tempfile::TempDir, sessions: Arc<dyn SessionStore>) -> Env {
    env_with(dir, sessions, RunClock::system()).await
}

async fn env_with(dir: tempfile::TempDir, sessions: Arc<dyn SessionStore>, clock: RunClock) -> Env {
    let ctl = Arc::new(Control::default());
    let url = format!("sqlite:{}", dir.path().join("runs.db").display());
    let runs = RunStore::connect_with_clock(&url, clock.clone())
        .await
        .unwrap();
    let rt = Runtime::new(runs, sessions.clone(), registry(ctl.clone()));
    Env {
        _dir: dir,
        rt,
        ctl,
        sessions,
        clock,
        session_ms: None,
    }
}

impl Env {
    async fn submit(&self, seed: u64, options: RunOptions) -> RunId {
        let input = Session::user_with(format!("task {seed}"), Stamper::seeded(seed));
        self.rt
            .submit(&Stamper::seeded(seed + 1000), "flow", &input, options)
            .await
            .unwrap()
    }

    fn worker(&self) -> Worker {
        let mut opts = WorkerOptions::named("w1");
        if let Some(ms) = self.session_ms {
            opts = opts.session_clock(RunClock::manual(ms));
        }
        Worker::new(self.rt.clone(), opts)
    }

    /// Every stored session but the inputs.
    async fn outputs(&self) -> Vec<Session> {
        let mut out = Vec::new();
        for s in self.sessions.list().await.unwrap() {
            let loaded = self.sessions.load(&s.id).await.unwrap().session;
            if loaded.len() > 1 {
                out.push(loaded);
            }
        }
        out
    }
}

fn last_kind(s: &Session) -> ChunkKind {
    s.chunks().last().unwrap().kind()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_run_is_retried_after_its_backoff() {
    let env = env_manual().await;
    *env.ctl.fail.lock().unwrap() = vec![1, 2];
    let policy =
        RetryPolicy::attempts(3).backoff(Duration::from_millis(150), 2, Duration::from_secs(10));
    let id = env
        .submit(1, RunOptions::default().retry_policy(policy))
        .await;
    let w = env.worker();

    // The run store's clock moves only when this test moves it: "not yet" and "now" are
    // exact, whatever the machine's load.
    let before = env.clock.now_ms();
    assert_eq!(
        w.run_once().await.unwrap().unwrap().1,
        Outcome::Moved(RunStatus::Queued)
    );
    let run = env.rt.runs().get(&id).await.unwrap();
    assert_eq!((run.failures, run.attempts), (1, 1));
    assert!(run.detail.unwrap().contains("call 1 refused"));
    assert_eq!(run.not_before_ms, before + 150, "first backoff is 150 ms");
    // Not claimable before its backoff passed, even a millisecond before.
    env.clock.advance(Duration::from_millis(149));
    assert!(w.run_once().await.unwrap().is_none());
    env.clock.advance(Duration::from_millis(1));

    let second = env.clock.now_ms();
    assert_eq!(
        w.run_once().await.unwrap().unwrap().1,
        Outcome::Moved(RunStatus::Queued)
    );
    let run = env.rt.runs().get(&id).await.unwrap();
    assert_eq!((run.failures, run.attempts), (2, 2));
    assert_eq!(
        run.not_before_ms,
        second + 300,
        "the second backoff doubles"
    );
    env.clock.advance(Duration::from_millis(299));
    assert!(w.run_once().await.unwrap().is_none());
    env.clock.advance(Duration::from_millis(1));

    assert_eq!(
        w.run_once().await.unwrap().unwrap().1,
        Outcome::Moved(RunStatus::Succeeded)
    );
    let run = env.rt.runs().get(&id).await.unwrap();
    assert_eq!(
        (run.failures, run.attempts, run.status),
        (2, 3, RunStatus::Succeeded)
    );
    let out = env.rt.output(&id).await.unwrap().unwrap();
    assert_eq!(rath_flow::final_text(&out), Some("done"));
    // Each failed attempt left its own session, ending in its failure; the output is a third.
    let sessions = env.outputs().await;
    let failed: Vec<_> = sessions
        .iter()
        .filter(|s| last_kind(s) == ChunkKind::RunFailure)
        .collect();
    assert_eq!(failed.len(), 2, "{sessions:?}");
    assert!(failed.iter().all(|s| s.id() != out.id()));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_whose_retries_are_spent_fails() {
    let env = env().await;
    *env.ctl.fail.lock().unwrap() = vec![1, 2];
    let id = env.submit(2, RunOptions::default().retry(2)).await;
    let w = env.worker();
    assert_eq!(
        w.run_once().await.unwrap().unwrap().1,
        Outcome::Moved(RunStatus::Queued)
    );
    assert_eq!(
        w.run_once().await.unwrap().unwrap().1,
        Outcome::Moved(RunStatus::Failed)
    );
    let run = env.rt.runs().get(&id).await.unwrap();
    assert_eq!(
        (run.status, run.failures, run.attempts),
        (RunStatus::Failed, 2, 2)
    );
    assert!(run.detail.unwrap().contains("call 2 refused"));
    assert!(w.run_once().await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_store_failure_ends_the_attempt_instead_of_holding_the_lease() {
    let env = env_manual().await;
    let id = env.submit(3, RunOptions::default().retry(2)).await;
    let input = env.rt.runs().get(&id).await.unwrap().input_session;
    // The run's input is gone before a worker claims it: loading it fails for good.
    assert!(env.sessions.delete(&SessionId::new(&input)).await.unwrap());
    let w = env.worker();
    // Each attempt ends with the lease let go (before, the error left the run `running`
    // under a lease that every later claim met again once it expired).
    assert_eq!(
        w.run_once().await.unwrap().unwrap().1,
        Outcome::Moved(RunStatus::Queued)
    );
    let run = env.rt.runs().get(&id).await.unwrap();
    assert_eq!((run.status, run.failures), (RunStatus::Queued, 1));
    env.clock.set(run.not_before_ms);
    assert_eq!(
        w.run_once().await.unwrap().unwrap().1,
        Outcome::Moved(RunStatus::Failed)
    );
    let run = env.rt.runs().get(&id).await.unwrap();
    assert_eq!((run.status, run.failures), (RunStatus::Failed, 2));
    let detail = run.detail.unwrap();
    assert!(detail.starts_with("session store:"), "{detail}");
    assert!(
        detail.contains(&input),
        "the detail names the session: {detail}"
    );
    assert_eq!(
        env.ctl.calls.load(Ordering::SeqCst),
        0,
        "no model call was made"
    );
    assert!(w.run_once().await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_queued_run_past_its_deadline_times_out() {
    let env = env_manual().await;
    let swept = env
        .submit(3, RunOptions::default().deadline(Duration::from_millis(80)))
        .await;
    let claimed = env
        .submit(4, RunOptions::default().deadline(Duration::from_millis(80)))
        .await;
    let in_time = env
        .submit(5, RunOptions::default().deadline(Duration::from_secs(600)))
        .await;
    let mut events = env.rt.runs().subscribe(&swept, 0).await.unwrap();
    assert_eq!(
        events.next().await.unwrap().status(),
        Some(RunStatus::Queued)
    );
    env.clock.advance(Duration::from_millis(81));
    let token = env.rt.runs().lease(&swept).await.unwrap().token;
    // An idle worker's sweep times out the overdue runs nobody is on, oldest first.
    assert_eq!(
        env.rt.runs().expire_overdue().await.unwrap(),
        vec![swept.clone(), claimed.clone()]
    );
    // The event is already written; the wait of minutes only guards against a hang.
    let ev = events
        .next_within(Duration::from_secs(120))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ev.status(), Some(RunStatus::TimedOut));
    assert_eq!(env.rt.runs().lease(&swept).await.unwrap().token, token + 1);
    assert_eq!(
        env.rt.runs().get(&claimed).await.unwrap().status,
        RunStatus::TimedOut
    );
    // A run claimed after its deadline (no sweep came first) times out at the claim.
    let late = env
        .submit(6, RunOptions::default().deadline(Duration::from_millis(1)))
        .await;
    env.clock.advance(Duration::from_millis(2));
    let w = env.worker();
    assert_eq!(
        w.run_once().await.unwrap().unwrap(),
        (in_time.clone(), Outcome::Moved(RunStatus::Succeeded))
    );
    assert_eq!(
        w.run_once().await.unwrap().unwrap(),
        (late.clone(), Outcome::Moved(RunStatus::TimedOut))
    );
    assert!(env.rt.runs().expire_overdue().await.unwrap().is_empty());
    assert_eq!(
        env.rt.runs().get(&swept).await.unwrap().status,
        RunStatus::TimedOut
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_running_run_past_its_deadline_times_out_with_its_session_kept() {
    let env = env().await;
    env.ctl.hang.store(2, Ordering::SeqCst);
    let id = env
        .submit(
            7,
            RunOptions::default().deadline(Duration::from_millis(400)),
        )
        .await;
    // The model hangs for good: only the run's deadline ends this call. The guard of
    // minutes is against a hang (a deadline not enforced), not a measurement.
    let got = tokio::time::timeout(Duration::from_secs(120), env.worker().run_once())
        .await
        .expect("the deadline ended the run")
        .unwrap()
        .unwrap();
    assert_eq!(got, (id.clone(), Outcome::Moved(RunStatus::TimedOut)));
    let run = env.rt.runs().get(&id).await.unwrap();
    assert_eq!(run.status, RunStatus::TimedOut);
    // The session as far as it got: the first round's call and result are stored.
    let sessions = env.outputs().await;
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let kinds: Vec<ChunkKind> = sessions[0].chunks().iter().map(|c| c.kind()).collect();
    assert!(kinds.contains(&ChunkKind::ToolResult), "{kinds:?}");
    // It ends in its failure: a timeout (the loop saw its deadline as a cancellation).
    let failure = sessions[0].failure().expect("a failure record");
    assert_eq!(failure.kind, "timed_out", "{failure:?}");
    let events = env.rt.runs().events(&id, 0).await.unwrap();
    assert!(events.iter().any(|e| e.kind == "session"), "{events:?}");
    assert_eq!(events.last().unwrap().status(), Some(RunStatus::TimedOut));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_session_is_written_as_it_goes_and_never_by_a_fenced_worker() {
    let env = env().await;
    let (id, task, session) = held_at_second_call(&env, 8).await;
    // A guard against a hang (the session never written), not a measurement.
    let deadline = Instant::now() + Duration::from_secs(120);
    let stored = loop {
        let s = env.sessions.load(&session).await.unwrap().session;
        if s.chunks().iter().any(|c| c.kind() == ChunkKind::ToolResult) || Instant::now() > deadline
        {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(
        stored
            .chunks()
            .iter()
            .any(|c| c.kind() == ChunkKind::ToolResult)
    );
    let len = stored.len();
    // An operator cancels: the worker is fenced; released, it finds it cannot write.
    env.rt.runs().cancel(&id).await.unwrap();
    env.ctl.gate.add_permits(1);
    let (_, outcome) = task.await.unwrap().unwrap().unwrap();
    assert_eq!(outcome, Outcome::Fenced);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(env.sessions.stored_len(&session).await.unwrap(), Some(len));
    assert_eq!(
        env.rt.runs().get(&id).await.unwrap().status,
        RunStatus::Cancelled
    );
}

/// Issue 48 (4): `Runtime::cancel` ends the session a running run was working on in a
/// `cancelled` failure record, written under the cancel's lease token: the fenced worker,
/// released, cannot append after it.
#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_marks_the_running_session_cancelled_and_the_worker_cannot_undo_it() {
    let env = env().await;
    let (id, task, session) = held_at_second_call(&env, 9).await;
    // A guard against a hang (the session never written), not a measurement.
    let deadline = Instant::now() + Duration::from_secs(120);
    while env
        .sessions
        .stored_len(&session)
        .await
        .unwrap()
        .unwrap_or(0)
        < 3
    {
        assert!(Instant::now() < deadline, "round one never stored");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    env.rt.cancel(&id).await.unwrap();
    let marked = env.sessions.load(&session).await.unwrap().session;
    let failure = marked.failure().expect("the cancel's record");
    assert!(failure.is_cancellation(), "{failure:?}");
    env.ctl.gate.add_permits(1);
    let (_, outcome) = task.await.unwrap().unwrap().unwrap();
    assert_eq!(outcome, Outcome::Fenced);
    let after = env.sessions.load(&session).await.unwrap().session;
    assert_eq!(
        after.len(),
        marked.len(),
        "nothing appended after the record"
    );
    assert!(after.failure().is_some_and(|f| f.is_cancellation()));
    let run = env.rt.runs().get(&id).await.unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
    // A finished run cannot be cancelled, and nothing is marked.
    assert!(matches!(
        env.rt.cancel(&id).await,
        Err(RuntimeError::BadState { .. })
    ));
}

/// Each parent a stored session names that the store does not hold.
async fn dangling_parents(sessions: &dyn SessionStore) -> Vec<String> {
    let mut missing = Vec::new();
    for s in sessions.list().await.unwrap() {
        for p in &s.parents {
            if sessions.stored_len(p).await.unwrap().is_none() {
                missing.push(format!("{} names {p}", s.id));
            }
        }
    }
    missing
}

/// Issue 48 (3): the sessions a durable run stores name no parent the store lacks (the
/// agent's system-prompt session was not stored), on SQLite (sessions written as they
/// grow) and on a JSONL directory (written when the attempt ends), for a run that
/// succeeds and one that fails.
#[tokio::test(flavor = "multi_thread")]
async fn every_parent_of_a_stored_session_is_stored() {
    let sqlite = env().await;
    let dir = tempfile::tempdir().unwrap();
    let jsonl: Arc<dyn SessionStore> = Arc::new(rath_persist::Store::at(dir.path().join("s")));
    let jsonl = env_on(dir, jsonl).await;
    for env in [&sqlite, &jsonl] {
        let ok = env.submit(11, RunOptions::default()).await;
        assert_eq!(
            env.worker().run_once().await.unwrap().unwrap(),
            (ok, Outcome::Moved(RunStatus::Succeeded))
        );
        *env.ctl.fail.lock().unwrap() = vec![env.ctl.calls.load(Ordering::SeqCst) + 2];
        let failed = env.submit(12, RunOptions::default()).await;
        assert_eq!(
            env.worker().run_once().await.unwrap().unwrap(),
            (failed, Outcome::Moved(RunStatus::Failed))
        );
        let stored = env.sessions.list().await.unwrap();
        assert!(
            stored.iter().any(|s| s.kind.as_str() == "leaf_system"),
            "{stored:?}"
        );
        assert_eq!(dangling_parents(&*env.sessions).await, Vec::<String>::new());
    }
    // While a run is under way on SQLite too: its live writer stores a session's parents
    // before the session.
    let env = &sqlite;
    env.ctl
        .held
        .store(env.ctl.calls.load(Ordering::SeqCst) + 2, Ordering::SeqCst);
    let id = env.submit(13, RunOptions::default()).await;
    let w = env.worker();
    let task = tokio::spawn(async move { w.run_once().await });
    env.ctl.reached.notified().await;
    let session = first_session_event(&env.rt, &id).await;
    assert!(env.sessions.stored_len(&session).await.unwrap().is_some());
    assert_eq!(dangling_parents(&*env.sessions).await, Vec::<String>::new());
    env.ctl.gate.add_permits(1);
    let (_, outcome) = task.await.unwrap().unwrap().unwrap();
    assert_eq!(outcome, Outcome::Moved(RunStatus::Succeeded));
    assert_eq!(dangling_parents(&*env.sessions).await, Vec::<String>::new());
}

/// The header `created_at` (ms since the Unix epoch) of every stored session but the
/// inputs (one chunk).
async fn output_times_ms(sessions: &dyn SessionStore) -> Vec<i64> {
    let mut out = Vec::new();
    for s in sessions.list().await.unwrap() {
        if s.chunk_count > 1 {
            out.push(s.created_at.unix_micros() / 1000);
        }
    }
    out
}

/// Issue 48 (2): a durable run's sessions carry the real time of its execution (they were
/// stamped 2026-01-01T00:00:00, the seeded stamper's clock), on SQLite and on a JSONL
/// directory.
#[tokio::test(flavor = "multi_thread")]
async fn a_runs_sessions_carry_the_time_it_ran() {
    let sqlite = env().await;
    let dir = tempfile::tempdir().unwrap();
    let jsonl: Arc<dyn SessionStore> = Arc::new(rath_persist::Store::at(dir.path().join("s")));
    let jsonl = env_on(dir, jsonl).await;
    for env in [&sqlite, &jsonl] {
        let before = now_ms();
        env.submit(31, RunOptions::default()).await;
        let (_, outcome) = env.worker().run_once().await.unwrap().unwrap();
        assert_eq!(outcome, Outcome::Moved(RunStatus::Succeeded));
        let after = now_ms();
        let times = output_times_ms(&*env.sessions).await;
        assert!(!times.is_empty());
        for t in times {
            // The run's clock is read once, between `before` and `after`; each reading of
            // its stamper adds a millisecond, and a run of this size makes far fewer than
            // a thousand: an exact bound, not a measurement.
            assert!(
                before <= t && t <= after + 1000,
                "{before} <= {t} <= {after}"
            );
        }
    }
}

/// Issue 48 (2): a run handed back mid-way and executed again on another worker keeps the
/// times of its first execution (the journal holds them), whatever the clock says then.
#[tokio::test(flavor = "multi_thread")]
async fn a_re_execution_keeps_the_times_of_the_first() {
    let env = env().await;
    let (first, second) = (1_800_000_000_000, 1_900_000_000_000);
    env.ctl.held.store(2, Ordering::SeqCst);
    let id = env.submit(32, RunOptions::default()).await;
    let opts = WorkerOptions::named("w1")
        .grace(Duration::ZERO)
        .session_clock(RunClock::manual(first));
    let w = Worker::new(env.rt.clone(), opts);
    let shutdown = rath_flow::CancellationToken::new();
    let task = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { w.run(shutdown).await }
    });
    env.ctl.reached.notified().await;
    shutdown.cancel();
    task.await.unwrap().unwrap();
    env.ctl.gate.add_permits(1);
    assert_eq!(
        env.rt.runs().get(&id).await.unwrap().status,
        RunStatus::Queued
    );
    let opts = WorkerOptions::named("w2").session_clock(RunClock::manual(second));
    let (_, outcome) = Worker::new(env.rt.clone(), opts)
        .run_once()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome, Outcome::Moved(RunStatus::Succeeded));
    let times = output_times_ms(&*env.sessions).await;
    assert!(!times.is_empty());
    for t in times {
        assert!(
            (first..first + 1000).contains(&t),
            "{t}: the first execution's time"
        );
    }
}

/// The worker's task on a run of `seed` whose second model call is held.
type Held = tokio::task::JoinHandle<Result<Option<(RunId, Outcome)>, rath_runtime::RuntimeError>>;

/// Starts a worker on a new run of `seed` and holds the run's second model call: the run,
/// the worker's task, and the session its live writer stored first (round one is in the
/// session store by then). `env.ctl.gate` lets the call go on.
async fn held_at_second_call(env: &Env, seed: u64) -> (RunId, Held, SessionId) {
    env.ctl.held.store(2, Ordering::SeqCst);
    let id = env.submit(seed, RunOptions::default()).await;
    let w = env.worker();
    let task = tokio::spawn(async move { w.run_once().await });
    env.ctl.reached.notified().await;
    let session = first_session_event(&env.rt, &id).await;
    (id, task, session)
}

/// The first `session` event of run `id`: the session its live writer stored first.
async fn first_session_event(rt: &Runtime, id: &RunId) -> SessionId {
    let mut events = rt.runs().subscribe(id, 0).await.unwrap();
    loop {
        let ev = events
            .next_within(Duration::from_secs(10))
            .await
            .unwrap()
            .unwrap();
        if ev.kind == "session" {
            let v: serde_json::Value = serde_json::from_str(&ev.detail).unwrap();
            return SessionId::new(v["session"].as_str().unwrap());
        }
    }
}

/// A run's stored output is the same session, `created_at` included, whichever write
/// created its row: here the live writer (a SQL store, the run held until its first round
/// is stored), there the worker's final persist (a JSONL directory, where no live writer
/// runs). Once the row's creation time came from the run's own stamper on one path and from
/// a fixed one on the other, so the chaos test's outputs differed by timing.
#[tokio::test(flavor = "multi_thread")]
async fn the_stored_output_does_not_depend_on_which_write_created_it() {
    // Both runs start at one time: the same run, the same sessions.
    let start = now_ms();
    let mut live = env().await;
    live.session_ms = Some(start);
    let (id, task, early) = held_at_second_call(&live, 9).await;
    live.ctl.gate.add_permits(1);
    let (_, outcome) = task.await.unwrap().unwrap().unwrap();
    assert_eq!(outcome, Outcome::Moved(RunStatus::Succeeded));
    let a = live.rt.output(&id).await.unwrap().unwrap();
    assert_eq!(a.id(), &early, "the live writer created the output's row");

    let dir = tempfile::tempdir().unwrap();
    let files: Arc<dyn SessionStore> =
        Arc::new(rath_persist::Store::at(dir.path().join("sessions")));
    let mut at_end = env_on(dir, files).await;
    at_end.session_ms = Some(start);
    let id_b = at_end.submit(9, RunOptions::default()).await;
    assert_eq!(id_b, id);
    let (_, outcome) = at_end.worker().run_once().await.unwrap().unwrap();
    assert_eq!(outcome, Outcome::Moved(RunStatus::Succeeded));
    let b = at_end.rt.output(&id).await.unwrap().unwrap();
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
}

// ------------------------------------------------------------------------ event stream

const WRITERS: usize = 4;
const PER_WRITER: usize = 40;

/// Writers append events concurrently while subscribers, one from the start and one
/// opened after a later id, follow them: each sees every event after its id exactly once,
/// in id order, pushed (the fallback read is set far beyond the test's bound).
async fn events_from_concurrent_writers(writer: RunStore, reader: RunStore) {
    let id = writer
        .submit(
            RunId(format!("run_events_{}", std::process::id())),
            "flow",
            "h",
            "in",
            &RunOptions::default(),
        )
        .await
        .unwrap();
    let (_, lease) = writer
        .claim("w", Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    let total = 2 + WRITERS * PER_WRITER; // queued, claimed, then the writers'
    let from_start = reader
        .subscribe(&id, 0)
        .await
        .unwrap()
        .fallback(Duration::from_secs(120));
    let follow = |mut sub: rath_runtime::EventSubscription, after: usize| {
        tokio::spawn(async move {
            let mut got: Vec<RunEvent> = Vec::new();
            while got.len() < total - after {
                let ev = sub.next_within(Duration::from_secs(20)).await.unwrap();
                got.push(ev.expect("an event within 20 s: the stream is pushed"));
            }
            got
        })
    };
    let a = follow(from_start, 0);
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (store, lease) = (writer.clone(), lease.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..PER_WRITER {
                store
                    .event(&lease, "step", &format!("{{\"w\": {w}, \"i\": {i}}}"))
                    .await
                    .unwrap();
            }
        }));
    }
    // A late subscriber resumes after whatever id the table holds now (a Last-Event-ID).
    tokio::time::sleep(Duration::from_millis(20)).await;
    let seen = reader.events(&id, 0).await.unwrap().len();
    let late = reader
        .subscribe(&id, seen as i64)
        .await
        .unwrap()
        .fallback(Duration::from_secs(120));
    let b = follow(late, seen);
    for t in tasks {
        t.await.unwrap();
    }
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    let seqs = |v: &[RunEvent]| v.iter().map(|e| e.seq).collect::<Vec<_>>();
    assert_eq!(seqs(&a), (1..=total as i64).collect::<Vec<_>>());
    assert_eq!(
        seqs(&b),
        ((seen as i64 + 1)..=total as i64).collect::<Vec<_>>()
    );
    assert_eq!(a, writer.events(&id, 0).await.unwrap());
    // Each writer's own events arrive in the order it wrote them.
    for w in 0..WRITERS {
        let mine: Vec<i64> = a
            .iter()
            .filter_map(|e| {
                let v: serde_json::Value = serde_json::from_str(&e.detail).ok()?;
                (v["w"] == json!(w)).then(|| v["i"].as_i64().unwrap())
            })
            .collect();
        assert_eq!(mine, (0..PER_WRITER as i64).collect::<Vec<_>>());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_event_stream_is_pushed_without_gaps_or_duplicates_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("runs.db").display());
    let store = RunStore::connect(&url).await.unwrap();
    events_from_concurrent_writers(store.clone(), store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_event_stream_is_pushed_without_gaps_or_duplicates_on_postgres() {
    let Some(url) = rath_testkit::fresh_postgres_database("h4_rt_events_", "h4_rt_events").await
    else {
        return;
    };
    // Two stores, two pools, two hubs: what reaches the reader comes through LISTEN/NOTIFY.
    let writer = RunStore::connect(&url).await.unwrap();
    let reader = RunStore::connect(&url).await.unwrap();
    events_from_concurrent_writers(writer, reader).await;
}

/// A workflow that answers with a session it was not handed and did not mint: the one
/// `seed` starts, one chunk longer.
struct Returns {
    seed: u64,
}

impl rath_flow::Workflow for Returns {
    fn forward<'a>(
        &'a self,
        _session: Session,
        _cx: &'a rath_flow::FlowContext,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Session, rath_flow::FlowError>> + Send + 'a>,
    > {
        let out = Session::user_with("kept", Stamper::seeded(self.seed))
            .push(rath_session::Chunk::assistant_text("grown"));
        Box::pin(async move { Ok(out) })
    }
}

#[tokio::test]
async fn an_output_session_stored_before_the_run_is_appended_to() {
    // A first claim takes the sessions it writes for its own (nothing stored them yet) and
    // skips asking the store; a workflow may still answer with one stored before: its
    // first write is refused and done again after asking, as an append.
    let dir = tempfile::tempdir().unwrap();
    let sessions: Arc<dyn SessionStore> = Arc::new(
        rath_store_sql::SqliteStore::open(dir.path().join("sessions.db"))
            .await
            .unwrap(),
    );
    let registry = WorkflowRegistry::new().register("returns", "returns v1", || {
        Ok(Arc::new(Returns { seed: 77 }) as SharedWorkflow)
    });
    let url = format!("sqlite:{}", dir.path().join("runs.db").display());
    let rt = Runtime::connect(&url, sessions.clone(), registry)
        .await
        .unwrap();
    let before = Session::user_with("kept", Stamper::seeded(77));
    sessions
        .write(rath_persist::WriteBatch::new().with(rath_persist::Write::Save(&before)))
        .await
        .unwrap();
    let input = Session::user_with("task", Stamper::seeded(1));
    let id = rt
        .submit(
            &Stamper::seeded(2),
            "returns",
            &input,
            RunOptions::default(),
        )
        .await
        .unwrap();
    let worker = Worker::new(rt.clone(), WorkerOptions::named("w1"));
    let (ran, outcome) = worker.run_once().await.unwrap().unwrap();
    assert_eq!(ran, id);
    assert_eq!(outcome, Outcome::Moved(RunStatus::Succeeded));
    let run = rt.runs().get(&id).await.unwrap();
    assert_eq!(run.output_session.as_deref(), Some(before.id().as_str()));
    let stored = sessions.load(before.id()).await.unwrap().session;
    assert_eq!(stored.len(), 2);
    assert_eq!(
        stored.chunks().last().unwrap().kind(),
        ChunkKind::Assistant,
        "the answer's chunk was appended to the stored session"
    );
}

#[tokio::test]
async fn a_lease_too_long_to_end_is_refused_and_no_lease_is_born_expired() {
    // Issue 47, item 9: a lease of u64::MAX ms wrapped `now + lease` into the past, so two
    // workers stole the run from each other. A lease over MAX_LEASE is a typed error, the
    // run stays queued, and the longest lease allowed ends after now.
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("runs.db").display());
    let store = RunStore::connect(&url).await.unwrap();
    let id = store
        .submit(
            RunId("run-long-lease".into()),
            "flow",
            "h",
            "input",
            &RunOptions::default(),
        )
        .await
        .unwrap();
    for lease in [
        Duration::from_millis(u64::MAX),
        Duration::MAX,
        MAX_LEASE + Duration::from_millis(1),
    ] {
        match store.claim("greedy", lease).await {
            Err(RuntimeError::BadDuration { what: "lease", .. }) => {}
            other => panic!("lease {lease:?}: {other:?}"),
        }
    }
    assert_eq!(store.get(&id).await.unwrap().status, RunStatus::Queued);
    let before = now_ms();
    let (run, lease) = store.claim("w1", MAX_LEASE).await.unwrap().unwrap();
    assert_eq!(run.id, id);
    assert!(lease.expires_ms > before, "{lease:?}");
    // A second worker cannot take it: the lease has not expired.
    assert!(
        store
            .claim("w2", Duration::from_secs(5))
            .await
            .unwrap()
            .is_none()
    );
    // A heartbeat with an unbounded lease is refused too, and the lease is kept.
    match store.heartbeat(&lease, Duration::MAX).await {
        Err(RuntimeError::BadDuration { .. }) => {}
        other => panic!("heartbeat: {other:?}"),
    }
    assert_eq!(store.lease(&id).await.unwrap().worker, "w1");
}

#[tokio::test]
async fn the_run_store_reads_its_url_as_the_session_store_does() {
    // Issue 47, item 8: one parser for both stores. What the session store refuses, the run
    // store refuses the same way (before connecting).
    for bad in [
        "postgres://u@127.0.0.1:1/db?schema=a;drop",
        "postgres://u@127.0.0.1:1/db?schema=",
        "postgres://u@127.0.0.1:1/db?schema=a&schema=b",
        "sqlite:/tmp/runs.db?mode=rwc",
    ] {
        match RunStore::connect(bad).await {
            Err(RuntimeError::Persist(PersistError::BadStoreUrl { .. })) => {}
            Err(e) => panic!("{bad}: {e}"),
            Ok(_) => panic!("{bad}: accepted"),
        }
        assert!(
            matches!(
                rath_store_sql::open_store(bad).await,
                Err(PersistError::BadStoreUrl { .. })
            ),
            "{bad}"
        );
    }
    // Item 10: a refused port is reported at once, naming the address.
    match RunStore::connect("postgres://u@127.0.0.1:1/db").await {
        Err(e) => {
            let text = e.to_string();
            assert!(text.contains("cannot connect to 127.0.0.1:1"), "{text}");
            assert!(!text.contains("pool timed out"), "{text}");
        }
        Ok(_) => panic!("connected to port 1"),
    }
    let Some(url) = rath_testkit::fresh_postgres_database("h47_rt_schema_", "h47_rt_schema").await
    else {
        return;
    };
    // `?schema=` puts the run store's tables in that schema (created when missing).
    let in_schema = RunStore::connect(&format!("{url}?schema=team_a"))
        .await
        .unwrap();
    assert!(
        in_schema.name().ends_with("?schema=team_a"),
        "{}",
        in_schema.name()
    );
    let id = in_schema
        .submit(
            RunId("run-in-team-a".into()),
            "flow",
            "h",
            "input",
            &RunOptions::default(),
        )
        .await
        .unwrap();
    let mut c = <sqlx::PgConnection as sqlx::Connection>::connect(&url)
        .await
        .unwrap();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_schema::text FROM information_schema.tables WHERE table_name = 'rt_runs' ORDER BY 1",
    )
    .fetch_all(&mut c)
    .await
    .unwrap();
    assert_eq!(tables, ["team_a"]);
    // The database's default schema is another store: it has no such run.
    let plain = RunStore::connect(&url).await.unwrap();
    assert!(matches!(
        plain.get(&id).await,
        Err(RuntimeError::NoSuchRun(_))
    ));
    assert_eq!(in_schema.get(&id).await.unwrap().status, RunStatus::Queued);
}
