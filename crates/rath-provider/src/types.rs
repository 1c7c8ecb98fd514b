//! Requests, responses, stream events and manifests: the data every provider speaks.

use std::collections::BTreeMap;

use rath_session::{
    AssistantPayload, ChatMessage, Chunk, ChunkBody, ModelCall, Session, ToolCall, Usage,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A tool as the model sees it: a name, a description and a JSON Schema for its arguments.
///
/// ```
/// use rath_provider::ToolSchema;
/// use serde_json::json;
///
/// let t = ToolSchema::new("word_count", "Count words", json!({"type": "object"}));
/// assert_eq!(t.name, "word_count");
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSchema {
    /// The function name the model calls.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

impl ToolSchema {
    /// A tool schema.
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            parameters,
        }
    }
}

/// How the model may use the offered tools (OpenAI's `tool_choice`).
///
/// Serialises as `"auto"`, `"none"`, `"required"` or `{"function": "<name>"}`.
///
/// ```
/// use rath_provider::ToolChoice;
///
/// assert_eq!(serde_json::to_string(&ToolChoice::Auto).unwrap(), r#""auto""#);
/// assert_eq!(
///     serde_json::to_string(&ToolChoice::function("word_count")).unwrap(),
///     r#"{"function":"word_count"}"#
/// );
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides (the default). Not sent when no tools are offered.
    #[default]
    Auto,
    /// The model must not call tools.
    None,
    /// The model must call some tool.
    Required,
    /// The model must call this tool.
    Function(String),
}

impl ToolChoice {
    /// `ToolChoice::Function(name)`.
    pub fn function(name: impl Into<String>) -> Self {
        ToolChoice::Function(name.into())
    }
}

/// One request for the next assistant chunk.
///
/// Build it from a session with [`ProviderRequest::from_session`]: the request id then comes
/// from the session's stamper, so deterministic runs stay byte-identical.
///
/// ```
/// use rath_provider::{ProviderRequest, ToolSchema};
/// use rath_session::{Session, Stamper};
/// use serde_json::json;
///
/// let s = Session::user_with("count 'a b'", Stamper::counter());
/// let req = ProviderRequest::from_session(&s, vec![ToolSchema::new("wc", "count", json!({})) ])
///     .with_model("smollm2")
///     .with_temperature(0.0)
///     .with_max_tokens(64);
/// assert_eq!(req.request_id, "req_000001");
/// assert_eq!(req.messages.len(), 1);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProviderRequest {
    /// The id this call carries; it ends up on the session in the `model_call` evidence.
    pub request_id: String,
    /// Model override; `None` uses the provider's configured model.
    #[serde(default)]
    pub model: Option<String>,
    /// The conversation view (evidence excluded).
    pub messages: Vec<ChatMessage>,
    /// Tools offered to the model.
    #[serde(default)]
    pub tools: Vec<ToolSchema>,
    /// How the model may use the tools (ignored when `tools` is empty).
    #[serde(default)]
    pub tool_choice: ToolChoice,
    /// Sampling temperature override.
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Sampling seed override.
    #[serde(default)]
    pub seed: Option<i64>,
    /// Completion token limit override.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// The agent on whose behalf the call is made (for usage attribution and evidence).
    #[serde(default)]
    pub agent: Option<String>,
    /// Reasoning blocks earlier replies carried that the provider must send back with them
    /// (Anthropic's `thinking` blocks, signature included), keyed by the id of the first
    /// tool call of that reply. They live on the session as the `model_call` evidence's
    /// `detail.thinking` (so a stored and reloaded session keeps them) and are gathered here
    /// by [`ProviderRequest::push_chunk`]; a model never sees them as answer text. Omitted
    /// when empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub thinking: BTreeMap<String, Vec<Value>>,
}

impl ProviderRequest {
    /// A request with explicit id and messages and no tools.
    pub fn new(request_id: impl Into<String>, messages: Vec<ChatMessage>) -> Self {
        Self {
            request_id: request_id.into(),
            model: None,
            messages,
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
            temperature: None,
            seed: None,
            max_tokens: None,
            agent: None,
            thinking: BTreeMap::new(),
        }
    }

    /// The session's conversation view plus `tools`, with a request id from
    /// `session.stamper().next_token("req")`, and the reasoning blocks its `model_call`
    /// evidence keeps ([`ProviderRequest::thinking`]).
    pub fn from_session(session: &Session, tools: Vec<ToolSchema>) -> Self {
        let mut req = Self::new(session.stamper().next_token("req"), Vec::new());
        for chunk in session.chunks().iter() {
            req.push_chunk(chunk);
        }
        req.tools = tools;
        req
    }

    /// Adds what `chunk` contributes to the request: a conversation chunk its message; the
    /// `model_call` evidence of a reply that called tools its `detail.thinking` blocks, under
    /// the reply's first call id (the evidence follows its reply, as
    /// [`ProviderResponse::apply`] puts them); other evidence nothing.
    ///
    /// ```
    /// use rath_provider::{ProviderRequest, ProviderResponse};
    /// use rath_session::{Chunk, Session, Stamper, ToolCall};
    /// use serde_json::json;
    ///
    /// let s = Session::user_with("count", Stamper::counter());
    /// let req = ProviderRequest::from_session(&s, vec![]);
    /// let mut resp = ProviderResponse {
    ///     request_id: req.request_id.clone(),
    ///     chunk: Chunk::assistant(None, Some(vec![ToolCall::function("c1", "wc", "{}")])),
    ///     finish_reason: Some("tool_calls".into()),
    ///     usage: None, model: None, provider: "anthropic".into(), detail: Default::default(),
    /// };
    /// let block = json!({"type": "thinking", "thinking": "count them", "signature": "sig"});
    /// resp.detail.insert("thinking".into(), json!([block]));
    /// let s = resp.apply(&s, &req, 0.0);
    /// let next = ProviderRequest::from_session(&s, vec![]);
    /// assert_eq!(next.messages.len(), 2);
    /// assert_eq!(next.thinking["c1"], vec![block]);
    /// ```
    pub fn push_chunk(&mut self, chunk: &Chunk) {
        if let Some(m) = ChatMessage::from_chunk(chunk) {
            self.messages.push(m);
            return;
        }
        let ChunkBody::ModelCall(call) = chunk.body() else {
            return;
        };
        let Some(blocks) = call.detail.get("thinking").and_then(Value::as_array) else {
            return;
        };
        let first_call = self
            .messages
            .last()
            .filter(|m| m.role == rath_session::Role::Assistant)
            .and_then(|m| m.tool_calls.as_deref())
            .and_then(<[ToolCall]>::first);
        if let Some(first) = first_call
            && !blocks.is_empty()
        {
            self.thinking.insert(first.id.clone(), blocks.clone());
        }
    }

    /// Sets the model.
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Sets the tools.
    pub fn with_tools(mut self, tools: Vec<ToolSchema>) -> Self {
        self.tools = tools;
        self
    }

    /// Sets `tool_choice`.
    pub fn with_tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = choice;
        self
    }

    /// Sets the temperature.
    pub fn with_temperature(mut self, t: f32) -> Self {
        self.temperature = Some(t);
        self
    }

    /// Sets the seed.
    pub fn with_seed(mut self, seed: i64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Sets the completion token limit.
    pub fn with_max_tokens(mut self, n: u32) -> Self {
        self.max_tokens = Some(n);
        self
    }

    /// Sets the agent name.
    pub fn with_agent(mut self, agent: impl Into<String>) -> Self {
        self.agent = Some(agent.into());
        self
    }

    /// The request as a JSON value without its `request_id`: what cassettes compare.
    pub fn normalized(&self) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(map) = &mut v {
            map.remove("request_id");
        }
        v
    }

    /// A rough prompt size in tokens (bytes of message text and tool schemas / 4), used by
    /// token budgets to stop *before* a request could exceed them.
    pub fn estimated_prompt_tokens(&self) -> u64 {
        let bytes = serde_json::to_vec(&self.messages).map_or(0, |b| b.len())
            + serde_json::to_vec(&self.tools).map_or(0, |b| b.len());
        (bytes as u64).div_ceil(4)
    }
}

/// The provider's answer: the assistant chunk plus what the evidence needs.
///
/// ```
/// use rath_provider::{ProviderRequest, ProviderResponse};
/// use rath_session::{Chunk, ChunkKind, Session, Stamper, Usage};
///
/// let s = Session::user_with("hi", Stamper::counter());
/// let req = ProviderRequest::from_session(&s, vec![]).with_agent("greeter");
/// let resp = ProviderResponse {
///     request_id: req.request_id.clone(),
///     chunk: Chunk::assistant_text("hello"),
///     finish_reason: Some("stop".into()),
///     usage: Some(Usage::new(5, 1)),
///     model: Some("m".into()),
///     provider: "scripted".into(),
///     detail: Default::default(),
/// };
/// let next = resp.apply(&s, &req, 0.0);
/// assert_eq!(next.last().unwrap().kind(), ChunkKind::ModelCall);
/// assert_eq!(next.usage(), Some(Usage::new(5, 1)));
/// assert_eq!(next.agent_usage()["greeter"], Usage::new(5, 1));
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProviderResponse {
    /// The request id of the call this answers.
    pub request_id: String,
    /// The assistant chunk (text and/or tool calls).
    pub chunk: Chunk,
    /// Why generation stopped (`stop`, `tool_calls`, `length`, ...).
    pub finish_reason: Option<String>,
    /// Token usage, when the server reported it.
    pub usage: Option<Usage>,
    /// The model that answered, as the server named it.
    pub model: Option<String>,
    /// Provider name (`openai-compatible`, `scripted`, `replay`, ...).
    pub provider: String,
    /// How the answer was fetched, for the `model_call` evidence's `detail`: the
    /// OpenAI-compatible provider records `stream` (true/false), `stream_fallback` (why a
    /// stream was replaced by a non-streamed request), `stream_skipped` (why none was
    /// tried) and `attempts` (when there were several). Never headers or keys.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub detail: BTreeMap<String, Value>,
}

impl ProviderResponse {
    /// The assistant payload of [`ProviderResponse::chunk`] (empty if it is not one).
    pub fn payload(&self) -> AssistantPayload {
        match self.chunk.body() {
            ChunkBody::Assistant(p) => p.clone(),
            _ => AssistantPayload::default(),
        }
    }

    /// The reply text, if any.
    pub fn text(&self) -> Option<&str> {
        self.chunk.text()
    }

    /// The requested tool calls (possibly empty).
    pub fn tool_calls(&self) -> &[ToolCall] {
        self.chunk.tool_calls()
    }

    /// The `model_call` evidence body for this response to `req`.
    pub fn model_call(&self, req: &ProviderRequest, elapsed_ms: f64) -> ModelCall {
        ModelCall {
            request_id: self.request_id.clone(),
            agent: req.agent.clone(),
            provider: self.provider.clone(),
            model: self.model.clone().or_else(|| req.model.clone()),
            finish_reason: self.finish_reason.clone(),
            usage: self.usage,
            messages_sent: req.messages.len() as u64,
            elapsed_ms,
            detail: self.detail.clone(),
        }
    }

    /// The `model_call` evidence as a chunk.
    pub fn model_call_chunk(&self, req: &ProviderRequest, elapsed_ms: f64) -> Chunk {
        Chunk::new(ChunkBody::ModelCall(self.model_call(req, elapsed_ms)))
    }

    /// `session` with the assistant chunk, then the `model_call` evidence, appended and the
    /// usage added (attributed to `req.agent` when set). The input is left unchanged.
    pub fn apply(&self, session: &Session, req: &ProviderRequest, elapsed_ms: f64) -> Session {
        self.apply_owned(session.clone(), req, elapsed_ms)
    }

    /// [`ProviderResponse::apply`] taking the session by value: when no other value shares
    /// its last chunks (a loop that replaces its session each round), they are appended in
    /// place instead of copied.
    pub fn apply_owned(
        &self,
        mut session: Session,
        req: &ProviderRequest,
        elapsed_ms: f64,
    ) -> Session {
        session.push_mut(self.chunk.clone());
        session.push_mut(self.model_call_chunk(req, elapsed_ms));
        if let Some(u) = self.usage {
            session.add_usage(req.agent.as_deref(), u);
        }
        session
    }
}

/// One piece of a streamed answer, in arrival order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum StreamEvent {
    /// More reply text.
    TextDelta {
        /// The new text.
        text: String,
    },
    /// A fragment of tool call `index`: its id and name usually arrive first, then the
    /// arguments in pieces that may split anywhere (even inside a UTF-8 escape).
    ToolCallDelta {
        /// Position of the call in the reply.
        index: u32,
        /// The call id, when this fragment carries it.
        id: Option<String>,
        /// The function name (or a piece of it), when this fragment carries it.
        name: Option<String>,
        /// A piece of the JSON arguments text.
        arguments: String,
    },
    /// Usage for the whole call (sent last with `stream_options.include_usage`).
    Usage {
        /// The figures.
        usage: Usage,
    },
    /// The attempt so far failed and the request is being retried: discard what arrived
    /// before this event (the retried stream starts again from the beginning).
    Retry {
        /// The attempt about to start (2 for the first retry).
        attempt: u32,
        /// Why the previous attempt failed.
        reason: String,
    },
    /// Why generation stopped.
    Finish {
        /// `stop`, `tool_calls`, `length`, ...
        reason: String,
    },
}

/// Folds [`StreamEvent`]s into the same assistant chunk a non-streamed call returns.
///
/// ```
/// use rath_provider::{StreamAssembler, StreamEvent};
///
/// let mut a = StreamAssembler::default();
/// a.push(&StreamEvent::ToolCallDelta { index: 0, id: Some("c1".into()), name: Some("wc".into()), arguments: "{\"te".into() });
/// a.push(&StreamEvent::ToolCallDelta { index: 0, id: None, name: None, arguments: "xt\":1}".into() });
/// let chunk = a.chunk();
/// assert_eq!(chunk.tool_calls()[0].function.arguments, "{\"text\":1}");
/// ```
#[derive(Clone, Debug, Default)]
pub struct StreamAssembler {
    text: Option<String>,
    calls: BTreeMap<u32, (String, String, String)>,
    /// The finish reason seen, if any.
    pub finish_reason: Option<String>,
    /// The usage seen, if any.
    pub usage: Option<Usage>,
}

impl StreamAssembler {
    /// Adds one event.
    pub fn push(&mut self, event: &StreamEvent) {
        match event {
            StreamEvent::TextDelta { text } => {
                if !text.is_empty() {
                    self.text.get_or_insert_with(String::new).push_str(text);
                }
            }
            StreamEvent::ToolCallDelta {
                index,
                id,
                name,
                arguments,
            } => {
                let entry = self.calls.entry(*index).or_default();
                if let Some(id) = id
                    && !id.is_empty()
                {
                    entry.0 = id.clone();
                }
                if let Some(name) = name {
                    entry.1.push_str(name);
                }
                entry.2.push_str(arguments);
            }
            StreamEvent::Usage { usage } => self.usage = Some(*usage),
            StreamEvent::Finish { reason } => self.finish_reason = Some(reason.clone()),
            StreamEvent::Retry { .. } => *self = StreamAssembler::default(),
        }
    }

    /// The assembled assistant chunk: text (if any arrived) and tool calls in index order.
    pub fn chunk(&self) -> Chunk {
        self.chunk_for("call")
    }

    /// Like [`StreamAssembler::chunk`], naming calls whose id never arrived
    /// `<request_id>_call_<n>` (deterministic, unlike a random id).
    pub fn chunk_for(&self, request_id: &str) -> Chunk {
        let calls: Vec<ToolCall> = self
            .calls
            .values()
            .enumerate()
            .map(|(i, (id, name, args))| {
                let id = if id.is_empty() {
                    format!("{request_id}_call_{i}")
                } else {
                    id.clone()
                };
                ToolCall::function(id, name.clone(), args.clone())
            })
            .collect();
        Chunk::assistant(
            self.text.clone(),
            if calls.is_empty() { None } else { Some(calls) },
        )
    }

    /// The events that replay `chunk` (plus finish and usage) as a stream: how providers
    /// without native streaming implement [`crate::Provider::stream`].
    pub fn events_for(response: &ProviderResponse) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        let payload = response.payload();
        if let Some(text) = payload.content {
            out.push(StreamEvent::TextDelta { text });
        }
        for (i, call) in payload
            .tool_calls
            .unwrap_or_default()
            .into_iter()
            .enumerate()
        {
            out.push(StreamEvent::ToolCallDelta {
                index: u32::try_from(i).unwrap_or(u32::MAX),
                id: Some(call.id),
                name: Some(call.function.name),
                arguments: call.function.arguments,
            });
        }
        if let Some(reason) = &response.finish_reason {
            out.push(StreamEvent::Finish {
                reason: reason.clone(),
            });
        }
        if let Some(usage) = response.usage {
            out.push(StreamEvent::Usage { usage });
        }
        out
    }
}

/// What a provider is, for evidence packets: never contains a key or secret header value.
///
/// ```
/// use rath_provider::ProviderManifest;
///
/// let mut m = ProviderManifest::new("openai-compatible");
/// m.set_header("Authorization", "Bearer sk-live");
/// m.set_header("X-Trace", "abc");
/// let text = serde_json::to_string(&m).unwrap();
/// assert!(!text.contains("sk-live"));
/// assert!(text.contains("abc"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProviderManifest {
    /// Provider name.
    pub provider: String,
    /// Configured model.
    pub model: Option<String>,
    /// Host (and port) of the base URL; never the full URL, which may embed credentials.
    pub base_url_host: Option<String>,
    /// Sampling and transport parameters (temperature, seed, timeout, retries, budget, ...).
    pub parameters: BTreeMap<String, Value>,
    /// Extra request headers, secret-looking values replaced by `"[redacted]"`.
    pub headers: BTreeMap<String, String>,
    /// Library name → version (this crate, async-openai, ...).
    pub library_versions: BTreeMap<String, String>,
    /// The layers wrapped around the provider (retry, budget, rate limit, fallback,
    /// recording), outermost first, each with its settings; omitted when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layers: Vec<LayerManifest>,
}

/// One layer of a stacked provider as its manifest lists it: the layer's name and its
/// settings (limits, delays, the inner provider of a fallback), never a key.
///
/// ```
/// use rath_provider::{LayerManifest, ProviderManifest};
/// use serde_json::json;
///
/// let m = ProviderManifest::new("scripted")
///     .wrapped(LayerManifest::new("budget").with("token_budget", json!(1000)));
/// assert_eq!(m.layers[0].layer, "budget");
/// assert_eq!(serde_json::to_value(&m).unwrap()["layers"][0]["settings"]["token_budget"], 1000);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LayerManifest {
    /// `retry`, `budget`, `rate_limit`, `fallback`, `recording`, ...
    pub layer: String,
    /// The layer's settings.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: BTreeMap<String, Value>,
}

impl LayerManifest {
    /// A layer named `layer` with no settings yet.
    pub fn new(layer: impl Into<String>) -> Self {
        Self {
            layer: layer.into(),
            settings: BTreeMap::new(),
        }
    }

    /// Adds one setting.
    pub fn with(mut self, key: impl Into<String>, value: Value) -> Self {
        self.settings.insert(key.into(), value);
        self
    }
}

/// The text that replaces secret values in manifests.
pub const REDACTED: &str = "[redacted]";

impl ProviderManifest {
    /// An empty manifest for `provider`, with this crate's version recorded.
    pub fn new(provider: impl Into<String>) -> Self {
        let mut library_versions = BTreeMap::new();
        library_versions.insert(
            "rath-provider".to_owned(),
            env!("CARGO_PKG_VERSION").to_owned(),
        );
        Self {
            provider: provider.into(),
            library_versions,
            ..Self::default()
        }
    }

    /// This manifest with `layer` wrapped around everything listed so far (it becomes the
    /// outermost, first, entry of [`ProviderManifest::layers`]).
    pub fn wrapped(mut self, layer: LayerManifest) -> Self {
        self.layers.insert(0, layer);
        self
    }

    /// Records a header, redacting its value when the name looks secret.
    pub fn set_header(&mut self, name: &str, value: &str) {
        let value = if is_secret_name(name) {
            REDACTED.to_owned()
        } else {
            value.to_owned()
        };
        self.headers.insert(name.to_owned(), value);
    }
}

/// True for header or variable names that usually hold credentials.
pub fn is_secret_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    [
        "authorization",
        "key",
        "token",
        "secret",
        "password",
        "cookie",
        "credential",
        "session",
    ]
    .iter()
    .any(|s| n.contains(s))
}
