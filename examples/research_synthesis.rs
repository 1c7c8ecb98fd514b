//! literature → reproduction → compression → output, printing the compression record (the
//! digest of every dropped chunk).
//!
//! ```sh
//! cargo run --release --example research_synthesis          # offline, scripted models
//! OPENAI_BASE_URL=http://127.0.0.1:8099/v1 cargo run --release --example research_synthesis
//! RATH_PROVIDER=anthropic ANTHROPIC_API_KEY=... ANTHROPIC_MODEL=... cargo run --release --example research_synthesis
//! ```
//!
//! A model-routed Selector sends the question to a literature agent (a typed `search_papers`
//! tool) and a reproduction agent (`run_code`, real Python in a `local` sandbox); a
//! SummaryCompressor replaces the long history by a summary and records the digest of every
//! dropped chunk; a writer answers from the compressed session. Offline every model (the
//! router included) answers from a script. Ids are fresh UUIDv7s on every run; pass
//! `--deterministic` (or set `OPENRATH_DETERMINISTIC=1`) for counter ids and a fixed clock
//! (the same bytes every run: give each such run its own OPENRATH_HOME).

use std::sync::Arc;

use openrath::flow::{FlowEvent, SummaryCompressor};
use openrath::persist::SessionRecorder;
use openrath::prelude::*;
use serde::Deserialize;

const QUESTION: &str = "Does the mean of 2, 4, 6, 8 equal 5? Find the claim and reproduce it.";

/// `search_papers`' arguments.
#[derive(Deserialize, JsonSchema)]
struct SearchArgs {
    /// What to look for.
    query: String,
}

/// The live model from the environment (short answers for small local models), or `script`.
fn model(
    live: bool,
    script: Vec<ScriptedResponse>,
    name: &str,
) -> anyhow::Result<Arc<dyn Provider>> {
    if live {
        // What RATH_PROVIDER (or the key set) chooses: the wire, retries, a token budget.
        return Ok(openrath::select::live()?);
    }
    Ok(Arc::new(
        ScriptedProvider::new(script).named(format!("scripted:{name}")),
    ))
}

/// A scripted call of `tool` with `args`.
fn call(id: &str, tool: &str, args: serde_json::Value) -> ScriptedResponse {
    ScriptedResponse::tool_calls(vec![(id.to_owned(), tool.to_owned(), args)])
}

fn pipeline(live: bool) -> anyhow::Result<Sequence> {
    // Live, each agent gets one tool round.
    let rounds = LoopOptions::default();
    let rounds = if live {
        let n = rounds.max_tool_rounds.min(1);
        rounds.max_tool_rounds(n)
    } else {
        rounds
    };
    let route = |id: &str, choice: &str, reason: &str| {
        call(id, "route", json!({"choice": choice, "reason": reason}))
    };
    let router_model = model(
        live,
        vec![
            route("route_1", "literature", "find the claim first").usage(20, 6),
            route("route_2", "reproduction", "check the number").usage(40, 6),
            route("route_3", "done", "claim reproduced").usage(60, 5),
        ],
        "router",
    )?;
    let search = typed_tool(
        "search_papers",
        "Search the (offline) paper index; returns titles and their claims.",
        |_cx, a: SearchArgs| async move {
            Ok(json!({
                "query": a.query,
                "results": [{"title": "Smith 2024", "claim": "the mean of 2, 4, 6, 8 is 5"}]
            }))
        },
    )
    .parallel_safe(true);
    let literature = Agent::new(
        "literature",
        "You find papers with search_papers and state the claim they make.",
        model(
            live,
            vec![
                call(
                    "call_search",
                    "search_papers",
                    json!({"query": "mean of even numbers"}),
                )
                .usage(35, 9),
                ScriptedResponse::text("Smith 2024 claims the mean of 2, 4, 6, 8 is 5.")
                    .usage(50, 14),
            ],
            "literature",
        )?,
    )
    .describe("Searches the literature for the claim.")
    .with_tools(ToolSet::new().with(search)?)
    .with_options(rounds.clone());
    let reproduction = Agent::new(
        "reproduction",
        "You reproduce claimed numbers by running Python with run_code.",
        model(
            live,
            vec![
                call(
                    "call_code",
                    "run_code",
                    json!({"code": "print(sum([2, 4, 6, 8]) / 4)"}),
                )
                .usage(60, 12),
                ScriptedResponse::text("Reproduced: the mean is 5.0.").usage(75, 8),
            ],
            "reproduction",
        )?,
    )
    .describe("Re-computes a claimed number with run_code.")
    .with_tools(ToolSet::builtins())
    .with_options(rounds);
    let router = Selector::by_model("router", router_model)
        .describe("Routes literature -> reproduction until the claim is checked.")
        .candidate(literature)
        .candidate(reproduction)
        .max_steps(if live { 3 } else { 6 });
    let summary = "Smith 2024 claims mean(2,4,6,8)=5; run_code reproduced 5.0.";
    let summarizer = model(
        live,
        vec![ScriptedResponse::text(summary).usage(90, 20)],
        "compressor",
    )?;
    let report = "Report: Smith 2024's claim (mean 5) is reproduced exactly.";
    let writer = Agent::new(
        "writer",
        "You write the final two-sentence report from the summary.",
        model(
            live,
            vec![ScriptedResponse::text(report).usage(40, 15)],
            "writer",
        )?,
    )
    .describe("Writes the report.");
    Ok(Sequence::new("research")
        .then(router)
        .then(SummaryCompressor::new(summarizer, 2).named("compressor"))
        .then(writer))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let live = openrath::select::live_requested();
    let home = openrath::persist::openrath_home();
    // `--store URL` or $OPENRATH_STORE, else the JSONL directory under `home`.
    let store = openrath::run_store::RunStore::from_args().await?;
    let mode = if live {
        openrath::select::describe()
    } else {
        "offline, scripted models".to_owned()
    };
    println!("research_synthesis ({mode}), store {store}");
    let workspace = home.join("workspaces/research_synthesis");
    std::fs::create_dir_all(&workspace)?;
    let workspace = workspace.canonicalize()?;

    // Every session the run makes is recorded; new route decisions, compressions and tool
    // results are printed as they happen.
    let recorder = SessionRecorder::new();
    let cx = FlowContext::new().with_observer({
        let recorder = recorder.clone();
        move |ev: &FlowEvent<'_>| match ev {
            FlowEvent::Session { session } if recorder.record(session) => {
                let l = session.lineage();
                if l.operator == "Selector.route"
                    && let Some(ChunkBody::RouteDecision(r)) = session.last().map(|x| x.body())
                {
                    let choice = r.choice.as_deref().unwrap_or("done");
                    println!("  route -> {choice} ({})", r.reason);
                } else if l.kind.as_str() == "op_session_compress" {
                    let n = session.conversation_len();
                    println!("  compressed -> {n} conversation chunks");
                }
            }
            FlowEvent::ToolEnd {
                agent,
                call,
                outcome,
                ..
            } => {
                let agent = agent.unwrap_or("-");
                println!("  [{agent}] {} -> {outcome}", call.function.name);
            }
            _ => {}
        }
    });
    let spec = SandboxSpec::working_dir(workspace.to_string_lossy().into_owned());
    let root = Session::user_with(QUESTION, Stamper::from_env()).to_with("local", spec);
    println!("  question: {QUESTION}");
    let out = match cx.forward(&pipeline(live)?, root).await {
        Ok(out) => out,
        Err(e) => {
            // Keep what the failed run made; `rath show <id>` says why it failed.
            let kept = store.keep_failed(&e, &recorder.sessions()).await?;
            eprintln!("research_synthesis: {kept}");
            std::process::exit(1);
        }
    };
    let sessions = recorder.sessions();
    let saved = store.save_all(&sessions).await?;
    println!("  saved {saved} sessions to {store}");

    let all_chunks = || sessions.iter().flat_map(|s| s.chunks().iter());
    println!("\nRoute decisions:");
    let mut routes: Vec<(String, String)> = Vec::new();
    for c in all_chunks() {
        if let ChunkBody::RouteDecision(r) = c.body() {
            let choice = r.choice.clone().unwrap_or_else(|| "done".to_owned());
            let row = (choice, r.reason.clone());
            if !routes.contains(&row) {
                println!("  -> {}: {}", row.0, row.1);
                routes.push(row);
            }
        }
    }
    let reproduction = all_chunks().find_map(|c| match c.body() {
        ChunkBody::ToolResult(r) if r.content.contains("stdout") => Some(r.content.clone()),
        _ => None,
    });
    if let Some(out) = &reproduction {
        println!("Reproduction (run_code): {out}");
    }
    let compression = out
        .chunks()
        .iter()
        .chain(all_chunks())
        .find_map(|c| match c.body() {
            ChunkBody::CompressionRecord(r) => Some(r.clone()),
            _ => None,
        });
    match &compression {
        Some(rec) => {
            println!(
                "Compression record ({}, lossy={}, rows_out={}), {} chunks dropped:",
                rec.compressor,
                rec.lossy,
                rec.rows_out,
                rec.dropped.len()
            );
            for d in &rec.dropped {
                println!("  #{:<3} {:<14} sha256 {}", d.index, d.kind, d.sha256);
            }
        }
        None => println!("No compression record (nothing was dropped)."),
    }
    println!(
        "Summary: answer {:?}; {saved} sessions saved to {}",
        out.final_text().unwrap_or("-"),
        store
    );
    Ok(())
}
