//! Approval round trip across processes: a gated call stops the loop; the stopped session is
//! persisted; a fresh process loads it, records approve (or reject), resumes and finishes.
//!
//! The second process is this test binary re-executed with `--exact approval_child` and the
//! store location in environment variables; run normally, `approval_child` does nothing.

use std::path::Path;
use std::sync::Arc;

use rath_flow::{
    Agent, FlowContext, StoreSink, ToolPolicy, ToolSet, Workflow, WorkflowExt, approve, reject,
};
use rath_persist::Store;
use rath_provider::{ScriptedProvider, ScriptedResponse};
use rath_session::{ChunkBody, LineageKind, SandboxSpec, Session, SessionId, Stamper};
use serde_json::{Value, json};

const ENV_STORE: &str = "RATH_FLOW_APPROVAL_STORE";
const ENV_ID: &str = "RATH_FLOW_APPROVAL_ID";
const ENV_DECISION: &str = "RATH_FLOW_APPROVAL_DECISION";

fn editor(provider: Arc<ScriptedProvider>) -> Agent {
    Agent::new("editor", "You edit files when asked.", provider)
        .with_tools(ToolSet::builtins())
        .with_policy(ToolPolicy::allow_all().require_approval("write_workspace_file"))
}

fn result_for(s: &Session, call_id: &str) -> Value {
    s.chunks()
        .iter()
        .find_map(|c| match c.body() {
            ChunkBody::ToolResult(r) if r.tool_call_id == call_id => {
                serde_json::from_str(&r.content).ok()
            }
            _ => None,
        })
        .expect("tool result")
}

/// Phase 1: run until the approval stop, persisting through a `StoreSink`.
async fn interrupt(store_dir: &Path, workdir: &Path) -> Session {
    let provider = Arc::new(ScriptedProvider::new(vec![
        ScriptedResponse::tool_calls(vec![
            ("call_ls", "list_workspace_files", json!({"path": "."})),
            (
                "call_write",
                "write_workspace_file",
                json!({"path": "note.txt", "content": "approved text"}),
            ),
            (
                "call_exists",
                "workspace_path_exists",
                json!({"path": "note.txt"}),
            ),
        ])
        .usage(30, 20),
    ]));
    let agent = editor(provider.clone()).persist_to(Store::at(store_dir));
    let user = Session::user_with("Write note.txt.", Stamper::counter())
        .to_with("local", SandboxSpec::working_dir(workdir.to_string_lossy()));
    let stopped = agent
        .forward(user, &FlowContext::new())
        .await
        .expect("forward");
    provider.assert_complete().expect("script used");

    // Stopped exactly at the gated call: the earlier call answered, the gated one and the
    // later one pending, in call order.
    assert_eq!(
        stopped.lineage().extra("loop.stopped"),
        Some(&json!("pending_approval"))
    );
    let pending: Vec<(&str, &str)> = stopped
        .pending()
        .iter()
        .map(|p| (p.call.id.as_str(), p.reason.as_str()))
        .collect();
    assert_eq!(
        pending,
        [
            ("call_write", "require_approval"),
            ("call_exists", "queued_behind_approval")
        ]
    );
    assert_eq!(result_for(&stopped, "call_ls")["ok"], json!(true));
    assert!(!workdir.join("note.txt").exists());
    stopped
}

fn spawn_child(store_dir: &Path, id: &SessionId, decision: &str) {
    let exe = std::env::current_exe().expect("test binary");
    let out = std::process::Command::new(exe)
        .args([
            "--exact",
            "approval_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ENV_STORE, store_dir)
        .env(ENV_ID, id.as_str())
        .env(ENV_DECISION, decision)
        .output()
        .expect("spawn child");
    assert!(
        out.status.success(),
        "child failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "child test did not run"
    );
}

fn resumed_from(store_dir: &Path, stopped: &SessionId) -> Session {
    let store = Store::at(store_dir);
    let summary = store
        .list()
        .expect("list")
        .into_iter()
        .find(|s| {
            s.lineage_row().parent_session_ids.first() == Some(stopped)
                && s.lineage_row().lineage_kind == LineageKind::OpResume
        })
        .expect("resumed session in the store");
    store.load(&summary.lineage_row().id).expect("load").session
}

#[tokio::test]
async fn approval_round_trip_across_processes() {
    let store_dir = tempfile::tempdir().expect("store");
    let work = tempfile::tempdir().expect("work");
    let stopped = interrupt(store_dir.path(), work.path()).await;
    spawn_child(store_dir.path(), stopped.id(), "approve");

    assert_eq!(
        std::fs::read_to_string(work.path().join("note.txt")).expect("written"),
        "approved text"
    );
    let done = resumed_from(store_dir.path(), stopped.id());
    assert!(done.pending().is_empty());
    let w = result_for(&done, "call_write");
    assert_eq!(w["ok"], json!(true), "{w}");
    assert_eq!(result_for(&done, "call_exists")["exists"], json!(true));
    assert_eq!(rath_flow::final_text(&done), Some("Wrote note.txt."));
    // The decision is on record, and the whole conversation is valid: every call answered.
    assert!(done.chunks().iter().any(|c| matches!(c.body(),
        ChunkBody::PolicyDecision(d) if d.decision == "approved" && d.decided_by == "reviewer")));
    assert!(done.unanswered_tool_calls().is_empty());
    assert_eq!(done.usage().expect("usage").total_tokens, 50 + 50);
}

#[tokio::test]
async fn reject_round_trip_across_processes() {
    let store_dir = tempfile::tempdir().expect("store");
    let work = tempfile::tempdir().expect("work");
    let stopped = interrupt(store_dir.path(), work.path()).await;
    spawn_child(store_dir.path(), stopped.id(), "reject");

    assert!(!work.path().join("note.txt").exists());
    let done = resumed_from(store_dir.path(), stopped.id());
    let v = result_for(&done, "call_write");
    assert_eq!(v["error_kind"], json!("denied_by_policy"));
    assert!(v["message"].as_str().unwrap_or("").contains("not today"));
    assert_eq!(result_for(&done, "call_exists")["exists"], json!(false));
    assert_eq!(rath_flow::final_text(&done), Some("I did not write it."));
}

#[tokio::test]
async fn resume_without_decision_is_refused() {
    let store_dir = tempfile::tempdir().expect("store");
    let work = tempfile::tempdir().expect("work");
    let stopped = interrupt(store_dir.path(), work.path()).await;
    let agent = editor(Arc::new(ScriptedProvider::new(vec![])));
    let err = agent
        .forward(stopped.clone(), &FlowContext::new())
        .await
        .expect_err("needs a decision");
    assert!(
        matches!(err, rath_flow::FlowError::AwaitingDecision { .. }),
        "{err}"
    );
}

/// The second process. Does nothing unless the parent set the environment.
#[tokio::test]
async fn approval_child() {
    let (Ok(dir), Ok(id), Ok(decision)) = (
        std::env::var(ENV_STORE),
        std::env::var(ENV_ID),
        std::env::var(ENV_DECISION),
    ) else {
        return;
    };
    let store = Store::at(&dir);
    let loaded = store
        .load(&SessionId::new(id))
        .expect("load stopped session");
    assert!(loaded.closed);
    let stopped = loaded.session.with_stamper(Stamper::seeded(7));
    assert_eq!(stopped.pending().len(), 2);
    let (decided, final_text) = if decision == "approve" {
        (
            approve(&stopped, "call_write", "reviewer").expect("approve"),
            "Wrote note.txt.",
        )
    } else {
        (
            reject(&stopped, "call_write", "reviewer", "not today").expect("reject"),
            "I did not write it.",
        )
    };
    let provider = Arc::new(ScriptedProvider::new(vec![
        ScriptedResponse::text(final_text).usage(40, 10),
    ]));
    let agent = editor(provider.clone());
    let cx = FlowContext::new().with_sink(StoreSink::new(Store::at(&dir)));
    let done = agent.forward(decided.clone(), &cx).await.expect("resume");
    provider.assert_complete().expect("script used");
    assert_eq!(done.lineage().kind, LineageKind::OpResume);
    assert_eq!(done.lineage().parents[0], *stopped.id());
}
