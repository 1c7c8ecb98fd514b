//! The OpenAI-compatible provider against the in-repo mock server.
//!
//! Every test runs on tokio's paused clock: the mock server is a task of the test's own
//! runtime, so time moves only while every task waits on a timer. Backoff, `Retry-After`,
//! per-attempt timeouts and the retry layer's elapsed limits happen instantly and exactly,
//! and what the tests measure with [`since`] is that virtual time, never the wall clock.

mod common;

use tokio::time::Instant;

use common::*;
use rath_provider::mock::{MockFault, MockReply};
use rath_provider::{
    Provider, ProviderError, ProviderExt, StreamAssembler, StreamEvent, ToolChoice,
};
use rath_session::{ChunkKind, Usage};
use serde_json::json;

#[tokio::test(start_paused = true)]
async fn plain_completion_carries_text_usage_and_request_id() {
    let server = server().await;
    server.push(MockReply::text("four").usage(31, 2));
    let p = provider(&server);
    let s = session();
    let req = request(&s)
        .with_temperature(0.0)
        .with_seed(7)
        .with_max_tokens(16);
    let resp = p.complete(&req).await.unwrap();
    assert_eq!(resp.text(), Some("four"));
    assert_eq!(resp.usage, Some(Usage::new(31, 2)));
    assert_eq!(resp.finish_reason.as_deref(), Some("stop"));
    assert_eq!(resp.request_id, "req_000001");
    assert_eq!(resp.provider, "openai-compatible");

    let sent = &server.requests()[0];
    assert_eq!(sent["model"], "mock-model");
    assert_eq!(sent["stream"], false);
    assert_eq!(sent["seed"], 7);
    assert_eq!(sent["max_tokens"], 16);
    assert_eq!(sent["tool_choice"], "auto");
    assert_eq!(sent["tools"][0]["function"]["name"], "word_count");
    assert_eq!(sent["messages"][0]["role"], "system");
    assert_eq!(sent["messages"][1]["role"], "user");

    let next = resp.apply(&s, &req, 0.0);
    let call = next.last().unwrap();
    assert_eq!(call.kind(), ChunkKind::ModelCall);
    let text = serde_json::to_string(call).unwrap();
    assert!(text.contains("\"request_id\":\"req_000001\""), "{text}");
    assert_eq!(next.usage(), Some(Usage::new(31, 2)));
}

#[tokio::test(start_paused = true)]
async fn tool_calls_non_streamed() {
    let server = server().await;
    server.push(
        MockReply::tool_calls(vec![
            (
                "call_1",
                "word_count",
                json!({"text": "the quick brown fox"}),
            ),
            (
                "call_2",
                "word_count",
                json!({"text": "ünïcödé \"quoted\""}),
            ),
        ])
        .usage(40, 12),
    );
    let p = provider(&server);
    let s = session();
    let req = request(&s).with_tool_choice(ToolChoice::function("word_count"));
    let resp = p.complete(&req).await.unwrap();
    let calls = resp.tool_calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].id, "call_1");
    assert_eq!(calls[0].function.name, "word_count");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&calls[1].function.arguments).unwrap(),
        json!({"text": "ünïcödé \"quoted\""})
    );
    assert_eq!(resp.text(), None);
    assert_eq!(resp.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(
        server.requests()[0]["tool_choice"],
        json!({"type": "function", "function": {"name": "word_count"}})
    );
    assert_eq!(resp.apply(&s, &req, 0.0).unanswered_tool_calls().len(), 2);
}

/// The async-openai `byot` pitfall: without `stream: true` in the body a streamed call
/// silently yields nothing. This test fails unless real SSE chunks arrive one by one.
#[tokio::test(start_paused = true)]
async fn streaming_really_yields_chunks() {
    let server = server().await;
    let text = "The quick brown fox jumps over the lazy dog.";
    server.push(MockReply::text(text).usage(20, 11).fragment(4));
    let p = provider(&server);
    let s = session();
    let mut deltas = Vec::new();
    let resp = p
        .stream(&request(&s), &mut |ev| {
            if let StreamEvent::TextDelta { text } = ev {
                deltas.push(text);
            }
        })
        .await
        .unwrap();
    assert!(deltas.len() >= 10, "only {} deltas", deltas.len());
    assert_eq!(deltas.concat(), text);
    assert_eq!(resp.text(), Some(text));
    assert_eq!(resp.usage, Some(Usage::new(20, 11)));
    let sent = &server.requests()[0];
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["stream_options"]["include_usage"], true);
}

#[tokio::test(start_paused = true)]
async fn streamed_tool_call_fragments_assemble_into_the_non_streamed_chunk() {
    for fragment in [1, 2, 3, 7] {
        let server = server().await;
        let reply = MockReply::tool_calls(vec![
            (
                "call_a",
                "word_count",
                json!({"text": "a \\ b \"c\" \u{e9}\u{1F600}"}),
            ),
            ("call_b", "word_count", json!({"text": ""})),
        ])
        .with_text_free()
        .usage(50, 9)
        .fragment(fragment);
        server.push(reply.clone());
        server.push(reply);
        let p = provider(&server);
        let s = session();
        let whole = p.complete(&request(&s)).await.unwrap();
        let mut events = Vec::new();
        let streamed = p
            .stream(&request(&s), &mut |ev| events.push(ev))
            .await
            .unwrap();
        assert_eq!(streamed.chunk, whole.chunk, "fragment size {fragment}");
        assert_eq!(streamed.usage, whole.usage);
        assert_eq!(streamed.finish_reason, whole.finish_reason);
        let fragments = events
            .iter()
            .filter(|e| matches!(e, StreamEvent::ToolCallDelta { .. }))
            .count();
        assert!(
            fragments > 2,
            "fragment size {fragment}: {fragments} fragments"
        );
        let mut asm = StreamAssembler::default();
        events.iter().for_each(|e| asm.push(e));
        assert_eq!(asm.chunk_for(&streamed.request_id), streamed.chunk);
    }
}

trait TextFree {
    fn with_text_free(self) -> Self;
}
impl TextFree for MockReply {
    fn with_text_free(mut self) -> Self {
        self.content = None;
        self
    }
}

#[tokio::test(start_paused = true)]
async fn rate_limit_is_retried_after_retry_after() {
    let server = server().await;
    server.push(MockFault::RateLimited {
        retry_after_secs: 1,
    });
    server.push(MockReply::text("ok").usage(1, 1));
    let p = provider(&server);
    let started = Instant::now();
    let resp = p.complete(&request(&session())).await.unwrap();
    assert!(since(started) >= secs(1000), "{:?}", since(started));
    assert_eq!(resp.text(), Some("ok"));
    assert_eq!(server.requests().len(), 2);
}

async fn fault_then_success(fault: MockFault, stream: bool) {
    let server = server().await;
    server.push(fault.clone());
    server.push(MockReply::text("recovered").usage(3, 1));
    let p = provider(&server);
    let s = session();
    let before = session_json(&s);
    let req = request(&s);
    let mut events = Vec::new();
    let resp = if stream {
        p.stream(&req, &mut |e| events.push(e)).await
    } else {
        p.complete(&req).await
    }
    .unwrap_or_else(|e| panic!("{fault:?} stream={stream}: {e}"));
    assert_eq!(resp.text(), Some("recovered"), "{fault:?}");
    assert_eq!(resp.usage, Some(Usage::new(3, 1)));
    assert_eq!(server.requests().len(), 2, "{fault:?}");
    assert_eq!(session_json(&s), before);
    if stream {
        assert!(
            events
                .iter()
                .any(|e| matches!(e, StreamEvent::Retry { attempt: 2, .. })),
            "{fault:?}: {events:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn each_fault_is_retried_then_succeeds() {
    for stream in [false, true] {
        fault_then_success(MockFault::ServerError, stream).await;
        fault_then_success(MockFault::Hang(secs(10_000)), stream).await;
        fault_then_success(MockFault::CutMidStream, stream).await;
        fault_then_success(MockFault::InvalidJson, stream).await;
        fault_then_success(
            MockFault::RateLimited {
                retry_after_secs: 0,
            },
            stream,
        )
        .await;
    }
}

async fn fault_exhausts(fault: MockFault, stream: bool) -> ProviderError {
    let server = server().await;
    for _ in 0..3 {
        server.push(fault.clone());
    }
    let p = provider(&server);
    let s = session();
    let before = session_json(&s);
    let req = request(&s);
    let result = if stream {
        p.stream(&req, &mut |_| {}).await
    } else {
        p.complete(&req).await
    };
    assert_eq!(session_json(&s), before);
    assert_eq!(server.requests().len(), 3, "{fault:?}");
    match result {
        Err(ProviderError::RetriesExhausted { attempts, last, .. }) => {
            assert_eq!(attempts, 3);
            *last
        }
        other => panic!("{fault:?}: expected RetriesExhausted, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn each_fault_gives_a_typed_error_after_the_retry_budget() {
    for stream in [false, true] {
        let e = fault_exhausts(MockFault::ServerError, stream).await;
        assert!(
            matches!(e, ProviderError::Http { status: 500, .. }),
            "{e:?}"
        );
        let e = fault_exhausts(
            MockFault::RateLimited {
                retry_after_secs: 0,
            },
            stream,
        )
        .await;
        assert!(
            matches!(
                e,
                ProviderError::Http {
                    status: 429,
                    retry_after: Some(_),
                    ..
                }
            ),
            "{e:?}"
        );
        let e = fault_exhausts(MockFault::Hang(secs(10_000)), stream).await;
        assert!(matches!(e, ProviderError::Timeout { .. }), "{e:?}");
        let e = fault_exhausts(MockFault::CutMidStream, stream).await;
        assert!(
            matches!(
                e,
                ProviderError::Connection(_) | ProviderError::InvalidResponse(_)
            ),
            "{e:?}"
        );
        let e = fault_exhausts(MockFault::InvalidJson, stream).await;
        assert!(matches!(e, ProviderError::InvalidResponse(_)), "{e:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn missing_usage_is_none_by_default_and_retried_when_required() {
    let server = server().await;
    server.push(MockReply::text("no usage"));
    server.push(MockReply::text("no usage"));
    server.push(MockReply::text("usage").usage(4, 2));
    let p = provider(&server);
    let s = session();
    let resp = p.complete(&request(&s)).await.unwrap();
    assert_eq!(resp.usage, None);
    let next = resp.apply(&s, &request(&s), 0.0);
    assert_eq!(next.usage(), None);

    let strict = stacked(config(&server).with_require_usage(true), retry());
    let mut n = 0;
    let resp = strict.stream(&request(&s), &mut |_| n += 1).await.unwrap();
    assert_eq!(resp.usage, Some(Usage::new(4, 2)));

    server.push(MockReply::text("no usage"));
    server.push(MockReply::text("no usage"));
    server.push(MockReply::text("no usage"));
    let err = strict.complete(&request(&s)).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::RetriesExhausted { last, .. }
            if matches!(**last, ProviderError::InvalidResponse(_))),
        "{err:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn token_budget_stops_before_it_is_exceeded() {
    let server = server().await;
    server.set_fallback(Some(MockReply::text("ok").usage(100, 50)));
    let p = provider(&server).with_budget(400);
    let s = session();
    let req = request(&s).with_max_tokens(60);
    let mut served = 0;
    let err = loop {
        match p.complete(&req).await {
            Ok(_) => served += 1,
            Err(e) => break e,
        }
        assert!(served < 10);
    };
    assert!(
        matches!(err, ProviderError::BudgetExceeded { budget: 400, .. }),
        "{err:?}"
    );
    assert_eq!(served, 2);
    assert_eq!(
        server.requests().len(),
        2,
        "the refused request was never sent"
    );
    assert!(p.used_tokens() <= 400);
}

#[tokio::test(start_paused = true)]
async fn config_errors_are_typed() {
    let err = rath_provider::OpenAiProvider::new(rath_provider::OpenAiConfig::new(
        "ftp://example.invalid",
        "m",
    ))
    .unwrap_err();
    assert!(matches!(err, ProviderError::Config(_)));
    let err = rath_provider::OpenAiProvider::new(rath_provider::OpenAiConfig::new(
        "http://127.0.0.1:1/v1",
        " ",
    ))
    .unwrap_err();
    assert!(matches!(err, ProviderError::Config(_)));
}

#[tokio::test(start_paused = true)]
async fn unreachable_server_is_a_connection_error_after_retries() {
    // Bind and drop a listener so the port is (almost certainly) closed.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let p = stacked(
        rath_provider::OpenAiConfig::new(format!("http://127.0.0.1:{port}/v1"), "m"),
        retry().with_max_retries(1).with_backoff(secs(1), secs(1)),
    );
    let err = p.complete(&request(&session())).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::RetriesExhausted { attempts: 2, last, .. }
            if matches!(**last, ProviderError::Connection(_))),
        "{err:?}"
    );
}

// ------------------------------------------------------------ stream fallback and retries

fn detail_str<'a>(resp: &'a rath_provider::ProviderResponse, key: &str) -> Option<&'a str> {
    resp.detail.get(key).and_then(|v| v.as_str())
}

fn attempts_of(resp: &rath_provider::ProviderResponse) -> Vec<rath_provider::Attempt> {
    resp.detail
        .get("attempts")
        .map(|v| serde_json::from_value(v.clone()).expect("attempts parse"))
        .unwrap_or_default()
}

/// llama-cpp-python with `chatml-function-calling` answers a streamed request offering
/// tools with `tool_choice: auto` with HTTP 200 and an empty stream. One non-streamed
/// fallback answers it; nothing is retried; the evidence says so.
#[tokio::test(start_paused = true)]
async fn empty_stream_with_tools_is_answered_by_one_fallback() {
    let server = server().await;
    server.refuse_streamed_tools(true);
    server.push(
        MockReply::tool_calls(vec![("call_1", "word_count", json!({"text": "a b c"}))])
            .usage(40, 9),
    );
    server.push(MockReply::text("three").usage(50, 2));
    let p = provider(&server);
    let s = session();
    let req = request(&s);
    let mut events = Vec::new();
    let started = Instant::now();
    let resp = p.stream(&req, &mut |e| events.push(e)).await.unwrap();
    assert!(since(started) < secs(1000), "no backoff before a fallback");
    assert_eq!(resp.tool_calls().len(), 1);
    assert_eq!(resp.tool_calls()[0].function.name, "word_count");
    let sent = server.requests();
    assert_eq!(sent.len(), 2, "one stream, one fallback, no retry");
    assert_eq!(sent[0]["stream"], true);
    assert_eq!(sent[1]["stream"], false);
    assert_eq!(detail_str(&resp, "stream_fallback"), Some("empty_stream"));
    assert_eq!(resp.detail["stream"], json!(false));
    let attempts = attempts_of(&resp);
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0].outcome, "empty_stream");
    assert!(attempts[0].fallback);
    assert_eq!(attempts[0].backoff_ms, None);
    assert_eq!(attempts[1].outcome, "ok");
    assert_eq!(attempts[1].mode, rath_provider::AttemptMode::Complete);
    // The sink still sees the answer, replayed as events (nothing to discard first).
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, StreamEvent::Retry { .. }))
    );
    let mut asm = StreamAssembler::default();
    events.iter().for_each(|e| asm.push(e));
    assert_eq!(asm.chunk_for(&resp.request_id), resp.chunk);
    // The evidence on the session carries it.
    let next = resp.apply(&s, &req, 0.0);
    let evidence = serde_json::to_string(next.last().unwrap()).unwrap();
    assert!(
        evidence.contains("\"stream_fallback\":\"empty_stream\""),
        "{evidence}"
    );

    // The provider remembers: the next tool-offering stream is not tried at all.
    let resp = p.stream(&request(&s), &mut |_| {}).await.unwrap();
    assert_eq!(resp.text(), Some("three"));
    assert_eq!(server.requests().len(), 3);
    assert_eq!(server.requests()[2]["stream"], false);
    assert_eq!(
        detail_str(&resp, "stream_skipped"),
        Some(rath_provider::STREAM_SKIPPED_FAILED_EARLIER)
    );
    assert!(!resp.detail.contains_key("attempts"));
    // A request without tools still streams.
    server.push(MockReply::text("plain").usage(5, 1));
    let plain = rath_provider::ProviderRequest::from_session(&s, vec![]);
    let resp = p.stream(&plain, &mut |_| {}).await.unwrap();
    assert_eq!(resp.text(), Some("plain"));
    assert_eq!(server.requests()[3]["stream"], true);
    assert_eq!(resp.detail["stream"], json!(true));
}

#[tokio::test(start_paused = true)]
async fn stream_without_finish_reason_is_answered_by_one_fallback() {
    let server = server().await;
    server.push(MockFault::NoFinishReason);
    server.push(MockReply::text("the whole answer").usage(7, 3));
    let p = provider(&server);
    let s = session();
    let mut events = Vec::new();
    let resp = p
        .stream(&request(&s), &mut |e| events.push(e))
        .await
        .unwrap();
    assert_eq!(resp.text(), Some("the whole answer"));
    assert_eq!(resp.finish_reason.as_deref(), Some("stop"));
    let sent = server.requests();
    assert_eq!(sent.len(), 2, "one stream, one fallback, no retry");
    assert_eq!(
        (sent[0]["stream"].clone(), sent[1]["stream"].clone()),
        (json!(true), json!(false))
    );
    assert_eq!(
        detail_str(&resp, "stream_fallback"),
        Some("no_finish_reason")
    );
    let attempts = attempts_of(&resp);
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0].outcome, "no_finish_reason");
    assert!(attempts[0].fallback);
    // Partial text arrived first: a Retry event tells the sink to discard it, and what
    // the sink assembles is exactly the answer.
    let retry_at = events
        .iter()
        .position(|e| matches!(e, StreamEvent::Retry { attempt: 2, .. }))
        .expect("a Retry event before the replay");
    assert!(retry_at > 0, "partial deltas came first: {events:?}");
    let mut asm = StreamAssembler::default();
    events.iter().for_each(|e| asm.push(e));
    assert_eq!(asm.chunk_for(&resp.request_id), resp.chunk);
}

#[tokio::test(start_paused = true)]
async fn client_errors_are_not_retried() {
    for status in [400u16, 401, 403, 404, 422] {
        // Non-streamed: exactly one request, the typed HTTP error itself.
        let server = server().await;
        server.push(MockFault::status(status));
        server.set_fallback(Some(MockReply::text("must not be reached")));
        let p = provider(&server);
        let err = p.complete(&request(&session())).await.unwrap_err();
        assert!(
            matches!(&err, ProviderError::Http { status: s, .. } if *s == status),
            "{status}: {err:?}"
        );
        assert!(!err.is_retryable());
        assert_eq!(server.requests().len(), 1, "{status} was retried");

        // Streamed: 401/403/404 end at once; 400/422 (a server refusing the stream's shape)
        // get the one non-streamed fallback, which fails the same way and is final.
        let server = common::server().await;
        server.push(MockFault::status(status));
        server.push(MockFault::status(status));
        server.set_fallback(Some(MockReply::text("must not be reached")));
        let p = provider(&server);
        let err = p
            .stream(&request(&session()), &mut |_| {})
            .await
            .unwrap_err();
        assert_eq!(err.status(), Some(status), "{err:?}");
        if matches!(status, 400 | 422) {
            assert_eq!(
                server.requests().len(),
                2,
                "{status}: stream + one fallback"
            );
            match &err {
                ProviderError::RetriesExhausted {
                    attempts: 2,
                    history,
                    stopped,
                    ..
                } => {
                    assert_eq!(stopped, "not_retryable");
                    assert!(history[0].fallback);
                    assert_eq!(history[1].status, Some(status));
                }
                other => panic!("{status}: {other:?}"),
            }
        } else {
            assert_eq!(server.requests().len(), 1, "{status} was retried");
            assert!(matches!(err, ProviderError::Http { .. }), "{err:?}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn unavailable_then_success_is_retried_honouring_retry_after() {
    let server = server().await;
    server.push(MockFault::Status {
        status: 503,
        retry_after_secs: Some(1),
    });
    server.push(MockFault::status(408));
    server.push(MockFault::status(409));
    server.push(MockReply::text("back").usage(2, 1));
    let p = stacked(config(&server), retry().with_max_retries(3));
    let started = Instant::now();
    let resp = p.complete(&request(&session())).await.unwrap();
    assert!(since(started) >= secs(1000), "{:?}", since(started));
    assert_eq!(resp.text(), Some("back"));
    assert_eq!(server.requests().len(), 4);
    let attempts = attempts_of(&resp);
    let statuses: Vec<_> = attempts.iter().map(|a| a.status).collect();
    assert_eq!(statuses, [Some(503), Some(408), Some(409), None]);
    assert_eq!(attempts[0].retry_after_ms, Some(1000));
    assert_eq!(attempts[0].backoff_ms, Some(1000));
    assert!(
        attempts[..3]
            .iter()
            .all(|a| a.backoff_ms.is_some() && !a.fallback)
    );
    assert_eq!(attempts[3].outcome, "ok");
    assert_eq!(resp.detail["stream"], json!(false));
    assert!(p.retry_time_spent() >= secs(1000));
}

#[tokio::test(start_paused = true)]
async fn retry_time_is_bounded_per_call_and_per_provider() {
    // Every request is a 500 (empty script); retries would go on for 50 attempts.
    let server = server().await;
    let r = retry()
        .with_max_retries(50)
        .with_backoff(secs(60), secs(60))
        .with_max_elapsed(secs(500))
        .with_budget(None);
    let p = stacked(config(&server), r);
    let started = Instant::now();
    let err = p.complete(&request(&session())).await.unwrap_err();
    let took = since(started);
    assert!(took < secs(1500), "took {took:?}");
    let ProviderError::RetriesExhausted {
        attempts,
        history,
        stopped,
        last,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(stopped, "retry_max_elapsed");
    assert!(*attempts >= 3 && (*attempts as usize) < 50, "{attempts}");
    assert_eq!(history.len(), *attempts as usize);
    assert_eq!(server.requests().len(), *attempts as usize);
    assert!(matches!(**last, ProviderError::Http { status: 500, .. }));
    // The final error lists the attempts.
    let text = err.to_string();
    assert!(text.contains("#1 complete http 500"), "{text}");
    assert!(text.contains("stopped: retry_max_elapsed"), "{text}");

    // The provider-wide budget: once spent, later calls are not retried at all.
    let server = common::server().await;
    let r = retry()
        .with_max_retries(50)
        .with_backoff(secs(60), secs(60))
        .with_max_elapsed(std::time::Duration::from_secs(30))
        .with_budget(Some(secs(400)));
    let p = stacked(config(&server), r);
    let started = Instant::now();
    let err = p.complete(&request(&session())).await.unwrap_err();
    assert!(since(started) < secs(1500), "{:?}", since(started));
    assert!(
        matches!(&err, ProviderError::RetriesExhausted { stopped, .. } if stopped == "retry_budget"),
        "{err:?}"
    );
    let spent = p.retry_time_spent();
    assert!(spent <= secs(450), "{spent:?}");
    // What is left of the budget is less than one backoff (60 ms): a later call gets at
    // most one more retry, then stops on the budget too.
    let before = server.requests().len();
    let err = p.complete(&request(&session())).await.unwrap_err();
    assert!(
        server.requests().len() <= before + 2,
        "retried past the budget"
    );
    assert!(
        matches!(&err, ProviderError::RetriesExhausted { stopped, .. } if stopped == "retry_budget"),
        "{err:?}"
    );
    assert!(p.retry_time_spent() <= secs(450));
}

#[tokio::test(start_paused = true)]
async fn a_retry_gets_only_the_time_that_is_left() {
    // A hanging server, 1.5 s per attempt, but 0.8 s for the call once it retries: the
    // first attempt times out, and no retry starts past the limit.
    let server = server().await;
    for _ in 0..5 {
        server.push(MockFault::Hang(secs(10_000)));
    }
    let p = stacked(
        config(&server),
        retry().with_max_retries(5).with_max_elapsed(secs(800)),
    );
    let started = Instant::now();
    let err = p.complete(&request(&session())).await.unwrap_err();
    let took = since(started);
    assert!(took < secs(2500), "took {took:?}");
    assert_eq!(server.requests().len(), 1);
    assert!(
        matches!(&err, ProviderError::RetriesExhausted { stopped, last, .. }
            if stopped == "retry_max_elapsed" && matches!(**last, ProviderError::Timeout { .. })),
        "{err:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn stream_tools_false_never_streams_with_tools() {
    let server = server().await;
    server.refuse_streamed_tools(true);
    let base = server.base_url();
    let cfg = rath_provider::OpenAiConfig::from_lookup(|k| match k {
        "OPENAI_BASE_URL" => Some(base.clone()),
        "OPENAI_MODEL" => Some("mock-model".into()),
        "OPENAI_STREAM_TOOLS" => Some("false".into()),
        _ => None,
    })
    .unwrap();
    assert!(!cfg.stream_tools);
    let p = rath_provider::OpenAiProvider::new(cfg).unwrap();
    let s = session();
    for i in 0..3 {
        server.push(
            MockReply::tool_calls(vec![("call_1", "word_count", json!({"text": "x"}))]).usage(9, 3),
        );
        let mut events = Vec::new();
        let resp = p
            .stream(&request(&s), &mut |e| events.push(e))
            .await
            .unwrap();
        assert_eq!(resp.tool_calls().len(), 1);
        assert_eq!(
            detail_str(&resp, "stream_skipped"),
            Some(rath_provider::STREAM_SKIPPED_DISABLED)
        );
        assert!(!resp.detail.contains_key("stream_fallback"));
        assert!(
            events
                .iter()
                .any(|e| matches!(e, StreamEvent::ToolCallDelta { .. }))
        );
        assert_eq!(
            server.requests().len(),
            i + 1,
            "exactly one request per call"
        );
    }
    assert!(server.requests().iter().all(|r| r["stream"] == false));
    // Without tools it still streams.
    server.push(MockReply::text("streamed").usage(3, 1).fragment(2));
    let mut deltas = 0;
    let plain = rath_provider::ProviderRequest::from_session(&s, vec![]);
    p.stream(&plain, &mut |e| {
        if matches!(e, StreamEvent::TextDelta { .. }) {
            deltas += 1;
        }
    })
    .await
    .unwrap();
    assert!(deltas >= 3);
    assert_eq!(server.requests()[3]["stream"], true);

    let bad = rath_provider::StackConfig::from_lookup(|k| {
        (k == "OPENAI_RETRY_MAX_ELAPSED_MS").then(|| "soon".to_owned())
    })
    .unwrap_err();
    assert!(
        bad.to_string().contains("OPENAI_RETRY_MAX_ELAPSED_MS"),
        "{bad}"
    );
}

/// llama-cpp-python rejects a request its schema does not accept with HTTP 500 and
/// "N validation errors": the same request can never pass, so it is not retried.
#[tokio::test(start_paused = true)]
async fn a_schema_rejection_is_not_retried_even_as_500() {
    let server = server().await;
    server.push(MockFault::StatusWith {
        status: 500,
        message: "7 validation errors:\n {'type': 'string_type', 'loc': ('body', 'messages', 2, \
                  'ChatCompletionRequestAssistantMessage', 'content'), 'msg': 'Input should be a \
                  valid string', 'input': None}"
            .to_owned(),
    });
    server.set_fallback(Some(MockReply::text("must not be reached")));
    let err = provider(&server)
        .complete(&request(&session()))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::Http { status: 500, .. }),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    assert_eq!(server.requests().len(), 1);
}

/// An assistant turn that only calls tools goes out with `"content": ""`, which every
/// server takes (llama-cpp-python's schema rejects null).
#[tokio::test(start_paused = true)]
async fn tool_call_turns_are_sent_with_empty_content() {
    let server = server().await;
    server.push(MockReply::text("four").usage(9, 1));
    let call = rath_session::ToolCall::function("call_1", "word_count", r#"{"text":"a b"}"#);
    let s = session()
        .push(rath_session::Chunk::assistant(None, Some(vec![call])))
        .push(rath_session::Chunk::tool_result(
            "call_1",
            "word_count",
            r#"{"words": 2}"#,
        ));
    provider(&server).complete(&request(&s)).await.unwrap();
    let sent = &server.requests()[0]["messages"];
    assert_eq!(sent[2]["role"], "assistant");
    assert_eq!(sent[2]["content"], "");
    assert_eq!(sent[2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(sent[3]["role"], "tool");
    assert_eq!(sent[3]["tool_call_id"], "call_1");
    // A plain text turn keeps its text.
    assert_eq!(
        sent[1]["content"],
        "How many words in 'the quick brown fox'?"
    );
}
