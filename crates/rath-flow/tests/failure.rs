//! A failed run is kept: whatever stops a workflow (a provider error, an exhausted budget, a
//! broken fan-out, cancellation), the error carries the session as far as it got, closed
//! with a `run_failure` chunk (kind, message, agent, step, attempts), and it round-trips
//! through the store, which lists it as failed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rath_flow::{
    Agent, Decision, FlowContext, FlowError, FlowEvent, LoopOptions, Parallel, Selector,
    SessionLoop, StoreSink, ToolContext, ToolError, ToolSet, WorkflowExt, typed_tool,
};
use rath_persist::Store;
use rath_provider::{ProviderError, ScriptedProvider, ScriptedResponse};
use rath_session::{ChunkBody, ChunkKind, Session, Stamper};
use serde_json::json;

fn http_503() -> ProviderError {
    ProviderError::Http {
        status: 503,
        message: "overloaded".into(),
        retry_after: None,
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

fn slow_tools() -> ToolSet {
    let slow = typed_tool(
        "slow",
        "Sleeps.",
        |_cx: ToolContext, _a: NoArgs| async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok::<_, ToolError>(json!({"ok": true}))
        },
    );
    ToolSet::new().with(slow).expect("tools")
}

#[tokio::test]
async fn a_provider_failure_is_kept_in_the_store_closed_and_failed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::at(dir.path());
    let provider = Arc::new(ScriptedProvider::new(vec![
        ScriptedResponse::tool_calls(vec![("c1", "count", json!({}))]).usage(10, 2),
        ScriptedResponse::error(http_503()),
    ]));
    let count = typed_tool(
        "count",
        "Counts.",
        |_cx: ToolContext, _a: NoArgs| async move { Ok::<_, ToolError>(json!({"n": 1})) },
    );
    let stamper = Stamper::counter();
    let agent = Session::system_with("sys", stamper.clone());
    let user = Session::user_with("go", stamper);
    let err = SessionLoop::new(provider, ToolSet::new().with(count).expect("tools"))
        .with_agent_name("worker")
        .run(
            &user,
            &agent,
            &FlowContext::new().with_sink(StoreSink::new(store.clone())),
        )
        .await
        .expect_err("the second model call fails");

    assert!(matches!(err.cause(), FlowError::Provider(_)), "{err}");
    assert!(err.to_string().contains("HTTP 503"), "{err}");
    let session = err.partial_session().expect("partial session").clone();
    let f = session.failure().expect("run_failure last").clone();
    assert_eq!(f.kind, "provider");
    assert_eq!(f.agent.as_deref(), Some("worker"));
    assert_eq!(f.step, "model_call");
    assert_eq!(f.round, Some(1));
    assert!(f.request_id.is_some());
    assert_eq!(f.attempts.len(), 1);
    assert_eq!(f.attempts[0].status, Some(503));
    assert!(f.message.contains("overloaded"), "{}", f.message);
    // As far as it got: the user turn, the first reply, the tool round, then the failure.
    let kinds: Vec<ChunkKind> = session.chunks().iter().map(|c| c.kind()).collect();
    assert_eq!(
        kinds,
        [
            ChunkKind::User,
            ChunkKind::Assistant,
            ChunkKind::ModelCall,
            ChunkKind::ToolResult,
            ChunkKind::ToolEvidence,
            ChunkKind::RunFailure
        ]
    );

    // The sink closed it: a closed file, listed as failed, loading back identically.
    let summary = store
        .list()
        .expect("list")
        .into_iter()
        .find(|s| &s.id == session.id())
        .expect("stored");
    assert!(summary.closed, "the failed session is closed");
    assert_eq!(summary.failure.as_ref(), Some(&f));
    let loaded = store.load(session.id()).expect("load");
    assert!(loaded.closed);
    assert_eq!(loaded.session.chunks(), session.chunks());
    assert_eq!(loaded.session.failure(), Some(&f));
}

#[tokio::test]
async fn an_exhausted_budget_is_its_own_kind() {
    let provider = Arc::new(ScriptedProvider::new(vec![ScriptedResponse::error(
        ProviderError::BudgetExceeded {
            budget: 100,
            used: 90,
            needed: 40,
        },
    )]));
    let agent = Agent::new("spender", "sys", provider);
    let err = agent
        .run(Session::user_with("go", Stamper::counter()))
        .await
        .expect_err("budget");
    let f = err.failure().expect("failure");
    assert_eq!(f.kind, "budget_exhausted");
    assert_eq!(f.agent.as_deref(), Some("spender"));
    assert!(f.attempts.is_empty(), "no request was sent");
}

#[tokio::test]
async fn cancellation_records_its_failure_and_stays_resumable() {
    let provider = Arc::new(ScriptedProvider::new(vec![
        ScriptedResponse::tool_calls(vec![("call_1", "slow", json!({}))]),
        ScriptedResponse::text("final answer"),
    ]));
    let stamper = Stamper::counter();
    let agent = Session::system_with("sys", stamper.clone());
    let user = Session::user_with("go", stamper);
    let cx = FlowContext::new();
    let token = cx.cancel_token().clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        token.cancel();
    });
    let looper = SessionLoop::new(provider, slow_tools())
        .with_agent_name("sleeper")
        .with_options(LoopOptions::default().tool_timeout(None));
    let err = looper.run(&user, &agent, &cx).await.expect_err("cancelled");
    let FlowError::Cancelled { session } = &err else {
        panic!("expected Cancelled, got {err}");
    };
    let f = session.failure().expect("run_failure");
    assert_eq!(f.kind, "cancelled");
    assert_eq!(f.step, "tool_calls");
    assert_eq!(session.pending().len(), 1);

    // A run that goes on after the failure (a resume) is not failed: only a last
    // run_failure chunk marks a session.
    let later = session.push(rath_session::Chunk::assistant_text("went on"));
    assert!(later.failure().is_none());
}

#[tokio::test]
async fn a_model_router_failure_names_the_selector_and_the_route_step() {
    let router = Arc::new(ScriptedProvider::new(vec![ScriptedResponse::error(
        http_503(),
    )]));
    let worker = Agent::new(
        "worker",
        "sys",
        Arc::new(ScriptedProvider::new(vec![ScriptedResponse::text("done")])),
    )
    .describe("Works.");
    let seen: Arc<Mutex<Vec<Session>>> = Arc::default();
    let log = seen.clone();
    let cx = FlowContext::new().with_observer(move |ev: &FlowEvent<'_>| {
        if let FlowEvent::Session { session } = ev {
            log.lock().expect("log").push((*session).clone());
        }
    });
    let sel = Selector::by_model("router", router).candidate(worker);
    let input = Session::user_with("route me", Stamper::counter());
    let err = cx
        .forward(&sel, input.clone())
        .await
        .expect_err("router down");
    let failed = err.partial_session().expect("partial");
    assert_eq!(failed.lineage().operator, "Selector.route");
    assert_eq!(failed.lineage().parents, vec![input.id().clone()]);
    let f = failed.failure().expect("failure");
    assert_eq!(
        (f.agent.as_deref(), f.step.as_str()),
        (Some("router"), "route")
    );
    // The observer saw the failed session, so a caller collecting sessions keeps it.
    assert!(
        seen.lock()
            .expect("log")
            .iter()
            .any(|s| s.id() == failed.id() && s.failure().is_some())
    );
}

#[tokio::test]
async fn a_model_router_naming_no_candidate_falls_back_to_done() {
    let router = Arc::new(ScriptedProvider::new(vec![ScriptedResponse::tool_calls(
        vec![(
            "r1",
            "route",
            json!({"choice": "nobody", "reason": "confused"}),
        )],
    )]));
    let worker = Agent::new(
        "worker",
        "sys",
        Arc::new(ScriptedProvider::new(vec![ScriptedResponse::text("done")])),
    );
    let out = Selector::by_model("router", router)
        .candidate(worker)
        .run(Session::user_with("route me", Stamper::counter()))
        .await
        .expect("a fallback, not an error");
    let Some(ChunkBody::RouteDecision(d)) = out.last().map(|c| c.body()) else {
        panic!("no route decision");
    };
    assert_eq!(d.choice, None);
    assert!(d.reason.starts_with("fallback:"), "{}", d.reason);
}

#[tokio::test]
async fn a_function_router_naming_no_candidate_is_a_kept_config_error() {
    let sel = Selector::by_function("router", |_s: &Session, _c: &[rath_flow::Candidate]| {
        Decision::to("nobody", "bug")
    })
    .candidate(Agent::new(
        "worker",
        "sys",
        Arc::new(ScriptedProvider::new(vec![])),
    ));
    let err = sel
        .run(Session::user_with("go", Stamper::counter()))
        .await
        .expect_err("config");
    assert!(matches!(err.cause(), FlowError::Config(_)));
    assert_eq!(err.failure().map(|f| f.kind.as_str()), Some("config"));
}

#[tokio::test]
async fn a_failing_branch_fails_the_fan_out_and_its_siblings_finish() {
    let ok = Agent::new(
        "ok",
        "sys",
        Arc::new(ScriptedProvider::new(vec![ScriptedResponse::text("fine")])),
    );
    let bad = Agent::new(
        "bad",
        "sys",
        Arc::new(ScriptedProvider::new(vec![ScriptedResponse::error(
            http_503(),
        )])),
    );
    let seen: Arc<Mutex<Vec<Session>>> = Arc::default();
    let log = seen.clone();
    let cx = FlowContext::new().with_observer(move |ev: &FlowEvent<'_>| {
        if let FlowEvent::Session { session } = ev {
            log.lock().expect("log").push((*session).clone());
        }
    });
    let team = Parallel::new("team").branch(bad).branch(ok);
    let err = cx
        .forward(&team, Session::user_with("go", Stamper::counter()))
        .await
        .expect_err("a branch failed");
    assert_eq!(err.failure().and_then(|f| f.agent.as_deref()), Some("bad"));
    let seen = seen.lock().expect("log");
    assert!(
        seen.iter()
            .any(|s| rath_flow::final_text(s) == Some("fine")),
        "the sibling branch ran to its end"
    );
}
