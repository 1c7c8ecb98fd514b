//! Cassette round trips, the secret-free manifest, and the scripted provider's contract.

mod common;

use std::sync::Arc;

use common::*;
use rath_provider::mock::MockReply;
use rath_provider::{
    OpenAiProvider, Provider, ProviderError, ProviderRequest, RecordingProvider, ReplayProvider,
    ScriptedProvider, ScriptedResponse,
};
use rath_session::{Chunk, Session, Stamper};
use serde_json::json;

/// A two-step tool workflow: ask, get a tool call, answer it, get the final text.
async fn workflow(p: &dyn Provider, stream: bool) -> Result<Session, ProviderError> {
    let mut s = session();
    for _ in 0..2 {
        let req = request(&s).with_agent("counter");
        let timer = s.stamper().start_timer();
        let resp = if stream {
            p.stream(&req, &mut |_| {}).await?
        } else {
            p.complete(&req).await?
        };
        s = resp.apply(&s, &req, timer.elapsed_ms());
        for call in s.unanswered_tool_calls() {
            s = s.push(Chunk::tool_result(
                call.id,
                call.function.name,
                "{\"count\":4}",
            ));
        }
    }
    Ok(s)
}

fn script(server: &rath_provider::mock::MockServer) {
    server.push(
        MockReply::tool_calls(vec![(
            "call_1",
            "word_count",
            json!({"text": "the quick brown fox"}),
        )])
        .usage(40, 12),
    );
    server.push(MockReply::text("There are 4 words.").usage(70, 11));
}

#[tokio::test]
async fn cassette_round_trip_reproduces_the_session_byte_for_byte() {
    for stream in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("workflow.jsonl");
        let server = server().await;
        script(&server);
        let recorder = RecordingProvider::create(provider(&server), &path).unwrap();
        let live = workflow(&recorder, stream).await.unwrap();
        drop(server); // replay must not need the network

        let replay = ReplayProvider::load(&path).unwrap();
        let again = workflow(&replay, stream).await.unwrap();
        replay.assert_complete().unwrap();
        assert_eq!(session_json(&live), session_json(&again), "stream={stream}");
        let text = session_json(&again);
        assert!(
            text.contains("req_000001") && text.contains("openai-compatible"),
            "{text}"
        );
    }
}

#[tokio::test]
async fn replay_mismatch_fails_with_a_clear_diff() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.jsonl");
    let server = server().await;
    script(&server);
    let recorder = RecordingProvider::create(provider(&server), &path).unwrap();
    workflow(&recorder, false).await.unwrap();

    let replay = ReplayProvider::load(&path).unwrap();
    let s = Session::user_with("a different question", Stamper::counter());
    let err = replay
        .complete(&ProviderRequest::from_session(&s, vec![word_count()]))
        .await
        .unwrap_err();
    match err {
        ProviderError::ReplayMismatch { index, diff } => {
            assert_eq!(index, 0);
            assert!(
                diff.contains("+       \"content\": \"a different question\""),
                "{diff}"
            );
            assert!(diff.contains("-"), "{diff}");
        }
        other => panic!("expected a mismatch, got {other:?}"),
    }
    assert!(replay.assert_complete().is_err());
}

#[tokio::test]
async fn manifest_and_all_outputs_never_contain_the_key() {
    const KEY: &str = "sk-rath-TEST-7f3e9c1d-do-not-leak";
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.jsonl");
    let server = server().await;
    script(&server);
    let cfg = config(&server)
        .with_api_key(KEY)
        .with_header("X-Api-Key", KEY)
        .with_header("X-Request-Source", "contract-test");
    let p = OpenAiProvider::new(cfg.clone()).unwrap();
    let rec = RecordingProvider::create(p, &path).unwrap();
    let session = workflow(&rec, false).await.unwrap();

    // The key really is sent to the server...
    let headers = server.request_headers();
    assert_eq!(
        headers[0].get("authorization").unwrap().to_str().unwrap(),
        format!("Bearer {KEY}")
    );
    // ...and appears in nothing we produce.
    let manifest = serde_json::to_string_pretty(&rec.manifest()).unwrap();
    assert!(manifest.contains("contract-test"), "{manifest}");
    assert!(manifest.contains("[redacted]"), "{manifest}");
    let err = {
        let bad = server_error_text(&cfg).await;
        format!("{bad}\n{bad:?}")
    };
    // A server (or proxy) that echoes the Authorization header in its error text: once
    // final (401), once after retries (503), once after a stream fallback (400).
    let echoed = {
        let mut text = String::new();
        for (status, stream) in [(401u16, false), (503, false), (400, true)] {
            let echo = common::server().await;
            for _ in 0..4 {
                echo.push(rath_provider::mock::MockFault::EchoAuthorization { status });
            }
            let mut c = cfg.clone();
            c.base_url = echo.base_url();
            let p = stacked(c, retry());
            let e = if stream {
                p.stream(&request(&common::session()), &mut |_| {})
                    .await
                    .unwrap_err()
            } else {
                p.complete(&request(&common::session())).await.unwrap_err()
            };
            assert_eq!(e.status(), Some(status), "{e:?}");
            assert!(e.to_string().contains("[redacted]"), "{e}");
            text.push_str(&format!("{e}\n{e:?}\n{:?}\n", e.attempts()));
        }
        text
    };
    // The evidence of a call that needed a fallback and retries.
    let fallback_session = {
        let fb = common::server().await;
        fb.refuse_streamed_tools(true);
        fb.push(rath_provider::mock::MockFault::ServerError);
        fb.push(rath_provider::mock::MockReply::text("ok").usage(1, 1));
        let mut c = cfg.clone();
        c.base_url = fb.base_url();
        let p = stacked(c, rath_provider::Retry::default());
        let s = common::session();
        let req = request(&s);
        let resp = p.stream(&req, &mut |_| {}).await.unwrap();
        assert!(resp.detail.contains_key("stream_fallback"));
        assert!(resp.detail.contains_key("attempts"));
        session_json(&resp.apply(&s, &req, 0.0))
    };
    let outputs = [
        manifest,
        format!("{cfg:?}"),
        format!("{rec:?}"),
        session_json(&session),
        std::fs::read_to_string(&path).unwrap(),
        err,
        echoed,
        fallback_session,
    ];
    for (i, out) in outputs.iter().enumerate() {
        assert!(!out.contains(KEY), "output {i} leaks the key:\n{out}");
        assert!(
            !out.contains("7f3e9c1d"),
            "output {i} leaks part of the key"
        );
    }
}

async fn server_error_text(cfg: &rath_provider::OpenAiConfig) -> ProviderError {
    let server = server().await; // empty script: every request is a 500
    let mut cfg = cfg.clone();
    cfg.base_url = server.base_url();
    let p = stacked(cfg, retry().with_max_retries(0));
    p.complete(&request(&session())).await.unwrap_err()
}

#[tokio::test]
async fn scripted_provider_serves_in_order_and_checks_requests() {
    let p = Arc::new(ScriptedProvider::new(vec![
        ScriptedResponse::tool_calls(vec![("call_1", "word_count", json!({"text": "a b"}))])
            .usage(40, 12),
        ScriptedResponse::text("done").usage(70, 11).expect(|req| {
            match req.messages.last().and_then(|m| m.tool_call_id.as_deref()) {
                Some("call_1") => Ok(()),
                other => Err(format!(
                    "expected the tool result for call_1, got {other:?}"
                )),
            }
        }),
    ]));
    let dynp: Arc<dyn Provider> = p.clone();
    let s = session();
    let req = request(&s).with_agent("counter");
    let r1 = dynp.complete(&req).await.unwrap();
    assert!(p.assert_complete().is_err());
    let s = r1
        .apply(&s, &req, 0.0)
        .push(Chunk::tool_result("call_1", "word_count", "2"));
    let req2 = request(&s).with_agent("counter");
    let mut deltas = 0;
    let r2 = dynp.stream(&req2, &mut |_| deltas += 1).await.unwrap();
    assert_eq!(r2.text(), Some("done"));
    assert!(deltas >= 2);
    let s = r2.apply(&s, &req2, 0.0);
    p.assert_complete().unwrap();
    assert_eq!(
        s.agent_usage()["counter"],
        rath_session::Usage::new(110, 23)
    );
    assert!(matches!(
        dynp.complete(&req2).await,
        Err(ProviderError::ScriptExhausted { served: 2 })
    ));
    assert_eq!(p.requests().len(), 3);
}

#[tokio::test]
async fn scripted_assertions_and_errors_are_typed() {
    let p = ScriptedProvider::new(vec![
        ScriptedResponse::text("x").expect(|_| Err("always fails".into())),
        ScriptedResponse::error(ProviderError::Http {
            status: 503,
            message: "scripted outage".into(),
            retry_after: None,
        }),
    ]);
    let req = request(&session());
    assert!(matches!(
        p.complete(&req).await,
        Err(ProviderError::ScriptAssertion { index: 0, .. })
    ));
    assert!(matches!(
        p.complete(&req).await,
        Err(ProviderError::ScriptAssertion { index: 0, .. })
    ));
    let fresh = ScriptedProvider::new(vec![ScriptedResponse::error(ProviderError::Timeout {
        after: secs(1),
    })]);
    let err = fresh.complete(&req).await.unwrap_err();
    assert!(err.is_retryable());
    fresh.assert_complete().unwrap();
}
