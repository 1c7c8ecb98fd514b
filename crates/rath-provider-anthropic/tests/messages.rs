//! The Anthropic provider against the mock Messages API: request shape for every chunk kind
//! we send, streaming equals non-streaming, usage, stop reasons, thinking, faults, the key.

use std::time::Duration;

use rath_provider::{
    Provider, ProviderError, ProviderRequest, StreamEvent, ToolChoice, ToolSchema,
};
use rath_provider_anthropic::mock::{MockAnthropic, MockBlock, MockFault, MockMessage};
use rath_provider_anthropic::{AnthropicConfig, AnthropicError, AnthropicProvider};
use rath_session::{Chunk, Session, Stamper, ToolCall, Usage};
use serde_json::{Value, json};

const KEY: &str = "sk-ant-test-0123456789";

fn provider(server: &MockAnthropic) -> AnthropicProvider {
    AnthropicProvider::new(
        AnthropicConfig::new(server.base_url(), KEY, "claude-test").timeout(Duration::from_secs(5)),
    )
    .expect("provider")
}

fn tools() -> Vec<ToolSchema> {
    vec![ToolSchema::new(
        "word_count",
        "Count words.",
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
    )]
}

/// A conversation holding every chunk kind we send: system, user, assistant text, assistant
/// tool calls (two), their results (one a failure), and a later user turn.
fn full_session() -> Session {
    let calls = vec![
        ToolCall::function("toolu_1", "word_count", r#"{"text":"a b"}"#),
        ToolCall::function("toolu_2", "word_count", r#"{"text": "c"}"#),
    ];
    Session::system_with("Be brief.", Stamper::counter())
        .push(Chunk::user("count"))
        .push(Chunk::assistant(Some("Counting.".into()), Some(calls)))
        .push(Chunk::tool_result(
            "toolu_1",
            "word_count",
            r#"{"words": 2}"#,
        ))
        .push(Chunk::tool_result(
            "toolu_2",
            "word_count",
            r#"{"ok": false, "error_kind": "tool_timeout", "message": "slow"}"#,
        ))
        .push(Chunk::assistant_text("2 and unknown."))
        .push(Chunk::user("thanks"))
}

#[tokio::test]
async fn the_request_has_the_documented_shape_for_every_chunk_kind() {
    let server = MockAnthropic::start().await.unwrap();
    server.push(MockMessage::text("ok"));
    let p = provider(&server);
    let req = ProviderRequest::from_session(&full_session(), tools())
        .with_tool_choice(ToolChoice::function("word_count"))
        .with_temperature(0.5)
        .with_max_tokens(77);
    p.complete(&req).await.unwrap();
    let sent = &server.requests()[0];
    assert_eq!(
        sent,
        &json!({
            "model": "claude-test",
            "max_tokens": 77,
            "system": "Be brief.",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "count"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Counting."},
                    {"type": "tool_use", "id": "toolu_1", "name": "word_count", "input": {"text": "a b"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "word_count", "input": {"text": "c"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "{\"words\": 2}"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true,
                     "content": "{\"ok\": false, \"error_kind\": \"tool_timeout\", \"message\": \"slow\"}"},
                ]},
                {"role": "assistant", "content": [{"type": "text", "text": "2 and unknown."}]},
                {"role": "user", "content": [{"type": "text", "text": "thanks"}]},
            ],
            "tools": [{"name": "word_count", "description": "Count words.",
                       "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}],
            "tool_choice": {"type": "tool", "name": "word_count"},
            "temperature": 0.5,
        })
    );
    let h = &server.request_headers()[0];
    assert_eq!(h["anthropic-version"], "2023-06-01");
    assert_eq!(h["x-api-key"], KEY);
}

#[tokio::test]
async fn tool_choice_maps_and_no_tools_sends_no_choice() {
    let server = MockAnthropic::start().await.unwrap();
    let p = provider(&server);
    let s = Session::user_with("hi", Stamper::counter());
    for (choice, want) in [
        (ToolChoice::Auto, json!({"type": "auto"})),
        (ToolChoice::Required, json!({"type": "any"})),
        (ToolChoice::None, json!({"type": "none"})),
    ] {
        server.push(MockMessage::text("ok"));
        p.complete(&ProviderRequest::from_session(&s, tools()).with_tool_choice(choice))
            .await
            .unwrap();
        assert_eq!(server.requests().last().unwrap()["tool_choice"], want);
    }
    server.push(MockMessage::text("ok"));
    p.complete(&ProviderRequest::from_session(&s, vec![]))
        .await
        .unwrap();
    let last = server.requests().last().cloned().unwrap();
    assert!(
        last.get("tools").is_none() && last.get("tool_choice").is_none(),
        "{last}"
    );
    assert!(last.get("system").is_none());
}

fn script() -> Vec<MockMessage> {
    vec![
        MockMessage::text("héllo, wörld — a longer answer").usage(12, 7),
        MockMessage::with_blocks(
            vec![
                MockBlock::Text("Let me count.".into()),
                MockBlock::ToolUse {
                    id: "toolu_a".into(),
                    name: "word_count".into(),
                    input: json!({"text": "a b c", "nested": {"k": [1, 2.5, "é"]}}),
                },
                MockBlock::ToolUse {
                    id: "toolu_b".into(),
                    name: "word_count".into(),
                    input: json!({}),
                },
            ],
            "tool_use",
        )
        .usage(30, 20)
        .cache(100, 5),
        MockMessage::text("thinking done")
            .thinking("Let me see...", "sig-1")
            .usage(3, 4),
        MockMessage::text("cut")
            .stop_reason("max_tokens")
            .usage(1, 64),
    ]
}

#[tokio::test]
async fn streaming_equals_non_streaming_chunk_for_chunk() {
    let server = MockAnthropic::start().await.unwrap();
    let p = provider(&server);
    let s = Session::user_with("go", Stamper::counter());
    for m in script() {
        server.push(m.clone());
        server.push(m);
        let req = ProviderRequest::from_session(&s, tools());
        let plain = p.complete(&req).await.unwrap();
        let mut events = Vec::new();
        let streamed = p.stream(&req, &mut |e| events.push(e)).await.unwrap();
        assert_eq!(streamed.chunk, plain.chunk);
        assert_eq!(streamed.usage, plain.usage);
        assert_eq!(streamed.finish_reason, plain.finish_reason);
        assert_eq!(streamed.model, plain.model);
        let mut d = streamed.detail.clone();
        assert_eq!(d.remove("stream"), Some(json!(true)));
        let mut d2 = plain.detail.clone();
        assert_eq!(d2.remove("stream"), Some(json!(false)));
        assert_eq!(d, d2);
        // The deltas the observer saw add up to the answer text.
        let text: String = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::TextDelta { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(Some(text.as_str()).filter(|t| !t.is_empty()), plain.text());
    }
}

#[tokio::test]
async fn tool_use_blocks_become_calls_and_usage_counts_cache_tokens_once() {
    let server = MockAnthropic::start().await.unwrap();
    let p = provider(&server);
    let s = Session::user_with("go", Stamper::counter());
    server.push(script().remove(1));
    let req = ProviderRequest::from_session(&s, tools());
    let resp = p.stream(&req, &mut |_| {}).await.unwrap();
    let calls = resp.tool_calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].id, "toolu_a");
    assert_eq!(
        calls[0].function.arguments,
        r#"{"nested":{"k":[1,2.5,"é"]},"text":"a b c"}"#
    );
    assert_eq!(calls[1].function.arguments, "{}");
    assert_eq!(resp.text(), Some("Let me count."));
    assert_eq!(resp.finish_reason.as_deref(), Some("tool_calls"));
    // 30 uncached + 100 read from cache + 5 written to cache; output 20 (message_delta's
    // cumulative count replaces message_start's, it is not added).
    assert_eq!(resp.usage, Some(Usage::new(135, 20)));
    assert_eq!(
        resp.detail["anthropic_usage"],
        json!({"input_tokens": 30, "output_tokens": 20, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 5})
    );
    assert_eq!(resp.detail["stop_reason"], "tool_use");
}

#[tokio::test]
async fn stop_reasons_map_to_finish_reasons() {
    let server = MockAnthropic::start().await.unwrap();
    let p = provider(&server);
    let s = Session::user_with("go", Stamper::counter());
    for (stop, finish) in [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("tool_use", "tool_calls"),
        ("max_tokens", "length"),
        ("refusal", "content_filter"),
    ] {
        server.push(MockMessage::text("x").stop_reason(stop));
        let resp = p
            .complete(&ProviderRequest::from_session(&s, vec![]))
            .await
            .unwrap();
        assert_eq!(resp.finish_reason.as_deref(), Some(finish), "{stop}");
    }
}

#[tokio::test]
async fn thinking_is_evidence_not_text_and_goes_back_with_its_turn() {
    let server = MockAnthropic::start().await.unwrap();
    let p = provider(&server);
    server.push(
        MockMessage::tool_use(vec![("toolu_t", "word_count", json!({"text": "a"}))])
            .thinking("I should count.", "sig-xyz"),
    );
    let s = Session::user_with("count a", Stamper::counter());
    let req = ProviderRequest::from_session(&s, tools());
    let resp = p.stream(&req, &mut |_| {}).await.unwrap();
    assert_eq!(resp.text(), None);
    assert_eq!(
        resp.detail["thinking"],
        json!([{"type": "thinking", "thinking": "I should count.", "signature": "sig-xyz"}])
    );
    // The next request sends the thinking block first in the assistant turn.
    let s = resp.apply(&s, &req, 0.0).push(Chunk::tool_result(
        "toolu_t",
        "word_count",
        r#"{"words": 1}"#,
    ));
    server.push(MockMessage::text("1"));
    p.complete(&ProviderRequest::from_session(&s, tools()))
        .await
        .unwrap();
    let sent = &server.requests()[1]["messages"][1]["content"];
    assert_eq!(sent[0]["type"], "thinking");
    assert_eq!(sent[0]["signature"], "sig-xyz");
    assert_eq!(sent[1]["type"], "tool_use");
}

fn status_of(e: &ProviderError) -> Option<u16> {
    e.status()
}

#[tokio::test]
async fn faults_are_typed_and_classified_for_the_retry_layer() {
    let server = MockAnthropic::start().await.unwrap();
    let p = provider(&server);
    let s = Session::user_with("go", Stamper::counter());
    let req = ProviderRequest::from_session(&s, vec![]);
    for status in [400u16, 401, 403, 404, 413] {
        server.push(MockFault::status(status));
        let e = p.complete(&req).await.unwrap_err();
        assert_eq!(status_of(&e), Some(status));
        assert!(!e.is_retryable(), "{status} must not be retried: {e}");
    }
    for status in [429u16, 529, 500, 503] {
        server.push(MockFault::Status {
            status,
            retry_after_secs: Some(2),
        });
        let e = p.complete(&req).await.unwrap_err();
        assert_eq!(status_of(&e), Some(status));
        assert!(e.is_retryable(), "{status} must be retried: {e}");
        assert_eq!(e.retry_after(), Some(Duration::from_secs(2)));
        assert!(
            e.to_string()
                .contains(rath_provider_anthropic::mock::error_type(status)),
            "{e}"
        );
    }
    // Mid-stream `error` event: overloaded is a retryable 529.
    server.push(MockFault::StreamError {
        error_type: "overloaded_error".into(),
    });
    let e = p.stream(&req, &mut |_| {}).await.unwrap_err();
    assert_eq!(status_of(&e), Some(529));
    assert!(e.is_retryable());
    // A cut stream, a cut body, garbage: retryable connection / invalid-response errors.
    server.push(MockFault::CutMidStream);
    let e = p.stream(&req, &mut |_| {}).await.unwrap_err();
    assert!(
        matches!(e, ProviderError::Connection(_)) && e.is_retryable(),
        "{e:?}"
    );
    server.push(MockFault::CutMidStream);
    let e = p.complete(&req).await.unwrap_err();
    assert!(e.is_retryable(), "{e:?}");
    server.push(MockFault::InvalidJson);
    let e = p.complete(&req).await.unwrap_err();
    assert!(matches!(e, ProviderError::InvalidResponse(_)), "{e:?}");
    server.push(MockFault::InvalidJson);
    let e = p.stream(&req, &mut |_| {}).await.unwrap_err();
    assert!(matches!(e, ProviderError::InvalidResponse(_)), "{e:?}");
    // A hang past the timeout.
    let slow = AnthropicProvider::new(
        AnthropicConfig::new(server.base_url(), KEY, "claude-test")
            .timeout(Duration::from_millis(200)),
    )
    .unwrap();
    server.push(MockFault::Hang(Duration::from_secs(3)));
    let e = slow.complete(&req).await.unwrap_err();
    assert!(matches!(e, ProviderError::Timeout { .. }), "{e:?}");
}

#[tokio::test]
async fn the_key_never_appears_in_manifests_errors_or_debug_output() {
    let server = MockAnthropic::start().await.unwrap();
    let p = provider(&server);
    let manifest = serde_json::to_string(&p.manifest()).unwrap();
    assert!(!manifest.contains(KEY), "{manifest}");
    assert!(manifest.contains("anthropic-version"));
    assert!(!format!("{p:?}").contains(KEY));
    server.push(MockFault::EchoKey { status: 401 });
    let s = Session::user_with("go", Stamper::counter());
    let e = p
        .complete(&ProviderRequest::from_session(&s, vec![]))
        .await
        .unwrap_err();
    assert!(!e.to_string().contains(KEY), "{e}");
    assert!(!format!("{e:?}").contains(KEY), "{e:?}");
    // A response applied to a session carries no key either.
    server.push(MockMessage::text("hi").usage(1, 1));
    let req = ProviderRequest::from_session(&s, vec![]);
    let resp = p.complete(&req).await.unwrap();
    let stored = serde_json::to_string(&resp.apply(&s, &req, 0.0)).unwrap();
    assert!(!stored.contains(KEY));
}

#[test]
fn bad_configuration_is_a_typed_error() {
    let e = AnthropicProvider::new(AnthropicConfig::new("ftp://x", KEY, "m")).unwrap_err();
    assert!(matches!(e, AnthropicError::InvalidBaseUrl { .. }), "{e}");
    let e = AnthropicProvider::new(AnthropicConfig::new("http://x", KEY, "")).unwrap_err();
    assert!(matches!(e, AnthropicError::MissingModel));
    let e = AnthropicProvider::new(AnthropicConfig::new("http://x", "bad\nkey", "m")).unwrap_err();
    assert!(matches!(e, AnthropicError::InvalidKey));
    let as_provider: ProviderError = e.into();
    assert_eq!(as_provider.kind(), "config");
}

#[tokio::test]
async fn the_mock_rejects_what_the_api_rejects() {
    // Roles that do not alternate are refused by the API; the provider merges them.
    let server = MockAnthropic::start().await.unwrap();
    let p = provider(&server);
    let s = Session::user_with("one", Stamper::counter()).push(Chunk::user("two"));
    server.push(MockMessage::text("ok"));
    p.complete(&ProviderRequest::from_session(&s, vec![]))
        .await
        .unwrap();
    let msgs = &server.requests()[0]["messages"];
    assert_eq!(msgs.as_array().map(Vec::len), Some(1));
    assert_eq!(msgs[0]["content"].as_array().map(Vec::len), Some(2));
    let _: Value = msgs.clone();
}

#[tokio::test]
async fn the_retry_layer_retries_overloaded_and_rate_limited_calls_and_not_auth_errors() {
    use rath_provider::{ProviderExt, Retry};
    let server = MockAnthropic::start().await.unwrap();
    let retrying = provider(&server).with_retry(
        Retry::default().with_backoff(Duration::from_millis(1), Duration::from_millis(5)),
    );
    let s = Session::user_with("go", Stamper::counter());
    let req = ProviderRequest::from_session(&s, vec![]);
    server.push(MockFault::status(529));
    server.push(MockFault::Status {
        status: 429,
        retry_after_secs: Some(0),
    });
    server.push(MockFault::StreamError {
        error_type: "overloaded_error".into(),
    });
    server.push(MockMessage::text("finally").usage(2, 1));
    let resp = retrying.stream(&req, &mut |_| {}).await.unwrap();
    assert_eq!(resp.text(), Some("finally"));
    assert_eq!(server.requests().len(), 4);
    server.push(MockFault::status(401));
    server.push(MockMessage::text("never served"));
    let e = retrying.complete(&req).await.unwrap_err();
    assert_eq!(e.status(), Some(401));
    assert_eq!(server.remaining(), 1, "a 401 is not retried");
}
