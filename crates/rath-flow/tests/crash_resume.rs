//! A team cut off by a crash resumes where it stopped: a 3-step `Sequence[lead, worker, qa]`
//! persisted as it goes runs in a child process (this test binary re-executed with `--exact
//! crash_child`) that exits at once (no cleanup) while `worker`'s tool call runs, after `lead` finished.
//! What the persist-as-you-go sink left is a partial session: worker's loop output with the
//! call on record and no result, no stop marker, no approval. Loaded in this process and
//! forwarded, the team finds from that session alone that step 1 was running: `lead` is not
//! called again (its script is empty), the call runs once, and qa finishes.

#[path = "common/partials.rs"]
mod partials;
use partials::partial_files;

use rath_flow::{Agent, FlowContext, Sequence, ToolSet, WorkflowExt, typed_tool};
use rath_persist::{Store, load_file};
use rath_provider::{ScriptedProvider, ScriptedResponse};
use rath_session::{ChunkBody, Session, Stamper};
use serde_json::json;

const ENV_DIR: &str = "RATH_FLOW_CRASH_DIR";

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct BuildArgs {
    what: String,
}

/// The team. In the first process `lead` answers and `worker`'s tool aborts the process;
/// in the second `lead` has no script (a call would fail the run) and the tool builds.
fn team(first_process: bool) -> Sequence {
    let lead_script = if first_process {
        vec![ScriptedResponse::text("plan: build it").usage(6, 2)]
    } else {
        Vec::new()
    };
    let lead = Agent::new("lead", "Plan.", ScriptedProvider::new(lead_script));
    let call = ScriptedResponse::tool_calls(vec![("w1", "build", json!({"what": "app"}))]);
    let worker_script = if first_process {
        vec![call.usage(5, 2)]
    } else {
        vec![ScriptedResponse::text("built").usage(7, 1)]
    };
    let build = typed_tool("build", "Builds.", move |_cx, a: BuildArgs| async move {
        if first_process {
            std::process::exit(86); // the process dies with the call in flight, no cleanup
        }
        Ok(json!({"built": a.what}))
    });
    let worker = Agent::new("worker", "Build.", ScriptedProvider::new(worker_script))
        .with_tools(ToolSet::new().with(build).expect("one tool"));
    let qa = Agent::new(
        "qa",
        "Check.",
        ScriptedProvider::new(vec![ScriptedResponse::text("qa ok").usage(3, 1)]),
    );
    Sequence::new("team").then(lead).then(worker).then(qa)
}

/// The first process: runs the team persisted to the store in `RATH_FLOW_CRASH_DIR`; it
/// never returns (the tool ends the process).
#[tokio::test]
async fn crash_child() {
    let Ok(dir) = std::env::var(ENV_DIR) else {
        return; // run normally: nothing to do
    };
    let wf = team(true).persist_to(Store::at(&dir));
    let input = Session::user_with("Build the app.", Stamper::counter());
    let _ = FlowContext::new().forward(&wf, input).await;
    unreachable!("the tool ends the process");
}

fn tool_results(s: &Session, id: &str) -> Vec<String> {
    s.chunks()
        .iter()
        .filter_map(|c| match c.body() {
            ChunkBody::ToolResult(r) if r.tool_call_id == id => Some(r.content.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_team_cut_off_mid_step_resumes_at_that_step_in_a_new_process() {
    let dir = tempfile::tempdir().expect("dir");
    let exe = std::env::current_exe().expect("test binary");
    let out = std::process::Command::new(exe)
        .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
        .env(ENV_DIR, dir.path())
        .output()
        .expect("spawn child");
    assert!(
        !out.status.success(),
        "the child was to die mid-call: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    // What the sink left: lead's output closed, worker's open with the call unanswered.
    let partials = partial_files(dir.path());
    assert_eq!(partials.len(), 1, "{partials:?}");
    let loaded = load_file(&partials[0]).expect("load the partial session");
    assert!(!loaded.closed);
    let cut = loaded.session;
    assert!(cut.pending().is_empty(), "no approval is pending");
    let unanswered: Vec<String> = cut
        .unanswered_tool_calls()
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(unanswered, ["w1"]);
    assert_eq!(cut.lineage().kind.as_str(), "op_session_loop");

    // Forwarded in this (new) process: lead is not called, the call runs once, qa ends it.
    let done = FlowContext::new()
        .forward(&team(false), cut)
        .await
        .expect("the team resumes at step 1");
    assert_eq!(rath_flow::final_text(&done), Some("qa ok"));
    let results = tool_results(&done, "w1");
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&results[0]).expect("json"),
        json!({"built": "app"})
    );
    let texts: Vec<&str> = done.conversation().filter_map(|c| c.text()).collect();
    assert_eq!(
        texts.iter().filter(|t| **t == "plan: build it").count(),
        1,
        "lead answered once, in the first process: {texts:?}"
    );
    assert!(texts.contains(&"built"), "{texts:?}");
}
