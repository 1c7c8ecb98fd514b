//! A scriptable OpenAI-compatible mock server (axum, on `127.0.0.1:0`) with fault injection.
//!
//! Enabled by the `mock-server` feature, so other crates' tests and examples can use it.
//!
//! ```
//! use rath_provider::mock::{MockReply, MockServer};
//! use rath_provider::{OpenAiConfig, OpenAiProvider, Provider, ProviderRequest};
//! use rath_session::{Session, Stamper};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let server = MockServer::start().await.unwrap();
//! server.push(MockReply::text("hello").usage(5, 1));
//! let p = OpenAiProvider::new(OpenAiConfig::new(server.base_url(), "mock")).unwrap();
//! let s = Session::user_with("hi", Stamper::counter());
//! let resp = p.complete(&ProviderRequest::from_session(&s, vec![])).await.unwrap();
//! assert_eq!(resp.text(), Some("hello"));
//! assert_eq!(server.requests().len(), 1);
//! # });
//! ```

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rath_session::Usage;
use serde_json::{Value, json};

/// A well-formed answer the mock serves (as one JSON body or as SSE, as the request asks).
#[derive(Clone, Debug, PartialEq)]
pub struct MockReply {
    /// Reply text.
    pub content: Option<String>,
    /// Tool calls `(id, name, arguments JSON text)`.
    pub tool_calls: Vec<(String, String, String)>,
    /// Usage to report; `None` omits the field (the "missing usage" fault).
    pub usage: Option<Usage>,
    /// Finish reason.
    pub finish_reason: String,
    /// Model name reported.
    pub model: String,
    /// Streamed text and arguments are cut into pieces of this many characters (default 3,
    /// so fragments split inside keys, strings and escapes).
    pub fragment: usize,
}

impl MockReply {
    /// A text answer (`stop`).
    pub fn text(content: impl Into<String>) -> Self {
        Self {
            content: Some(content.into()),
            tool_calls: Vec::new(),
            usage: None,
            finish_reason: "stop".to_owned(),
            model: "mock-model".to_owned(),
            fragment: 3,
        }
    }

    /// A tool-call answer (`tool_calls`); arguments are JSON values serialised compactly.
    pub fn tool_calls<S1: Into<String>, S2: Into<String>>(calls: Vec<(S1, S2, Value)>) -> Self {
        Self {
            content: None,
            tool_calls: calls
                .into_iter()
                .map(|(id, name, args)| (id.into(), name.into(), args.to_string()))
                .collect(),
            usage: None,
            finish_reason: "tool_calls".to_owned(),
            model: "mock-model".to_owned(),
            fragment: 3,
        }
    }

    /// Sets usage.
    pub fn usage(mut self, prompt: u64, completion: u64) -> Self {
        self.usage = Some(Usage::new(prompt, completion));
        self
    }

    /// Sets the streamed fragment size (at least 1).
    pub fn fragment(mut self, chars: usize) -> Self {
        self.fragment = chars.max(1);
        self
    }

    /// The non-streamed chat completion body.
    pub fn completion_json(&self) -> Value {
        let calls: Vec<Value> = self
            .tool_calls
            .iter()
            .map(|(id, name, args)| {
                json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})
            })
            .collect();
        let mut body = json!({
            "id": "chatcmpl-mock",
            "object": "chat.completion",
            "created": 0,
            "model": self.model,
            "choices": [{
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": self.content,
                    "tool_calls": if calls.is_empty() { Value::Null } else { Value::Array(calls) },
                },
                "finish_reason": self.finish_reason,
            }],
        });
        if let Some(u) = self.usage {
            body["usage"] = json!(u);
        }
        body
    }

    /// The SSE `data:` payloads of the streamed answer, `[DONE]` excluded.
    pub fn stream_chunks(&self) -> Vec<Value> {
        let frame = |delta: Value, finish: Value| {
            json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0,
                   "model": self.model,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        };
        let mut out = vec![frame(json!({"role": "assistant"}), Value::Null)];
        if let Some(text) = &self.content {
            for piece in split_chars(text, self.fragment) {
                out.push(frame(json!({"content": piece}), Value::Null));
            }
        }
        for (i, (id, name, args)) in self.tool_calls.iter().enumerate() {
            out.push(frame(
                json!({"tool_calls": [{"index": i, "id": id, "type": "function",
                                       "function": {"name": name, "arguments": ""}}]}),
                Value::Null,
            ));
            for piece in split_chars(args, self.fragment) {
                out.push(frame(
                    json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}),
                    Value::Null,
                ));
            }
        }
        out.push(frame(json!({}), json!(self.finish_reason)));
        if let Some(u) = self.usage {
            out.push(
                json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk",
                            "created": 0, "model": self.model, "choices": [], "usage": u}),
            );
        }
        out
    }
}

fn split_chars(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(n.max(1)).map(|c| c.iter().collect()).collect()
}

/// A fault the mock injects instead of (or in the middle of) an answer.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum MockFault {
    /// 429 with `Retry-After: <secs>`.
    RateLimited {
        /// Seconds in the `Retry-After` header.
        retry_after_secs: u64,
    },
    /// 500 with a text body.
    ServerError,
    /// Accept the request and never answer (for this long).
    Hang(Duration),
    /// Start the answer, then cut the connection (streamed: after a few SSE events;
    /// non-streamed: halfway through the JSON body).
    CutMidStream,
    /// 200 with a body (or SSE event) that is not JSON.
    InvalidJson,
    /// This HTTP status with a JSON error body, and `Retry-After` when given.
    Status {
        /// The status code (400, 401, 503, ...).
        status: u16,
        /// Seconds in the `Retry-After` header, if any.
        retry_after_secs: Option<u64>,
    },
    /// This HTTP status with this error message (in the JSON error body).
    StatusWith {
        /// The status code.
        status: u16,
        /// The error message.
        message: String,
    },
    /// 200 and nothing: an SSE stream with no event (not even `[DONE]`), or an empty body.
    EmptyStream,
    /// Streamed: text deltas, then `[DONE]` without a finish reason. Non-streamed: a
    /// completion whose `finish_reason` is null.
    NoFinishReason,
    /// This status with the request's `Authorization` header echoed in the body, as a
    /// careless proxy might: what a key-leak test needs.
    EchoAuthorization {
        /// The status code.
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

/// One step of the mock's script.
#[derive(Clone, Debug, PartialEq)]
pub enum MockStep {
    /// Serve a well-formed answer.
    Reply(MockReply),
    /// Inject a fault.
    Fault(MockFault),
}

impl From<MockReply> for MockStep {
    fn from(r: MockReply) -> Self {
        MockStep::Reply(r)
    }
}

impl From<MockFault> for MockStep {
    fn from(f: MockFault) -> Self {
        MockStep::Fault(f)
    }
}

pub mod host;
pub mod workload;

use host::{HostShared, MockHost, cut_json, json_response, raw_response, sse_response};

/// The OpenAI mock's own switch.
#[derive(Default)]
struct Switches {
    refuse_streamed_tools: bool,
}

type Shared = HostShared<MockStep, Switches>;

/// The running mock server. Dropping it stops the server.
#[derive(Debug)]
pub struct MockServer {
    host: MockHost<MockStep, Switches>,
}

impl MockServer {
    /// Starts a server on `127.0.0.1:0` (a free port) in the current tokio runtime.
    pub async fn start() -> std::io::Result<Self> {
        let routes = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/models", get(models));
        Ok(Self {
            host: MockHost::start(routes).await?,
        })
    }

    /// `http://127.0.0.1:<port>/v1`.
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.host.base_url())
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.host.addr()
    }

    /// Appends a step to the script.
    pub fn push(&self, step: impl Into<MockStep>) {
        self.host.push(step.into());
    }

    /// The answer served whenever the script is empty (otherwise: 500 "script exhausted").
    pub fn set_fallback(&self, reply: Option<MockReply>) {
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

    /// Behave like llama-cpp-python with `chatml-function-calling`: a streamed request that
    /// offers tools with `tool_choice: "auto"` (or none) gets HTTP 200 and an empty stream,
    /// without consuming a script step ("Automatic streaming tool choice is not supported").
    pub fn refuse_streamed_tools(&self, on: bool) {
        self.host.lock().extra.refuse_streamed_tools = on;
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

async fn models() -> impl IntoResponse {
    axum::Json(json!({"object": "list", "data": [{"id": "mock-model", "object": "model"}]}))
}

async fn chat(State(state): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let streamed = request.get("stream").and_then(Value::as_bool) == Some(true);
    let offers_tools = request
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|t| !t.is_empty());
    let auto_choice = request
        .get("tool_choice")
        .is_none_or(|c| c == &Value::String("auto".to_owned()));
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let step = {
        let mut st = host::lock(&state);
        let refuse = st.extra.refuse_streamed_tools && streamed && offers_tools && auto_choice;
        if refuse {
            st.record(request, headers);
            Some(MockStep::Fault(MockFault::EmptyStream))
        } else {
            st.record_and_next(request, headers)
        }
    };
    match step {
        None => (StatusCode::INTERNAL_SERVER_ERROR, "mock script exhausted").into_response(),
        Some(MockStep::Reply(reply)) if streamed => sse(reply.stream_chunks(), false),
        Some(MockStep::Reply(reply)) => axum::Json(reply.completion_json()).into_response(),
        Some(MockStep::Fault(fault)) => fault_response(fault, streamed, &authorization).await,
    }
}

/// The streamed answer of `chunks`: every frame, then `[DONE]`; `cut` stops after three
/// frames with a reset connection instead.
fn sse(chunks: Vec<Value>, cut: bool) -> Response {
    let mut frames: Vec<Bytes> = chunks
        .iter()
        .map(|c| Bytes::from(format!("data: {c}\n\n")))
        .collect();
    if cut {
        return sse_response(frames, Some(3));
    }
    frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
    sse_response(frames, None)
}

fn error_json(status: u16, message: &str) -> Response {
    error_with(status, message, None)
}

fn error_with(status: u16, message: &str, retry_after_secs: Option<u64>) -> Response {
    json_response(
        status,
        &json!({"error": {"message": message, "type": "mock_error", "code": status}}),
        retry_after_secs,
    )
}

async fn fault_response(fault: MockFault, streamed: bool, authorization: &str) -> Response {
    let reply = MockReply::text("partial answer that never completes").usage(1, 1);
    match fault {
        MockFault::RateLimited { retry_after_secs } => rate_limited(retry_after_secs),
        MockFault::ServerError => {
            (StatusCode::INTERNAL_SERVER_ERROR, "mock: internal error").into_response()
        }
        MockFault::Hang(d) => {
            tokio::time::sleep(d).await;
            (StatusCode::GATEWAY_TIMEOUT, "mock: hung").into_response()
        }
        MockFault::CutMidStream if streamed => sse(reply.stream_chunks(), true),
        MockFault::CutMidStream => cut_json(&reply.completion_json().to_string()),
        MockFault::InvalidJson => invalid_json(streamed),
        MockFault::Status {
            status,
            retry_after_secs,
        } => error_with(status, &format!("mock: status {status}"), retry_after_secs),
        MockFault::StatusWith { status, message } => error_json(status, &message),
        MockFault::EchoAuthorization { status } => error_json(
            status,
            &format!("mock: rejected request with authorization {authorization:?}"),
        ),
        MockFault::EmptyStream => {
            let kind = if streamed {
                "text/event-stream"
            } else {
                "application/json"
            };
            raw_response(kind, Body::empty())
        }
        MockFault::NoFinishReason => no_finish_reason(&reply, streamed),
    }
}

/// HTTP 429 with `Retry-After` and an OpenAI-style error body.
fn rate_limited(retry_after_secs: u64) -> Response {
    json_response(
        429,
        &json!({"error": {"message": "rate limited", "type": "rate_limit", "code": null}}),
        Some(retry_after_secs),
    )
}

/// A body that is not JSON (as a stream: an event that is not).
fn invalid_json(streamed: bool) -> Response {
    if streamed {
        let frames = vec![
            Bytes::from_static(b"data: {\"choices\": [oops\n\n"),
            Bytes::from_static(b"data: [DONE]\n\n"),
        ];
        return sse_response(frames, None);
    }
    raw_response("application/json", "{\"choices\": [ this is not json")
}

/// `reply` without a finish reason (streamed or whole).
fn no_finish_reason(reply: &MockReply, streamed: bool) -> Response {
    if streamed {
        let mut chunks = reply.stream_chunks();
        for c in &mut chunks {
            if let Some(choices) = c["choices"].as_array_mut() {
                for ch in choices {
                    ch["finish_reason"] = Value::Null;
                }
            }
        }
        return sse(chunks, false);
    }
    let mut body = reply.completion_json();
    body["choices"][0]["finish_reason"] = Value::Null;
    axum::Json(body).into_response()
}

impl host::ScriptedMock for MockServer {
    fn base_url(&self) -> String {
        MockServer::base_url(self)
    }

    fn push_text(&self, text: &str, prompt_tokens: u64, completion_tokens: u64) {
        self.push(MockReply::text(text).usage(prompt_tokens, completion_tokens));
    }

    fn push_tool_calls(
        &self,
        calls: &[(&str, &str, Value)],
        prompt_tokens: u64,
        completion_tokens: u64,
    ) {
        let calls = calls
            .iter()
            .map(|(id, name, args)| (*id, *name, args.clone()))
            .collect();
        self.push(MockReply::tool_calls(calls).usage(prompt_tokens, completion_tokens));
    }

    fn push_status(&self, status: u16, retry_after_secs: Option<u64>) {
        self.push(MockFault::Status {
            status,
            retry_after_secs,
        });
    }

    fn push_key_echo(&self, status: u16) {
        self.push(MockFault::EchoAuthorization { status });
    }

    fn requests(&self) -> Vec<Value> {
        MockServer::requests(self)
    }

    fn request_headers(&self) -> Vec<HeaderMap> {
        MockServer::request_headers(self)
    }

    fn remaining(&self) -> usize {
        MockServer::remaining(self)
    }
}
