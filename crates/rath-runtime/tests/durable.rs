//! Durable runs end to end: fencing, definition hashes, worker processes killed at fixed
//! points (SIGKILL through `RATH_RUNTIME_CRASH`), a worker stopped past its lease (SIGSTOP),
//! and an approval decided from another process.
//!
//! The worker and operator processes are this test binary run again with `--ignored
//! --exact child` and `RATH_RT_CHILD` saying what to do.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rath_flow::{Agent, Sequence, SharedWorkflow, ToolContext, ToolError, ToolPolicy, typed_tool};
use rath_persist::{SessionStore, Store};
use rath_provider::{
    Provider, ProviderError, ProviderManifest, ProviderRequest, ProviderResponse, ScriptedProvider,
    ScriptedResponse,
};
use rath_runtime::{
    EffectState, Outcome, Resolution, RunClock, RunId, RunOptions, RunStatus, RunStore, Runtime,
    RuntimeError, Worker, WorkerOptions, WorkflowRegistry, current_call,
};
use rath_session::{Role, Session, Stamper};
use serde_json::json;

/// A model that answers from the request alone (so a re-executed run gets the same reply
/// whether it is served from the journal or asked again): two tool rounds, then text.
#[derive(Debug)]
struct RuleModel {
    tool: &'static str,
}

#[async_trait]
impl Provider for RuleModel {
    fn name(&self) -> &str {
        "rule"
    }
    async fn complete(&self, req: &ProviderRequest) -> Result<ProviderResponse, ProviderError> {
        let agent = req.agent.clone().unwrap_or_default();
        let mine = format!("{agent}_call_");
        let rounds = req
            .messages
            .iter()
            .filter(|m| {
                m.role == Role::Tool
                    && m.tool_call_id
                        .as_deref()
                        .is_some_and(|c| c.starts_with(&mine))
            })
            .count();
        let n = req.messages.len() as u64;
        let reply = if rounds < 2 {
            let id = format!("{agent}_call_{rounds}");
            ScriptedResponse::tool_calls(vec![(
                id,
                self.tool,
                json!({"text": format!("{agent} {rounds}")}),
            )])
        } else {
            ScriptedResponse::text(format!("{agent} done after {n} messages"))
        };
        ScriptedProvider::new(vec![reply.usage(10 * n, 3)])
            .complete(req)
            .await
    }
    fn manifest(&self) -> ProviderManifest {
        ProviderManifest::new("rule")
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Args {
    text: String,
}

/// The non-idempotent `record` tool: appends the idempotency key it was handed to `file`, a
/// file outside the store, so a test can count how many times each effect happened.
fn record_tool(file: PathBuf) -> impl rath_flow::Tool + 'static {
    typed_tool(
        "record",
        "Record a text.",
        move |_cx: ToolContext, a: Args| {
            let file = file.clone();
            async move {
                let key = current_call()
                    .map(|c| c.idempotency_key)
                    .unwrap_or_default();
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&file)
                    .map_err(|e| ToolError::exception(e.to_string()))?;
                // One write per line: concurrent calls append whole lines (O_APPEND).
                f.write_all(format!("{key}\n").as_bytes())
                    .map_err(|e| ToolError::exception(e.to_string()))?;
                Ok::<_, ToolError>(json!({"recorded": a.text}))
            }
        },
    )
}

/// The workflows every worker of these tests registers. `effects` is the file outside the
/// store where the non-idempotent `record` tool appends the idempotency key it was handed.
fn registry(effects: PathBuf) -> WorkflowRegistry {
    let e1 = effects.clone();
    WorkflowRegistry::new()
        .register(
            "team",
            "team v1: planner(lookup x2) then writer(record x2)",
            move || {
                let lookup = typed_tool(
                    "lookup",
                    "Look a text up.",
                    |_cx: ToolContext, a: Args| async move {
                        Ok::<_, ToolError>(json!({"len": a.text.len()}))
                    },
                )
                .idempotent(true);
                let record = record_tool(e1.clone());
                let planner = Agent::new("planner", "Plan.", RuleModel { tool: "lookup" })
                    .with_tool(lookup)?;
                let writer = Agent::new("writer", "Write.", RuleModel { tool: "record" })
                    .with_tool(record)?;
                Ok(Arc::new(Sequence::new("team").then(planner).then(writer)) as SharedWorkflow)
            },
        )
        .register("gated", "gated v1: writer(record, approval)", move || {
            let record = record_tool(effects.clone());
            let writer = Agent::new("writer", "Write.", RuleModel { tool: "record" })
                .with_tool(record)?
                .with_policy(ToolPolicy::allow_all().require_approval("record"));
            Ok(Arc::new(writer) as SharedWorkflow)
        })
}

struct Env {
    dir: tempfile::TempDir,
    url: String,
}

impl Env {
    fn sqlite() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("runs.db").display());
        Env { dir, url }
    }

    /// A fresh PostgreSQL database for this test, or `None` (skipped; fails under RATH_CI).
    async fn postgres(name: &str) -> Option<Env> {
        let url = rath_testkit::fresh_postgres_database("rt_", &format!("rt_{name}")).await?;
        Some(Env {
            dir: tempfile::tempdir().unwrap(),
            url,
        })
    }

    fn sessions(&self) -> PathBuf {
        self.dir.path().join("sessions")
    }
    fn effects(&self) -> PathBuf {
        self.dir.path().join("effects.txt")
    }

    /// A fresh SQLite environment, its runtime, and a run of `workflow` submitted to it.
    async fn sqlite_run(workflow: &str) -> (Env, Runtime, RunId) {
        let env = Env::sqlite();
        let rt = env.runtime().await;
        let id = submit(&rt, workflow).await;
        (env, rt, id)
    }

    async fn runtime(&self) -> Runtime {
        let store: Arc<dyn SessionStore> = Arc::new(Store::at(self.sessions()));
        Runtime::connect(&self.url, store, registry(self.effects()))
            .await
            .unwrap()
    }

    /// [`Env::runtime`] on a store an older build left: connecting migrates it, and the
    /// store then says this build's schema version.
    async fn migrated(&self) -> Runtime {
        let rt = self.runtime().await;
        assert_eq!(
            rt.runs().schema_version().await.unwrap(),
            rath_runtime::SCHEMA_VERSION
        );
        rt
    }

    /// A worker process named `name` with extra environment (crash points).
    fn worker(&self, name: &str, lease_ms: u64, env: &[(&str, &str)]) -> Child {
        self.child("worker", name, lease_ms, env)
    }

    fn child(&self, what: &str, name: &str, lease_ms: u64, env: &[(&str, &str)]) -> Child {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "child", "--nocapture", "--test-threads=1"])
            .env("RATH_RT_CHILD", what)
            .env("RATH_RT_URL", &self.url)
            .env("RATH_RT_SESSIONS", self.sessions())
            .env("RATH_RT_EFFECTS", self.effects())
            .env("RATH_RT_NAME", name)
            .env("RATH_RT_LEASE_MS", lease_ms.to_string())
            .env("RATH_RT_SESSION_MS", SESSION_MS.to_string())
            .env_remove("RATH_RUNTIME_CRASH")
            .env_remove("RATH_RUNTIME_STOP")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.spawn().unwrap()
    }

    fn effect_lines(&self) -> Vec<String> {
        std::fs::read_to_string(self.effects())
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// The child process entry point (run by the tests above, never on its own).
#[test]
fn child() {
    let Ok(what) = std::env::var("RATH_RT_CHILD") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let var = |k: &str| std::env::var(k).unwrap();
        let store: Arc<dyn SessionStore> = Arc::new(Store::at(var("RATH_RT_SESSIONS")));
        let runtime = Runtime::connect(
            &var("RATH_RT_URL"),
            store,
            registry(var("RATH_RT_EFFECTS").into()),
        )
        .await
        .unwrap();
        match what.as_str() {
            "worker" => {
                let lease = Duration::from_millis(var("RATH_RT_LEASE_MS").parse().unwrap());
                let opts = WorkerOptions::named(var("RATH_RT_NAME"))
                    .lease(lease)
                    .poll(Duration::from_millis(20))
                    .session_clock(RunClock::manual(var("RATH_RT_SESSION_MS").parse().unwrap()));
                let shutdown = rath_flow::CancellationToken::new();
                Worker::new(runtime, opts).run(shutdown).await.unwrap();
            }
            "approve" => {
                let run = RunId(var("RATH_RT_RUN"));
                runtime
                    .approve(&run, &var("RATH_RT_CALL"), "reviewer@other-process")
                    .await
                    .unwrap();
            }
            other => panic!("unknown child role {other}"),
        }
    });
}

const SEED: u64 = 4242;

/// When every run of these tests starts (`WorkerOptions::session_clock`), in-process and in
/// worker processes alike: a run's sessions are then byte for byte the same in every store
/// and on every machine (2026-12-01T00:00:00Z).
const SESSION_MS: i64 = 1_795_996_800_000;

/// The model replies among a run's journal entries (not the record of when it started).
async fn replies(rt: &Runtime, id: &RunId) -> usize {
    rt.runs()
        .journal(id)
        .await
        .unwrap()
        .iter()
        .filter(|e| !e.step.ends_with(rath_runtime::CLOCK_STEP))
        .count()
}

async fn submit(rt: &Runtime, workflow: &str) -> RunId {
    let input = Session::user_with("Plan and write it.", Stamper::seeded(SEED));
    rt.submit(
        &Stamper::seeded(SEED + 1),
        workflow,
        &input,
        RunOptions::default(),
    )
    .await
    .unwrap()
}

/// The same run done in-process without faults, in a store of its own: the reference.
async fn uninterrupted(workflow: &str) -> (Env, Session) {
    let (env, rt, id) = Env::sqlite_run(workflow).await;
    let opts = WorkerOptions::named("reference").session_clock(RunClock::manual(SESSION_MS));
    let w = Worker::new(rt.clone(), opts);
    assert_eq!(
        w.run_once().await.unwrap().unwrap().1,
        Outcome::Moved(RunStatus::Succeeded)
    );
    let out = output(&rt, &id).await;
    (env, out)
}

async fn wait_for(rt: &Runtime, id: &RunId, want: RunStatus) -> rath_runtime::Run {
    let within = Duration::from_secs(180);
    let start = Instant::now();
    loop {
        let run = rt.runs().get(id).await.unwrap();
        if run.status == want {
            return run;
        }
        // `within` is a guard of minutes against a hang, many times what a run needs; the
        // test waits for the status, not for a clock.
        assert!(
            start.elapsed() < within,
            "run is {} after {within:?}, wanted {want}: {:?}",
            run.status,
            run.detail
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The run's output session (it has one).
async fn output(rt: &Runtime, id: &RunId) -> Session {
    rt.output(id).await.unwrap().expect("an output session")
}

/// The workers that claimed the run, in order (from its `claimed` events).
async fn claims(rt: &Runtime, id: &RunId) -> Vec<String> {
    rt.runs()
        .events(id, 0)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "claimed")
        .map(|e| e.by)
        .collect()
}

/// A worker process `name` takes the run over and finishes it; the run once it succeeded.
async fn finish_on(env: &Env, rt: &Runtime, id: &RunId, name: &str) -> rath_runtime::Run {
    let worker = env.worker(name, 600, &[]);
    let run = wait_for(rt, id, RunStatus::Succeeded).await;
    kill(worker);
    run
}

fn session_file(env: &Env, s: &Session) -> Vec<u8> {
    std::fs::read(Store::at(env.sessions()).path_of(s.id())).unwrap()
}

/// The resumed session equals the reference: conversation chunks, tool results, usage
/// (every chunk, in fact) and the stored file byte for byte.
fn assert_same_session(reference: (&Env, &Session), got: (&Env, &Session)) {
    let text = |s: &Session| serde_json::to_string(s).unwrap();
    assert_eq!(text(got.1), text(reference.1));
    assert_eq!(got.1.usage(), reference.1.usage());
    assert_eq!(
        session_file(got.0, got.1),
        session_file(reference.0, reference.1)
    );
}

fn kill(mut c: Child) {
    let _ = c.kill();
    let _ = c.wait();
}

fn has_no_duplicates(lines: &[String]) -> bool {
    let mut seen = std::collections::BTreeSet::new();
    lines.iter().all(|l| seen.insert(l.clone()))
}

async fn sigkill_at_step_resumes(env: Env) {
    let (ref_env, reference) = uninterrupted("team").await;
    let rt = env.runtime().await;
    let id = submit(&rt, "team").await;
    // The first worker SIGKILLs itself right after the third recorded model reply.
    let mut first = env.worker("w1", 600, &[("RATH_RUNTIME_CRASH", "step:3")]);
    let status = first.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    assert_eq!(replies(&rt, &id).await, 3);
    // The second worker takes the run over once the killed one's lease has lapsed: two
    // attempts, the second on w2 (how soon is the runtime bench's SIGKILL-to-progress).
    let run = finish_on(&env, &rt, &id, "w2").await;
    assert_eq!(run.attempts, 2);
    let out = output(&rt, &id).await;
    assert_same_session((&ref_env, &reference), (&env, &out));
    // Two record calls, each key once; the reference made the same two keys.
    let keys = env.effect_lines();
    assert_eq!(keys.len(), 2);
    assert_eq!(keys, ref_env.effect_lines());
    // Worker w2 took over with a newer token; the claims are in the run's events.
    let claims = claims(&rt, &id).await;
    assert_eq!(claims, ["w1", "w2"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_at_a_fixed_step_resumes_byte_identical_on_sqlite() {
    sigkill_at_step_resumes(Env::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_at_a_fixed_step_resumes_byte_identical_on_postgres() {
    if let Some(env) = Env::postgres("sigkill").await {
        sigkill_at_step_resumes(env).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn crash_between_model_reply_and_its_recording() {
    let (ref_env, reference) = uninterrupted("team").await;
    let (env, rt, id) = Env::sqlite_run("team").await;
    // Reply 4 (the writer's first) arrived and was never recorded: asked again on resume.
    let mut first = env.worker("w1", 600, &[("RATH_RUNTIME_CRASH", "model_reply:4")]);
    first.wait().unwrap();
    assert_eq!(replies(&rt, &id).await, 3);
    finish_on(&env, &rt, &id, "w2").await;
    let out = output(&rt, &id).await;
    assert_same_session((&ref_env, &reference), (&env, &out));
    assert_eq!(replies(&rt, &id).await, reference_replies());
    // One record of when the run started: the second worker read it, wrote none.
    assert_eq!(
        rt.runs().journal(&id).await.unwrap().len(),
        reference_replies() + 1
    );
}

fn reference_replies() -> usize {
    6 // planner: 2 tool rounds + text; writer: the same
}

/// A worker SIGKILLed right after a tool's effect, before the step commits (its answer is
/// not recorded). The workflows of these tests are plain flow code: no tool or provider is
/// wrapped by its author; the worker's journal and ledger layer sees every call.
/// `envs` are two fresh environments on one kind of store.
async fn unwrapped_tool_effect_survives_sigkill(envs: [Env; 2]) {
    let [env, second_env] = envs;
    let (ref_env, reference) = uninterrupted("team").await;
    // The idempotent lookup (effect 1): run again on resume, the run succeeds.
    let rt = env.runtime().await;
    let id = submit(&rt, "team").await;
    env.worker("w1", 600, &[("RATH_RUNTIME_CRASH", "tool_effect:1")])
        .wait()
        .unwrap();
    let effects = rt.runs().effects(&id).await.unwrap();
    assert_eq!(effects.len(), 1);
    assert_eq!(effects[0].state, EffectState::Dispatched);
    finish_on(&env, &rt, &id, "w2").await;
    assert_same_session((&ref_env, &reference), (&env, &output(&rt, &id).await));

    // The non-idempotent record (effect 3): ambiguous, the run goes to review with the call.
    let env = second_env;
    let rt = env.runtime().await;
    let id = submit(&rt, "team").await;
    let status = env
        .worker("w1", 600, &[("RATH_RUNTIME_CRASH", "tool_effect:3")])
        .wait()
        .unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    assert_eq!(env.effect_lines().len(), 1, "the effect happened once");
    let second = env.worker("w2", 600, &[]);
    let run = wait_for(&rt, &id, RunStatus::NeedsReview).await;
    let detail = run.detail.unwrap();
    assert!(
        detail.contains("writer_call_0") && detail.contains("record"),
        "{detail}"
    );
    let ambiguous: Vec<_> = rt
        .runs()
        .effects(&id)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.state == EffectState::Ambiguous)
        .collect();
    assert_eq!(ambiguous.len(), 1);
    assert_eq!(ambiguous[0].idempotency_key, env.effect_lines()[0]);
    // A person says the effect happened and what it answered; the run finishes without
    // repeating it, and equals the reference.
    let answered = r#"{"recorded": "writer 0"}"#.to_owned();
    rt.runs()
        .resolve(&id, "writer_call_0", &Resolution::Answered(answered))
        .await
        .unwrap();
    wait_for(&rt, &id, RunStatus::Succeeded).await;
    kill(second);
    // The effect counter: each record call's effect happened once, the interrupted one too.
    let keys = env.effect_lines();
    assert_eq!(keys.len(), 2);
    assert!(has_no_duplicates(&keys));
    assert_same_session((&ref_env, &reference), (&env, &output(&rt, &id).await));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unwrapped_tool_effect_is_not_repeated_after_sigkill_on_sqlite() {
    unwrapped_tool_effect_survives_sigkill([Env::sqlite(), Env::sqlite()]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unwrapped_tool_effect_is_not_repeated_after_sigkill_on_postgres() {
    let (Some(a), Some(b)) = (
        Env::postgres("effect_lookup").await,
        Env::postgres("effect_record").await,
    ) else {
        return;
    };
    unwrapped_tool_effect_survives_sigkill([a, b]).await;
}

fn state_of(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit(')')
        .next()
        .and_then(|s| s.trim().chars().next())
        .unwrap_or('?')
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_paused_past_its_lease_cannot_write() {
    let (ref_env, reference) = uninterrupted("team").await;
    let (env, rt, id) = Env::sqlite_run("team").await;
    // w1 stops itself (SIGSTOP) with reply 4 in hand, before recording it.
    let first = env.worker("w1", 500, &[("RATH_RUNTIME_STOP", "model_reply:4")]);
    let start = Instant::now();
    while state_of(first.id()) != 'T' {
        // A guard against a hang (w1 never reaching its stop point), not a measurement.
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "w1 never stopped"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let w1_token = rt.runs().lease(&id).await.unwrap().token;
    let w1_rows = rt.runs().rows_with_token(&id, w1_token).await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    // w2's lease is long: on a loaded machine a 500 ms lease can lapse between heartbeats,
    // and w2 losing its own claim is not what this test is about (w1's short lease is).
    let second = env.worker("w2", 5000, &[]);
    wait_for(&rt, &id, RunStatus::Succeeded).await;
    // w1 wakes past its lease: its recording is fenced, nothing of it lands.
    let _ = Command::new("kill")
        .args(["-CONT", &first.id().to_string()])
        .status();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        rt.runs().rows_with_token(&id, w1_token).await.unwrap(),
        w1_rows
    );
    assert_eq!(rt.runs().rows_above_lease().await.unwrap(), 0);
    let run = rt.runs().get(&id).await.unwrap();
    assert_eq!(run.status, RunStatus::Succeeded);
    kill(first);
    kill(second);
    assert_same_session((&ref_env, &reference), (&env, &output(&rt, &id).await));
    assert!(has_no_duplicates(&env.effect_lines()));
}

#[tokio::test(flavor = "multi_thread")]
async fn approval_decided_from_another_process_finishes_on_another_worker() {
    let (env, rt, id) = Env::sqlite_run("gated").await;
    // An in-process worker runs the gated call up to its approval stop.
    let w = Worker::new(rt.clone(), WorkerOptions::named("starter"));
    assert_eq!(
        w.run_once().await.unwrap().unwrap().1,
        Outcome::Moved(RunStatus::Waiting)
    );
    let stopped = output(&rt, &id).await;
    let call = stopped.pending()[0].call.id.clone();
    assert!(env.effect_lines().is_empty());
    // Another process approves it, and a worker process that did not start the run takes
    // it from there (the writer's second call stops again: approved the same way).
    let finisher = env.worker("finisher", 1000, &[]);
    let mut call = call;
    let mut approved = Vec::new();
    let run = loop {
        let mut op = env.child(
            "approve",
            "op",
            0,
            &[("RATH_RT_RUN", id.as_str()), ("RATH_RT_CALL", &call)],
        );
        assert!(op.wait().unwrap().success());
        approved.push(call.clone());
        let run = rt
            .wait(&id, Duration::from_secs(30), Duration::from_millis(20))
            .await
            .unwrap();
        if run.status != RunStatus::Waiting {
            break run;
        }
        call = output(&rt, &id).await.pending()[0].call.id.clone();
    };
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.detail);
    kill(finisher);
    let claims = claims(&rt, &id).await;
    assert_eq!(claims.last().map(String::as_str), Some("finisher"));
    assert!(claims.contains(&"starter".to_owned()));
    assert_eq!(approved.len(), 2);
    assert_eq!(run.segment, 2);
    let out = output(&rt, &id).await;
    assert!(out.pending().is_empty());
    for call in &approved {
        assert!(rath_flow::decision_for(&out, call).is_some());
    }
    assert_eq!(env.effect_lines().len(), 2);
    assert!(has_no_duplicates(&env.effect_lines()));
}

async fn fencing_refuses_stale_writes(env: Env) {
    let rt = env.runtime().await;
    let id = submit(&rt, "team").await;
    let runs = rt.runs();
    let (_, old) = runs
        .claim("a", Duration::from_millis(50))
        .await
        .unwrap()
        .unwrap();
    runs.heartbeat(&old, Duration::from_millis(50))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(120)).await;
    let (_, new) = runs
        .claim("b", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(new.token, old.token + 1);
    let entry = rath_runtime::JournalEntry {
        step: "0/x".into(),
        seq: 0,
        request_hash: "h".into(),
        payload: "{}".into(),
        token: old.token,
    };
    let refused = runs.record(&old, &entry).await;
    assert!(
        matches!(refused, Err(RuntimeError::Fenced { token, current, .. }) if token == old.token && current == new.token)
    );
    assert!(matches!(
        runs.heartbeat(&old, Duration::from_secs(1)).await,
        Err(RuntimeError::Fenced { .. })
    ));
    assert!(matches!(
        runs.finish(&old, rath_runtime::Transition::to(RunStatus::Succeeded))
            .await,
        Err(RuntimeError::Fenced { .. })
    ));
    assert!(runs.journal(&id).await.unwrap().is_empty());
    runs.record(&new, &entry).await.unwrap();
    // A stale write and a current one handed over together (so most likely in one group
    // commit): the stale one is refused alone, the current one lands.
    let stale_entry = rath_runtime::JournalEntry {
        step: "0/stale".into(),
        ..entry.clone()
    };
    let fresh_entry = rath_runtime::JournalEntry {
        step: "0/fresh".into(),
        ..entry.clone()
    };
    let (stale, fresh) = tokio::join!(
        runs.record(&old, &stale_entry),
        runs.record(&new, &fresh_entry)
    );
    assert!(matches!(stale, Err(RuntimeError::Fenced { .. })));
    fresh.unwrap();
    let steps: Vec<String> = runs
        .journal(&id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.step)
        .collect();
    assert_eq!(steps, ["0/fresh", "0/x"]);
    // A cancel fences the holder too.
    runs.cancel(&id).await.unwrap();
    assert!(matches!(
        runs.record(&new, &entry).await,
        Err(RuntimeError::Fenced { .. })
    ));
    assert_eq!(runs.get(&id).await.unwrap().status, RunStatus::Cancelled);
    assert!(
        runs.claim("c", Duration::from_secs(1))
            .await
            .unwrap()
            .is_none()
    );
    assert!(matches!(
        runs.cancel(&id).await,
        Err(RuntimeError::BadState { .. })
    ));
    assert_eq!(
        runs.schema_version().await.unwrap(),
        rath_runtime::SCHEMA_VERSION
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn fencing_refuses_stale_writes_on_sqlite() {
    fencing_refuses_stale_writes(Env::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn fencing_refuses_stale_writes_on_postgres() {
    if let Some(env) = Env::postgres("fencing").await {
        fencing_refuses_stale_writes(env).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changed_definition_is_refused_unless_accepted() {
    let (env, rt, id) = Env::sqlite_run("team").await;
    let store: Arc<dyn SessionStore> = Arc::new(Store::at(env.sessions()));
    let changed = WorkflowRegistry::new().register("team", "team v2", || {
        Ok(Arc::new(rath_flow::EmptyWorkflow) as SharedWorkflow)
    });
    let rt2 = Runtime::new(RunStore::connect(&env.url).await.unwrap(), store, changed);
    let w = Worker::new(rt2.clone(), WorkerOptions::named("v2"));
    assert_eq!(
        w.run_once().await.unwrap().unwrap().1,
        Outcome::Moved(RunStatus::Failed)
    );
    let run = rt.runs().get(&id).await.unwrap();
    assert!(run.detail.unwrap().contains("changed since submission"));
    // Told to accept it, a worker runs the new definition.
    let id2 = rt
        .submit(
            &Stamper::seeded(9),
            "team",
            &Session::user_with("x", Stamper::seeded(8)),
            RunOptions::default(),
        )
        .await
        .unwrap();
    let w = Worker::new(
        rt2,
        WorkerOptions::named("v2").accept_changed_definitions(true),
    );
    assert_eq!(
        w.run_once().await.unwrap().unwrap(),
        (id2, Outcome::Moved(RunStatus::Succeeded))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_newer_schema_is_refused() {
    let env = Env::sqlite();
    let rt = env.runtime().await;
    let path = env.dir.path().join("runs.db");
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    sqlx::query("INSERT INTO rt_schema (version, what, applied_ms) VALUES (99, 'future', 0)")
        .execute(&pool)
        .await
        .unwrap();
    drop(rt);
    let again = RunStore::connect(&env.url).await;
    assert!(matches!(
        again,
        Err(RuntimeError::NewerSchema { found: 99, .. })
    ));
    assert!(matches!(
        RunStore::connect("mysql://x").await,
        Err(RuntimeError::BadUrl(_))
    ));
}

/// A PostgreSQL run store at schema v4 (its `rt_group` taking JSON rows) is brought to v5
/// when a store of this build connects: the JSON function is gone, the one left takes
/// arrays and keeps generic plans, and the store works.
#[tokio::test(flavor = "multi_thread")]
async fn a_v4_postgres_store_migrates_to_array_rows() {
    let Some(env) = Env::postgres("v4_to_v5").await else {
        return;
    };
    // Every rt_group: its arguments and its settings.
    let functions = |pool: sqlx::PgPool| async move {
        sqlx::query_as::<_, (String, Option<Vec<String>>)>(
            "SELECT pg_get_function_identity_arguments(oid), proconfig FROM pg_proc \
             WHERE proname = 'rt_group' ORDER BY 1",
        )
        .fetch_all(&pool)
        .await
        .unwrap()
    };
    let rt = env.runtime().await;
    let pool = sqlx::PgPool::connect(&env.url).await.unwrap();
    // Back to what v4 left: the function over JSON rows (here one that always answers
    // fenced, which sends every group the general way), no v5 row.
    for sql in [
        "DROP FUNCTION rt_group",
        "CREATE FUNCTION rt_group(now_ms bigint, tokens json, records json, effects json, \
         beats json, finishes json, events json, claims json, notify json) RETURNS json \
         LANGUAGE sql SET plan_cache_mode = force_generic_plan \
         AS $$ SELECT '{\"fenced\": true}'::json $$",
        "DELETE FROM rt_schema WHERE version >= 5",
    ] {
        sqlx::query(sql).execute(&pool).await.unwrap();
    }
    drop(rt);
    let before = functions(pool.clone()).await;
    assert_eq!(before.len(), 1);
    assert!(before[0].0.contains("tokens json"), "{before:?}");
    let rt = env.migrated().await;
    let after = functions(pool.clone()).await;
    assert_eq!(after.len(), 1, "{after:?}");
    assert!(
        after[0]
            .0
            .starts_with("now_ms bigint, t_run text[], t_token bigint[]"),
        "{after:?}"
    );
    assert_eq!(
        after[0].1.clone().unwrap_or_default(),
        vec!["plan_cache_mode=force_generic_plan".to_owned()]
    );
    let id = submit(&rt, "team").await;
    let w = Worker::new(rt.clone(), WorkerOptions::named("v5"));
    assert_eq!(
        w.run_once().await.unwrap().unwrap(),
        (id, Outcome::Moved(RunStatus::Succeeded))
    );
    pool.close().await;
}

/// A PostgreSQL run store at schema v5 (its keys under the database's default collation) is
/// brought to v6 when a store of this build connects: every key column compares as bytes,
/// and a run submitted before the migration is claimed and finished after it.
#[tokio::test(flavor = "multi_thread")]
async fn a_v5_postgres_store_migrates_to_byte_keys() {
    let Some(env) = Env::postgres("v5_to_v6").await else {
        return;
    };
    let keys = |pool: sqlx::PgPool| async move {
        sqlx::query_as::<_, (String, String, Option<String>)>(
            "SELECT table_name::text, column_name::text, collation_name::text \
             FROM information_schema.columns \
             WHERE table_name LIKE 'rt\\_%' AND column_name IN ('id', 'run_id', 'step', 'call_id') \
             AND table_name <> 'rt_schema' ORDER BY 1, 2",
        )
        .fetch_all(&pool)
        .await
        .unwrap()
    };
    let rt = env.runtime().await;
    let pool = sqlx::PgPool::connect(&env.url).await.unwrap();
    let id = submit(&rt, "team").await;
    // Back to what v5 left: the keys under the database's collation, no row of v6 or later.
    for (table, column) in [
        ("rt_runs", "id"),
        ("rt_leases", "run_id"),
        ("rt_journal", "run_id"),
        ("rt_journal", "step"),
        ("rt_effects", "run_id"),
        ("rt_effects", "step"),
        ("rt_effects", "call_id"),
        ("rt_events", "run_id"),
    ] {
        let sql = format!(
            "ALTER TABLE {table} ALTER COLUMN {column} TYPE text COLLATE pg_catalog.\"default\""
        );
        sqlx::query(&sql).execute(&pool).await.unwrap();
    }
    sqlx::query("DELETE FROM rt_schema WHERE version >= 6")
        .execute(&pool)
        .await
        .unwrap();
    drop(rt);
    let before = keys(pool.clone()).await;
    assert_eq!(before.len(), 8, "{before:?}");
    assert!(before.iter().all(|k| k.2.is_none()), "{before:?}");
    let rt = env.migrated().await;
    let after = keys(pool.clone()).await;
    assert_eq!(after.len(), 8, "{after:?}");
    assert!(
        after.iter().all(|k| k.2.as_deref() == Some("C")),
        "{after:?}"
    );
    let w = Worker::new(rt.clone(), WorkerOptions::named("v6"));
    assert_eq!(
        w.run_once().await.unwrap().unwrap(),
        (id, Outcome::Moved(RunStatus::Succeeded))
    );
    pool.close().await;
}

/// An in-process worker pool of `n` loops named `name`, running until the token is cancelled.
fn pool(
    rt: &Runtime,
    name: &str,
    n: usize,
) -> (
    rath_flow::CancellationToken,
    tokio::task::JoinHandle<Result<(), RuntimeError>>,
) {
    let shutdown = rath_flow::CancellationToken::new();
    let worker = Worker::new(rt.clone(), WorkerOptions::named(name).concurrency(n));
    let handle = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { worker.run(shutdown).await }
    });
    (shutdown, handle)
}

#[tokio::test(flavor = "multi_thread")]
async fn in_process_pool_runs_many_and_replays_nothing_twice() {
    let env = Env::sqlite();
    let rt = env.runtime().await;
    let mut ids = Vec::new();
    for i in 0..8u64 {
        let input = Session::user_with(format!("task {i}"), Stamper::seeded(100 + i));
        ids.push(
            rt.submit(
                &Stamper::seeded(200 + i),
                "team",
                &input,
                RunOptions::default().tag("batch"),
            )
            .await
            .unwrap(),
        );
    }
    let (shutdown, handle) = pool(&rt, "pool", 4);
    // One waiter for all eight: their runs come back in the order asked.
    let runs = rt
        .wait_all(&ids, Duration::from_secs(60), Duration::from_millis(250))
        .await
        .unwrap();
    assert_eq!(runs.iter().map(|r| r.id.clone()).collect::<Vec<_>>(), ids);
    for run in &runs {
        assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.detail);
    }
    // A run the store does not have is a typed error, not a wait until the timeout.
    let mut with_unknown = ids.clone();
    with_unknown.push(RunId("no-such-run".into()));
    match rt
        .wait_all(
            &with_unknown,
            Duration::from_secs(60),
            Duration::from_millis(20),
        )
        .await
    {
        Err(RuntimeError::NoSuchRun(id)) => assert_eq!(id, "no-such-run"),
        other => panic!("expected NoSuchRun, got {other:?}"),
    }
    shutdown.cancel();
    handle.await.unwrap().unwrap();
    let keys = env.effect_lines();
    assert_eq!(keys.len(), 16);
    assert!(has_no_duplicates(&keys), "{keys:#?}");
    assert_eq!(
        rt.runs()
            .list(Some(RunStatus::Succeeded))
            .await
            .unwrap()
            .len(),
        8
    );
    let _ = Path::new("");
}

#[tokio::test(flavor = "multi_thread")]
async fn wait_all_sees_runs_another_runtime_finished() {
    // The waiter's runtime writes nothing, so no local event tells it about these runs:
    // only its poll can, while the other runtime (its own connections, as another process
    // would have) runs them.
    let env = Env::sqlite();
    let waiter = env.runtime().await;
    let runner = env.runtime().await;
    let mut ids = Vec::new();
    for i in 0..3u64 {
        let input = Session::user_with(format!("task {i}"), Stamper::seeded(300 + i));
        ids.push(
            runner
                .submit(
                    &Stamper::seeded(400 + i),
                    "team",
                    &input,
                    RunOptions::default(),
                )
                .await
                .unwrap(),
        );
    }
    let (shutdown, handle) = pool(&runner, "other", 3);
    // wait_all's deadline is a guard against a hang, minutes above what the runs need.
    let runs = waiter
        .wait_all(&ids, Duration::from_secs(300), Duration::from_millis(50))
        .await
        .unwrap();
    assert!(
        runs.iter().all(|r| r.status == RunStatus::Succeeded),
        "{runs:#?}"
    );
    shutdown.cancel();
    handle.await.unwrap().unwrap();
}
