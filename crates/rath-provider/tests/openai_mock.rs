//! The OpenAI-compatible provider against the in-repo mock server.

mod common;

use std::time::Instant;

use common::*;
use rath_provider::mock::{MockFault, MockReply};
use rath_provider::{Provider, ProviderError, StreamAssembler, StreamEvent, ToolChoice};
use rath_session::{ChunkKind, Usage};
use serde_json::json;

#[tokio::test]
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

#[tokio::test]
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
#[tokio::test]
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

#[tokio::test]
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

#[tokio::test]
async fn rate_limit_is_retried_after_retry_after() {
    let server = server().await;
    server.push(MockFault::RateLimited {
        retry_after_secs: 1,
    });
    server.push(MockReply::text("ok").usage(1, 1));
    let p = provider(&server);
    let started = Instant::now();
    let resp = p.complete(&request(&session())).await.unwrap();
    assert!(started.elapsed() >= secs(1000), "{:?}", started.elapsed());
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

#[tokio::test]
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
        Err(ProviderError::RetriesExhausted { attempts, last }) => {
            assert_eq!(attempts, 3);
            *last
        }
        other => panic!("{fault:?}: expected RetriesExhausted, got {other:?}"),
    }
}

#[tokio::test]
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

#[tokio::test]
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

    let strict =
        rath_provider::OpenAiProvider::new(config(&server).with_require_usage(true)).unwrap();
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

#[tokio::test]
async fn token_budget_stops_before_it_is_exceeded() {
    let server = server().await;
    server.set_fallback(Some(MockReply::text("ok").usage(100, 50)));
    let p = rath_provider::OpenAiProvider::new(config(&server).with_token_budget(400)).unwrap();
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

#[tokio::test]
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

#[tokio::test]
async fn unreachable_server_is_a_connection_error_after_retries() {
    // Bind and drop a listener so the port is (almost certainly) closed.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let p = rath_provider::OpenAiProvider::new(
        rath_provider::OpenAiConfig::new(format!("http://127.0.0.1:{port}/v1"), "m")
            .with_max_retries(1)
            .with_backoff(secs(1), secs(1)),
    )
    .unwrap();
    let err = p.complete(&request(&session())).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::RetriesExhausted { attempts: 2, last }
            if matches!(**last, ProviderError::Connection(_))),
        "{err:?}"
    );
}
