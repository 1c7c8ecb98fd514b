//! `research_synthesis`: literature → reproduction → compression → output. A model-routed
//! [`Selector`] sends the question to a literature agent (a typed `search_papers` tool) and a
//! reproduction agent (`run_code`, real Python in a `local` sandbox), a
//! [`SummaryCompressor`] replaces the long history by a summary and records the digest of
//! every dropped chunk, and a writer answers from the compressed session.
//!
//! Offline every model (router included) answers from a script; with `OPENAI_BASE_URL` set
//! the OpenAI-compatible provider answers instead.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rath_flow::{
    Agent, FlowContext, FlowEvent, LoopOptions, Selector, Sequence, SummaryCompressor, ToolContext,
    ToolError, ToolSet, Workflow, typed_tool,
};
use rath_provider::ScriptedResponse;
use rath_session::{ChunkBody, CompressionRecord, SandboxSpec, Session, SessionId};
use serde_json::json;

use super::hello_agent::{DemoConfig, LIVE_MAX_STEPS, bounded, provider};
use super::{DemoError, io};

const QUESTION: &str = "Does the mean of 2, 4, 6, 8 equal 5? Find the claim and reproduce it.";

/// What `research_synthesis` left behind.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ResearchReport {
    /// The final session (the writer's answer on top of the compressed history).
    pub final_session: Session,
    /// The compression record of the compressed session.
    pub compression: Option<CompressionRecord>,
    /// The reproduction's `run_code` output.
    pub reproduction_output: Option<String>,
    /// Route decisions, as `(choice or "done", reason)`.
    pub routes: Vec<(String, String)>,
    /// The writer's answer.
    pub answer: Option<String>,
    /// The sessions directory written.
    pub store_dir: PathBuf,
    /// Sessions written.
    pub sessions: usize,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct SearchArgs {
    /// What to look for.
    query: String,
}

fn pipeline(live: bool) -> Result<Sequence, DemoError> {
    let router_p = provider(
        live,
        vec![
            ScriptedResponse::tool_calls(vec![(
                "route_1",
                "route",
                json!({"choice": "literature", "reason": "find the claim first"}),
            )])
            .usage(20, 6),
            ScriptedResponse::tool_calls(vec![(
                "route_2",
                "route",
                json!({"choice": "reproduction", "reason": "check the number"}),
            )])
            .usage(40, 6),
            ScriptedResponse::tool_calls(vec![(
                "route_3",
                "route",
                json!({"choice": "done", "reason": "claim reproduced"}),
            )])
            .usage(60, 5),
        ],
        "router",
    )?;
    let search = typed_tool(
        "search_papers",
        "Search the (offline) paper index; returns titles and their claims.",
        |_cx: ToolContext, a: SearchArgs| async move {
            Ok::<_, ToolError>(json!({
                "query": a.query,
                "results": [{"title": "Smith 2024", "claim": "the mean of 2, 4, 6, 8 is 5"}]
            }))
        },
    )
    .parallel_safe(true);
    let literature = Agent::new(
        "literature",
        "You find papers with search_papers and state the claim they make.",
        provider(
            live,
            vec![
                ScriptedResponse::tool_calls(vec![(
                    "call_search",
                    "search_papers",
                    json!({"query": "mean of even numbers"}),
                )])
                .usage(35, 9),
                ScriptedResponse::text("Smith 2024 claims the mean of 2, 4, 6, 8 is 5.")
                    .usage(50, 14),
            ],
            "literature",
        )?,
    )
    .describe("Searches the literature for the claim.")
    .with_tools(ToolSet::new().with(search)?)
    .with_options(bounded(live, LoopOptions::default()));
    let reproduction = Agent::new(
        "reproduction",
        "You reproduce claimed numbers by running Python with run_code.",
        provider(
            live,
            vec![
                ScriptedResponse::tool_calls(vec![(
                    "call_code",
                    "run_code",
                    json!({"code": "print(sum([2, 4, 6, 8]) / 4)"}),
                )])
                .usage(60, 12),
                ScriptedResponse::text("Reproduced: the mean is 5.0.").usage(75, 8),
            ],
            "reproduction",
        )?,
    )
    .describe("Re-computes a claimed number with run_code.")
    .with_tools(ToolSet::builtins())
    .with_options(bounded(live, LoopOptions::default()));
    let router = Selector::by_model("router", router_p)
        .describe("Routes literature -> reproduction until the claim is checked.")
        .candidate(literature)
        .candidate(reproduction)
        .max_steps(if live { LIVE_MAX_STEPS } else { 6 });
    let summarizer = provider(
        live,
        vec![
            ScriptedResponse::text("Smith 2024 claims mean(2,4,6,8)=5; run_code reproduced 5.0.")
                .usage(90, 20),
        ],
        "compressor",
    )?;
    let writer = Agent::new(
        "writer",
        "You write the final two-sentence report from the summary.",
        provider(
            live,
            vec![
                ScriptedResponse::text(
                    "Report: Smith 2024's claim (mean 5) is reproduced exactly.",
                )
                .usage(40, 15),
            ],
            "writer",
        )?,
    )
    .describe("Writes the report.");
    Ok(Sequence::new("research")
        .then(router)
        .then(SummaryCompressor::new(summarizer, 2).named("compressor"))
        .then(writer))
}

/// Runs the pipeline in a `local` sandbox under `<home>/workspaces/research_synthesis` and
/// saves every session.
pub async fn run(config: DemoConfig) -> Result<ResearchReport, DemoError> {
    let workspace = config.home.join("workspaces/research_synthesis");
    std::fs::create_dir_all(&workspace).map_err(io(&workspace))?;
    let workspace = workspace.canonicalize().map_err(io(&workspace))?;

    let collected: Arc<Mutex<(Vec<SessionId>, Vec<Session>)>> = Arc::default();
    let sink = collected.clone();
    let progress = config.progress;
    let cx = FlowContext::new().with_observer(move |ev: &FlowEvent<'_>| match ev {
        FlowEvent::Session { session } => {
            let mut c = sink.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(i) = c.0.iter().position(|id| id == session.id()) {
                c.1[i] = (*session).clone();
                return;
            }
            c.0.push(session.id().clone());
            c.1.push((*session).clone());
            if !progress {
                return;
            }
            let l = session.lineage();
            if l.operator == "Selector.route"
                && let Some(ChunkBody::RouteDecision(r)) = session.last().map(|x| x.body())
            {
                println!(
                    "  route -> {} ({})",
                    r.choice.as_deref().unwrap_or("done"),
                    r.reason
                );
            } else if l.kind.as_str() == "op_session_compress" {
                println!(
                    "  compressed -> {} conversation chunks",
                    session.conversation_len()
                );
            }
        }
        FlowEvent::ToolEnd {
            agent,
            call,
            outcome,
            ..
        } if progress => {
            println!(
                "  [{}] {} -> {outcome}",
                agent.unwrap_or("-"),
                call.function.name
            );
        }
        _ => {}
    });
    let root = Session::user_with(QUESTION, config.stamper()).to_with(
        "local",
        SandboxSpec::working_dir(workspace.to_string_lossy().into_owned()),
    );
    config.step(format!("question: {QUESTION}"));
    cx.record(&root);
    let out = match pipeline(config.live)?.forward(root, &cx).await {
        Ok(out) => out,
        Err(e) => {
            let so_far = super::sessions_so_far(&collected);
            return Err(super::keep_failed(&config.store_dir(), so_far, e));
        }
    };
    cx.record(&out);

    let sessions = super::sessions_so_far(&collected);
    let store_dir = config.save_sessions(&sessions)?;

    let all_chunks = || sessions.iter().flat_map(|s| s.chunks().iter());
    let compression = out
        .chunks()
        .iter()
        .chain(all_chunks())
        .find_map(|c| match c.body() {
            ChunkBody::CompressionRecord(r) => Some(r.clone()),
            _ => None,
        });
    let reproduction_output = all_chunks().find_map(|c| match c.body() {
        ChunkBody::ToolResult(r) if r.content.contains("stdout") => Some(r.content.clone()),
        _ => None,
    });
    let mut routes: Vec<(String, String)> = Vec::new();
    for c in all_chunks() {
        if let ChunkBody::RouteDecision(r) = c.body() {
            let row = (
                r.choice.clone().unwrap_or_else(|| "done".to_owned()),
                r.reason.clone(),
            );
            if !routes.contains(&row) {
                routes.push(row);
            }
        }
    }
    Ok(ResearchReport {
        answer: rath_flow::final_text(&out).map(str::to_owned),
        final_session: out,
        compression,
        reproduction_output,
        routes,
        store_dir,
        sessions: sessions.len(),
    })
}
