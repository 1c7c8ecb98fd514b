//! The Messages API wire format: our requests as its JSON, its replies as our responses.
//!
//! ```
//! use rath_provider::{ProviderRequest, ToolChoice, ToolSchema};
//! use rath_provider_anthropic::wire::request_body;
//! use rath_session::{ChatMessage, Chunk, Session, Stamper};
//! use serde_json::json;
//!
//! let s = Session::system_with("Be brief.", Stamper::counter())
//!     .push(Chunk::user("hi"));
//! let req = ProviderRequest::from_session(&s, vec![ToolSchema::new("wc", "count", json!({"type": "object"}))])
//!     .with_tool_choice(ToolChoice::Required);
//! let body = request_body(&req, "claude-test", 1024, false);
//! assert_eq!(body["system"], "Be brief.");
//! assert_eq!(body["messages"], json!([{"role": "user", "content": [{"type": "text", "text": "hi"}]}]));
//! assert_eq!(body["tools"][0]["input_schema"], json!({"type": "object"}));
//! assert_eq!(body["tool_choice"], json!({"type": "any"}));
//! ```

use std::collections::BTreeMap;

use rath_provider::{ProviderRequest, ToolChoice};
use rath_session::{ChatMessage, Role, ToolCall, Usage};
use serde_json::{Map, Value, json};

/// Thinking blocks by the id of the first `tool_use` block of the reply that carried them
/// (as [`ProviderRequest::thinking`] holds them).
pub type ThinkingByCall = BTreeMap<String, Vec<Value>>;

/// The `POST /v1/messages` body for `req`. The thinking blocks of earlier replies
/// ([`ProviderRequest::thinking`], gathered from the session's `model_call` evidence) go back
/// first in their assistant turn, before its `tool_use` blocks, as the API requires.
pub fn request_body(req: &ProviderRequest, model: &str, max_tokens: u32, stream: bool) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model.as_deref().unwrap_or(model)));
    body.insert(
        "max_tokens".into(),
        json!(req.max_tokens.unwrap_or(max_tokens)),
    );
    let system: Vec<&str> = req
        .messages
        .iter()
        .filter(|m| m.role == Role::System)
        .filter_map(|m| m.content.as_deref())
        .collect();
    if !system.is_empty() {
        body.insert("system".into(), json!(system.join("\n\n")));
    }
    body.insert(
        "messages".into(),
        Value::Array(messages(&req.messages, &req.thinking)),
    );
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        body.insert("tool_choice".into(), tool_choice(&req.tool_choice));
    }
    if let Some(t) = req.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if stream {
        body.insert("stream".into(), json!(true));
    }
    Value::Object(body)
}

/// `tool_choice` as the API spells it.
pub fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!({"type": "auto"}),
        ToolChoice::None => json!({"type": "none"}),
        ToolChoice::Required => json!({"type": "any"}),
        ToolChoice::Function(name) => json!({"type": "tool", "name": name}),
    }
}

/// The conversation as alternating turns: system rows left out (they are `system`),
/// consecutive same-role rows merged into one turn, so the results answering one assistant
/// turn travel together in one user turn.
fn messages(msgs: &[ChatMessage], thinking: &ThinkingByCall) -> Vec<Value> {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in msgs {
        let (role, blocks) = match m.role {
            Role::System => continue,
            Role::User => ("user", text_block(m.content.as_deref())),
            Role::Tool => ("user", vec![tool_result_block(m)]),
            Role::Assistant => ("assistant", assistant_blocks(m, thinking)),
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((r, b)) if *r == role => b.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

fn text_block(text: Option<&str>) -> Vec<Value> {
    match text {
        Some(t) if !t.is_empty() => vec![json!({"type": "text", "text": t})],
        _ => Vec::new(),
    }
}

fn tool_result_block(m: &ChatMessage) -> Value {
    let content = m.content.clone().unwrap_or_default();
    let mut block = json!({
        "type": "tool_result",
        "tool_use_id": m.tool_call_id.clone().unwrap_or_default(),
        "content": content,
    });
    if is_failure(&content) {
        block["is_error"] = json!(true);
    }
    block
}

/// True for our failure contents, `{"ok": false, ...}`.
pub fn is_failure(content: &str) -> bool {
    content.starts_with('{')
        && serde_json::from_str::<Value>(content)
            .is_ok_and(|v| v.get("ok").and_then(Value::as_bool) == Some(false))
}

fn assistant_blocks(m: &ChatMessage, thinking: &ThinkingByCall) -> Vec<Value> {
    let calls = m.tool_calls.as_deref().unwrap_or_default();
    let mut blocks = calls
        .first()
        .and_then(|c| thinking.get(&c.id))
        .cloned()
        .unwrap_or_default();
    blocks.extend(text_block(m.content.as_deref()));
    blocks.extend(calls.iter().map(tool_use_block));
    blocks
}

/// A tool call as a `tool_use` block. Arguments that are not a JSON object (a model's
/// malformed call, already answered with `invalid_tool_arguments`) go as `{}`: the API
/// accepts only an object as `input`.
fn tool_use_block(call: &ToolCall) -> Value {
    let input = serde_json::from_str::<Value>(&call.function.arguments)
        .ok()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    json!({"type": "tool_use", "id": call.id, "name": call.function.name, "input": input})
}

/// OpenRath's finish reason for a `stop_reason`.
pub fn finish_reason(stop_reason: &str) -> String {
    match stop_reason {
        "end_turn" | "stop_sequence" => "stop",
        "tool_use" => "tool_calls",
        "max_tokens" => "length",
        "refusal" => "content_filter",
        other => other,
    }
    .to_owned()
}

/// The four usage figures the API reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ApiUsage {
    /// `input_tokens`: uncached prompt tokens.
    pub input_tokens: u64,
    /// `output_tokens`.
    pub output_tokens: u64,
    /// `cache_read_input_tokens`.
    pub cache_read_input_tokens: u64,
    /// `cache_creation_input_tokens`.
    pub cache_creation_input_tokens: u64,
}

impl ApiUsage {
    /// Replaces the figures `v` carries (the API's counts are cumulative, so a later
    /// report supersedes an earlier one; nothing is added twice).
    pub fn update(&mut self, v: &Value) {
        let get = |k: &str| v.get(k).and_then(Value::as_u64);
        if let Some(n) = get("input_tokens") {
            self.input_tokens = n;
        }
        if let Some(n) = get("output_tokens") {
            self.output_tokens = n;
        }
        if let Some(n) = get("cache_read_input_tokens") {
            self.cache_read_input_tokens = n;
        }
        if let Some(n) = get("cache_creation_input_tokens") {
            self.cache_creation_input_tokens = n;
        }
    }

    /// Our usage: every prompt token (uncached, read from cache, written to cache) is a
    /// prompt token; output tokens are completion tokens.
    pub fn to_usage(self) -> Usage {
        Usage::new(
            self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens,
            self.output_tokens,
        )
    }

    /// The raw figures, for the evidence's `detail`.
    pub fn to_json(self) -> Value {
        json!({
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
        })
    }
}

/// A reply taken apart: text, calls, thinking, stop reason, usage, model.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reply {
    /// The text blocks joined, `None` when there were none.
    pub text: Option<String>,
    /// The `tool_use` blocks as calls (arguments as compact JSON text).
    pub calls: Vec<ToolCall>,
    /// `thinking` and `redacted_thinking` blocks, as received.
    pub thinking: Vec<Value>,
    /// `stop_reason`, as received.
    pub stop_reason: Option<String>,
    /// Usage, when reported.
    pub usage: Option<ApiUsage>,
    /// The model that answered.
    pub model: Option<String>,
}

impl Reply {
    /// Takes a non-streamed `message` body apart; `None` when it is not one.
    pub fn from_message(body: &Value) -> Option<Self> {
        if body.get("type").and_then(Value::as_str) != Some("message") {
            return None;
        }
        let mut reply = Reply {
            stop_reason: body
                .get("stop_reason")
                .and_then(Value::as_str)
                .map(str::to_owned),
            model: body.get("model").and_then(Value::as_str).map(str::to_owned),
            ..Reply::default()
        };
        if let Some(u) = body.get("usage") {
            let mut usage = ApiUsage::default();
            usage.update(u);
            reply.usage = Some(usage);
        }
        for block in body.get("content")?.as_array()? {
            reply.add_block(block)?;
        }
        Some(reply)
    }

    /// Adds one complete content block; `None` for a block without its required fields.
    pub fn add_block(&mut self, block: &Value) -> Option<()> {
        let field = |k: &str| block.get(k).and_then(Value::as_str);
        match field("type")? {
            "text" => self
                .text
                .get_or_insert_with(String::new)
                .push_str(field("text")?),
            "tool_use" => {
                let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
                self.calls.push(ToolCall::function(
                    field("id")?,
                    field("name")?,
                    input.to_string(),
                ));
            }
            "thinking" | "redacted_thinking" => self.thinking.push(block.clone()),
            // Blocks this version does not know (server tool results, ...) are not answer text.
            _ => {}
        }
        Some(())
    }

    /// The `detail` entries of the `model_call` evidence: `stop_reason`, the raw usage
    /// figures and the thinking blocks.
    pub fn detail(&self) -> BTreeMap<String, Value> {
        let mut d = BTreeMap::new();
        if let Some(r) = &self.stop_reason {
            d.insert("stop_reason".to_owned(), json!(r));
        }
        if let Some(u) = self.usage {
            d.insert("anthropic_usage".to_owned(), u.to_json());
        }
        if !self.thinking.is_empty() {
            d.insert("thinking".to_owned(), Value::Array(self.thinking.clone()));
        }
        d
    }
}
