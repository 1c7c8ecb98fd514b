//! Issue 48 (7): a run cut off by a crash resumes through `LoopUntil` and `Parallel`, as an
//! approval stop already does. Each scenario runs a workflow persisted as it goes in a child
//! process (this test binary re-executed with `--exact crash_child`) that exits at once (no
//! cleanup) while a tool call runs, at a point the scenario picks. The parent loads a
//! partial file the crash left and forwards it through the same workflow: what had finished
//! is not done again (those models have no script left: a call would fail the run), what
//! was cut resumes there, and the result is what an uninterrupted run makes.
//!
//! - `loop`: `LoopUntil` of an agent, cut in its second iteration: the loop resumes that
//!   iteration and runs only the third (the iteration count was lost: it ran three more).
//! - `one_branch`: `Parallel[Sequence[a1, a2], b]`, cut in `b` after the first branch
//!   finished: the finished branch is taken from the store (a branch's file lacks its
//!   siblings), `b` resumes, the merge holds both.
//! - `two_branches`: the same, cut while `a2` and `b` both run a tool: both resume, `a1`
//!   is not asked again.
//! - `loop_of_parallel`: `LoopUntil` of `Parallel[a, b]`, cut in the second iteration's `b`.

#[path = "common/partials.rs"]
mod partials;
use partials::partial_files;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rath_flow::{
    Agent, FlowContext, FlowError, LoopUntil, Parallel, Sequence, ToolSet, Workflow, WorkflowExt,
    typed_tool,
};
use rath_persist::{Store, load_file};
use rath_provider::{ScriptedProvider, ScriptedResponse};
use rath_session::{ChunkBody, Session, Stamper};
use serde_json::json;

const ENV_DIR: &str = "RATH_FLOW_CRASH2_DIR";
const ENV_SCENARIO: &str = "RATH_FLOW_CRASH2_SCENARIO";

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WorkArgs {
    what: String,
}

/// The tool calls that ran (`agent:what`), in the process that runs them.
type Ran = Arc<std::sync::Mutex<Vec<String>>>;

/// Agents whose loop ended in the first process, by name, once per end (the crash points
/// wait on them); and agents whose tool was reached.
static ENDED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
static REACHED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn count(list: &std::sync::Mutex<Vec<String>>, name: &str) -> usize {
    list.lock().unwrap().iter().filter(|n| *n == name).count()
}

/// Where an agent's tool ends the first process: on its `call`-th call, once `ready` holds.
#[derive(Clone, Copy)]
struct Crash {
    call: usize,
    ready: fn() -> bool,
}

fn now() -> bool {
    true
}

/// An agent `name` whose model is `script` and whose `work` tool records what it ran in
/// `ran`; in the first process, `crash` ends the process mid-call.
fn agent(
    name: &'static str,
    script: Vec<ScriptedResponse>,
    ran: &Ran,
    crash: Option<Crash>,
) -> Agent {
    let ran = ran.clone();
    let calls = Arc::new(AtomicUsize::new(0));
    let work = typed_tool("work", "Does the work.", move |_cx, a: WorkArgs| {
        let ran = ran.clone();
        let calls = calls.clone();
        async move {
            REACHED.lock().unwrap().push(name.to_owned());
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            if let Some(c) = crash.filter(|c| c.call == n) {
                while !(c.ready)() {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
                std::process::exit(86); // the call is in flight: no result, no cleanup
            }
            ran.lock().unwrap().push(format!("{name}:{}", a.what));
            Ok(json!({"done": a.what}))
        }
    });
    Agent::new(name, "Work.", ScriptedProvider::new(script))
        .with_tools(ToolSet::new().with(work).expect("one tool"))
}

fn call(id: &str, what: &str) -> ScriptedResponse {
    ScriptedResponse::tool_calls(vec![(id, "work", json!({"what": what}))]).usage(5, 2)
}

fn text(t: &str) -> ScriptedResponse {
    ScriptedResponse::text(t).usage(3, 1)
}

/// The scenario's workflow. In the first process the scripts cover the run up to the crash
/// and the crash points are armed; in the second the scripts hold only what is left to do.
fn workflow(scenario: &str, first: bool, ran: &Ran) -> Arc<dyn Workflow> {
    let armed = |c: Crash| first.then_some(c);
    match scenario {
        "loop" => {
            let script = if first {
                vec![call("w0", "0"), text("done 0"), call("w1", "1")]
            } else {
                vec![text("done 1"), call("w2", "2"), text("done 2")]
            };
            let crash = armed(Crash {
                call: 2,
                ready: now,
            });
            Arc::new(LoopUntil::new(
                "rounds",
                agent("worker", script, ran, crash),
                3,
            ))
        }
        "one_branch" | "two_branches" => {
            let two = scenario == "two_branches";
            let a1 = if first {
                vec![call("a1c", "a1"), text("a1 done")]
            } else {
                Vec::new()
            };
            let a2 = match (first, two) {
                (true, true) => vec![call("a2c", "a2")],
                (true, false) => vec![call("a2c", "a2"), text("a2 done")],
                (false, true) => vec![text("a2 done")],
                (false, false) => Vec::new(),
            };
            let b = if first {
                vec![call("bc", "b")]
            } else {
                vec![text("b done")]
            };
            // `one_branch`: b's call ends the process once branch 0 (a1 then a2) finished.
            // `two_branches`: a2's and b's calls each wait until the other's was reached.
            let (a2_crash, b_crash) = if two {
                (
                    armed(Crash {
                        call: 1,
                        ready: || count(&REACHED, "b") > 0,
                    }),
                    armed(Crash {
                        call: 1,
                        ready: || count(&REACHED, "a2") > 0,
                    }),
                )
            } else {
                (
                    None,
                    armed(Crash {
                        call: 1,
                        ready: || count(&ENDED, "a2") > 0,
                    }),
                )
            };
            let seq = Sequence::new("pair")
                .then(agent("a1", a1, ran, None))
                .then(agent("a2", a2, ran, a2_crash));
            let b = agent("b", b, ran, b_crash);
            Arc::new(Parallel::new("fan").branch(seq).branch(b))
        }
        "loop_of_parallel" => {
            let (a, b) = if first {
                (
                    vec![call("a0", "a0"), text("a 0"), call("a1", "a1"), text("a 1")],
                    vec![call("b0", "b0"), text("b 0"), call("b1", "b1")],
                )
            } else {
                (Vec::new(), vec![text("b 1")])
            };
            // b's second call ends the process once a finished its second iteration.
            let b_crash = armed(Crash {
                call: 2,
                ready: || count(&ENDED, "a") >= 2,
            });
            let fan = Parallel::new("fan")
                .branch(agent("a", a, ran, None))
                .branch(agent("b", b, ran, b_crash));
            Arc::new(LoopUntil::new("twice", fan, 2))
        }
        other => panic!("unknown scenario {other}"),
    }
}

/// The first process: runs the scenario persisted to the store in `RATH_FLOW_CRASH2_DIR`;
/// it never returns (a tool ends the process).
#[tokio::test(flavor = "multi_thread")]
async fn crash_child() {
    let (Ok(dir), Ok(scenario)) = (std::env::var(ENV_DIR), std::env::var(ENV_SCENARIO)) else {
        return; // run normally: nothing to do
    };
    let ran = Ran::default();
    let wf = SharedPersisted(workflow(&scenario, true, &ran)).persist_to(Store::at(&dir));
    let cx = FlowContext::new().with_observer(|ev: &rath_flow::FlowEvent<'_>| {
        if let rath_flow::FlowEvent::AgentEnd { agent, .. } = ev {
            ENDED.lock().unwrap().push((*agent).to_owned());
        }
    });
    let input = Session::user_with("Do the work.", Stamper::counter());
    let _ = cx.forward(&wf, input).await;
    unreachable!("a tool ends the process");
}

/// A shared workflow as a workflow (so the layers wrap it).
struct SharedPersisted(Arc<dyn Workflow>);

impl Workflow for SharedPersisted {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn description(&self) -> &str {
        self.0.description()
    }
    fn forward<'a>(
        &'a self,
        session: Session,
        cx: &'a FlowContext,
    ) -> futures::future::BoxFuture<'a, Result<Session, FlowError>> {
        self.0.forward(session, cx)
    }
    fn role(&self) -> rath_flow::WorkflowRole {
        rath_flow::WorkflowRole::Wrapper
    }
    fn children(&self, visit: &mut dyn FnMut(&dyn Workflow)) {
        visit(&self.0);
    }
}

/// Runs `scenario`'s first process; returns the store directory.
fn crash(scenario: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("dir");
    let exe = std::env::current_exe().expect("test binary");
    let out = std::process::Command::new(exe)
        .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
        .env(ENV_DIR, dir.path())
        .env(ENV_SCENARIO, scenario)
        .output()
        .expect("spawn child");
    assert_eq!(
        out.status.code(),
        Some(86),
        "the child was to die mid-call: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

/// The cut session of the partial file whose last model call was `agent`'s.
fn cut_of(dir: &Path, agent: &str) -> Session {
    for p in partial_files(dir) {
        let loaded = load_file(&p).expect("load the partial session");
        assert!(!loaded.closed);
        let last = loaded
            .session
            .chunks()
            .iter()
            .rev()
            .find_map(|c| match c.body() {
                ChunkBody::ModelCall(m) => m.agent.clone(),
                _ => None,
            });
        if last.as_deref() == Some(agent) {
            assert!(!loaded.session.unanswered_tool_calls().is_empty());
            return loaded.session;
        }
    }
    panic!("no partial file of {agent}: {:?}", partial_files(dir));
}

/// Resumes `scenario` from `cut` in this process, persisted to the same store; the output
/// and the tool calls that ran.
async fn resume(scenario: &str, dir: &Path, cut: Session) -> (Session, Vec<String>) {
    let ran = Ran::default();
    let wf = SharedPersisted(workflow(scenario, false, &ran)).persist_to(Store::at(dir));
    let out = FlowContext::new()
        .forward(&wf, cut)
        .await
        .unwrap_or_else(|e| panic!("{scenario} resumes: {e}"));
    let mut ran = ran.lock().unwrap().clone();
    ran.sort();
    (out, ran)
}

/// What an uninterrupted run gives too: the input once (a fan-out's branches share it),
/// and `tokens` used in all (every call counts once: the ones before the crash, carried by
/// the sessions the store kept, and the ones after it).
fn assert_whole(s: &Session, tokens: u64) {
    let inputs = s
        .conversation()
        .filter(|c| c.text() == Some("Do the work."))
        .count();
    assert_eq!(inputs, 1, "the input once");
    assert_eq!(s.usage().map(|u| u.total_tokens), Some(tokens));
}

/// The assistant's answers in `s`, in order.
fn texts(s: &Session) -> Vec<&str> {
    s.conversation()
        .filter(|c| matches!(c.body(), ChunkBody::Assistant(_)))
        .filter_map(|c| c.text())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_loop_cut_in_its_second_iteration_resumes_that_iteration() {
    let dir = crash("loop");
    let cut = cut_of(dir.path(), "worker");
    let (out, ran) = resume("loop", dir.path(), cut).await;
    // Three iterations in all: one before the crash, the cut one, one more.
    assert_eq!(texts(&out), ["done 0", "done 1", "done 2"]);
    assert_eq!(ran, ["worker:1", "worker:2"]);
    assert_whole(&out, 33);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fan_out_cut_in_one_branch_takes_the_finished_one_from_the_store() {
    let dir = crash("one_branch");
    let cut = cut_of(dir.path(), "b");
    let (out, ran) = resume("one_branch", dir.path(), cut).await;
    let t = texts(&out);
    for want in ["a1 done", "a2 done", "b done"] {
        assert_eq!(t.iter().filter(|x| **x == want).count(), 1, "{want}: {t:?}");
    }
    assert_eq!(ran, ["b:b"], "only b's cut call runs again");
    assert_eq!(out.lineage().kind.as_str(), "op_merge");
    assert_whole(&out, 33);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fan_out_cut_in_two_branches_resumes_both() {
    let dir = crash("two_branches");
    assert_eq!(partial_files(dir.path()).len(), 2);
    let cut = cut_of(dir.path(), "b");
    let (out, ran) = resume("two_branches", dir.path(), cut).await;
    let t = texts(&out);
    for want in ["a1 done", "a2 done", "b done"] {
        assert_eq!(t.iter().filter(|x| **x == want).count(), 1, "{want}: {t:?}");
    }
    assert_eq!(ran, ["a2:a2", "b:b"]);
    assert_whole(&out, 33);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_loop_of_fan_outs_cut_in_its_second_iteration_resumes_there() {
    let dir = crash("loop_of_parallel");
    let cut = cut_of(dir.path(), "b");
    let (out, ran) = resume("loop_of_parallel", dir.path(), cut).await;
    let t = texts(&out);
    for want in ["a 0", "b 0", "a 1", "b 1"] {
        assert_eq!(t.iter().filter(|x| **x == want).count(), 1, "{want}: {t:?}");
    }
    assert_eq!(ran, ["b:b1"]);
    assert_whole(&out, 44);
}

/// Without the store its branches were written to, a fan-out cut in one branch cannot know
/// its siblings: a typed error, not a guess.
#[tokio::test(flavor = "multi_thread")]
async fn a_cut_fan_out_without_its_store_is_a_typed_error() {
    let dir = crash("one_branch");
    let cut = cut_of(dir.path(), "b");
    let wf = workflow("one_branch", false, &Ran::default());
    let err = FlowContext::new()
        .forward(wf.as_ref(), cut)
        .await
        .expect_err("no store to take the siblings from");
    assert!(
        matches!(err.cause(), FlowError::Config(m) if m.contains("store")),
        "{err}"
    );
}
