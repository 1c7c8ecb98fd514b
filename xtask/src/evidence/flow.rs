//! Flow packets: `workflow_transcript`, `selector_decisions`, `compression`,
//! `approval_round_trip`. Every model is a scripted provider, so runs are offline and
//! byte-reproducible.

use std::sync::Arc;

use anyhow::Result;
use rath_flow::{
    Agent, Decision, KeepLastN, Parallel, Selector, Sequence, SummaryCompressor, ToolContext,
    ToolError, ToolPolicy, ToolSet, Workflow, WorkflowExt, approve, final_text, reject, typed_tool,
};
use rath_persist::Store;
use rath_provider::{ScriptedProvider, ScriptedResponse};
use rath_session::{Chunk, ChunkBody, ChunkKind, LineageKind, Session, Stamper};
use serde_json::json;

use super::{Ctx, Packet, Report};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct TextArgs {
    /// The text to count.
    text: String,
}

fn word_count() -> impl rath_flow::Tool + 'static {
    typed_tool(
        "word_count",
        "Count the words of a text.",
        |_cx: ToolContext, a: TextArgs| async move {
            Ok::<_, ToolError>(json!({"words": a.text.split_whitespace().count()}))
        },
    )
}

fn scripted(responses: Vec<ScriptedResponse>) -> Arc<ScriptedProvider> {
    Arc::new(ScriptedProvider::new(responses))
}

fn say(name: &str, text: &str, p: u64, c: u64) -> Agent {
    Agent::new(
        name,
        "Be brief.",
        scripted(vec![ScriptedResponse::text(text).usage(p, c)]),
    )
}

/// Writes the session's chunks (JSONL), messages, and its store file into the packet.
fn write_session(ctx: &Ctx, prefix: &str, s: &Session) -> Result<()> {
    let mut jsonl = String::new();
    for c in s.chunks() {
        jsonl.push_str(&serde_json::to_string(c)?);
        jsonl.push('\n');
    }
    ctx.write(&format!("{prefix}chunks.jsonl"), jsonl)?;
    ctx.write_json(&format!("{prefix}messages.json"), &s.messages())?;
    let dir = ctx.tmp_dir(&format!("store-{}", prefix.trim_end_matches('/')))?;
    Store::at(&dir).save(s)?;
    ctx.copy_tree(&dir, &format!("{prefix}store"))?;
    Ok(())
}

fn kinds(s: &Session) -> Vec<String> {
    s.chunks()
        .iter()
        .map(|c| c.kind().as_str().to_string())
        .collect()
}

/// The `workflow_transcript` packet.
pub fn workflow_transcript() -> Packet {
    Packet {
        name: "workflow_transcript",
        about: "A Sequence(lead → Parallel(counter with a word_count tool, checker) → qa) of \
                scripted agents runs on one session; the transcript, every evidence chunk, \
                per-agent usage and the persisted session are the artifacts.",
        env: &[],
        build: build_workflow,
    }
}

fn build_workflow(ctx: &mut Ctx) -> Result<Report> {
    let mut r = Report::new(
        &[
            "workflows compose session state: a Sequence containing a Parallel fan-out of agents \
             passes one Session value through every step, and the output holds every step's \
             chunks (no private transcript)",
            "tool calls inside a nested agent run through the session loop and leave \
             tool_result and tool_evidence chunks",
            "usage is attributed per agent and summed",
        ],
        &[
            "anything about real model behaviour: every model is scripted",
            "concurrency timing of the Parallel branches (results are merged in branch order)",
        ],
    );
    let counter = Agent::new(
        "counter",
        "Use tools.",
        scripted(vec![
            ScriptedResponse::tool_calls(vec![(
                "call_wc_1",
                "word_count",
                json!({"text": "the quick brown fox"}),
            )])
            .usage(40, 12),
            ScriptedResponse::text("4 words.").usage(70, 11),
        ]),
    )
    .with_tools(ToolSet::new().with(word_count())?);
    let team = Sequence::new("team")
        .then(say("lead", "Plan: count the words, then check.", 20, 8))
        .then(Parallel::new("workers").branch(counter).branch(say(
            "checker",
            "The sentence is a pangram fragment.",
            30,
            9,
        )))
        .then(say("qa", "Answer: 4 words.", 50, 5));
    let names: Vec<String> = rath_flow::agent_paths(&team);
    let input = Session::user_with(
        "How many words are in 'the quick brown fox'?",
        Stamper::counter(),
    );
    let out = ctx.block_on(team.run(input))??;
    write_session(ctx, "", &out)?;
    let usage: serde_json::Map<String, serde_json::Value> = out
        .agent_usage()
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    ctx.write_json(
        "summary.json",
        &json!({"agents": names, "final_text": final_text(&out), "chunk_kinds": kinds(&out),
                "usage": out.usage(), "agent_usage": usage,
                "lineage": {"operator": out.lineage().operator, "kind": out.lineage().kind.as_str(),
                            "parents": out.lineage().parents.len()}}),
    )?;
    r.check_eq(
        "named agents",
        names,
        vec![
            "team.lead".to_string(),
            "team.workers.counter".into(),
            "team.workers.checker".into(),
            "team.qa".into(),
        ],
    );
    r.check_eq(
        "final answer",
        final_text(&out).map(str::to_string),
        Some("Answer: 4 words.".into()),
    );
    let has = |k: ChunkKind| out.chunks().iter().any(|c| c.kind() == k);
    r.check_eq(
        "tool result and tool evidence present",
        (has(ChunkKind::ToolResult), has(ChunkKind::ToolEvidence)),
        (true, true),
    );
    r.check(
        "every agent's usage is attributed",
        out.agent_usage().len() >= 4,
        format!("{:?}", out.agent_usage().keys().collect::<Vec<_>>()),
    );
    r.check_eq(
        "usage summed",
        out.usage().map(|u| u.total_tokens),
        Some(20 + 8 + 40 + 12 + 70 + 11 + 30 + 9 + 50 + 5),
    );
    Ok(r)
}

/// The `selector_decisions` packet.
pub fn selector_decisions() -> Packet {
    Packet {
        name: "selector_decisions",
        about: "A function selector and a (scripted) model selector route between a researcher \
                and a writer; every decision is a route_decision chunk on the session.",
        env: &[],
        build: build_selector,
    }
}

fn build_selector(ctx: &mut Ctx) -> Result<Report> {
    let mut r = Report::new(
        &[
            "every routing decision (candidates, choice or done, reason, who decided) is \
             recorded on the session as a route_decision chunk, for function and model deciders",
            "a model decider's own call leaves model_call evidence and usage, and its reply is \
             not added to the conversation",
        ],
        &["routing quality of a real model: the router's replies are scripted"],
    );
    let researcher =
        || say("researcher", "Found: the API listens on 8443.", 10, 4).describe("Finds facts.");
    let writer = || {
        say("writer", "The staging API listens on port 8443.", 12, 6).describe("Writes the answer.")
    };
    let by_fn = Selector::by_function("router", |s: &Session, _c: &[rath_flow::Candidate]| {
        let answers = s
            .chunks()
            .iter()
            .filter(|c| c.kind() == ChunkKind::Assistant)
            .count();
        match answers {
            0 => Decision::to("researcher", "no facts yet"),
            1 => Decision::to("writer", "facts found; write it up"),
            _ => Decision::done("answer written"),
        }
    })
    .candidate(researcher())
    .candidate(writer());
    let input = Session::user_with("Which port does the staging API use?", Stamper::counter());
    let out_fn = ctx.block_on(by_fn.run(input.clone()))??;
    let model_router = scripted(vec![
        ScriptedResponse::tool_calls(vec![(
            "route_1",
            rath_flow::ROUTE_TOOL,
            json!({"choice": "researcher", "reason": "needs facts"}),
        )])
        .usage(30, 5),
        ScriptedResponse::tool_calls(vec![(
            "route_2",
            rath_flow::ROUTE_TOOL,
            json!({"choice": "done", "reason": "the researcher answered"}),
        )])
        .usage(35, 5),
    ]);
    let by_model = Selector::by_model("model_router", model_router)
        .candidate(researcher())
        .candidate(writer());
    let out_model = ctx.block_on(by_model.run(input))??;
    let decisions = |s: &Session| -> Vec<serde_json::Value> {
        s.chunks()
            .iter()
            .filter_map(|c| match c.body() {
                ChunkBody::RouteDecision(d) => serde_json::to_value(d).ok(),
                _ => None,
            })
            .collect()
    };
    let d_fn = decisions(&out_fn);
    let d_model = decisions(&out_model);
    ctx.write_json("function_router_decisions.json", &d_fn)?;
    ctx.write_json("model_router_decisions.json", &d_model)?;
    write_session(ctx, "function_router/", &out_fn)?;
    write_session(ctx, "model_router/", &out_model)?;
    r.check_eq(
        "function router: 3 decisions (researcher, writer, done)",
        d_fn.len(),
        3,
    );
    r.check_eq(
        "model router: 2 decisions (researcher, done)",
        d_model.len(),
        2,
    );
    r.check_eq(
        "function router's final answer",
        final_text(&out_fn).map(str::to_string),
        Some("The staging API listens on port 8443.".into()),
    );
    let model_calls = out_model
        .chunks()
        .iter()
        .filter(|c| c.kind() == ChunkKind::ModelCall)
        .count();
    r.check(
        "model decisions leave model_call evidence",
        model_calls >= 2,
        format!("{model_calls} model_call chunks"),
    );
    r.check(
        "router usage attributed to the selector",
        out_model.agent_usage().contains_key("model_router"),
        format!("{:?}", out_model.agent_usage().keys().collect::<Vec<_>>()),
    );
    Ok(r)
}

/// The `compression` packet.
pub fn compression() -> Packet {
    Packet {
        name: "compression",
        about: "KeepLastN and a (scripted) SummaryCompressor shorten a long session; each output \
                begins with a compression_record listing every dropped chunk by index, kind and \
                sha256, and its lineage is op_session_compress.",
        env: &[],
        build: build_compression,
    }
}

fn build_compression(ctx: &mut Ctx) -> Result<Report> {
    let mut r = Report::new(
        &[
            "compression is evidence: what was dropped is recorded by index, kind and sha256 \
             digest, so a reviewer can verify it against the uncompressed session",
            "the compressed session is a new value with lineage op_session_compress and the \
             input as parent; the input is unchanged",
            "the cut never separates a tool result from the call that requested it",
        ],
        &["that a summary is faithful: the summary text here is scripted"],
    );
    let mut s = Session::user_with("Plan the release.", Stamper::counter());
    for i in 1..=5 {
        s = s
            .push(Chunk::assistant_text(format!("Step {i} drafted.")))
            .push(Chunk::user(format!("Continue after step {i}.")));
    }
    s = s
        .push(Chunk::assistant(
            None,
            Some(vec![rath_session::ToolCall::function(
                "call_1",
                "word_count",
                r#"{"text": "ship it"}"#,
            )]),
        ))
        .push(Chunk::tool_result(
            "call_1",
            "word_count",
            r#"{"words": 2}"#,
        ))
        .push(Chunk::assistant_text("Two words: ship it."));
    let keep = ctx.block_on(KeepLastN::new(2).run(s.clone()))??;
    let summarizer = SummaryCompressor::new(
        scripted(vec![
            ScriptedResponse::text("Steps 1-5 of the release plan were drafted.").usage(90, 12),
        ]),
        3,
    );
    let summ = ctx.block_on(summarizer.run(s.clone()))??;
    write_session(ctx, "input/", &s)?;
    write_session(ctx, "keep_last_2/", &keep)?;
    write_session(ctx, "summary/", &summ)?;
    let record = |out: &Session| match out.chunks().first().map(|c| c.body().clone()) {
        Some(ChunkBody::CompressionRecord(rec)) => Some(rec),
        _ => None,
    };
    for (name, out) in [("keep_last_2", &keep), ("summary", &summ)] {
        let Some(rec) = record(out) else {
            r.check(
                format!("{name}: starts with a compression_record"),
                false,
                "absent",
            );
            continue;
        };
        let digests_ok = rec.dropped.iter().all(|d| {
            s.chunks()
                .get(d.index as usize)
                .is_some_and(|c| c.sha256() == d.sha256)
        });
        r.check(
            format!("{name}: every dropped digest matches the input chunk"),
            digests_ok && !rec.dropped.is_empty(),
            format!("{} dropped", rec.dropped.len()),
        );
        r.check_eq(
            &format!("{name}: lineage"),
            (out.lineage().kind.clone(), out.lineage().parents.clone()),
            (LineageKind::OpSessionCompress, vec![s.id().clone()].into()),
        );
        let first_conv = out.conversation().next().map(|c| c.kind());
        r.check(
            format!("{name}: does not start on a tool result"),
            first_conv != Some(ChunkKind::ToolResult),
            format!("{first_conv:?}"),
        );
    }
    r.check_eq("input unchanged", s.conversation_len(), 14);
    Ok(r)
}

/// The `approval_round_trip` packet.
pub fn approval_round_trip() -> Packet {
    Packet {
        name: "approval_round_trip",
        about: "An agent's approval-gated tool call stops the loop with pending work; the \
                session is persisted, loaded back, approved (one run) or rejected (another), \
                and resumed to completion.",
        env: &[],
        build: build_approval,
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct DeployArgs {
    /// Service to deploy.
    service: String,
}

fn deploy_agent(responses: Vec<ScriptedResponse>) -> Result<Agent> {
    let deploy = typed_tool(
        "deploy",
        "Deploy a service.",
        |_cx: ToolContext, a: DeployArgs| async move {
            Ok::<_, ToolError>(json!({"deployed": a.service}))
        },
    );
    Ok(Agent::new("ops", "Deploy when asked.", scripted(responses))
        .with_tools(ToolSet::new().with(deploy)?)
        .with_policy(ToolPolicy::allow_all().require_approval("deploy")))
}

fn build_approval(ctx: &mut Ctx) -> Result<Report> {
    let mut r = Report::new(
        &[
            "an approval-gated call stops the loop and is recorded as pending work on the session",
            "the stopped session survives persistence: loaded from the store, its pending call \
             is intact, and resuming after approve runs the call; after reject the call is \
             answered with denied_by_policy",
            "both decisions are policy_decision chunks on the session",
        ],
        &[
            "a reviewer UI or a second OS process: the store round trip stands in for the \
             process boundary",
        ],
    );
    let call = || {
        ScriptedResponse::tool_calls(vec![("call_deploy_1", "deploy", json!({"service": "api"}))])
            .usage(25, 6)
    };
    let input = || Session::user_with("Deploy the api service.", Stamper::counter());
    let store_dir = ctx.tmp_dir("sessions")?;
    let store = Store::at(&store_dir);
    let mut results = Vec::new();
    for (branch, decision) in [("approved", true), ("rejected", false)] {
        let final_text_resp = if decision {
            "Deployed api."
        } else {
            "Deployment was rejected; nothing changed."
        };
        let agent = deploy_agent(vec![
            call(),
            ScriptedResponse::text(final_text_resp).usage(40, 7),
        ])?;
        let stopped = ctx.block_on(agent.run(input()))??;
        let pending: Vec<String> = stopped
            .pending()
            .iter()
            .map(|p| p.call.id.clone())
            .collect();
        r.check_eq(
            &format!("{branch}: loop stopped with the call pending"),
            pending,
            vec!["call_deploy_1".to_string()],
        );
        store.save(&stopped)?;
        let loaded = store
            .load(stopped.id())?
            .session
            .with_stamper(Stamper::counter());
        r.check_eq(
            &format!("{branch}: pending call survives the store"),
            loaded.pending().len(),
            1,
        );
        let decided = if decision {
            approve(&loaded, "call_deploy_1", "reviewer")?
        } else {
            reject(
                &loaded,
                "call_deploy_1",
                "reviewer",
                "not during the freeze",
            )?
        };
        let cx = rath_flow::FlowContext::new();
        let done = ctx.block_on(agent.forward(decided.clone(), &cx))??;
        let result = done.chunks().iter().find_map(|c| match c.body() {
            ChunkBody::ToolResult(t) if t.tool_call_id == "call_deploy_1" => {
                Some(t.content.clone())
            }
            _ => None,
        });
        let want = if decision {
            "deployed"
        } else {
            "denied_by_policy"
        };
        r.check(
            format!("{branch}: tool result after resume"),
            result.as_deref().is_some_and(|t| t.contains(want)),
            result.clone().unwrap_or_default(),
        );
        r.check_eq(
            &format!("{branch}: nothing pending at the end"),
            done.pending().len(),
            0,
        );
        r.check_eq(
            &format!("{branch}: final answer"),
            final_text(&done).map(str::to_string),
            Some(final_text_resp.to_string()),
        );
        let decisions: Vec<serde_json::Value> = done
            .chunks()
            .iter()
            .filter_map(|c| match c.body() {
                ChunkBody::PolicyDecision(d) => serde_json::to_value(d).ok(),
                _ => None,
            })
            .collect();
        results.push(json!({"branch": branch, "policy_decisions": decisions,
                            "tool_result": result, "final_text": final_text(&done),
                            "resumed_lineage": done.lineage().operator}));
        write_session(ctx, &format!("{branch}/"), &done)?;
    }
    ctx.copy_tree(&store_dir, "stopped_store")?;
    ctx.write_json("round_trips.json", &results)?;
    Ok(r)
}
