//! Reproduces the Python OpenRath 1.3.0 interop loop (scripted responses, word_count tool)
//! and compares our transcript and provider requests with the fixture files.

use std::path::PathBuf;
use std::sync::Arc;

use rath_flow::{
    FlowContext, LoopOptions, SessionLoop, ToolContext, ToolError, ToolSet, typed_tool,
};
use rath_provider::{ScriptedProvider, ScriptedResponse};
use rath_session::{SandboxSpec, Session, Stamper};
use serde::Serialize;
use serde_json::{Value, json};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/interop/openrath-1.3.0")
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WordCountArgs {
    text: String,
}

#[derive(Serialize)]
struct WordCount {
    words: usize,
    unique_lowercase: usize,
}

/// Drops `null` members, so `{"tool_calls": null}` and an absent key compare equal.
fn strip_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_nulls).collect()),
        other => other.clone(),
    }
}

#[tokio::test]
async fn python_interop_loop_matches_fixture() {
    let dir = fixtures();
    let Ok(requests_text) = std::fs::read_to_string(dir.join("llm_requests.json")) else {
        rath_testkit::skip(&format!(
            "interop fixtures not found at {} (the ../shared checkout)",
            dir.display()
        ));
        return;
    };
    let expected_requests: Value = serde_json::from_str(&requests_text).expect("requests json");
    let loop_a = std::fs::read_to_string(
        dir.join("openrath_home/sessions/00000000-0000-4000-8000-000000000005.jsonl"),
    )
    .expect("loop_a file");

    let wc = typed_tool(
        "word_count",
        "Count whitespace-separated words and unique lowercase tokens.",
        |_cx: ToolContext, a: WordCountArgs| async move {
            let words: Vec<&str> = a.text.split_whitespace().collect();
            let unique: std::collections::BTreeSet<String> =
                words.iter().map(|w| w.to_lowercase()).collect();
            Ok::<_, ToolError>(WordCount {
                words: words.len(),
                unique_lowercase: unique.len(),
            })
        },
    )
    .parallel_safe(true);
    let tools = ToolSet::builtins().with(wc).expect("no clash");

    let provider = Arc::new(ScriptedProvider::new(vec![
        ScriptedResponse::tool_calls(vec![(
            "call_wc_1",
            "word_count",
            Value::String(r#"{"text": "the quick brown fox"}"#.to_owned()),
        )])
        .usage(40, 12)
        .model("scripted-model"),
        ScriptedResponse::text("The text 'the quick brown fox' has 4 words.")
            .usage(70, 11)
            .model("scripted-model"),
    ]));

    let stamper = Stamper::counter();
    let agent = Session::system_with(
        "You are a careful assistant. Use tools when helpful.",
        stamper.clone(),
    );
    let root = Session::user_with("How many words are in 'the quick brown fox'?", stamper)
        .to_with("local", SandboxSpec::working_dir("/workspace/demo"));
    let fork_a = root.fork();
    let out = SessionLoop::new(provider.clone(), tools)
        .with_options(LoopOptions::default().model("scripted-model"))
        .run(&fork_a, &agent, &FlowContext::new())
        .await
        .expect("loop");
    provider.assert_complete().expect("script used up");

    // Conversation chunks equal the fixture's chunk payloads (evidence excluded).
    let expected_chunks: Vec<Value> = loop_a
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["record_type"] == "chunk")
        .map(|v| json!({"kind": v["kind"], "payload": v["payload"]}))
        .collect();
    let ours: Vec<Value> = out
        .conversation()
        .map(|c| serde_json::to_value(c).expect("chunk json"))
        .collect();
    assert_eq!(ours, expected_chunks);
    // The tool result text is byte-identical to Python's json.dumps output.
    assert_eq!(
        out.conversation().nth(2).and_then(|c| c.text()),
        Some(r#"{"words": 4, "unique_lowercase": 4}"#)
    );

    // Lineage and usage as Python wrote them.
    assert_eq!(out.lineage().operator, "run_session_loop");
    assert_eq!(out.lineage().kind.as_str(), "op_session_loop");
    assert_eq!(
        out.lineage().parents,
        vec![fork_a.id().clone(), agent.id().clone()]
    );
    assert!(out.lineage().extras.is_empty());
    let usage = out.usage().expect("usage");
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.total_tokens
        ),
        (110, 23, 133)
    );

    // The requests our provider received match llm_requests.json.
    let got = provider.requests();
    let expected = expected_requests.as_array().expect("array");
    assert_eq!(got.len(), expected.len());
    for (g, e) in got.iter().zip(expected) {
        assert_eq!(g.model.as_deref(), e["model"].as_str());
        assert_eq!(
            serde_json::to_value(&g.tool_choice).expect("tc"),
            e["tool_choice"]
        );
        let msgs = serde_json::to_value(&g.messages).expect("messages");
        assert_eq!(strip_nulls(&msgs), strip_nulls(&e["messages"]));
        let tools = serde_json::to_value(&g.tools).expect("tools");
        assert_eq!(tools, e["tools"], "tool names, descriptions and schemas");
    }
}
