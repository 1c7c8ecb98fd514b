//! Compressors pass pending work through: a team `Sequence[lead, KeepLastN, worker, qa]`
//! whose `worker` stops on an approval is stored, loaded and forwarded with the approval;
//! the compressor's output is kept, lead and the compressor do not run again, and the team
//! finishes. A stopped session forwarded through a compressor comes back unchanged, so the
//! team still resumes from it.

use rath_flow::{
    Agent, FlowContext, KeepLastN, Sequence, SummaryCompressor, ToolPolicy, Workflow, approve,
    typed_tool,
};
use rath_persist::Store;
use rath_provider::{ScriptedProvider, ScriptedResponse};
use rath_session::{ChunkKind, LineageKind, Session, Stamper};
use serde_json::json;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct ShipArgs {
    what: String,
}

/// The team; `first_run` false gives lead no script (calling it would fail the run).
fn team(first_run: bool) -> Sequence {
    let once = |r: ScriptedResponse| if first_run { vec![r] } else { Vec::new() };
    let lead = Agent::new(
        "lead",
        "Plan.",
        ScriptedProvider::new(once(ScriptedResponse::text("plan: ship it").usage(6, 2))),
    );
    let call = ScriptedResponse::tool_calls(vec![("s1", "ship", json!({"what": "v1"}))]);
    let worker_script = if first_run {
        vec![call.usage(5, 2)]
    } else {
        vec![ScriptedResponse::text("shipped").usage(7, 1)]
    };
    let ship = typed_tool("ship", "Ships.", |_cx, a: ShipArgs| async move {
        Ok(json!({"shipped": a.what}))
    });
    let worker = Agent::new("worker", "Ship.", ScriptedProvider::new(worker_script))
        .with_tool(ship)
        .expect("one tool")
        .with_policy(ToolPolicy::allow_all().require_approval("ship"));
    let qa = Agent::new(
        "qa",
        "Check.",
        ScriptedProvider::new(vec![ScriptedResponse::text("qa ok").usage(3, 1)]),
    );
    Sequence::new("team")
        .then(lead)
        .then(KeepLastN::new(1))
        .then(worker)
        .then(qa)
}

fn compressions(s: &Session) -> usize {
    s.chunks()
        .iter()
        .filter(|c| c.kind() == ChunkKind::CompressionRecord)
        .count()
}

#[tokio::test]
async fn a_team_with_a_compressor_stops_on_approval_and_resumes_from_the_store() {
    let cx = FlowContext::new();
    let input = Session::user_with("Ship v1.", Stamper::counter());
    let stopped = cx.forward(&team(true), input).await.expect("first run");
    assert_eq!(stopped.pending().len(), 1, "worker stopped on its call");
    assert_eq!(compressions(&stopped), 1, "the compressor ran once");
    let dir = tempfile::tempdir().expect("dir");
    let store = Store::at(dir.path());
    store.save(&stopped).expect("save");

    let loaded = store.load(stopped.id()).expect("load").session;
    let decided = approve(&loaded, "s1", "reviewer").expect("approve");
    let done = FlowContext::new()
        .forward(&team(false), decided)
        .await
        .expect("resumed run: lead and the compressor do not run again");
    assert!(done.pending().is_empty());
    assert_eq!(rath_flow::final_text(&done), Some("qa ok"));
    assert_eq!(compressions(&done), 1, "the compressor did not run again");
    let result = done
        .chunks()
        .iter()
        .find_map(|c| match c.body() {
            rath_session::ChunkBody::ToolResult(r) if r.tool_call_id == "s1" => {
                Some(r.content.clone())
            }
            _ => None,
        })
        .expect("the approved call ran");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&result).expect("json"),
        json!({"shipped": "v1"})
    );
}

#[tokio::test]
async fn a_stopped_session_passes_through_a_compressor_unchanged() {
    let cx = FlowContext::new();
    let stopped = cx
        .forward(
            &team(true),
            Session::user_with("Ship v1.", Stamper::counter()),
        )
        .await
        .expect("first run");
    let keep = cx
        .forward(&KeepLastN::new(1), stopped.clone())
        .await
        .expect("keep");
    // SummaryCompressor would call its model on a fresh session; here it must not.
    let summary = SummaryCompressor::new(ScriptedProvider::new(Vec::new()), 1);
    let summarized = cx
        .forward(&summary, stopped.clone())
        .await
        .expect("summary passes it through without a model call");
    for out in [&keep, &summarized] {
        assert_eq!(out.id(), stopped.id());
        assert_eq!(out.len(), stopped.len());
        assert_eq!(out.pending(), stopped.pending());
        assert_eq!(out.lineage(), stopped.lineage());
        assert_ne!(out.lineage().kind, LineageKind::OpSessionCompress);
    }
    let decided = approve(&keep, "s1", "reviewer").expect("approve");
    let done = team(false)
        .forward(decided, &cx)
        .await
        .expect("the team resumes from what the compressor passed on");
    assert_eq!(rath_flow::final_text(&done), Some("qa ok"));
}
