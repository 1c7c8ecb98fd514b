//! Lineage in one place: a team forwarded through its [`FlowContext`] leaves, in the
//! context's journal, every session it created or returned (no parent missing, each version
//! reported once), with no `record` call in the team and no process-global journal; two
//! runs in two contexts keep two journals.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use rath_flow::{
    Agent, Decision, FlowContext, FlowEvent, FnWorkflow, KeepLastN, Parallel, Selector, Sequence,
    WorkflowExt,
};
use rath_persist::{LineageJournal, export_jsonl_string};
use rath_provider::{ScriptedProvider, ScriptedResponse};
use rath_session::{Chunk, Session, SessionId, Stamper};

fn say(name: &str, text: &str) -> Agent {
    let script = vec![ScriptedResponse::text(text).usage(3, 1)];
    Agent::new(name, "Be brief.", ScriptedProvider::new(script)).describe(format!("Agent {name}."))
}

/// `Sequence[lead, Parallel[a, b], Selector{qa}, KeepLastN, note]`.
fn team() -> Sequence {
    let router = Selector::by_function("route", |s: &Session, _c: &[rath_flow::Candidate]| {
        match rath_flow::final_text(s) {
            Some("qa ok") => Decision::done("checked"),
            _ => Decision::to("qa", "check"),
        }
    })
    .candidate(say("qa", "qa ok"));
    Sequence::new("team")
        .then(say("lead", "plan"))
        .then(
            Parallel::new("workers")
                .branch(say("a", "did a"))
                .branch(say("b", "did b")),
        )
        .then(router)
        .then(KeepLastN::new(3))
        .then(FnWorkflow::new("note", "", |s: Session| {
            Ok(s.fork().push(Chunk::note("me", "end")))
        }))
}

/// An observer that keeps every reported session version, in order.
fn observed() -> (FlowContext, Arc<Mutex<Vec<Session>>>) {
    let seen: Arc<Mutex<Vec<Session>>> = Arc::default();
    let log = seen.clone();
    let cx = FlowContext::new().with_observer(move |ev: &FlowEvent<'_>| {
        if let FlowEvent::Session { session } = ev {
            log.lock().expect("log").push((*session).clone());
        }
    });
    (cx, seen)
}

#[tokio::test]
async fn the_context_journal_holds_every_session_of_a_team_run() {
    let (cx, seen) = observed();
    let root = Session::user_with("Do a and b.", Stamper::counter());
    let out = cx.forward(&team(), root.clone()).await.expect("team runs");

    let journal = cx.journal();
    let sessions = journal.sessions();
    let ids: Vec<SessionId> = journal.visit_order();
    let index: HashMap<&SessionId, usize> = ids.iter().enumerate().map(|(i, d)| (d, i)).collect();
    assert_eq!(index.len(), ids.len(), "one entry per id");
    // Every parent of every journaled session is in the journal, recorded before it.
    for s in &sessions {
        for p in s.lineage().parents.iter() {
            let (Some(&pi), Some(&si)) = (index.get(p), index.get(s.id())) else {
                panic!("{} names parent {p}, which the journal lacks", s.id());
            };
            assert!(pi < si, "{p} recorded after its child {}", s.id());
        }
    }
    // The root, the final output (latest version), and every kind the team makes.
    assert_eq!(ids.first(), Some(root.id()));
    let last = journal.get(out.id()).expect("the output is journaled");
    assert_eq!(last.len(), out.len());
    let kinds: HashSet<String> = sessions
        .iter()
        .map(|s| s.lineage().kind.to_string())
        .collect();
    for kind in [
        "leaf_user",
        "leaf_system",
        "op_session_loop",
        "op_fork",
        "op_merge",
        "op_annotate",
        "op_session_compress",
    ] {
        assert!(kinds.contains(kind), "no {kind} session in {kinds:?}");
    }
    // 1 root + 4 agent system sessions (lead, a, b, qa) + 4 loop outputs + 2 forks +
    // 1 merge + 2 route annotations + 1 compression + 1 fork by `note`.
    assert_eq!(sessions.len(), 16, "{kinds:?}");

    // The observer saw each version once, and every journaled session's latest version.
    let seen = seen.lock().expect("log");
    let mut versions = HashSet::new();
    for s in seen.iter() {
        assert!(
            versions.insert((s.id().clone(), s.len(), s.lineage().extras.len())),
            "{} reported twice in the same version",
            s.id()
        );
    }
    let seen_ids: HashSet<&SessionId> = seen.iter().map(Session::id).collect();
    assert_eq!(seen_ids.len(), ids.len());
}

#[tokio::test]
async fn a_shared_journal_is_the_callers_and_runs_do_not_mix() {
    let mine = LineageJournal::new();
    let cx = FlowContext::new().with_journal(mine.clone());
    let other = FlowContext::new();
    let (one, two) = (team(), team());
    let (a, b) = futures::join!(
        cx.forward(&one, Session::user_with("one", Stamper::counter())),
        other.forward(&two, Session::user_with("two", Stamper::counter())),
    );
    let (a, b) = (a.expect("run a"), b.expect("run b"));
    // Counter stampers mint the same ids in both runs: each journal holds its own run.
    assert_eq!(a.id(), b.id());
    assert_eq!(mine.len(), 16);
    assert_eq!(other.journal().len(), 16);
    assert_eq!(mine.sessions()[0].chunks()[0].text(), Some("one"));
    assert_eq!(
        other.journal().sessions()[0].chunks()[0].text(),
        Some("two")
    );
    // The journal's rows are the lineage export of its sessions.
    let rows: Vec<_> = mine
        .sessions()
        .iter()
        .map(rath_persist::LineageRow::from_session)
        .collect();
    assert_eq!(mine.to_jsonl(), export_jsonl_string(&rows));
}

#[tokio::test]
async fn a_layer_forwards_through_the_context_too() {
    // An observed team reports every session to both observers, once.
    let (cx, outer) = observed();
    let inner: Arc<Mutex<Vec<SessionId>>> = Arc::default();
    let log = inner.clone();
    let watched = team().observe(move |ev: &FlowEvent<'_>| {
        if let FlowEvent::Session { session } = ev {
            log.lock().expect("log").push(session.id().clone());
        }
    });
    let out = cx
        .forward(&watched, Session::user_with("go", Stamper::counter()))
        .await
        .expect("runs");
    assert_eq!(cx.journal().len(), 16);
    let inner = inner.lock().expect("log");
    assert!(
        inner.contains(out.id()),
        "the layer's observer saw the output"
    );
    // Everything but the root (recorded before the layer's context existed) reached the
    // layer's observer as well as the context's.
    let outer_ids: Vec<SessionId> = outer
        .lock()
        .expect("log")
        .iter()
        .map(|s| s.id().clone())
        .collect();
    assert_eq!(outer_ids.len(), inner.len() + 1);
    assert_eq!(&outer_ids[1..], &inner[..]);
}
