//! Issue 48 (7): a fan-out cut off mid-run resumes from a SQL store too. The run streams
//! into SQLite through `RunStore::sink`; it is cut off (its task aborted, as a crash would
//! leave it: nothing more is written) while `b`'s tool call runs and after `a` finished.
//! Forwarding `b`'s cut session through the same workflow, with the same sink, takes `a`'s
//! output from the store (its model is not asked again), resumes `b`, and merges both.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use openrath::flow::FlowEvent;
use openrath::prelude::*;
use openrath::run_store::RunStore;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
struct Args {
    what: String,
}

/// The fan-out: `a` and `b`, each one tool call then an answer. `hang`: `b`'s tool never
/// returns (and says it was reached); `ran` counts the calls that ran.
fn fan(first: bool, hang: Arc<AtomicBool>, ran: Arc<AtomicUsize>) -> Parallel {
    let agent = |name: &'static str, script: Vec<ScriptedResponse>| {
        let (hang, ran) = (hang.clone(), ran.clone());
        let work = typed_tool("work", "Does the work.", move |_cx, a: Args| {
            let (hang, ran) = (hang.clone(), ran.clone());
            async move {
                if first && name == "b" {
                    hang.store(true, Ordering::SeqCst);
                    std::future::pending::<()>().await;
                }
                ran.fetch_add(1, Ordering::SeqCst);
                Ok(json!({"done": a.what}))
            }
        });
        Agent::new(name, "Work.", ScriptedProvider::new(script))
            .with_tools(ToolSet::new().with(work).expect("one tool"))
    };
    let call = |id: &str, what: &str| {
        ScriptedResponse::tool_calls(vec![(id, "work", json!({"what": what}))]).usage(5, 2)
    };
    let text = |t: &str| ScriptedResponse::text(t).usage(3, 1);
    let (a, b) = if first {
        (vec![call("ac", "a"), text("a done")], vec![call("bc", "b")])
    } else {
        (Vec::new(), vec![text("b done")])
    };
    Parallel::new("fan")
        .branch(agent("a", a))
        .branch(agent("b", b))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fan_out_cut_off_resumes_from_a_sqlite_store() {
    let dir = tempfile::tempdir().expect("dir");
    let url = format!("sqlite://{}", dir.path().join("s.db").display());
    let store = RunStore::open(Some(&url)).await.expect("store");
    let hang = Arc::new(AtomicBool::new(false));
    let a_done = Arc::new(AtomicBool::new(false));
    let wf = fan(true, hang.clone(), Arc::default()).with_sink(store.sink());
    let done = a_done.clone();
    let cx = FlowContext::new().with_observer(move |ev: &FlowEvent<'_>| {
        if let FlowEvent::AgentEnd { agent: "a", .. } = ev {
            done.store(true, Ordering::SeqCst);
        }
    });
    let input = Session::user_with("Do the work.", Stamper::system());
    let task = tokio::spawn(async move { cx.forward(&wf, input).await });
    // A guard against a hang, not a measurement: both points are reached at once.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !(hang.load(Ordering::SeqCst) && a_done.load(Ordering::SeqCst)) {
        assert!(std::time::Instant::now() < deadline, "never cut");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    task.abort();
    let _ = task.await;

    let sessions = store.store();
    let mut cut = None;
    for s in sessions.list().await.expect("list") {
        let l = sessions.load(&s.id).await.expect("load").session;
        if !l.unanswered_tool_calls().is_empty() {
            cut = Some(l);
        }
    }
    let cut = cut.expect("b's session, its call unanswered");
    let ran = Arc::new(AtomicUsize::new(0));
    let wf = fan(false, Arc::default(), ran.clone()).with_sink(store.sink());
    let out = FlowContext::new()
        .forward(&wf, cut)
        .await
        .expect("the fan-out resumes");
    let answers: Vec<&str> = out
        .conversation()
        .filter(|c| matches!(c.body(), ChunkBody::Assistant(_)))
        .filter_map(|c| c.text())
        .collect();
    assert_eq!(answers, ["a done", "b done"]);
    assert_eq!(ran.load(Ordering::SeqCst), 1, "b's call ran once, a's none");
    assert_eq!(out.usage().map(|u| u.total_tokens), Some(22));
    assert_eq!(out.lineage().kind.as_str(), "op_merge");
}
