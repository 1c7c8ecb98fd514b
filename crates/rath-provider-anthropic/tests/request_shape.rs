//! Requests captured from the provider checked against the Messages API's documented shape
//! (field names, block types and where each may appear), and thinking blocks that survive a
//! store round trip: saved with the session, loaded elsewhere, sent back with their turn.

use std::collections::BTreeSet;
use std::time::Duration;

use rath_persist::Store;
use rath_provider::{Provider, ProviderRequest, ToolChoice, ToolSchema};
use rath_provider_anthropic::mock::{MockAnthropic, MockBlock, MockMessage};
use rath_provider_anthropic::{AnthropicConfig, AnthropicProvider};
use rath_session::{Chunk, Session, Stamper};
use serde_json::{Value, json};

fn provider(server: &MockAnthropic) -> AnthropicProvider {
    AnthropicProvider::new(
        AnthropicConfig::new(server.base_url(), "sk-ant-shape", "claude-test")
            .timeout(Duration::from_secs(5)),
    )
    .expect("provider")
}

fn tools() -> Vec<ToolSchema> {
    vec![
        ToolSchema::new(
            "word_count",
            "Count words.",
            json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        ),
        ToolSchema::new("read-file", "Read a file.", json!({"type": "object"})),
    ]
}

/// The documented top-level fields of `POST /v1/messages`.
const TOP_LEVEL: &[&str] = &[
    "model",
    "max_tokens",
    "messages",
    "system",
    "tools",
    "tool_choice",
    "temperature",
    "top_p",
    "top_k",
    "stop_sequences",
    "stream",
    "metadata",
    "thinking",
];

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

fn only(v: &Value, allowed: &[&str], required: &[&str], at: &str, out: &mut Vec<String>) {
    let k = keys(v);
    for extra in k.iter().filter(|k| !allowed.contains(&k.as_str())) {
        out.push(format!("{at}: undocumented field {extra:?}"));
    }
    for need in required.iter().filter(|r| !k.contains(**r)) {
        out.push(format!("{at}: missing required field {need:?}"));
    }
}

/// Every way `body` departs from the documented request shape, and the block types it has.
fn check_request(body: &Value) -> (Vec<String>, BTreeSet<String>) {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    only(
        body,
        TOP_LEVEL,
        &["model", "max_tokens", "messages"],
        "request",
        &mut out,
    );
    if !body["model"].is_string() {
        out.push("model: not a string".into());
    }
    if body["max_tokens"].as_u64().is_none_or(|n| n < 1) {
        out.push("max_tokens: not a positive integer".into());
    }
    match &body["system"] {
        Value::Null | Value::String(_) => {}
        Value::Array(blocks) => {
            for (i, b) in blocks.iter().enumerate() {
                only(
                    b,
                    &["type", "text", "cache_control"],
                    &["type", "text"],
                    &format!("system.{i}"),
                    &mut out,
                );
            }
        }
        other => out.push(format!("system: neither text nor blocks: {other}")),
    }
    if body.get("stream").is_some_and(|s| !s.is_boolean()) {
        out.push("stream: not a boolean".into());
    }
    check_tools(body, &mut out);
    let Some(messages) = body["messages"].as_array() else {
        out.push("messages: not an array".into());
        return (out, seen);
    };
    let mut expected_role = "user";
    let mut open_calls: BTreeSet<String> = BTreeSet::new();
    for (i, m) in messages.iter().enumerate() {
        let at = format!("messages.{i}");
        only(m, &["role", "content"], &["role", "content"], &at, &mut out);
        let role = m["role"].as_str().unwrap_or_default();
        if role != expected_role {
            out.push(format!(
                "{at}: role {role:?} where {expected_role:?} must come"
            ));
        }
        expected_role = if role == "user" { "assistant" } else { "user" };
        let Some(blocks) = m["content"].as_array() else {
            if !m["content"].is_string() {
                out.push(format!("{at}: content neither text nor blocks"));
            }
            continue;
        };
        if blocks.is_empty() {
            out.push(format!("{at}: empty content"));
        }
        let mut calls_now = BTreeSet::new();
        let mut past_results = false;
        let mut past_thinking = false;
        for (j, b) in blocks.iter().enumerate() {
            let at = format!("{at}.content.{j}");
            let ty = b["type"].as_str().unwrap_or_default().to_owned();
            seen.insert(ty.clone());
            match (role, ty.as_str()) {
                (_, "text") => {
                    only(
                        b,
                        &["type", "text", "cache_control", "citations"],
                        &["type", "text"],
                        &at,
                        &mut out,
                    );
                    if b["text"].as_str().is_none_or(str::is_empty) {
                        out.push(format!("{at}: text blocks must be non-empty"));
                    }
                    past_results = true;
                    past_thinking = true;
                }
                ("assistant", "thinking") => {
                    only(
                        b,
                        &["type", "thinking", "signature"],
                        &["type", "thinking", "signature"],
                        &at,
                        &mut out,
                    );
                    if b["signature"].as_str().is_none_or(str::is_empty) {
                        out.push(format!("{at}: thinking block without its signature"));
                    }
                    if past_thinking {
                        out.push(format!("{at}: thinking must open the assistant turn"));
                    }
                }
                ("assistant", "redacted_thinking") => {
                    only(b, &["type", "data"], &["type", "data"], &at, &mut out);
                }
                ("assistant", "tool_use") => {
                    only(
                        b,
                        &["type", "id", "name", "input", "cache_control"],
                        &["type", "id", "name", "input"],
                        &at,
                        &mut out,
                    );
                    if !b["input"].is_object() {
                        out.push(format!("{at}: tool_use input is not an object"));
                    }
                    calls_now.insert(b["id"].as_str().unwrap_or_default().to_owned());
                    past_thinking = true;
                }
                ("user", "tool_result") => {
                    only(
                        b,
                        &[
                            "type",
                            "tool_use_id",
                            "content",
                            "is_error",
                            "cache_control",
                        ],
                        &["type", "tool_use_id"],
                        &at,
                        &mut out,
                    );
                    let id = b["tool_use_id"].as_str().unwrap_or_default();
                    if !open_calls.remove(id) {
                        out.push(format!(
                            "{at}: tool_result for {id:?}, not a tool_use of the previous turn"
                        ));
                    }
                    if !(b["content"].is_string()
                        || b["content"].is_array()
                        || b.get("content").is_none())
                    {
                        out.push(format!("{at}: tool_result content neither text nor blocks"));
                    }
                    if b.get("is_error").is_some_and(|e| !e.is_boolean()) {
                        out.push(format!("{at}: is_error is not a boolean"));
                    }
                    if past_results {
                        out.push(format!(
                            "{at}: tool_result blocks must come first in the user turn"
                        ));
                    }
                }
                (r, t) => out.push(format!("{at}: a {t:?} block cannot appear in a {r} turn")),
            }
        }
        if role == "user" {
            for id in &open_calls {
                out.push(format!(
                    "{at}: tool_use {id:?} of the previous turn has no tool_result"
                ));
            }
            open_calls.clear();
        } else {
            open_calls = calls_now;
        }
    }
    (out, seen)
}

fn check_tools(body: &Value, out: &mut Vec<String>) {
    let Some(tools) = body.get("tools") else {
        if body.get("tool_choice").is_some() {
            out.push("tool_choice without tools".into());
        }
        return;
    };
    for (i, t) in tools.as_array().into_iter().flatten().enumerate() {
        let at = format!("tools.{i}");
        only(
            t,
            &["name", "description", "input_schema", "cache_control"],
            &["name", "input_schema"],
            &at,
            out,
        );
        let name = t["name"].as_str().unwrap_or_default();
        let name_ok = (1..=64).contains(&name.len())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !name_ok {
            out.push(format!(
                "{at}: name {name:?} does not match ^[a-zA-Z0-9_-]{{1,64}}$"
            ));
        }
        if t["input_schema"]["type"] != "object" {
            out.push(format!("{at}: input_schema is not an object schema"));
        }
    }
    if let Some(c) = body.get("tool_choice") {
        match c["type"].as_str() {
            Some("auto" | "any" | "none") => only(
                c,
                &["type", "disable_parallel_tool_use"],
                &["type"],
                "tool_choice",
                out,
            ),
            Some("tool") => only(
                c,
                &["type", "name", "disable_parallel_tool_use"],
                &["type", "name"],
                "tool_choice",
                out,
            ),
            other => out.push(format!("tool_choice: unknown type {other:?}")),
        }
    }
}

/// A conversation reached through the provider itself, so every assistant turn is what the
/// API answered: thinking + text + two tool calls, their results (one failure, grouped in
/// one user turn), a text reply, a follow-up question.
async fn every_chunk_kind(server: &MockAnthropic, p: &AnthropicProvider) -> Session {
    server.push(
        MockMessage::with_blocks(
            vec![
                MockBlock::Text("Counting both.".into()),
                MockBlock::ToolUse {
                    id: "toolu_1".into(),
                    name: "word_count".into(),
                    input: json!({"text": "a b"}),
                },
                MockBlock::ToolUse {
                    id: "toolu_2".into(),
                    name: "read-file".into(),
                    input: json!({"path": "x"}),
                },
            ],
            "tool_use",
        )
        .thinking("Two calls at once.", "sig-Ab12=="),
    );
    server.push(MockMessage::text("2, and the file is missing."));
    let s = Session::system_with("Be brief.", Stamper::counter()).push(Chunk::user("count"));
    let req = ProviderRequest::from_session(&s, tools());
    let s = p
        .stream(&req, &mut |_| {})
        .await
        .unwrap()
        .apply(&s, &req, 0.0);
    let s = s
        .push(Chunk::tool_result(
            "toolu_1",
            "word_count",
            r#"{"words": 2}"#,
        ))
        .push(Chunk::tool_result(
            "toolu_2",
            "read-file",
            r#"{"ok": false, "error_kind": "tool_failed", "message": "no such file"}"#,
        ));
    let req = ProviderRequest::from_session(&s, tools());
    let s = p.complete(&req).await.unwrap().apply(&s, &req, 0.0);
    s.push(Chunk::user("thanks"))
}

#[tokio::test]
async fn captured_requests_match_the_documented_messages_shape() {
    let server = MockAnthropic::start().await.unwrap();
    let p = provider(&server);
    let s = every_chunk_kind(&server, &p).await;
    for choice in [
        ToolChoice::Auto,
        ToolChoice::Required,
        ToolChoice::None,
        ToolChoice::function("word_count"),
    ] {
        server.push(MockMessage::text("ok"));
        server.push(MockMessage::text("ok"));
        let req = ProviderRequest::from_session(&s, tools())
            .with_tool_choice(choice)
            .with_temperature(0.2);
        p.complete(&req).await.unwrap();
        p.stream(&req, &mut |_| {}).await.unwrap();
    }
    let sent = server.requests();
    assert_eq!(sent.len(), 10);
    let mut kinds = BTreeSet::new();
    for (n, body) in sent.iter().enumerate() {
        let (problems, seen) = check_request(body);
        assert!(
            problems.is_empty(),
            "request {n} departs from the documented shape:\n{}\n{body:#}",
            problems.join("\n")
        );
        kinds.extend(seen);
    }
    let want: BTreeSet<String> = ["text", "thinking", "tool_use", "tool_result"]
        .map(String::from)
        .into();
    assert_eq!(kinds, want, "every block type we send was checked");
    // The last request holds every chunk kind: system, user text, assistant thinking + text +
    // tool_use, grouped results (one is_error), assistant text, user text.
    let last = &sent[9];
    assert_eq!(last["system"], "Be brief.");
    assert_eq!(last["stream"], true);
    let m = &last["messages"];
    assert_eq!(m.as_array().map(Vec::len), Some(5));
    let types = |i: usize| -> Vec<&str> {
        m[i]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["type"].as_str().unwrap())
            .collect()
    };
    assert_eq!(types(1), ["thinking", "text", "tool_use", "tool_use"]);
    assert_eq!(types(2), ["tool_result", "tool_result"]);
    assert_eq!(m[2]["content"][0].get("is_error"), None);
    assert_eq!(m[2]["content"][1]["is_error"], true);
    assert_eq!(m[1]["content"][0]["signature"], "sig-Ab12==");
    assert_eq!(types(3), ["text"]);
    assert_eq!(types(4), ["text"]);
}

#[test]
fn the_shape_check_catches_what_the_api_rejects() {
    let good = json!({"model": "m", "max_tokens": 5, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "wc", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "1"}]},
    ]});
    assert!(
        check_request(&good).0.is_empty(),
        "{:?}",
        check_request(&good).0
    );
    let bad = [
        json!({"model": "m", "messages": []}),
        json!({"model": "m", "max_tokens": 5, "messages": [], "system_prompt": "x"}),
        json!({"model": "m", "max_tokens": 5, "messages": [{"role": "assistant", "content": [{"type": "text", "text": "x"}]}]}),
        json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "n", "input": {}}]}]}),
        json!({"model": "m", "max_tokens": 5, "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "wc", "input": "{}"}]},
            {"role": "user", "content": [{"type": "text", "text": "no result"}]}]}),
        json!({"model": "m", "max_tokens": 5, "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "wc", "input": {}},
                                               {"type": "thinking", "thinking": "late", "signature": "s"}]}]}),
        json!({"model": "m", "max_tokens": 5, "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "no sig"}]}]}),
        json!({"model": "m", "max_tokens": 5, "messages": [], "tools": [{"name": "a b", "input_schema": {"type": "object"}}]}),
        json!({"model": "m", "max_tokens": 5, "messages": [], "tools": [{"name": "a", "parameters": {}}]}),
    ];
    for b in bad {
        assert!(!check_request(&b).0.is_empty(), "accepted {b}");
    }
}

#[tokio::test]
async fn thinking_blocks_survive_a_store_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::at(dir.path().join("sessions"));
    // Process one: the model thinks, calls a tool; the session is saved.
    let id = {
        let server = MockAnthropic::start().await.unwrap();
        let p = provider(&server);
        server.push(
            MockMessage::tool_use(vec![("toolu_9", "word_count", json!({"text": "a b c"}))])
                .thinking("Count the words of 'a b c'.", "sig-persisted-42"),
        );
        let s = Session::user_with("count 'a b c'", Stamper::counter());
        let req = ProviderRequest::from_session(&s, tools());
        let s = p.complete(&req).await.unwrap().apply(&s, &req, 0.0);
        let s = s.push(Chunk::tool_result(
            "toolu_9",
            "word_count",
            r#"{"words": 3}"#,
        ));
        store.save(&s).unwrap();
        s.id().clone()
    };
    // Process two: a fresh provider and server, the session loaded from the store.
    let server = MockAnthropic::start().await.unwrap();
    let p = provider(&server);
    let loaded = store.load(&id).unwrap().session;
    for m in loaded.messages() {
        assert!(
            !m.content.unwrap_or_default().contains("Count the words"),
            "thinking shown as text"
        );
    }
    assert_eq!(loaded.final_text(), None);
    server.push(MockMessage::text("3"));
    let req = ProviderRequest::from_session(&loaded, tools());
    assert_eq!(req.thinking.len(), 1, "{:?}", req.thinking);
    let resp = p.complete(&req).await.unwrap();
    assert_eq!(resp.text(), Some("3"));
    let turn = &server.requests()[0]["messages"][1]["content"];
    assert_eq!(
        turn[0],
        json!({"type": "thinking", "thinking": "Count the words of 'a b c'.", "signature": "sig-persisted-42"})
    );
    assert_eq!(turn[1]["type"], "tool_use");
    let (problems, _) = check_request(&server.requests()[0]);
    assert!(problems.is_empty(), "{problems:?}");
    // The file keeps the blocks as model_call evidence, in the Python OpenRath record shape.
    let text = std::fs::read_to_string(store.path_of(&id)).unwrap();
    let evidence: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.to_string().contains("sig-persisted-42"))
        .collect();
    assert_eq!(evidence.len(), 1, "{text}");
    assert!(
        evidence[0].to_string().contains("model_call"),
        "{}",
        evidence[0]
    );
}
