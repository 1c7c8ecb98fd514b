//! `durable_resume`: a worker process SIGKILLed at a fixed step of a durable run; a second
//! worker resumes the run from the journal and its session is the uninterrupted one.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use async_trait::async_trait;
use rath_flow::{Agent, Sequence, SharedWorkflow, ToolContext, ToolError, typed_tool};
use rath_persist::{SessionStore, Store};
use rath_provider::{
    Provider, ProviderError, ProviderManifest, ProviderRequest, ProviderResponse, ScriptedProvider,
    ScriptedResponse,
};
use rath_runtime::{
    RunClock, RunId, RunOptions, RunStatus, Runtime, Worker, WorkerOptions, WorkflowRegistry,
    current_call,
};
use rath_session::{Role, Session, Stamper};
use serde_json::json;

use super::{Ctx, Packet, Report};

/// Set (to the run's directory) when the xtask binary runs as the worker that is killed.
pub const CHILD_ENV: &str = "RATH_EVIDENCE_DURABLE_CHILD";

/// When the run starts in every worker here (`WorkerOptions::session_clock`), so the
/// resumed session is byte-identical to the uninterrupted one wherever and whenever the
/// packet is made: 2026-01-01T00:00:00Z, the deterministic stamper's epoch.
const SESSION_MS: i64 = 1_767_225_600_000;

/// The kill point: the third model reply recorded (the planner's last), before the
/// workflow sees it.
const CRASH_AT: &str = "step:3";

/// A model whose reply depends on the request only: `rounds` tool rounds, then text.
#[derive(Debug)]
struct RoundsModel {
    tool: &'static str,
    rounds: usize,
}

#[async_trait]
impl Provider for RoundsModel {
    fn name(&self) -> &str {
        "rounds"
    }
    async fn complete(&self, req: &ProviderRequest) -> Result<ProviderResponse, ProviderError> {
        let agent = req.agent.clone().unwrap_or_default();
        let prefix = format!("{agent}_");
        let done = req
            .messages
            .iter()
            .filter(|m| {
                m.role == Role::Tool
                    && m.tool_call_id
                        .as_deref()
                        .is_some_and(|c| c.starts_with(&prefix))
            })
            .count();
        let reply = if done < self.rounds {
            ScriptedResponse::tool_calls(vec![(
                format!("{agent}_{done}"),
                self.tool,
                json!({"text": format!("{agent} item {done}")}),
            )])
        } else {
            ScriptedResponse::text(format!("{agent}: {done} items handled"))
        };
        let prompt = req.messages.len() as u64;
        ScriptedProvider::new(vec![reply.usage(12 * prompt, 4)])
            .complete(req)
            .await
    }
    fn manifest(&self) -> ProviderManifest {
        ProviderManifest::new("rounds")
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Item {
    text: String,
}

/// The workflow: a planner that looks two items up (idempotent), then a writer that files
/// two (not idempotent: each call appends its idempotency key to `effects`, a file outside
/// the stores).
fn registry(effects: PathBuf) -> WorkflowRegistry {
    WorkflowRegistry::new().register(
        "plan_and_file",
        "plan_and_file v1: planner(lookup x2) then filer(file x2)",
        move || {
            let lookup = typed_tool(
                "lookup",
                "Look an item up.",
                |_cx: ToolContext, a: Item| async move {
                    Ok::<_, ToolError>(json!({"found": a.text.len()}))
                },
            )
            .idempotent(true);
            let effects = effects.clone();
            let file = typed_tool("file", "File an item.", move |_cx: ToolContext, a: Item| {
                let effects = effects.clone();
                async move {
                    let key = current_call()
                        .map(|c| c.idempotency_key)
                        .unwrap_or_default();
                    let mut f = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&effects)
                        .map_err(|e| ToolError::exception(e.to_string()))?;
                    // One write per line: concurrent calls append whole lines (O_APPEND).
                    f.write_all(format!("{key}\n").as_bytes())
                        .map_err(|e| ToolError::exception(e.to_string()))?;
                    Ok::<_, ToolError>(json!({"filed": a.text}))
                }
            });
            let planner = Agent::new(
                "planner",
                "Plan.",
                RoundsModel {
                    tool: "lookup",
                    rounds: 2,
                },
            )
            .with_tool(lookup)?;
            let filer = Agent::new(
                "filer",
                "File.",
                RoundsModel {
                    tool: "file",
                    rounds: 2,
                },
            )
            .with_tool(file)?;
            Ok(
                Arc::new(Sequence::new("plan_and_file").then(planner).then(filer))
                    as SharedWorkflow,
            )
        },
    )
}

struct Place {
    root: PathBuf,
}

impl Place {
    fn url(&self) -> String {
        format!("sqlite:{}", self.root.join("runs.db").display())
    }
    fn sessions(&self) -> PathBuf {
        self.root.join("sessions")
    }
    fn effects(&self) -> PathBuf {
        self.root.join("effects.txt")
    }
    async fn runtime(&self) -> Result<Runtime> {
        let store: Arc<dyn SessionStore> = Arc::new(Store::at(self.sessions()));
        Ok(Runtime::connect(&self.url(), store, registry(self.effects())).await?)
    }
}

/// When the binary was started as the worker to kill: claims the run and works on it until
/// the crash point kills it. Returns `None` in a normal run.
pub fn child_main() -> Option<std::process::ExitCode> {
    let root = PathBuf::from(std::env::var_os(CHILD_ENV)?);
    let run = || -> Result<()> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        rt.block_on(async {
            let place = Place { root };
            let runtime = place.runtime().await?;
            let opts = WorkerOptions::named("worker-1")
                .lease(Duration::from_millis(800))
                .session_clock(RunClock::manual(SESSION_MS));
            Worker::new(runtime, opts).run_once().await?;
            Ok::<(), anyhow::Error>(())
        })
    };
    Some(match run() {
        // Reaching here means the crash point did not fire: the parent reports it.
        Ok(()) => std::process::ExitCode::from(3),
        Err(e) => {
            eprintln!("durable child: {e:#}");
            std::process::ExitCode::FAILURE
        }
    })
}

/// The `durable_resume` packet.
pub fn durable_resume() -> Packet {
    Packet {
        name: "durable_resume",
        about: "A durable run (planner + filer, scripted models, a non-idempotent tool) on a \
                SQLite run store: worker process 1 is SIGKILLed at a fixed step \
                (RATH_RUNTIME_CRASH=step:3); worker 2 claims it once the lease expires, replays \
                the journal and finishes; the session is byte-identical to the uninterrupted run.",
        env: &[],
        build: build_durable,
    }
}

async fn submit(rt: &Runtime) -> Result<RunId> {
    let input = Session::user_with("Plan two items, then file them.", Stamper::seeded(11));
    Ok(rt
        .submit(
            &Stamper::seeded(12),
            "plan_and_file",
            &input,
            RunOptions::default(),
        )
        .await?)
}

async fn output_file(rt: &Runtime, place: &Place, id: &RunId) -> Result<Vec<u8>> {
    let out = rt
        .output(id)
        .await?
        .ok_or_else(|| anyhow!("no output session"))?;
    let path = place.sessions().join(format!("{}.jsonl", out.id()));
    std::fs::read(&path).with_context(|| format!("read {}", path.display()))
}

fn kill_at_step(place: &Place) -> Result<String> {
    let exe = std::env::current_exe()?;
    let status = Command::new(exe)
        .env(CHILD_ENV, &place.root)
        .env("RATH_RUNTIME_CRASH", CRASH_AT)
        .env_remove("RATH_RUNTIME_STOP")
        .env_remove("RATH_RUNTIME_PAUSE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("spawn the worker to kill")?;
    use std::os::unix::process::ExitStatusExt as _;
    match status.signal() {
        Some(9) => Ok("worker-1 ended by SIGKILL".into()),
        _ => bail!("worker-1 was not killed at {CRASH_AT}: {status}"),
    }
}

/// The run's record without wall-clock values: events (kind, detail, by), journal rows
/// (key and the token that wrote them), ledger rows.
async fn record(rt: &Runtime, id: &RunId) -> Result<serde_json::Value> {
    let run = rt.runs().get(id).await?;
    let events: Vec<_> = rt
        .runs()
        .events(id, 0)
        .await?
        .into_iter()
        .filter(|e| e.kind != "session")
        .map(|e| json!({"seq": e.seq, "kind": e.kind, "detail": e.detail, "by": e.by}))
        .collect();
    let journal: Vec<_> = rt
        .runs()
        .journal(id)
        .await?
        .into_iter()
        .map(|j| json!({"key": format!("{}#{}", j.step, j.seq), "token": j.token}))
        .collect();
    let effects: Vec<_> = rt
        .runs()
        .effects(id)
        .await?
        .into_iter()
        .map(|e| {
            json!({"step": e.step, "call_id": e.call_id, "tool": e.tool,
                   "state": e.state.as_str(), "idempotency_key": e.idempotency_key})
        })
        .collect();
    Ok(json!({
        "run": id.as_str(),
        "status": run.status.as_str(),
        "attempts": run.attempts,
        "events": events,
        "journal": journal,
        "effects": effects,
    }))
}

async fn wait_claim(w: &Worker) -> Result<(RunId, rath_runtime::Outcome)> {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(done) = w.run_once().await? {
            return Ok(done);
        }
        if Instant::now() > until {
            bail!("the killed worker's lease never expired");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn lines(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn build_durable(ctx: &mut Ctx) -> Result<Report> {
    let mut r = Report::new(
        &[
            "a worker process killed with SIGKILL at a fixed step of a durable run (its third \
             model reply recorded, not yet seen by the workflow) loses nothing: a second worker \
             claims the run once the lease expired, with the next fencing token",
            "the second worker re-forwards the input with the run's seeded stamper and is served \
             the recorded replies and tool answers; the output session file is byte-identical \
             to the same run done without the kill",
            "the non-idempotent tool's effects (idempotency keys appended to a file outside the \
             stores) happened once each, with the same keys as in the uninterrupted run",
            "the resume evidence lives in the run store, not in the session: two claims (worker-1 \
             with token 1, worker-2 with token 2) and the journal rows written under each token",
        ],
        &[
            "PostgreSQL, many workers and random kill points: rath-runtime's durable and chaos \
             tests cover those; this packet kills at one fixed point so it reproduces",
            "a crash between a tool's effect and its recording (an ambiguous call): \
             tests/durable.rs covers it",
        ],
    );
    let reference = Place {
        root: ctx.tmp_dir("reference")?,
    };
    let crashed = Place {
        root: ctx.tmp_dir("crashed")?,
    };
    let (ref_id, ref_file, ref_record) = ctx.block_on(async {
        let rt = reference.runtime().await?;
        let id = submit(&rt).await?;
        let opts = WorkerOptions::named("reference").session_clock(RunClock::manual(SESSION_MS));
        Worker::new(rt.clone(), opts).run_once().await?;
        let file = output_file(&rt, &reference, &id).await?;
        Ok::<_, anyhow::Error>((id.clone(), file, record(&rt, &id).await?))
    })??;
    let id = ctx.block_on(async { submit(&crashed.runtime().await?).await })??;
    r.check_eq(
        "same run id in both stores (seeded stamper)",
        id.as_str(),
        ref_id.as_str(),
    );
    let killed = kill_at_step(&crashed)?;
    r.check("worker-1 killed at step 3", true, killed);
    let (outcome, file, rec) = ctx.block_on(async {
        let rt = crashed.runtime().await?;
        let opts = WorkerOptions::named("worker-2").session_clock(RunClock::manual(SESSION_MS));
        let w2 = Worker::new(rt.clone(), opts);
        let (_, outcome) = wait_claim(&w2).await?;
        let file = output_file(&rt, &crashed, &id).await?;
        Ok::<_, anyhow::Error>((outcome, file, record(&rt, &id).await?))
    })??;
    r.check_eq(
        "worker-2 finished the run",
        format!("{outcome:?}"),
        format!("{:?}", rath_runtime::Outcome::Moved(RunStatus::Succeeded)),
    );
    r.check_eq(
        "session file byte-identical to the uninterrupted run",
        super::sha256_hex(&file),
        super::sha256_hex(&ref_file),
    );
    let (keys, ref_keys) = (lines(&crashed.effects()), lines(&reference.effects()));
    r.check_eq("effects: the same keys, once each", &keys, &ref_keys);
    r.check_eq("two filings", keys.len(), 2);
    r.check_eq("two claims", rec["attempts"].as_i64(), Some(2));
    let tokens: Vec<i64> = rec["journal"]
        .as_array()
        .map(|a| a.iter().filter_map(|j| j["token"].as_i64()).collect())
        .unwrap_or_default();
    r.check_eq(
        "journal rows: the run's start time and 3 replies by worker-1 (token 1), 3 replies by \
         worker-2 (token 2), which read the start time back",
        (
            tokens.iter().filter(|t| **t == 1).count(),
            tokens.iter().filter(|t| **t == 2).count(),
        ),
        (4, 3),
    );
    r.check_eq(
        "ledger rows equal the reference's",
        &rec["effects"],
        &ref_record["effects"],
    );
    ctx.write("session_uninterrupted.jsonl", &ref_file)?;
    ctx.write("session_resumed.jsonl", &file)?;
    ctx.write_json("run_resumed.json", &rec)?;
    ctx.write_json("run_uninterrupted.json", &ref_record)?;
    ctx.write("effects.txt", keys.join("\n") + "\n")?;
    r.note(
        "The session carries no resume evidence of its own (it is the uninterrupted one, byte \
         for byte); the resume shows in run_resumed.json: the `claimed` events of worker-1 \
         (token 1) and worker-2 (token 2) and the token of every journal row. `session` events \
         (written as the session grows) are left out: how many a killed worker got in before \
         the kill depends on timing.",
    );
    Ok(r)
}
