//! `rath run NAME --input TEXT`: one run of a registered workflow in the foreground, on the
//! store `--store` names (the embedded JSONL store by default), with a progress line on
//! stderr per step (an agent starting and ending, each model reply, each tool call), the
//! answer on stdout, and where its sessions were stored. A failed run is kept as far as it
//! got, and the exit code is 1.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;

use openrath::declare::Declared;
use openrath::flow::{FlowContext, FlowEvent};
use openrath::run_store::RunStore;
use openrath::runtime::WorkflowRegistry;
use openrath::runtime::bundled::BundledOptions;
use openrath::session::{Session, Stamper};

use crate::{Failure, Output, json};

/// `rath run`'s arguments.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The workflow to run: a declared workflow's file (`*.toml`), a workflow of
    /// `--workflows DIR`, or a bundled one (`team`, `gated`).
    name: String,
    /// The user message the run starts from.
    #[arg(long, value_name = "TEXT")]
    input: String,
    /// The declared workflows NAME is one of (every `*.toml` in DIR).
    #[arg(long, value_name = "DIR")]
    workflows: Option<PathBuf>,
}

/// One progress line per step, on stderr, with the time since the run started.
fn progress(started: Instant) -> impl Fn(&FlowEvent<'_>) + Send + Sync {
    move |event| {
        let at = started.elapsed().as_secs_f64();
        let who = |agent: Option<&str>| agent.unwrap_or("-").to_owned();
        let line = match event {
            FlowEvent::AgentStart { agent, .. } => format!("{agent}: started"),
            FlowEvent::AgentEnd { agent, outcome } => match outcome {
                Ok(s) => format!("{agent}: done ({} chunks)", s.len()),
                Err(e) => format!("{agent}: failed: {e}"),
            },
            FlowEvent::Reply { agent, outcome, .. } => match outcome {
                Ok(r) if r.tool_calls().is_empty() => {
                    format!("{}: model answered", who(*agent))
                }
                Ok(r) => {
                    let names: Vec<&str> = r
                        .tool_calls()
                        .iter()
                        .map(|c| c.function.name.as_str())
                        .collect();
                    format!("{}: model calls {}", who(*agent), names.join(", "))
                }
                Err(e) => format!("{}: model failed: {e}", who(*agent)),
            },
            FlowEvent::ToolEnd {
                agent,
                call,
                outcome,
                ..
            } => format!("{}: tool {} {outcome}", who(*agent), call.function.name),
            _ => return,
        };
        eprintln!("rath: {at:7.2}s  {line}");
    }
}

/// The workflows `rath run` chooses from, and the name of the one to run: a file's, the
/// directory's, or the bundled ones.
async fn registry(args: &RunArgs) -> Result<(WorkflowRegistry, String), Failure> {
    let file = Path::new(&args.name);
    if args.name.ends_with(".toml") || file.is_file() {
        let text = std::fs::read_to_string(file)
            .map_err(|e| Failure(format!("{}: {e}", file.display())))?;
        let declared = Declared::parse_str(file, &text)?;
        let name = declared
            .names()
            .first()
            .map(|n| (*n).to_owned())
            .unwrap_or_default();
        return Ok((crate::workflows::declared_registry(declared).await?, name));
    }
    let registry =
        crate::workflows::registry(args.workflows.as_deref(), &BundledOptions::default()).await?;
    Ok((registry, args.name.clone()))
}

/// Runs `args.name` on the store `store` names (`None`: the default JSONL directory) and
/// reports it.
pub(crate) fn run(store: Option<&str>, args: &RunArgs, as_json: bool) -> Result<Output, Failure> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure(format!("cannot start the async runtime: {e}")))?;
    rt.block_on(async {
        // The workflows first: a declared file's MCP servers start on this runtime.
        let (registry, name) = registry(args).await?;
        let Some(def) = registry.get(&name) else {
            return Err(Failure(format!(
                "no workflow {:?}: the workflows are {}",
                args.name,
                registry.names().join(", ")
            )));
        };
        let workflow = (def.constructor)().map_err(|e| Failure(format!("{name}: {e}")))?;
        // `--store`, else $OPENRATH_STORE, else the JSONL directory under $OPENRATH_HOME.
        let store = RunStore::open(store)
            .await
            .map_err(|e| Failure(e.to_string()))?;
        let input = Session::user_with(args.input.clone(), Stamper::from_env());
        let cx = FlowContext::new().with_observer(progress(Instant::now()));
        match cx.forward(workflow.as_ref(), input).await {
            Ok(answer) => {
                let saved = store
                    .save_all(&cx.journal().sessions())
                    .await
                    .map_err(|e| Failure(e.to_string()))?;
                let text = answer.final_text().unwrap_or_default().to_owned();
                let waiting: Vec<String> = answer
                    .pending()
                    .iter()
                    .map(|p| format!("{} ({})", p.call.function.name, p.reason))
                    .collect();
                if as_json {
                    return Ok(Output::ok(json(&serde_json::json!({
                        "workflow": name, "answer": text, "session": answer.id().as_str(),
                        "store": store.to_string(), "saved": saved, "waiting": waiting,
                    }))?));
                }
                let mut out = if waiting.is_empty() {
                    format!("{text}\n")
                } else {
                    // A foreground run has no one to ask: say what it stopped on and where
                    // a decision can be made.
                    format!(
                        "the run stopped on {} call(s) waiting for a decision: {}; a run \
                         submitted to a worker (`rath runs submit`) waits for one \
                         (`rath runs approve`)\n",
                        waiting.len(),
                        waiting.join(", ")
                    )
                };
                let _ = writeln!(
                    out,
                    "stored {saved} sessions in {store}; the answer is session {} \
                     (`rath show {}`)",
                    answer.id(),
                    answer.id()
                );
                Ok(Output::ok(out))
            }
            Err(e) => {
                let kept = store
                    .keep_failed(&e, &cx.journal().sessions())
                    .await
                    .map_err(|k| Failure(format!("{e}; and keeping what it made failed: {k}")))?;
                let mut out = Output::ok(String::new());
                out.stderr.push(format!("{kept} in {store}"));
                out.code = 1;
                Ok(out)
            }
        }
    })
}
