//! The OpenAI chat-completions wire format, parsed leniently.
//!
//! We send and receive our own serde types through async-openai's `byot` calls rather than
//! its typed structs: compatible servers (vLLM, llama.cpp, Ollama) omit fields the typed
//! structs require, and we need exact control over `stream`, `stream_options` and
//! `tool_choice`.

use rath_session::{Chunk, ToolCall, Usage};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::{ProviderRequest, StreamEvent, ToolChoice};

/// Settings the provider adds to every request.
#[derive(Clone, Debug, Default)]
pub(crate) struct Defaults {
    pub model: String,
    pub temperature: Option<f32>,
    pub seed: Option<i64>,
    pub max_tokens: Option<u32>,
}

/// The JSON body for `POST /chat/completions`.
pub(crate) fn request_body(req: &ProviderRequest, d: &Defaults, stream: bool) -> Value {
    let mut body = Map::new();
    let model = req.model.clone().unwrap_or_else(|| d.model.clone());
    body.insert("model".into(), json!(model));
    let mut messages = serde_json::to_value(&req.messages).unwrap_or_else(|_| json!([]));
    for m in messages.as_array_mut().into_iter().flatten() {
        // An assistant turn that only calls tools: `"content": ""`, not null. OpenAI takes
        // either; llama-cpp-python's request schema rejects null (HTTP 500, "Input should
        // be a valid string"), which broke every second round of a tool loop.
        if m["role"] == "assistant"
            && m.get("content").is_none_or(Value::is_null)
            && m.get("tool_calls").is_some_and(|c| !c.is_null())
            && let Some(obj) = m.as_object_mut()
        {
            obj.insert("content".into(), json!(""));
        }
    }
    body.insert("messages".into(), messages);
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters}})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        let choice = match &req.tool_choice {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::None => json!("none"),
            ToolChoice::Required => json!("required"),
            ToolChoice::Function(name) => json!({"type": "function", "function": {"name": name}}),
        };
        body.insert("tool_choice".into(), choice);
    }
    if let Some(t) = req.temperature.or(d.temperature) {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(s) = req.seed.or(d.seed) {
        body.insert("seed".into(), json!(s));
    }
    if let Some(m) = req.max_tokens.or(d.max_tokens) {
        body.insert("max_tokens".into(), json!(m));
    }
    // With byot, async-openai sends the body as is: `stream` must be set here explicitly or
    // a "streamed" call silently gets one non-SSE body and yields nothing.
    body.insert("stream".into(), json!(stream));
    if stream {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Value::Object(body)
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    total_tokens: Option<u64>,
}

impl WireUsage {
    pub fn to_usage(&self) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            total_tokens: self
                .total_tokens
                .unwrap_or(self.prompt_tokens + self.completion_tokens),
        }
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireResponse {
    #[serde(default)]
    pub model: Option<String>,
    pub choices: Vec<WireChoice>,
    #[serde(default)]
    pub usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireChoice {
    pub message: WireMessage,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireMessage {
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireToolCall {
    #[serde(default)]
    pub id: Option<String>,
    pub function: WireFunction,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireFunction {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub arguments: Option<Value>,
}

/// Arguments as JSON text: servers send a string, a few send an object.
fn arguments_text(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// A call id, synthesised from the request id when the server sent none (deterministic).
pub(crate) fn call_id(given: Option<&str>, request_id: &str, index: usize) -> String {
    match given {
        Some(id) if !id.is_empty() => id.to_owned(),
        _ => format!("{request_id}_call_{index}"),
    }
}

pub(crate) struct Parsed {
    pub chunk: Chunk,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
    pub model: Option<String>,
}

impl WireResponse {
    pub fn into_parsed(self, request_id: &str) -> Result<Parsed, String> {
        let Some(choice) = self.choices.into_iter().next() else {
            return Err("response has no choices".to_owned());
        };
        let calls: Vec<ToolCall> = choice
            .message
            .tool_calls
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                ToolCall::function(
                    call_id(c.id.as_deref(), request_id, i),
                    c.function.name.unwrap_or_default(),
                    arguments_text(c.function.arguments.as_ref()),
                )
            })
            .collect();
        let content = choice.message.content.filter(|c| !c.is_empty());
        Ok(Parsed {
            chunk: Chunk::assistant(content, (!calls.is_empty()).then_some(calls)),
            finish_reason: choice.finish_reason,
            usage: self.usage.map(|u| u.to_usage()),
            model: self.model,
        })
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireChunk {
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub choices: Vec<WireStreamChoice>,
    #[serde(default)]
    pub usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireStreamChoice {
    #[serde(default)]
    pub delta: Option<WireDelta>,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireDelta {
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Vec<WireToolCallChunk>>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireToolCallChunk {
    #[serde(default)]
    pub index: Option<u32>,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub function: Option<WireFunction>,
}

impl WireChunk {
    /// The events this SSE chunk carries, in order.
    pub fn events(&self) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        for choice in &self.choices {
            if let Some(delta) = &choice.delta {
                if let Some(text) = &delta.content
                    && !text.is_empty()
                {
                    out.push(StreamEvent::TextDelta { text: text.clone() });
                }
                for (pos, tc) in delta.tool_calls.iter().flatten().enumerate() {
                    let (name, arguments) = match &tc.function {
                        Some(f) => (
                            f.name.clone().filter(|n| !n.is_empty()),
                            arguments_text(f.arguments.as_ref()),
                        ),
                        None => (None, String::new()),
                    };
                    out.push(StreamEvent::ToolCallDelta {
                        index: tc
                            .index
                            .unwrap_or_else(|| u32::try_from(pos).unwrap_or(u32::MAX)),
                        id: tc.id.clone().filter(|i| !i.is_empty()),
                        name,
                        arguments,
                    });
                }
            }
            if let Some(reason) = &choice.finish_reason {
                out.push(StreamEvent::Finish {
                    reason: reason.clone(),
                });
            }
        }
        if let Some(u) = &self.usage {
            out.push(StreamEvent::Usage {
                usage: u.to_usage(),
            });
        }
        out
    }
}
