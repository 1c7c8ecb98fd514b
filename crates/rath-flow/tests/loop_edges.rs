//! Loop edge cases: every failure is a tool_result with an error_kind, and the loop goes on.

use std::sync::Arc;
use std::time::Duration;

use rath_flow::{
    FlowContext, LoopOptions, SessionLoop, ToolContext, ToolError, ToolSet, typed_tool,
};
use rath_provider::{ScriptedProvider, ScriptedResponse};
use rath_session::{ChunkBody, ChunkKind, Session, Stamper};
use serde_json::{Value, json};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WcArgs {
    text: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Nothing {}

fn tools() -> ToolSet {
    let wc = typed_tool(
        "word_count",
        "Count words.",
        |_cx: ToolContext, a: WcArgs| async move {
            Ok::<_, ToolError>(json!({"words": a.text.split_whitespace().count()}))
        },
    )
    .parallel_safe(true);
    let boom = typed_tool(
        "boom",
        "Panics.",
        |_cx: ToolContext, _a: Nothing| async move {
            if true {
                panic!("kaboom");
            }
            Ok::<_, ToolError>(json!({}))
        },
    );
    let slow = typed_tool(
        "slow",
        "Sleeps.",
        |_cx: ToolContext, _a: Nothing| async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok::<_, ToolError>(json!({}))
        },
    )
    .timeout(Duration::from_millis(50));
    let failing = typed_tool(
        "failing",
        "Fails.",
        |_cx: ToolContext, _a: Nothing| async move {
            Err::<Value, _>(ToolError::exception("disk on fire"))
        },
    );
    ToolSet::new()
        .with(wc)
        .and_then(|t| t.with(boom))
        .and_then(|t| t.with(slow))
        .and_then(|t| t.with(failing))
        .expect("tools")
}

async fn run_one(
    call_name: &str,
    args: &str,
    options: LoopOptions,
) -> (Session, Arc<ScriptedProvider>) {
    let provider = Arc::new(ScriptedProvider::new(vec![
        ScriptedResponse::tool_calls(vec![("call_1", call_name, Value::String(args.to_owned()))]),
        ScriptedResponse::text("final answer"),
    ]));
    let stamper = Stamper::counter();
    let agent = Session::system_with("sys", stamper.clone());
    let user = Session::user_with("go", stamper);
    let out = SessionLoop::new(provider.clone(), tools())
        .with_options(options)
        .run(&user, &agent, &FlowContext::new())
        .await
        .expect("loop");
    (out, provider)
}

fn result_of(s: &Session, call_id: &str) -> Value {
    let c = s
        .chunks()
        .iter()
        .find_map(|c| match c.body() {
            ChunkBody::ToolResult(r) if r.tool_call_id == call_id => Some(r.content.clone()),
            _ => None,
        })
        .expect("tool result");
    serde_json::from_str(&c).expect("json content")
}

fn assert_error(s: &Session, kind: &str) {
    let v = result_of(s, "call_1");
    assert_eq!(v["ok"], json!(false), "{v}");
    assert_eq!(v["error_kind"], json!(kind), "{v}");
    assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()));
    assert_eq!(rath_flow::final_text(s), Some("final answer"));
    // Evidence records the same outcome.
    let ev = s
        .chunks()
        .iter()
        .find_map(|c| match c.body() {
            ChunkBody::ToolEvidence(e) => Some(e.outcome.clone()),
            _ => None,
        })
        .expect("evidence");
    assert_eq!(ev, kind);
}

#[tokio::test]
async fn malformed_json_arguments() {
    let (s, p) = run_one("word_count", "{\"text\": ", LoopOptions::default()).await;
    assert_error(&s, "invalid_tool_arguments");
    // The model saw the error on its second request.
    assert_eq!(
        p.requests()[1].messages.last().map(|m| m.role),
        Some(rath_session::Role::Tool)
    );
}

#[tokio::test]
async fn schema_violation() {
    let (s, _) = run_one("word_count", r#"{"text": 5}"#, LoopOptions::default()).await;
    assert_error(&s, "invalid_tool_arguments");
    let (s, _) = run_one("word_count", r#"{}"#, LoopOptions::default()).await;
    assert_error(&s, "invalid_tool_arguments");
}

#[tokio::test]
async fn unknown_tool() {
    let (s, _) = run_one("no_such_tool", "{}", LoopOptions::default()).await;
    assert_error(&s, "unknown_tool");
}

#[tokio::test]
async fn panicking_tool_is_caught() {
    let (s, _) = run_one("boom", "{}", LoopOptions::default()).await;
    assert_error(&s, "tool_execution_exception");
    assert!(
        result_of(&s, "call_1")["message"]
            .as_str()
            .unwrap_or("")
            .contains("kaboom")
    );
}

#[tokio::test]
async fn failing_tool() {
    let (s, _) = run_one("failing", "{}", LoopOptions::default()).await;
    assert_error(&s, "tool_execution_exception");
}

#[tokio::test]
async fn tool_timeout_per_tool_and_loop_default() {
    let (s, _) = run_one("slow", "{}", LoopOptions::default()).await;
    assert_error(&s, "tool_timeout");
}

#[tokio::test]
async fn truncation_answers_and_finishes() {
    let provider = Arc::new(ScriptedProvider::new(vec![
        ScriptedResponse::tool_calls(vec![("call_1", "word_count", json!({"text": "a b"}))]),
        ScriptedResponse::tool_calls(vec![("call_2", "word_count", json!({"text": "a b c"}))]),
        ScriptedResponse::text("final answer").expect(|req| {
            if req.tool_choice == rath_provider::ToolChoice::None {
                Ok(())
            } else {
                Err("the last request must forbid tools".into())
            }
        }),
    ]));
    let stamper = Stamper::counter();
    let agent = Session::system_with("sys", stamper.clone());
    let user = Session::user_with("go", stamper);
    let out = SessionLoop::new(provider.clone(), tools())
        .with_options(LoopOptions::default().max_tool_rounds(1))
        .run(&user, &agent, &FlowContext::new())
        .await
        .expect("loop");
    provider.assert_complete().expect("all responses used");
    assert_eq!(out.lineage().extra("loop.truncated"), Some(&json!(true)));
    assert_eq!(result_of(&out, "call_1"), json!({"words": 2}));
    let v = result_of(&out, "call_2");
    assert_eq!(v["error_kind"], json!("max_tool_rounds_exceeded"));
    assert_eq!(rath_flow::final_text(&out), Some("final answer"));
    assert!(out.unanswered_tool_calls().is_empty());
}

#[tokio::test]
async fn parallel_calls_answer_in_call_order() {
    let provider = Arc::new(ScriptedProvider::new(vec![
        ScriptedResponse::tool_calls(vec![
            ("c1", "word_count", json!({"text": "a"})),
            ("c2", "nope", json!({})),
            ("c3", "word_count", json!({"text": "a b c"})),
            ("c4", "boom", json!({})),
            ("c5", "word_count", json!({"text": "a b"})),
        ]),
        ScriptedResponse::text("final answer"),
    ]));
    let stamper = Stamper::counter();
    let agent = Session::system_with("sys", stamper.clone());
    let user = Session::user_with("go", stamper);
    let out = SessionLoop::new(provider, tools())
        .run(&user, &agent, &FlowContext::new())
        .await
        .expect("loop");
    let ids: Vec<String> = out
        .chunks()
        .iter()
        .filter_map(|c| match c.body() {
            ChunkBody::ToolResult(r) => Some(r.tool_call_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(ids, ["c1", "c2", "c3", "c4", "c5"]);
    assert_eq!(result_of(&out, "c3"), json!({"words": 3}));
}

#[tokio::test]
async fn evidence_can_be_turned_off() {
    let (s, _) = run_one(
        "word_count",
        r#"{"text": "x"}"#,
        LoopOptions::default().evidence(false),
    )
    .await;
    assert!(s.chunks().iter().all(|c| c.is_conversation()));
    let (s, _) = run_one("word_count", r#"{"text": "x"}"#, LoopOptions::default()).await;
    let kinds: Vec<ChunkKind> = s.chunks().iter().map(|c| c.kind()).collect();
    assert_eq!(
        kinds,
        [
            ChunkKind::User,
            ChunkKind::Assistant,
            ChunkKind::ModelCall,
            ChunkKind::ToolResult,
            ChunkKind::ToolEvidence,
            ChunkKind::Assistant,
            ChunkKind::ModelCall
        ]
    );
}

#[tokio::test]
async fn cancellation_leaves_a_valid_session() {
    let provider = Arc::new(ScriptedProvider::new(vec![
        ScriptedResponse::tool_calls(vec![("call_1", "slow", json!({}))]),
        ScriptedResponse::text("final answer"),
    ]));
    let stamper = Stamper::counter();
    let agent = Session::system_with("sys", stamper.clone());
    let user = Session::user_with("go", stamper);
    let cx = FlowContext::new();
    let token = cx.cancel_token().clone();
    let looper = SessionLoop::new(provider.clone(), tools())
        .with_options(LoopOptions::default().tool_timeout(None));
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        token.cancel();
    });
    let err = looper.run(&user, &agent, &cx).await.expect_err("cancelled");
    canceller.await.expect("join");
    let rath_flow::FlowError::Cancelled { session } = err else {
        panic!("expected Cancelled, got {err}");
    };
    // The unanswered call is pending work, so the session is consistent and resumable.
    assert_eq!(session.pending().len(), 1);
    assert_eq!(
        session.pending()[0].reason,
        rath_flow::pending_reason::CANCELLED
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let store = rath_persist::Store::at(dir.path());
    store.save(&session).expect("persistable");
    let loaded = store.load(session.id()).expect("load").session;
    assert_eq!(loaded.pending().len(), 1);
}
