//! `rath worker` and `rath runs`: durable runs over a run store (rath-runtime).
//!
//! Both name the run store with `--runs URL` (`sqlite:FILE` or `postgres://...`), else
//! `$RATH_RUNS`, else `sqlite:<OPENRATH_HOME>/runs.db`; sessions go to the `--store` store.
//! The workers run the bundled workflows (`rath_runtime::bundled`), or with
//! `--workflows DIR` the declared ones of DIR ([`crate::workflows`]); a program with its
//! own compiled workflows calls `openrath::work` with its own registry.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use rath_persist::SessionStore;
use rath_runtime::bundled::BundledOptions;
use rath_runtime::{
    Effect, EffectState, Lease, Resolution, Run, RunEvent, RunId, RunOptions, RunStatus, Runtime,
    RuntimeError, WorkerOptions, WorkflowRegistry,
};
use rath_session::{PendingCall, Session, SessionId, Stamper};
use serde::Serialize;

use crate::{Failure, Output, json};

impl From<RuntimeError> for Failure {
    fn from(e: RuntimeError) -> Self {
        Failure(e.to_string())
    }
}

/// An hour in milliseconds: the bound of `--poll-ms` and `--think-ms`.
const HOUR_MS: u64 = 60 * 60 * 1000;

/// A day in milliseconds: the bound of `--grace-ms`.
const DAY_MS: u64 = 24 * HOUR_MS;

/// A year in milliseconds: the bound of `--deadline-ms`.
const YEAR_MS: u64 = 365 * DAY_MS;

/// The longest `--lease-ms`: the runtime's [`rath_runtime::MAX_LEASE`].
const MAX_LEASE_MS: u64 = rath_runtime::MAX_LEASE.as_millis() as u64;

/// The most runs a worker takes at once.
const MAX_CONCURRENCY: u64 = 1024;

/// `rath worker`'s options.
#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    /// The run store: `sqlite:FILE` or `postgres://USER@HOST/DB` (default: $RATH_RUNS, else
    /// `sqlite:<OPENRATH_HOME>/runs.db`).
    #[arg(long, value_name = "URL")]
    runs: Option<String>,
    /// Its name in leases, events and logs (unique per worker; default `rath-worker-<pid>`).
    #[arg(long)]
    name: Option<String>,
    /// Runs at once (1 to 1024).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_CONCURRENCY))]
    concurrency: usize,
    /// Lease length in milliseconds, 30 to 86400000 (a day); a heartbeat renews it every
    /// third of it.
    #[arg(long, value_name = "MS", default_value_t = 5000, value_parser = crate::duration(30, MAX_LEASE_MS))]
    lease_ms: u64,
    /// On SIGTERM/ctrl-c, how long runs in flight may go on before they are handed back (a
    /// second signal hands them back at once); at most a day.
    #[arg(long, value_name = "MS", default_value_t = 10_000, value_parser = crate::duration(0, DAY_MS))]
    grace_ms: u64,
    /// Sleep between claims that found nothing (1 ms to an hour).
    #[arg(long, value_name = "MS", default_value_t = 100, value_parser = crate::duration(1, HOUR_MS))]
    poll_ms: u64,
    /// The file the bundled `record` tool appends each call's idempotency key to.
    #[arg(long, value_name = "FILE")]
    effects: Option<PathBuf>,
    /// The bundled model's latency per reply (at most an hour).
    #[arg(long, value_name = "MS", default_value_t = 0, value_parser = crate::duration(0, HOUR_MS))]
    think_ms: u64,
    /// Run a workflow whose definition changed since the run was submitted.
    #[arg(long)]
    accept_changed_definitions: bool,
    /// Run the declared workflows of DIR (every `*.toml` in it) instead of the bundled
    /// ones; a bad file stops the worker at start, naming the file and line.
    #[arg(long, value_name = "DIR")]
    workflows: Option<PathBuf>,
}

/// `rath runs [--runs URL] ...`.
#[derive(Debug, Args)]
pub(crate) struct RunsArgs {
    /// The run store: `sqlite:FILE` or `postgres://USER@HOST/DB` (default: $RATH_RUNS, else
    /// `sqlite:<OPENRATH_HOME>/runs.db`).
    #[arg(long, global = true, value_name = "URL")]
    runs: Option<String>,
    /// The declared workflows of DIR (what `submit` names), instead of the bundled ones.
    #[arg(long, global = true, value_name = "DIR")]
    workflows: Option<PathBuf>,
    #[command(subcommand)]
    command: RunsCommand,
}

/// `rath runs ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum RunsCommand {
    /// Submit a run of a bundled workflow (`team`, `gated`) on a one-message input session;
    /// prints the run id.
    Submit {
        /// The workflow.
        workflow: String,
        /// The user message of the input session.
        #[arg(long, value_name = "TEXT")]
        input: String,
        /// A tag (repeatable).
        #[arg(long = "tag", value_name = "TAG")]
        tags: Vec<String>,
        /// The run times out when a worker finds it unfinished this long after submission
        /// (at most a year).
        #[arg(long, value_name = "MS", value_parser = crate::duration(0, YEAR_MS))]
        deadline_ms: Option<u64>,
        /// Attempts in all when the workflow fails (1: no retry; at most 1000).
        #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
        attempts: u32,
    },
    /// List runs: id, workflow, status, attempts, tags.
    List {
        /// Only runs in this status (queued, running, waiting, succeeded, failed,
        /// cancelled, timed_out, needs_review).
        #[arg(long)]
        status: Option<String>,
    },
    /// Show a run: status, attempts, lease, ledger entries (ambiguous calls first in a run
    /// under review), pending calls of a waiting run, and its events.
    Show {
        /// The run id (or a unique prefix or suffix of one).
        id: String,
    },
    /// Cancel a run that has not finished (its worker is fenced at once).
    Cancel {
        /// The run id (or a unique prefix or suffix of one).
        id: String,
    },
    /// Settle the ambiguous call of a run in review and requeue it (or fail it).
    Resolve {
        /// The run id (or a unique prefix or suffix of one).
        id: String,
        /// The ambiguous call's id (as `rath runs show` lists it).
        call: String,
        /// The effect happened and this is the tool's answer: serve it.
        #[arg(long, value_name = "RESULT")]
        succeeded: Option<String>,
        /// The effect failed with this message: serve that failure.
        #[arg(long, value_name = "MESSAGE")]
        failed: Option<String>,
        /// The effect did not happen: dispatch the call again.
        #[arg(long)]
        rerun: bool,
        /// Give the run up: it fails with this reason.
        #[arg(long, value_name = "REASON")]
        fail_run: Option<String>,
    },
    /// Approve a pending call of a waiting run; any worker resumes it.
    Approve {
        /// The run id (or a unique prefix or suffix of one).
        id: String,
        /// The pending call (default: the only one).
        call: Option<String>,
        /// Who decided (recorded on the session).
        #[arg(long, default_value = "operator")]
        by: String,
    },
    /// Reject a pending call of a waiting run (it is answered `denied_by_policy`); any worker
    /// resumes it.
    Reject {
        /// The run id (or a unique prefix or suffix of one).
        id: String,
        /// The pending call (default: the only one).
        call: Option<String>,
        /// Why.
        #[arg(long, default_value = "rejected by an operator")]
        reason: String,
        /// Who decided (recorded on the session).
        #[arg(long, default_value = "operator")]
        by: String,
    },
}

/// The run store URL: `--runs`, else `$RATH_RUNS`, else the SQLite file in the OpenRath home.
fn runs_url(flag: Option<&str>) -> String {
    flag.map(str::to_owned)
        .or_else(|| {
            std::env::var("RATH_RUNS")
                .ok()
                .filter(|v| !v.trim().is_empty())
        })
        .unwrap_or_else(|| {
            format!(
                "sqlite:{}",
                rath_persist::openrath_home().join("runs.db").display()
            )
        })
}

fn block_on<T>(f: impl std::future::Future<Output = Result<T, Failure>>) -> Result<T, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(crate::alloc::on_park)
        .build()
        .map_err(|e| Failure(format!("cannot start the async runtime: {e}")))?
        .block_on(f)
}

async fn runtime(runs: &str, store: &str, registry: WorkflowRegistry) -> Result<Runtime, Failure> {
    let sessions: Arc<dyn SessionStore> = Arc::from(rath_store_sql::open_store(store).await?);
    Ok(Runtime::connect(runs, sessions, registry).await?)
}

/// `rath worker`: runs until SIGTERM or ctrl-c, logging through `tracing` on stderr and
/// exporting its spans when an OTLP endpoint is set ([`crate::telemetry`]).
pub(crate) fn worker(store: &str, a: &WorkerArgs, as_json: bool) -> Result<Output, Failure> {
    let runs = runs_url(a.runs.as_deref());
    let name = a
        .name
        .clone()
        .unwrap_or_else(|| format!("rath-worker-{}", std::process::id()));
    let opts = WorkerOptions::named(&name)
        .concurrency(a.concurrency)
        .lease(Duration::from_millis(a.lease_ms))
        .poll(Duration::from_millis(a.poll_ms.max(1)))
        .grace(Duration::from_millis(a.grace_ms))
        .accept_changed_definitions(a.accept_changed_definitions);
    let bundled = BundledOptions {
        effects: a.effects.clone(),
        think: Duration::from_millis(a.think_ms),
    };
    let report = block_on(async {
        // Checked (and a declared file's MCP servers started) before anything is opened.
        let registry = crate::workflows::registry(a.workflows.as_deref(), &bundled).await?;
        let telemetry = crate::telemetry::init()?;
        let served = async {
            let rt = runtime(&runs, store, registry).await?;
            Ok::<_, Failure>(rath_runtime::serve_worker(rt, opts).await?)
        }
        .await;
        telemetry.shutdown();
        served
    })?;
    Ok(Output::ok(if as_json {
        json(&serde_json::json!({"worker": name, "stopped_on": report.signal}))?
    } else {
        format!("worker {name} stopped on {}\n", report.signal)
    }))
}

/// `rath runs ...`.
pub(crate) fn runs(store: &str, a: &RunsArgs, as_json: bool) -> Result<Output, Failure> {
    let runs = runs_url(a.runs.as_deref());
    let registry = crate::workflows::definitions(a.workflows.as_deref())?;
    block_on(async {
        let rt = runtime(&runs, store, registry).await?;
        runs_async(&rt, &a.command, as_json).await
    })
}

async fn runs_async(rt: &Runtime, cmd: &RunsCommand, as_json: bool) -> Result<Output, Failure> {
    match cmd {
        RunsCommand::Submit {
            workflow,
            input,
            tags,
            deadline_ms,
            attempts,
        } => submit(rt, workflow, input, tags, *deadline_ms, *attempts, as_json).await,
        RunsCommand::List { status } => list(rt, status.as_deref(), as_json).await,
        RunsCommand::Show { id } => show(rt, id, as_json).await,
        RunsCommand::Cancel { id } => {
            let id = find(rt, id).await?;
            rt.cancel(&id).await?;
            done(rt, &id, "cancelled", as_json).await
        }
        RunsCommand::Resolve {
            id,
            call,
            succeeded,
            failed,
            rerun,
            fail_run,
        } => {
            let how = match (succeeded, failed, rerun, fail_run) {
                (Some(r), None, false, None) => Resolution::Answered(r.clone()),
                (None, Some(m), false, None) => Resolution::Failed(m.clone()),
                (None, None, true, None) => Resolution::Rerun,
                (None, None, false, Some(why)) => Resolution::Fail(why.clone()),
                _ => {
                    return Err(Failure(
                        "resolve needs exactly one of --succeeded RESULT, --failed MESSAGE, \
                         --rerun, --fail-run REASON"
                            .into(),
                    ));
                }
            };
            let id = find(rt, id).await?;
            rt.runs().resolve(&id, call, &how).await?;
            done(rt, &id, &format!("resolved {call}"), as_json).await
        }
        RunsCommand::Approve { id, call, by } => {
            let id = find(rt, id).await?;
            let call = pending_call(rt, &id, call.as_deref()).await?;
            rt.approve(&id, &call, by).await?;
            done(rt, &id, &format!("approved {call}"), as_json).await
        }
        RunsCommand::Reject {
            id,
            call,
            reason,
            by,
        } => {
            let id = find(rt, id).await?;
            let call = pending_call(rt, &id, call.as_deref()).await?;
            rt.reject(&id, &call, by, reason).await?;
            done(rt, &id, &format!("rejected {call}"), as_json).await
        }
    }
}

async fn submit(
    rt: &Runtime,
    workflow: &str,
    input: &str,
    tags: &[String],
    deadline_ms: Option<u64>,
    attempts: u32,
    as_json: bool,
) -> Result<Output, Failure> {
    if attempts == 0 {
        return Err(Failure("--attempts must be at least 1".into()));
    }
    let mut options = RunOptions::default().retry(attempts);
    if let Some(ms) = deadline_ms {
        options = options.deadline(Duration::from_millis(ms));
    }
    for t in tags {
        options = options.tag(t.clone());
    }
    let stamper = Stamper::system();
    let session = Session::user_with(input, stamper.clone());
    let id = rt.submit(&stamper, workflow, &session, options).await?;
    done(rt, &id, "submitted", as_json).await
}

/// One line (or the run as JSON) after a command changed a run.
async fn done(rt: &Runtime, id: &RunId, what: &str, as_json: bool) -> Result<Output, Failure> {
    let run = rt.runs().get(id).await?;
    Ok(Output::ok(if as_json {
        json(&run)?
    } else {
        format!("{id} {what}: {}\n", run.status)
    }))
}

/// A run id as given, or the one run whose id starts or ends with it.
async fn find(rt: &Runtime, given: &str) -> Result<RunId, Failure> {
    let exact = RunId(given.to_owned());
    match rt.runs().get(&exact).await {
        Ok(_) => return Ok(exact),
        Err(RuntimeError::NoSuchRun(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let matches: Vec<RunId> = rt
        .runs()
        .list(None)
        .await?
        .into_iter()
        .map(|r| r.id)
        .filter(|id| !given.is_empty() && (id.0.starts_with(given) || id.0.ends_with(given)))
        .collect();
    match matches.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(Failure(format!("no run {given}"))),
        many => Err(Failure(format!(
            "run id {given} is ambiguous: {} runs match ({}, ...)",
            many.len(),
            many[0]
        ))),
    }
}

async fn pending(rt: &Runtime, id: &RunId) -> Result<Vec<PendingCall>, Failure> {
    let run = rt.runs().get(id).await?;
    if run.status != RunStatus::Waiting {
        return Ok(Vec::new());
    }
    Ok(match &run.output_session {
        Some(s) => rt
            .sessions()
            .load(&SessionId::new(s.as_str()))
            .await?
            .session
            .pending()
            .to_vec(),
        None => Vec::new(),
    })
}

async fn pending_call(rt: &Runtime, id: &RunId, given: Option<&str>) -> Result<String, Failure> {
    if let Some(c) = given {
        return Ok(c.to_owned());
    }
    let calls = pending(rt, id).await?;
    match calls.as_slice() {
        [one] => Ok(one.call.id.clone()),
        [] => {
            let run = rt.runs().get(id).await?;
            Err(Failure(format!(
                "run {id} is {}: no pending call to decide",
                run.status
            )))
        }
        many => Err(Failure(format!(
            "run {id} has {} pending calls: name one ({})",
            many.len(),
            many.iter()
                .map(|p| p.call.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

async fn list(rt: &Runtime, status: Option<&str>, as_json: bool) -> Result<Output, Failure> {
    let status = match status {
        None => None,
        Some(s) => Some(
            RunStatus::ALL
                .into_iter()
                .find(|st| st.as_str() == s)
                .ok_or_else(|| {
                    Failure(format!(
                        "unknown status {s:?} (one of {})",
                        RunStatus::ALL.map(RunStatus::as_str).join(", ")
                    ))
                })?,
        ),
    };
    let runs = rt.runs().list(status).await?;
    if as_json {
        return Ok(Output::ok(json(&serde_json::json!({ "runs": runs }))?));
    }
    let mut out = format!(
        "{:<34} {:<10} {:<13} {:>8}  tags\n",
        "id", "workflow", "status", "attempts"
    );
    for r in &runs {
        out.push_str(&format!(
            "{:<34} {:<10} {:<13} {:>8}  {}\n",
            r.id,
            r.workflow,
            r.status.as_str(),
            r.attempts,
            r.options.tags.join(",")
        ));
    }
    out.push_str(&format!("{} run(s)\n", runs.len()));
    Ok(Output::ok(out))
}

/// What `rath runs show` prints.
#[derive(Serialize)]
struct Shown {
    run: Run,
    lease: ShownLease,
    ambiguous: Vec<Effect>,
    ledger: Vec<Effect>,
    journal_entries: usize,
    pending: Vec<PendingCall>,
    events: Vec<RunEvent>,
}

#[derive(Serialize)]
struct ShownLease {
    worker: String,
    token: i64,
    expires_ms: i64,
}

impl From<Lease> for ShownLease {
    fn from(l: Lease) -> Self {
        ShownLease {
            worker: l.worker,
            token: l.token,
            expires_ms: l.expires_ms,
        }
    }
}

async fn show(rt: &Runtime, id: &str, as_json: bool) -> Result<Output, Failure> {
    let id = find(rt, id).await?;
    let runs = rt.runs();
    let ledger = runs.effects(&id).await?;
    let shown = Shown {
        run: runs.get(&id).await?,
        lease: runs.lease(&id).await?.into(),
        ambiguous: ledger
            .iter()
            .filter(|e| e.state == EffectState::Ambiguous)
            .cloned()
            .collect(),
        ledger,
        journal_entries: runs.journal(&id).await?.len(),
        pending: pending(rt, &id).await?,
        events: runs.events(&id, 0).await?,
    };
    Ok(Output::ok(if as_json {
        json(&shown)?
    } else {
        render(&shown)
    }))
}

fn render(s: &Shown) -> String {
    let r = &s.run;
    let mut out = format!("run {}\n", r.id);
    let line = |out: &mut String, k: &str, v: &str| out.push_str(&format!("  {k:<11} {v}\n"));
    line(
        &mut out,
        "workflow",
        &format!("{} (definition {})", r.workflow, short(&r.definition_hash)),
    );
    line(&mut out, "status", r.status.as_str());
    line(
        &mut out,
        "attempts",
        &format!("{} (failed {})", r.attempts, r.failures),
    );
    line(&mut out, "segment", &r.segment.to_string());
    line(&mut out, "input", &r.input_session);
    line(
        &mut out,
        "output",
        r.output_session.as_deref().unwrap_or("-"),
    );
    if !r.options.tags.is_empty() {
        line(&mut out, "tags", &r.options.tags.join(", "));
    }
    if let Some(d) = r.options.deadline {
        line(&mut out, "deadline", &format!("{} ms", d.as_millis()));
    }
    line(
        &mut out,
        "lease",
        &format!(
            "{} (token {})",
            if s.lease.worker.is_empty() {
                "-"
            } else {
                &s.lease.worker
            },
            s.lease.token
        ),
    );
    if let Some(d) = &r.detail {
        line(&mut out, "detail", d);
    }
    for e in &s.ambiguous {
        out.push_str(&format!(
            "AMBIGUOUS {} {} at {} (args {}, key {}): the tool may or may not have acted.\n  settle it: rath runs resolve {} {} --succeeded RESULT | --failed MESSAGE | --rerun | --fail-run REASON\n",
            e.tool, e.call_id, e.step, e.args, e.idempotency_key, r.id, e.call_id
        ));
    }
    for p in &s.pending {
        out.push_str(&format!(
            "PENDING {} {} {} ({}): rath runs approve {} {} | rath runs reject {} {}\n",
            p.call.id,
            p.call.function.name,
            p.call.function.arguments,
            p.reason,
            r.id,
            p.call.id,
            r.id,
            p.call.id
        ));
    }
    out.push_str(&format!("ledger ({} entries):\n", s.ledger.len()));
    for e in &s.ledger {
        out.push_str(&format!(
            "  {:<12} {:<16} {:<8} {:<10} key {}\n",
            e.step,
            e.call_id,
            e.tool,
            e.state.as_str(),
            short(&e.idempotency_key)
        ));
    }
    out.push_str(&format!(
        "journal: {} recorded model replies\n",
        s.journal_entries
    ));
    out.push_str(&format!("events ({}):\n", s.events.len()));
    for e in &s.events {
        out.push_str(&format!(
            "  {:>3} +{:>6} ms {:<8} by {:<16} {}\n",
            e.seq,
            e.at_ms - r.submitted_ms,
            e.kind,
            e.by,
            e.detail
        ));
    }
    out
}

fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}
