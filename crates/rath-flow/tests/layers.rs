//! Layers: a budget, an observer, a sink and memory wrap any workflow into a workflow.

use std::sync::{Arc, Mutex};

use rath_flow::{
    Agent, Budget, FlowError, FlowEvent, PolicyMemory, RawTool, Sequence, ToolOutput, WorkflowExt,
};
use rath_memory::{CommitPolicy, LocalMemory, MemoryPolicy, RecallPolicy, Scope};
use rath_persist::Store;
use rath_provider::{ScriptedProvider, ScriptedResponse};
use rath_session::{ChunkKind, Session, Stamper};
use serde_json::json;

fn tool_then_text() -> Arc<ScriptedProvider> {
    Arc::new(ScriptedProvider::new(vec![
        ScriptedResponse::tool_calls(vec![("c1", "echo", json!({"x": 1}))]).usage(4, 2),
        ScriptedResponse::text("done").usage(5, 1),
    ]))
}

fn echo_agent(provider: Arc<ScriptedProvider>) -> Agent {
    let echo = RawTool::new("echo", "Echo.", json!({"type": "object"}), |_cx, args| {
        Box::pin(async move { Ok(ToolOutput::json(&args)) })
    });
    Agent::new("worker", "Use tools.", provider)
        .with_tool(echo)
        .expect("one tool")
}

#[tokio::test]
async fn a_step_budget_refuses_the_call_over_it_without_sending_it() {
    let provider = tool_then_text();
    let team = Sequence::new("team")
        .then(echo_agent(provider.clone()))
        .with_budget(Budget::steps(1));
    let err = team
        .run(Session::user_with("go", Stamper::counter()))
        .await
        .expect_err("the second model call is over budget");
    assert!(
        matches!(
            err.cause(),
            FlowError::BudgetSpent {
                what: "steps",
                used: 1,
                limit: 1,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        provider.requests().len(),
        1,
        "the refused call was not sent"
    );
    let f = err.failure().expect("run_failure");
    assert_eq!(f.kind, "budget_exhausted");
    assert_eq!(f.agent.as_deref(), Some("worker"));
    // What ran before the refusal is kept: the tool round is answered.
    let s = err.partial_session().expect("partial");
    assert!(s.chunks().iter().any(|c| c.kind() == ChunkKind::ToolResult));
}

#[tokio::test]
async fn a_token_budget_counts_usage_and_a_roomy_one_lets_the_run_finish() {
    let provider = tool_then_text();
    let err = echo_agent(provider.clone())
        .with_budget(Budget::tokens(6))
        .run(Session::user_with("go", Stamper::counter()))
        .await
        .expect_err("6 tokens used after the first call");
    assert!(
        matches!(
            err.cause(),
            FlowError::BudgetSpent {
                what: "tokens",
                used: 6,
                limit: 6,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(provider.requests().len(), 1);

    let out = echo_agent(tool_then_text())
        .with_budget(Budget::tokens(100).and_steps(2))
        .run(Session::user_with("go", Stamper::counter()))
        .await
        .expect("within budget");
    assert_eq!(rath_flow::final_text(&out), Some("done"));
}

#[tokio::test]
async fn an_observer_layer_sees_only_its_workflow_and_a_sink_layer_persists_it() {
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let log = seen.clone();
    let dir = tempfile::tempdir().expect("tempdir");
    let quiet = Agent::new(
        "quiet",
        "sys",
        ScriptedProvider::new(vec![ScriptedResponse::text("q")]),
    );
    let watched = echo_agent(tool_then_text())
        .observe(move |ev: &FlowEvent<'_>| {
            if let FlowEvent::Request { agent, .. } = ev {
                log.lock()
                    .expect("log")
                    .push(agent.unwrap_or("-").to_owned());
            }
        })
        .persist_to(Store::at(dir.path()));
    let team = Sequence::new("team").then(quiet).then(watched);
    let out = team
        .run(Session::user_with("go", Stamper::counter()))
        .await
        .expect("run");
    assert_eq!(*seen.lock().expect("log"), ["worker", "worker"]);
    let stored = Store::at(dir.path())
        .load(out.id())
        .expect("the loop output is stored");
    assert!(stored.closed);
    assert_eq!(stored.session.len(), out.len());
    assert_eq!(
        Store::at(dir.path()).list().expect("list").len(),
        1,
        "only the watched loop"
    );
}

#[tokio::test]
async fn memory_wraps_a_whole_team_recalling_once_and_committing_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mem = LocalMemory::open_at(dir.path(), "notes", Default::default()).expect("memory");
    let hook = PolicyMemory::new(
        MemoryPolicy {
            recall: Some(RecallPolicy::new(Scope::Agent, 3)),
            commit: Some(CommitPolicy::new(Scope::Agent, "answers")),
        },
        Arc::new(mem),
    );
    let say = |n: &str, t: &str| {
        Agent::new(
            n,
            "sys",
            ScriptedProvider::new(vec![ScriptedResponse::text(t)]),
        )
    };
    let team = Sequence::new("team")
        .then(say("a", "kettle: descale monthly"))
        .then(say("b", "noted"))
        .with_memory(hook);
    let out = team
        .run(Session::user_with("kettle?", Stamper::counter()))
        .await
        .expect("run");
    let events = out
        .chunks()
        .iter()
        .filter(|c| c.kind() == ChunkKind::MemoryEvent)
        .count();
    assert_eq!(events, 2, "one recall before the team, one commit after it");
    assert_eq!(out.last().map(|c| c.kind()), Some(ChunkKind::MemoryEvent));
}
