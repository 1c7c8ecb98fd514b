//! A scriptable mock of the Messages API (axum, on `127.0.0.1:0`) with fault injection,
//! written from the published API: `POST /v1/messages` answers a `message` body, or with
//! `"stream": true` the documented event sequence (`message_start`, `ping`,
//! `content_block_start|delta|stop`, `message_delta`, `message_stop`).
//!
//! ```
//! use rath_provider_anthropic::mock::{MockAnthropic, MockFault, MockMessage};
//! use serde_json::json;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let server = MockAnthropic::start().await.unwrap();
//! server.push(MockFault::status(529));
//! server.push(MockMessage::tool_use(vec![("toolu_1", "wc", json!({"text": "a b"}))]));
//! assert_eq!(server.remaining(), 2);
//! # });
//! ```

use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use rath_provider::mock::host::{
    self, HostShared, MockHost, ScriptedMock, cut_json, json_response, raw_response, sse_response,
};
use serde_json::{Value, json};

/// One content block of a scripted reply.
#[derive(Clone, Debug, PartialEq)]
pub enum MockBlock {
    /// `{"type": "text", "text": ...}`.
    Text(String),
    /// `{"type": "tool_use", "id", "name", "input"}`.
    ToolUse {
        /// Block id (`toolu_...`).
        id: String,
        /// Tool name.
        name: String,
        /// The input object.
        input: Value,
    },
    /// `{"type": "thinking", "thinking", "signature"}`.
    Thinking {
        /// The reasoning text.
        thinking: String,
        /// The signature the API checks when the block is sent back.
        signature: String,
    },
}

/// A well-formed reply (one `message` body, or its events when streamed).
#[derive(Clone, Debug, PartialEq)]
pub struct MockMessage {
    /// The content blocks.
    pub content: Vec<MockBlock>,
    /// `stop_reason`.
    pub stop_reason: String,
    /// `input_tokens`, `output_tokens`, `cache_read_input_tokens`,
    /// `cache_creation_input_tokens`.
    pub usage: [u64; 4],
    /// The model reported.
    pub model: String,
    /// Streamed text and JSON are cut into pieces of this many characters (default 3).
    pub fragment: usize,
}

impl MockMessage {
    /// A text reply (`end_turn`).
    pub fn text(text: impl Into<String>) -> Self {
        Self::with_blocks(vec![MockBlock::Text(text.into())], "end_turn")
    }

    /// A reply of `tool_use` blocks (`tool_use`).
    pub fn tool_use<S1: Into<String>, S2: Into<String>>(calls: Vec<(S1, S2, Value)>) -> Self {
        let blocks = calls
            .into_iter()
            .map(|(id, name, input)| MockBlock::ToolUse {
                id: id.into(),
                name: name.into(),
                input,
            })
            .collect();
        Self::with_blocks(blocks, "tool_use")
    }

    /// A reply of these blocks.
    pub fn with_blocks(content: Vec<MockBlock>, stop_reason: impl Into<String>) -> Self {
        Self {
            content,
            stop_reason: stop_reason.into(),
            usage: [0, 0, 0, 0],
            model: "claude-mock".to_owned(),
            fragment: 3,
        }
    }

    /// Puts a thinking block first.
    pub fn thinking(mut self, thinking: impl Into<String>, signature: impl Into<String>) -> Self {
        self.content.insert(
            0,
            MockBlock::Thinking {
                thinking: thinking.into(),
                signature: signature.into(),
            },
        );
        self
    }

    /// Sets input and output tokens.
    pub fn usage(mut self, input: u64, output: u64) -> Self {
        self.usage[0] = input;
        self.usage[1] = output;
        self
    }

    /// Sets cache-read and cache-creation tokens.
    pub fn cache(mut self, read: u64, creation: u64) -> Self {
        self.usage[2] = read;
        self.usage[3] = creation;
        self
    }

    /// Sets `stop_reason`.
    pub fn stop_reason(mut self, reason: impl Into<String>) -> Self {
        self.stop_reason = reason.into();
        self
    }

    fn usage_json(&self, output: u64) -> Value {
        json!({
            "input_tokens": self.usage[0],
            "output_tokens": output,
            "cache_read_input_tokens": self.usage[2],
            "cache_creation_input_tokens": self.usage[3],
        })
    }

    /// The non-streamed `message` body.
    pub fn message_json(&self) -> Value {
        let content: Vec<Value> = self.content.iter().map(block_json).collect();
        json!({
            "id": "msg_mock",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": self.stop_reason,
            "stop_sequence": null,
            "usage": self.usage_json(self.usage[1]),
        })
    }

    /// The streamed events, in order (the `data` of each SSE frame).
    pub fn events(&self) -> Vec<Value> {
        let mut start = self.message_json();
        start["content"] = json!([]);
        start["stop_reason"] = Value::Null;
        // message_start reports the prompt and a first output count; message_delta the total.
        start["usage"] = self.usage_json(self.usage[1].min(1));
        let mut out = vec![
            json!({"type": "message_start", "message": start}),
            json!({"type": "ping"}),
        ];
        for (index, block) in self.content.iter().enumerate() {
            out.extend(self.block_events(index, block));
        }
        out.push(json!({
            "type": "message_delta",
            "delta": {"stop_reason": self.stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": self.usage[1]},
        }));
        out.push(json!({"type": "message_stop"}));
        out
    }

    fn block_events(&self, index: usize, block: &MockBlock) -> Vec<Value> {
        let delta = |d: Value| json!({"type": "content_block_delta", "index": index, "delta": d});
        let (start, deltas): (Value, Vec<Value>) = match block {
            MockBlock::Text(t) => (
                json!({"type": "text", "text": ""}),
                pieces(t, self.fragment)
                    .map(|p| delta(json!({"type": "text_delta", "text": p})))
                    .collect(),
            ),
            MockBlock::ToolUse { id, name, input } => (
                json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                // Spaced JSON, so a client must not rely on the streamed text's layout.
                pieces(&spaced(input), self.fragment)
                    .map(|p| delta(json!({"type": "input_json_delta", "partial_json": p})))
                    .collect(),
            ),
            MockBlock::Thinking {
                thinking,
                signature,
            } => {
                let mut d: Vec<Value> = pieces(thinking, self.fragment)
                    .map(|p| delta(json!({"type": "thinking_delta", "thinking": p})))
                    .collect();
                d.push(delta(
                    json!({"type": "signature_delta", "signature": signature}),
                ));
                (
                    json!({"type": "thinking", "thinking": "", "signature": ""}),
                    d,
                )
            }
        };
        let mut out =
            vec![json!({"type": "content_block_start", "index": index, "content_block": start})];
        out.extend(deltas);
        out.push(json!({"type": "content_block_stop", "index": index}));
        out
    }
}

fn block_json(block: &MockBlock) -> Value {
    match block {
        MockBlock::Text(t) => json!({"type": "text", "text": t}),
        MockBlock::ToolUse { id, name, input } => {
            json!({"type": "tool_use", "id": id, "name": name, "input": input})
        }
        MockBlock::Thinking {
            thinking,
            signature,
        } => json!({"type": "thinking", "thinking": thinking, "signature": signature}),
    }
}

fn spaced(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

fn pieces(text: &str, n: usize) -> impl Iterator<Item = String> + '_ {
    let chars: Vec<char> = text.chars().collect();
    let n = n.max(1);
    (0..chars.len().div_ceil(n)).map(move |i| {
        chars[i * n..((i + 1) * n).min(chars.len())]
            .iter()
            .collect()
    })
}

/// A fault the mock injects instead of (or in the middle of) a reply.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum MockFault {
    /// This status with the API's error body (`rate_limit_error` for 429,
    /// `overloaded_error` for 529, ...) and `retry-after` when given.
    Status {
        /// The HTTP status.
        status: u16,
        /// Seconds in `retry-after`, if any.
        retry_after_secs: Option<u64>,
    },
    /// Streamed: the first events, then an `error` event of this type
    /// (`overloaded_error`, ...). Non-streamed: the matching status.
    StreamError {
        /// The error type.
        error_type: String,
    },
    /// Start the reply, then cut the connection.
    CutMidStream,
    /// 200 with a body (or event) that is not JSON.
    InvalidJson,
    /// Accept the request and answer nothing for this long.
    Hang(Duration),
    /// This status with the request's `x-api-key` echoed in the body, as a careless
    /// proxy might: what a key-leak test needs.
    EchoKey {
        /// The HTTP status.
        status: u16,
    },
}

impl MockFault {
    /// `Status { status, retry_after_secs: None }`.
    pub fn status(status: u16) -> Self {
        MockFault::Status {
            status,
            retry_after_secs: None,
        }
    }
}

/// The error `type` the API uses for a status.
pub fn error_type(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

/// One step of the script.
#[derive(Clone, Debug, PartialEq)]
pub enum MockStep {
    /// Serve a reply.
    Reply(MockMessage),
    /// Inject a fault.
    Fault(MockFault),
}

impl From<MockMessage> for MockStep {
    fn from(m: MockMessage) -> Self {
        MockStep::Reply(m)
    }
}

impl From<MockFault> for MockStep {
    fn from(f: MockFault) -> Self {
        MockStep::Fault(f)
    }
}

type Shared = HostShared<MockStep>;

/// The running mock (on rath-provider's shared mock scaffolding). Dropping it stops the
/// server.
#[derive(Debug)]
pub struct MockAnthropic {
    host: MockHost<MockStep>,
}

impl MockAnthropic {
    /// Starts a server on a free port of `127.0.0.1` in the current tokio runtime.
    pub async fn start() -> std::io::Result<Self> {
        let routes = Router::new().route("/v1/messages", post(messages));
        Ok(Self {
            host: MockHost::start(routes).await?,
        })
    }

    /// `http://127.0.0.1:<port>` (the provider adds `/v1/messages`).
    pub fn base_url(&self) -> String {
        self.host.base_url()
    }

    /// Appends a step to the script.
    pub fn push(&self, step: impl Into<MockStep>) {
        self.host.push(step.into());
    }

    /// The reply served whenever the script is empty and no responder answers
    /// (otherwise: 500 "mock script exhausted").
    pub fn set_fallback(&self, reply: Option<MockMessage>) {
        self.host.set_fallback(reply.map(MockStep::Reply));
    }

    /// A function that picks the step from the request body when the script is empty (for
    /// several agents sharing one mock, whose calls interleave).
    pub fn set_responder(
        &self,
        responder: impl Fn(&Value) -> Option<MockStep> + Send + Sync + 'static,
    ) {
        self.host.set_responder(responder);
    }

    /// Every request body received, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.host.requests()
    }

    /// Every request's headers, in order.
    pub fn request_headers(&self) -> Vec<HeaderMap> {
        self.host.request_headers()
    }

    /// Steps not yet served.
    pub fn remaining(&self) -> usize {
        self.host.remaining()
    }
}

impl ScriptedMock for MockAnthropic {
    fn base_url(&self) -> String {
        MockAnthropic::base_url(self)
    }

    fn push_text(&self, text: &str, prompt_tokens: u64, completion_tokens: u64) {
        self.push(MockMessage::text(text).usage(prompt_tokens, completion_tokens));
    }

    fn push_tool_calls(
        &self,
        calls: &[(&str, &str, Value)],
        prompt_tokens: u64,
        completion_tokens: u64,
    ) {
        let calls = calls
            .iter()
            .map(|(id, name, input)| (*id, *name, input.clone()))
            .collect();
        self.push(MockMessage::tool_use(calls).usage(prompt_tokens, completion_tokens));
    }

    fn push_status(&self, status: u16, retry_after_secs: Option<u64>) {
        self.push(MockFault::Status {
            status,
            retry_after_secs,
        });
    }

    fn push_key_echo(&self, status: u16) {
        self.push(MockFault::EchoKey { status });
    }

    fn requests(&self) -> Vec<Value> {
        MockAnthropic::requests(self)
    }

    fn request_headers(&self) -> Vec<HeaderMap> {
        MockAnthropic::request_headers(self)
    }

    fn remaining(&self) -> usize {
        MockAnthropic::remaining(self)
    }
}

async fn messages(State(state): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let streamed = request.get("stream").and_then(Value::as_bool) == Some(true);
    let key = headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let versioned = headers.contains_key("anthropic-version");
    let step = host::lock(&state).record_and_next(request.clone(), headers);
    // What the API itself refuses before any script step.
    if key.is_empty() {
        return api_error(401, "x-api-key header is required", None);
    }
    if !versioned {
        return api_error(400, "anthropic-version header is required", None);
    }
    if let Some(problem) = invalid_request(&request) {
        return api_error(400, &problem, None);
    }
    match step {
        None => api_error(500, "mock script exhausted", None),
        Some(MockStep::Reply(m)) if streamed => sse(m.events(), None),
        Some(MockStep::Reply(m)) => axum::Json(m.message_json()).into_response(),
        Some(MockStep::Fault(f)) => fault(f, streamed, &key).await,
    }
}

/// The request checks the API documents: `model`, `max_tokens` and `messages` required,
/// roles alternate starting with `user`, content blocks of known types.
fn invalid_request(req: &Value) -> Option<String> {
    if !req.get("model").is_some_and(Value::is_string) {
        return Some("model: field required".to_owned());
    }
    if !req.get("max_tokens").is_some_and(Value::is_u64) {
        return Some("max_tokens: field required".to_owned());
    }
    let msgs = req.get("messages").and_then(Value::as_array)?;
    let mut last = "assistant";
    for (i, m) in msgs.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        if role == last || !matches!(role, "user" | "assistant") {
            return Some(format!(
                "messages.{i}: roles must alternate, starting with user"
            ));
        }
        last = role;
        let blocks = m.get("content").and_then(Value::as_array)?;
        for b in blocks {
            let t = b.get("type").and_then(Value::as_str).unwrap_or_default();
            if !matches!(
                t,
                "text" | "tool_use" | "tool_result" | "thinking" | "redacted_thinking"
            ) {
                return Some(format!("messages.{i}: unknown content block type {t:?}"));
            }
        }
    }
    None
}

fn api_error(status: u16, message: &str, retry_after: Option<u64>) -> Response {
    let body = json!({"type": "error", "error": {"type": error_type(status), "message": message}});
    json_response(status, &body, retry_after)
}

/// An SSE response of `events` (`event: <type>` lines); `cut` ends it after that many
/// events with a reset.
fn sse(events: Vec<Value>, cut: Option<usize>) -> Response {
    let frames = events
        .iter()
        .map(|e| {
            let kind = e.get("type").and_then(Value::as_str).unwrap_or("message");
            Bytes::from(format!("event: {kind}\ndata: {e}\n\n"))
        })
        .collect();
    sse_response(frames, cut)
}

async fn fault(f: MockFault, streamed: bool, key: &str) -> Response {
    let partial = MockMessage::text("partial answer that never completes").usage(1, 1);
    match f {
        MockFault::Status {
            status,
            retry_after_secs,
        } => api_error(status, &format!("mock: status {status}"), retry_after_secs),
        MockFault::StreamError { error_type } if streamed => {
            let mut events = partial.events();
            events.truncate(4);
            events.push(json!({"type": "error", "error": {"type": error_type, "message": "mock"}}));
            sse(events, None)
        }
        MockFault::StreamError { error_type } => {
            let status = match error_type.as_str() {
                "overloaded_error" => 529,
                "rate_limit_error" => 429,
                _ => 500,
            };
            api_error(status, "mock", None)
        }
        MockFault::CutMidStream if streamed => sse(partial.events(), Some(4)),
        MockFault::CutMidStream => cut_json(&partial.message_json().to_string()),
        MockFault::InvalidJson if streamed => raw_response(
            "text/event-stream",
            "event: message_start\ndata: {\"type\": oops\n\n",
        ),
        MockFault::InvalidJson => raw_response("application/json", "{\"type\": \"message\", oops"),
        MockFault::Hang(d) => {
            tokio::time::sleep(d).await;
            api_error(504, "mock: hung", None)
        }
        MockFault::EchoKey { status } => {
            api_error(status, &format!("mock: rejected key {key:?}"), None)
        }
    }
}
