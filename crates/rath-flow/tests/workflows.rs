//! Two multi-agent workflows, offline with scripted providers: engineering (lead → two
//! specialists in parallel on one shared sandbox → merge → QA runs the tests) and research
//! (selector-routed literature → reproduction → compression → output). Transcript and
//! lineage are snapshotted; a lineage walk proves there is no private transcript.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};

use rath_flow::{
    Agent, FlowContext, FlowEvent, Parallel, Selector, Sequence, SummaryCompressor, ToolContext,
    ToolError, ToolSet, typed_tool,
};
use rath_provider::{ScriptedProvider, ScriptedResponse};
use rath_session::{ChatMessage, ChunkBody, SandboxSpec, Session, SessionId, Stamper};
use serde_json::{Value, json};

type Archive = Arc<Mutex<HashMap<SessionId, Session>>>;

fn context() -> (FlowContext, Archive) {
    let archive: Archive = Arc::default();
    let a = archive.clone();
    let cx = FlowContext::new().with_observer(move |ev: &FlowEvent<'_>| {
        if let FlowEvent::Session { session } = ev {
            a.lock()
                .expect("archive")
                .insert(session.id().clone(), (*session).clone());
        }
    });
    (cx, archive)
}

fn python3_available() -> bool {
    std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn scripted(responses: Vec<ScriptedResponse>) -> Arc<ScriptedProvider> {
    Arc::new(ScriptedProvider::new(responses))
}

/// `final` and every ancestor found in the archive, breadth-first from `final`.
fn ancestry(final_session: &Session, archive: &Archive) -> Vec<Session> {
    let map = archive.lock().expect("archive").clone();
    let mut out = vec![final_session.clone()];
    let mut seen: BTreeSet<SessionId> = BTreeSet::from([final_session.id().clone()]);
    let mut queue: VecDeque<SessionId> = final_session.lineage().parents.iter().cloned().collect();
    while let Some(id) = queue.pop_front() {
        if !seen.insert(id.clone()) {
            continue;
        }
        let s = map
            .get(&id)
            .unwrap_or_else(|| panic!("ancestor {id} was not reported"));
        queue.extend(s.lineage().parents.iter().cloned());
        out.push(s.clone());
    }
    out
}

fn lineage_rows(sessions: &[Session]) -> Value {
    Value::Array(
        sessions
            .iter()
            .map(|s| {
                let l = s.lineage();
                json!({
                    "id": s.id(),
                    "parents": l.parents,
                    "operator": l.operator,
                    "kind": l.kind,
                    "extras": l.extras,
                    "conversation_chunks": s.conversation_len(),
                    "evidence_chunks": s.len() - s.conversation_len(),
                    "usage": s.usage(),
                    "agent_usage": s.agent_usage(),
                    "pending": s.pending().len(),
                })
            })
            .collect(),
    )
}

fn transcript(s: &Session) -> Value {
    serde_json::to_value(s.chunks().iter().collect::<Vec<_>>()).expect("chunks json")
}

/// Every message any agent's provider received is a conversation chunk of the final
/// session or one of its ancestors.
fn assert_no_private_transcript(sessions: &[Session], providers: &[(&str, &ScriptedProvider)]) {
    let known: BTreeSet<String> = sessions
        .iter()
        .flat_map(|s| {
            s.chunks()
                .iter()
                .filter_map(ChatMessage::from_chunk)
                .collect::<Vec<_>>()
        })
        .map(|m| serde_json::to_string(&m).expect("msg"))
        .collect();
    let mut checked = 0;
    for (agent, p) in providers {
        for req in p.requests() {
            assert_eq!(req.agent.as_deref(), Some(*agent));
            for m in &req.messages {
                let text = serde_json::to_string(m).expect("msg");
                assert!(
                    known.contains(&text),
                    "agent {agent} received a message not in the lineage: {text}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 0);
}

fn seed_repo(dir: &Path) {
    std::fs::write(dir.join("calc.py"), "def add(a, b):\n    return a - b\n").expect("seed");
    std::fs::write(
        dir.join("test_calc.py"),
        "import unittest\n\nimport calc\nimport textutil\n\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(calc.add(2, 3), 5)\n\n    def test_shout(self):\n        self.assertEqual(textutil.shout('hi'), 'HI!')\n\n\nif __name__ == '__main__':\n    unittest.main()\n",
    )
    .expect("seed");
}

fn run_tests(dir: &Path) -> i32 {
    std::process::Command::new("python3")
        .args(["-B", "-m", "unittest", "-q"])
        .current_dir(dir)
        .output()
        .map(|o| o.status.code().unwrap_or(-1))
        .unwrap_or(-1)
}

const TEST_CMD: &str = "python3 -B -m unittest -q 2>/dev/null";

async fn engineering(
    repo: &Path,
) -> (Session, Archive, Vec<(&'static str, Arc<ScriptedProvider>)>) {
    let lead_p = scripted(vec![
        ScriptedResponse::text(
            "Plan: backend fixes calc.add; utils adds textutil.shout; QA runs the tests.",
        )
        .usage(30, 15),
    ]);
    let backend_p = scripted(vec![
        ScriptedResponse::tool_calls(vec![(
            "call_fix_add",
            "write_workspace_file",
            json!({"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"}),
        )])
        .usage(50, 20),
        ScriptedResponse::text("calc.add now adds.").usage(60, 5),
    ]);
    let utils_p = scripted(vec![
        ScriptedResponse::tool_calls(vec![(
            "call_shout",
            "write_workspace_file",
            json!({"path": "textutil.py", "content": "def shout(s):\n    return s.upper() + '!'\n"}),
        )])
        .usage(45, 18),
        ScriptedResponse::text("textutil.shout added.").usage(55, 4),
    ]);
    let qa_p = scripted(vec![
        ScriptedResponse::tool_calls(vec![(
            "call_tests",
            "run_shell_command",
            json!({"cmd": TEST_CMD}),
        )])
        .usage(80, 10),
        ScriptedResponse::text("All tests pass.").usage(95, 5),
    ]);
    let tools = ToolSet::builtins();
    let lead = Agent::new(
        "lead",
        "You are the tech lead. Plan the work.",
        lead_p.clone(),
    )
    .describe("Plans the change.");
    let backend = Agent::new("backend", "You fix calc.py.", backend_p.clone())
        .describe("Edits calc.py.")
        .with_tools(tools.clone());
    let utils = Agent::new("utils", "You write textutil.py.", utils_p.clone())
        .describe("Edits textutil.py.")
        .with_tools(tools.clone());
    let qa = Agent::new("qa", "You run the test suite.", qa_p.clone())
        .describe("Runs the tests.")
        .with_tools(tools);
    let team = Sequence::new("engineering")
        .then(lead)
        .then(Parallel::new("specialists").branch(backend).branch(utils))
        .then(qa);
    let names: Vec<String> = rath_flow::agent_paths(&team);
    assert_eq!(
        names,
        [
            "engineering.lead",
            "engineering.specialists.backend",
            "engineering.specialists.utils",
            "engineering.qa"
        ]
    );

    let (cx, archive) = context();
    let root = Session::user_with("Make the test suite pass.", Stamper::counter())
        .to_with("local", SandboxSpec::working_dir(repo.to_string_lossy()));
    let out = cx.forward(&team, root).await.expect("engineering workflow");
    for p in [&lead_p, &backend_p, &utils_p, &qa_p] {
        p.assert_complete().expect("every scripted response used");
    }
    let providers = vec![
        ("lead", lead_p),
        ("backend", backend_p),
        ("utils", utils_p),
        ("qa", qa_p),
    ];
    (out, archive, providers)
}

#[tokio::test]
async fn engineering_workflow() {
    if !python3_available() {
        rath_testkit::skip("python3 is not installed");
        return;
    }
    let repo = tempfile::tempdir().expect("tempdir");
    seed_repo(repo.path());
    assert_ne!(
        run_tests(repo.path()),
        0,
        "the seeded suite must fail first"
    );

    let (out, archive, providers) = engineering(repo.path()).await;
    assert_eq!(
        run_tests(repo.path()),
        0,
        "the specialists' edits fix the suite"
    );

    // QA ran the real suite through run_shell_command: exit code 0, recorded as evidence.
    let qa_result = out
        .chunks()
        .iter()
        .find_map(|c| match c.body() {
            ChunkBody::ToolResult(r) if r.tool_call_id == "call_tests" => Some(r.content.clone()),
            _ => None,
        })
        .expect("qa tool result");
    let v: Value = serde_json::from_str(&qa_result).expect("json");
    assert_eq!(v["exit_code"], json!(0), "{v}");
    let ev = out
        .chunks()
        .iter()
        .find_map(|c| match c.body() {
            ChunkBody::ToolEvidence(e) if e.tool_call_id == "call_tests" => Some(e.clone()),
            _ => None,
        })
        .expect("qa evidence");
    assert_eq!(ev.exit_code, Some(0));
    assert_eq!(ev.backend.as_deref(), Some("local"));

    // Both specialists wrote through the same sandbox.
    let handles: BTreeSet<String> = out
        .chunks()
        .iter()
        .filter_map(|c| match c.body() {
            ChunkBody::ToolEvidence(e) => e.sandbox_handle.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(handles.len(), 1, "{handles:?}");

    // Usage: the whole breakdown, per agent.
    let per_agent = out.agent_usage();
    assert_eq!(per_agent.len(), 4);
    assert_eq!(
        out.usage().expect("usage").total_tokens,
        per_agent.values().map(|u| u.total_tokens).sum::<u64>()
    );

    let sessions = ancestry(&out, &archive);
    let refs: Vec<(&str, &ScriptedProvider)> =
        providers.iter().map(|(n, p)| (*n, p.as_ref())).collect();
    assert_no_private_transcript(&sessions, &refs);

    insta::assert_json_snapshot!("engineering_transcript", transcript(&out));
    insta::assert_json_snapshot!("engineering_lineage", lineage_rows(&sessions));
}

#[tokio::test]
async fn engineering_workflow_is_byte_identical_across_runs() {
    if !python3_available() {
        rath_testkit::skip("python3 is not installed");
        return;
    }
    let mut outputs = Vec::new();
    for _ in 0..3 {
        let repo = tempfile::tempdir().expect("tempdir");
        seed_repo(repo.path());
        let (out, archive, _) = engineering(repo.path()).await;
        let sessions = ancestry(&out, &archive);
        outputs.push((
            transcript(&out).to_string(),
            lineage_rows(&sessions).to_string(),
        ));
    }
    assert!(outputs.windows(2).all(|w| w[0] == w[1]));
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct SearchArgs {
    query: String,
}

async fn research(
    workdir: &Path,
) -> (Session, Archive, Vec<(&'static str, Arc<ScriptedProvider>)>) {
    let router_p = scripted(vec![
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
    ]);
    let lit_p = scripted(vec![
        ScriptedResponse::tool_calls(vec![(
            "call_search",
            "search_papers",
            json!({"query": "mean of even numbers"}),
        )])
        .usage(35, 9),
        ScriptedResponse::text("Smith 2024 claims the mean of 2, 4, 6, 8 is 5.").usage(50, 14),
    ]);
    let repro_p = scripted(vec![
        ScriptedResponse::tool_calls(vec![(
            "call_code",
            "run_code",
            json!({"code": "print(sum([2, 4, 6, 8]) / 4)"}),
        )])
        .usage(60, 12),
        ScriptedResponse::text("Reproduced: the mean is 5.0.").usage(75, 8),
    ]);
    let summary_p = scripted(vec![
        ScriptedResponse::text("Smith 2024 claims mean(2,4,6,8)=5; run_code reproduced 5.0.")
            .usage(90, 20),
    ]);
    let writer_p = scripted(vec![
        ScriptedResponse::text("Report: Smith 2024's claim (mean 5) is reproduced exactly.")
            .usage(40, 15),
    ]);

    let search = typed_tool("search_papers", "Search the paper index.", |_cx: ToolContext, a: SearchArgs| async move {
        Ok::<_, ToolError>(json!({"query": a.query, "results": [{"title": "Smith 2024", "claim": "mean of 2, 4, 6, 8 is 5"}]}))
    })
    .parallel_safe(true);
    let literature = Agent::new("literature", "You find papers.", lit_p.clone())
        .describe("Searches the literature for the claim.")
        .with_tools(ToolSet::new().with(search).expect("tools"));
    let reproduction = Agent::new(
        "reproduction",
        "You reproduce numbers with code.",
        repro_p.clone(),
    )
    .describe("Re-computes a claimed number with run_code.")
    .with_tools(ToolSet::builtins());
    let router = Selector::by_model("router", router_p.clone())
        .model("router-model")
        .candidate(literature)
        .candidate(reproduction);
    let writer = Agent::new("writer", "You write the final report.", writer_p.clone())
        .describe("Writes the report.");
    let pipeline = Sequence::new("research")
        .then(router)
        .then(SummaryCompressor::new(summary_p.clone(), 2).named("compressor"))
        .then(writer);

    let (cx, archive) = context();
    let root = Session::user_with("Does the mean of 2, 4, 6, 8 equal 5?", Stamper::counter())
        .to_with("local", SandboxSpec::working_dir(workdir.to_string_lossy()));
    let out = cx
        .forward(&pipeline, root)
        .await
        .expect("research workflow");
    for p in [&router_p, &lit_p, &repro_p, &summary_p, &writer_p] {
        p.assert_complete().expect("every scripted response used");
    }
    let providers = vec![
        ("literature", lit_p),
        ("reproduction", repro_p),
        ("writer", writer_p),
    ];
    (out, archive, providers)
}

#[tokio::test]
async fn research_workflow() {
    if !python3_available() {
        rath_testkit::skip("python3 is not installed");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, archive, providers) = research(dir.path()).await;
    assert_eq!(
        rath_flow::final_text(&out),
        Some("Report: Smith 2024's claim (mean 5) is reproduced exactly.")
    );
    let sessions = ancestry(&out, &archive);
    // Route decisions are on record (three of them: literature, reproduction, done).
    let routes: Vec<Option<String>> = sessions
        .iter()
        .flat_map(|s| s.chunks().iter().cloned().collect::<Vec<_>>())
        .filter_map(|c| match c.body() {
            ChunkBody::RouteDecision(d) => Some(d.choice.clone()),
            _ => None,
        })
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(
        routes,
        [
            None,
            Some("literature".to_owned()),
            Some("reproduction".to_owned())
        ]
    );
    // The reproduction really ran Python.
    let code_out = sessions[0]
        .chunks()
        .iter()
        .chain(sessions.iter().flat_map(|s| s.chunks().iter()))
        .find_map(|c| match c.body() {
            ChunkBody::ToolResult(r) if r.tool_call_id == "call_code" => Some(r.content.clone()),
            _ => None,
        })
        .expect("run_code result");
    assert!(code_out.contains("5.0"), "{code_out}");
    // Compression is on the lineage.
    assert!(
        sessions
            .iter()
            .any(|s| s.lineage().kind.as_str() == "op_session_compress"
                && s.lineage().extra("compression.lossy") == Some(&json!(true)))
    );
    assert_eq!(out.agent_usage().len(), 5, "{:?}", out.agent_usage());

    let refs: Vec<(&str, &ScriptedProvider)> =
        providers.iter().map(|(n, p)| (*n, p.as_ref())).collect();
    assert_no_private_transcript(&sessions, &refs);

    insta::assert_json_snapshot!("research_transcript", transcript(&out));
    insta::assert_json_snapshot!("research_lineage", lineage_rows(&sessions));
}
