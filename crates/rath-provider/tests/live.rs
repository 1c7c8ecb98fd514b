//! Live tier: a real model behind an OpenAI-compatible server (CI starts llama-cpp-python with
//! SmolLM2 via `.ci/install.d/20-llama.sh` and exports `RATH_LIVE_BASE_URL`). Asserts real
//! usage figures and well-formed chunks, not model quality. Skips, with a reason, when no
//! server is configured or it does not answer.

mod common;

use std::time::Duration;

use rath_provider::{
    OpenAiConfig, OpenAiProvider, Provider, ProviderExt, ProviderRequest, Retry, Retrying,
    StreamEvent, ToolChoice, ToolSchema,
};
use rath_session::{ChunkBody, Session, Stamper};
use serde_json::json;

// A missing server skips with a printed reason; under `RATH_CI=1` (CI installs the server)
// it fails instead, so a skipped live tier never passes for a tested one.
use rath_testkit::skip;

fn live_provider() -> Option<Retrying<OpenAiProvider>> {
    let Ok(base) = std::env::var("RATH_LIVE_BASE_URL") else {
        skip("RATH_LIVE_BASE_URL is not set");
        return None;
    };
    let model = std::env::var("RATH_LIVE_MODEL").unwrap_or_else(|_| "smollm2".to_owned());
    let cfg = OpenAiConfig::new(base.clone(), model)
        .with_timeout(Duration::from_secs(120))
        .with_temperature(0.0)
        .with_seed(1)
        .with_max_tokens(24);
    match OpenAiProvider::new(cfg) {
        Ok(p) => Some(p.with_retry(Retry::default().with_max_retries(1))),
        Err(e) => {
            skip(&e.to_string());
            None
        }
    }
}

async fn reachable(p: &Retrying<OpenAiProvider>) -> bool {
    let url = format!(
        "{}/models",
        p.inner().config().base_url.trim_end_matches('/')
    );
    let host = url
        .split("://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_default()
        .to_owned();
    match tokio::net::TcpStream::connect(&host).await {
        Ok(_) => true,
        Err(e) => {
            skip(&format!("server at {host} is absent ({e})"));
            false
        }
    }
}

fn assert_assistant(chunk: &rath_session::Chunk) {
    assert!(
        matches!(chunk.body(), ChunkBody::Assistant(_)),
        "not an assistant chunk: {chunk:?}"
    );
    assert!(
        chunk.text().is_some() || !chunk.tool_calls().is_empty(),
        "empty assistant chunk"
    );
}

#[tokio::test]
async fn live_completion_stream_and_tools() {
    let Some(p) = live_provider() else { return };
    if !reachable(&p).await {
        return;
    }
    let s = Session::system_with("You are a terse assistant.", Stamper::counter())
        .push(rath_session::Chunk::user("Say hello in one word."));

    // 1. Plain completion.
    let req = ProviderRequest::from_session(&s, vec![]);
    let resp = p.complete(&req).await.expect("live completion");
    assert_assistant(&resp.chunk);
    let u = resp.usage.expect("the server reports usage");
    assert!(u.prompt_tokens > 0 && u.completion_tokens > 0, "{u:?}");
    assert_eq!(u.total_tokens, u.prompt_tokens + u.completion_tokens);
    assert!(resp.finish_reason.is_some());
    let next = resp.apply(&s, &req, 0.0);
    assert_eq!(next.usage(), Some(u));

    // 2. Streamed completion: several deltas, assembled into the same kind of chunk.
    let req = ProviderRequest::from_session(&s, vec![]);
    let mut deltas = 0usize;
    let mut text = String::new();
    let resp = p
        .stream(&req, &mut |ev| {
            if let StreamEvent::TextDelta { text: t } = ev {
                deltas += 1;
                text.push_str(&t);
            }
        })
        .await
        .expect("live stream");
    assert_assistant(&resp.chunk);
    assert!(deltas >= 2, "only {deltas} deltas streamed");
    assert_eq!(resp.text().unwrap_or_default(), text);
    // We always ask for `stream_options.include_usage`; llama-cpp-python 0.3.36 ignores it
    // and sends no usage chunk, so usage is checked only when the server sends it.
    match resp.usage {
        Some(u) => assert!(u.prompt_tokens > 0 && u.completion_tokens > 0, "{u:?}"),
        None => eprintln!("note: the live server sent no usage on the stream"),
    }

    // 3. A tool-offering request (chatml-function-calling supports auto or a named tool).
    let tool = ToolSchema::new(
        "word_count",
        "Count the words in a text",
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
    );
    let s2 = Session::user_with(
        "Count the words in 'the quick brown fox'.",
        Stamper::counter(),
    );
    let req = ProviderRequest::from_session(&s2, vec![tool])
        .with_tool_choice(ToolChoice::function("word_count"))
        .with_max_tokens(64);
    let resp = p.complete(&req).await.expect("live tool request");
    assert_assistant(&resp.chunk);
    for call in resp.tool_calls() {
        assert_eq!(call.call_type, "function");
        assert!(!call.id.is_empty());
        assert_eq!(call.function.name, "word_count");
    }
    let u = resp.usage.expect("usage on tool request");
    assert!(u.prompt_tokens > 0);

    // 4. A STREAMED request offering tools with `tool_choice: auto`: llama-cpp-python's
    //    `chatml-function-calling` answers it with an empty stream; the provider must still
    //    get an answer (stream, one fallback, or no stream at all when so configured).
    let tool = ToolSchema::new(
        "word_count",
        "Count the words in a text",
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
    );
    let req = ProviderRequest::from_session(&s2, vec![tool]).with_max_tokens(64);
    let mut events = Vec::new();
    let resp = p
        .stream(&req, &mut |ev| events.push(ev))
        .await
        .expect("live streamed request with tools");
    assert_assistant(&resp.chunk);
    let streamed = resp.detail.get("stream").and_then(|v| v.as_bool());
    let fallback = resp.detail.get("stream_fallback").and_then(|v| v.as_str());
    eprintln!("streamed tool request: stream={streamed:?} stream_fallback={fallback:?}");
    assert!(streamed.is_some(), "{:?}", resp.detail);
    assert!(
        streamed == Some(true) || fallback.is_some(),
        "a non-streamed answer without a recorded fallback: {:?}",
        resp.detail
    );
    // Whatever the route, the events assemble into the returned chunk.
    let mut asm = rath_provider::StreamAssembler::default();
    events.iter().for_each(|e| asm.push(e));
    assert_eq!(asm.chunk_for(&resp.request_id), resp.chunk);
    let attempts = resp.detail.get("attempts").and_then(|v| v.as_array());
    if fallback.is_some() {
        assert_eq!(
            attempts.map(Vec::len),
            Some(2),
            "one stream, one fallback: {:?}",
            resp.detail
        );
    }
    // The same request on a provider that knows the server cannot stream tool calls: one
    // non-streamed request, no fallback needed.
    let base = p.inner().config().base_url.clone();
    let model = p.inner().config().model.clone();
    let q = OpenAiProvider::new(
        OpenAiConfig::new(base, model)
            .with_timeout(Duration::from_secs(120))
            .with_temperature(0.0)
            .with_seed(1)
            .with_stream_tools(false),
    )
    .expect("config")
    .with_retry(Retry::default().with_max_retries(1));
    let resp = q
        .stream(&req, &mut |_| {})
        .await
        .expect("live non-streamed tool request");
    assert_assistant(&resp.chunk);
    assert_eq!(
        resp.detail.get("stream_skipped").and_then(|v| v.as_str()),
        Some(rath_provider::STREAM_SKIPPED_DISABLED)
    );
    assert!(!resp.detail.contains_key("attempts"), "{:?}", resp.detail);
}
