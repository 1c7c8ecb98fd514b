//! Resume through forward, across processes: a team `Sequence[lead, Parallel[a, b],
//! Selector{qa, fix}]` whose branch `b` stops on an approval is persisted, loaded in a new
//! process (this test binary re-executed with `--exact team_child`), decided and forwarded
//! again. The result's chunks equal, byte for byte, those of a run where the call was
//! allowed from the start (deterministic stamper), tool results and usage too; they differ
//! only by the two policy-decision chunks (the `require_approval` stop and the reviewer's
//! approval). The stopped session carries where its stamper was, so the new process
//! continues the run's ids and tokens.

use std::path::Path;

use rath_flow::{
    Agent, Decision, FlowContext, Parallel, Selector, Sequence, ToolPolicy, Workflow, approve,
    reject, typed_tool,
};
use rath_persist::Store;
use rath_provider::{ScriptedProvider, ScriptedResponse};
use rath_session::{ChunkKind, Session, SessionId, Stamper};
use serde_json::{Value, json};

const ENV_DIR: &str = "RATH_FLOW_TEAM_DIR";
const ENV_ID: &str = "RATH_FLOW_TEAM_ID";
const ENV_DECISION: &str = "RATH_FLOW_TEAM_DECISION";

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct StampArgs {
    text: String,
}

#[derive(Clone, Copy, PartialEq)]
enum Phase {
    /// First process: `b`'s call needs approval.
    Stop,
    /// New process: lead and a must not run again; b continues after the decision.
    Resume { approved: bool },
    /// Reference run: the call is allowed from the start.
    Allowed,
}

fn scripted(rs: Vec<ScriptedResponse>) -> ScriptedProvider {
    ScriptedProvider::new(rs)
}

fn team(phase: Phase) -> Sequence {
    let first_run = !matches!(phase, Phase::Resume { .. });
    let once = |r: ScriptedResponse| if first_run { vec![r] } else { Vec::new() };
    let lead = Agent::new(
        "lead",
        "Plan.",
        scripted(once(ScriptedResponse::text("plan: a, b").usage(10, 2))),
    );
    let a = Agent::new(
        "a",
        "Do a.",
        scripted(once(ScriptedResponse::text("did a").usage(5, 1))),
    );
    let call =
        ScriptedResponse::tool_calls(vec![("cb1", "stamp", json!({"text": "b-item"}))]).usage(7, 3);
    let b_text = match phase {
        Phase::Resume { approved: false } => "b was refused",
        _ => "did b",
    };
    let b_script = match phase {
        Phase::Stop => vec![call],
        Phase::Resume { .. } => vec![ScriptedResponse::text(b_text).usage(9, 2)],
        Phase::Allowed => vec![call, ScriptedResponse::text(b_text).usage(9, 2)],
    };
    let stamp = typed_tool("stamp", "Stamps an item.", |_cx, a: StampArgs| async move {
        Ok(json!({"stamped": a.text}))
    });
    let policy = match phase {
        Phase::Allowed => ToolPolicy::allow_all(),
        _ => ToolPolicy::allow_all().require_approval("stamp"),
    };
    let b = Agent::new("b", "Do b.", scripted(b_script))
        .with_tool(stamp)
        .expect("one tool")
        .with_policy(policy);
    let qa = Agent::new(
        "qa",
        "Check.",
        scripted(vec![ScriptedResponse::text("qa ok").usage(4, 1)]),
    )
    .describe("Checks the work.");
    let fix = Agent::new("fix", "Fix.", scripted(Vec::new())).describe("Fixes the work.");
    let review = Selector::by_function("review", |s: &Session, _c: &[rath_flow::Candidate]| {
        if rath_flow::final_text(s) == Some("qa ok") {
            Decision::done("checked")
        } else {
            Decision::to("qa", "needs a check")
        }
    })
    .candidate(qa)
    .candidate(fix);
    Sequence::new("team")
        .then(lead)
        .then(Parallel::new("workers").branch(a).branch(b))
        .then(review)
}

async fn run(phase: Phase, input: Session) -> Session {
    team(phase)
        .forward(input, &FlowContext::new())
        .await
        .expect("team forward")
}

fn conversation(s: &Session) -> Value {
    serde_json::to_value(s.messages()).expect("messages")
}

/// Every chunk as its stored JSON, the policy-decision chunks left out.
fn chunk_bytes_without_decisions(s: &Session) -> Vec<String> {
    s.chunks()
        .iter()
        .filter(|c| c.kind() != ChunkKind::PolicyDecision)
        .map(|c| serde_json::to_string(c).expect("chunk serialises"))
        .collect()
}

fn kinds_without_decisions(s: &Session) -> Vec<ChunkKind> {
    s.chunks()
        .iter()
        .map(|c| c.kind())
        .filter(|k| *k != ChunkKind::PolicyDecision)
        .collect()
}

fn tool_result(s: &Session, id: &str) -> Value {
    s.chunks()
        .iter()
        .find_map(|c| match c.body() {
            rath_session::ChunkBody::ToolResult(r) if r.tool_call_id == id => {
                serde_json::from_str(&r.content).ok()
            }
            _ => None,
        })
        .expect("tool result")
}

async fn stop_and_persist(dir: &Path) -> Session {
    let stopped = run(
        Phase::Stop,
        Session::user_with("Ship a and b.", Stamper::counter()),
    )
    .await;
    let pending: Vec<&str> = stopped
        .pending()
        .iter()
        .map(|p| p.call.id.as_str())
        .collect();
    assert_eq!(pending, ["cb1"], "b stopped on its gated call");
    assert_eq!(
        rath_flow::final_text(&stopped),
        Some("did a"),
        "qa did not run yet"
    );
    Store::at(dir).save(&stopped).expect("save stopped team");
    stopped
}

fn resume_in_new_process(dir: &Path, id: &SessionId, decision: &str) -> Session {
    let exe = std::env::current_exe().expect("test binary");
    let out = std::process::Command::new(exe)
        .args(["--exact", "team_child", "--nocapture", "--test-threads=1"])
        .env(ENV_DIR, dir)
        .env(ENV_ID, id.as_str())
        .env(ENV_DECISION, decision)
        .output()
        .expect("spawn child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 passed"), "child test did not run");
    let final_id = std::fs::read_to_string(dir.join("final_id")).expect("child wrote the final id");
    let loaded = Store::at(dir)
        .load(&SessionId::new(final_id.trim()))
        .expect("final session");
    loaded.session
}

#[tokio::test]
async fn approved_team_resumed_in_a_new_process_equals_the_allowed_run() {
    let dir = tempfile::tempdir().expect("dir");
    let stopped = stop_and_persist(dir.path()).await;
    let resumed = resume_in_new_process(dir.path(), stopped.id(), "approve");
    let allowed = run(
        Phase::Allowed,
        Session::user_with("Ship a and b.", Stamper::counter()),
    )
    .await;

    assert_eq!(
        chunk_bytes_without_decisions(&resumed),
        chunk_bytes_without_decisions(&allowed),
        "the chunks, byte for byte"
    );
    assert_eq!(
        allowed
            .chunks()
            .iter()
            .filter(|c| c.kind() == ChunkKind::PolicyDecision)
            .count(),
        0
    );
    assert_eq!(conversation(&resumed), conversation(&allowed));
    assert_eq!(tool_result(&resumed, "cb1"), json!({"stamped": "b-item"}));
    assert_eq!(tool_result(&resumed, "cb1"), tool_result(&allowed, "cb1"));
    assert_eq!(resumed.usage(), allowed.usage());
    assert_eq!(resumed.agent_usage(), allowed.agent_usage());
    assert_eq!(
        resumed.usage().map(|u| u.total_tokens),
        Some(12 + 6 + 10 + 11 + 5)
    );
    assert_eq!(
        kinds_without_decisions(&resumed),
        kinds_without_decisions(&allowed)
    );
    let decisions = resumed
        .chunks()
        .iter()
        .filter(|c| c.kind() == ChunkKind::PolicyDecision)
        .count();
    assert_eq!(
        decisions, 2,
        "the require_approval stop and the reviewer's approval"
    );
    assert!(resumed.pending().is_empty());
    assert_eq!(rath_flow::final_text(&resumed), Some("qa ok"));
}

#[tokio::test]
async fn rejected_team_ends_with_denied_by_policy_and_finishes() {
    let dir = tempfile::tempdir().expect("dir");
    let stopped = stop_and_persist(dir.path()).await;
    let resumed = resume_in_new_process(dir.path(), stopped.id(), "reject");
    let r = tool_result(&resumed, "cb1");
    assert_eq!(r["ok"], json!(false));
    assert_eq!(r["error_kind"], json!("denied_by_policy"));
    assert!(resumed.pending().is_empty());
    let texts: Vec<&str> = resumed.conversation().filter_map(|c| c.text()).collect();
    assert!(texts.contains(&"b was refused"), "{texts:?}");
    assert_eq!(
        rath_flow::final_text(&resumed),
        Some("qa ok"),
        "the team finished"
    );
}

/// The second process: loads the stopped team, records the decision, forwards, saves.
#[tokio::test]
async fn team_child() {
    let (Ok(dir), Ok(id), Ok(decision)) = (
        std::env::var(ENV_DIR),
        std::env::var(ENV_ID),
        std::env::var(ENV_DECISION),
    ) else {
        return; // run normally: nothing to do
    };
    let store = Store::at(&dir);
    let loaded = store.load(&SessionId::new(&id)).expect("load stopped team");
    // Loaded with a live stamper, as every stored session is: forwarding a stopped
    // deterministic run gives it back the stamper it stopped with.
    let stopped = loaded.session;
    assert!(!stopped.stamper().is_deterministic());
    let approved = decision == "approve";
    let decided = if approved {
        approve(&stopped, "cb1", "reviewer").expect("approve")
    } else {
        reject(&stopped, "cb1", "reviewer", "not today").expect("reject")
    };
    let done = run(Phase::Resume { approved }, decided).await;
    store.save(&done).expect("save final");
    std::fs::write(Path::new(&dir).join("final_id"), done.id().as_str()).expect("final id");
}
