//! `rath sessions` and `rath show` (the inspect module) mark a failed run's session failed and
//! say why; closed and crashed sessions keep their status.

use std::sync::Arc;

use openrath::inspect::{StoreView, session_status};
use openrath::persist::Store;
use openrath::session::{Chunk, Session, Stamper};
use rath_flow::{Agent, WorkflowExt};
use rath_provider::{ProviderError, ScriptedProvider, ScriptedResponse};

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Runtime::new().expect("runtime").block_on(f)
}

#[test]
fn a_failed_run_is_listed_and_shown_as_failed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = Store::at(tmp.path().join("sessions"));
    let provider = Arc::new(ScriptedProvider::new(vec![ScriptedResponse::error(
        ProviderError::Http {
            status: 503,
            message: "overloaded".into(),
            retry_after: None,
        },
    )]));
    let input = Session::user_with("go", Stamper::counter());
    let err = block_on(Agent::new("hello", "sys", provider).run(input.clone()))
        .expect_err("provider down");
    let failed = err.into_partial_session().expect("partial session");
    store.save(&input).expect("save");
    store.save(&failed).expect("save");
    let ok = input.fork().push(Chunk::assistant_text("fine"));
    store.save(&ok).expect("save");

    let view = StoreView::open(tmp.path()).expect("open");
    let listing = view.sessions().expect("list");
    let status = |id: &openrath::session::SessionId| {
        listing
            .rows
            .iter()
            .find(|r| &r.id == id)
            .map(|r| r.status)
            .expect("row")
    };
    assert_eq!(status(failed.id()), "failed");
    assert_eq!(status(input.id()), "closed");
    assert_eq!(status(ok.id()), "closed");
    let text = listing.render();
    assert!(
        text.contains(&format!(
            "failed {}: provider in hello at model_call (1 attempt): provider failed: HTTP 503",
            failed.id()
        )),
        "{text}"
    );

    let shown = view.transcript(failed.id()).expect("show");
    assert_eq!(shown.status, "failed");
    let page = shown.render();
    assert!(
        page.contains("FAILED    provider in hello at model_call"),
        "{page}"
    );
    assert!(
        page.contains("  attempt 1: HTTP 503 from provider: overloaded"),
        "{page}"
    );
    assert!(page.contains("~[1] run_failure provider"), "{page}");
    let json = serde_json::to_value(&shown).expect("json");
    assert_eq!(json["failure"]["attempts"][0]["status"], 503);
}

#[test]
fn status_rule() {
    let f = openrath::session::RunFailure::default();
    assert_eq!(session_status(true, false, Some(&f)), "failed");
    assert_eq!(session_status(false, true, Some(&f)), "failed");
    assert_eq!(session_status(true, false, None), "closed");
    assert_eq!(session_status(false, true, None), "crashed");
    assert_eq!(session_status(false, false, None), "open");
}

/// Issue 48 (4): a cancelled run's session is listed and shown `cancelled` (it was listed
/// `failed`, the status of a run that failed); a failed one stays `failed`.
#[test]
fn a_cancelled_run_is_listed_and_shown_as_cancelled() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = Store::at(tmp.path().join("sessions"));
    let provider = Arc::new(ScriptedProvider::new(vec![ScriptedResponse::text("never")]));
    let input = Session::user_with("go", Stamper::counter());
    let cancel = rath_flow::CancellationToken::new();
    cancel.cancel();
    let cx = rath_flow::FlowContext::new().with_cancel(cancel);
    let agent = Agent::new("hello", "sys", provider);
    let err = block_on(cx.forward(&agent, input.clone())).expect_err("cancelled");
    assert!(
        matches!(err, rath_flow::FlowError::Cancelled { .. }),
        "{err}"
    );
    let kept = err.keep_in(&store, [&input]).expect("keep");
    let id = openrath::session::SessionId::new(kept.session.expect("a session"));

    let view = StoreView::open(tmp.path()).expect("open");
    let listing = view.sessions().expect("list");
    let row = listing.rows.iter().find(|r| r.id == id).expect("row");
    assert_eq!(row.status, "cancelled");
    let text = listing.render();
    assert!(
        text.contains(&format!("cancelled {id}: cancelled")),
        "{text}"
    );
    assert_eq!(view.transcript(&id).expect("show").status, "cancelled");
    let f = openrath::session::RunFailure {
        kind: "cancelled".into(),
        ..Default::default()
    };
    assert_eq!(session_status(true, false, Some(&f)), "cancelled");
}
