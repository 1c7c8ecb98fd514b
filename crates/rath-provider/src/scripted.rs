//! A provider that plays back a fixed list of responses: for tests and offline examples.

use std::fmt;
use std::sync::Mutex;

use async_trait::async_trait;
use rath_session::{Chunk, ToolCall, Usage};
use serde_json::{Value, json};

use crate::{Provider, ProviderError, ProviderManifest, ProviderRequest, ProviderResponse};

/// A check run on the request before its scripted response is served.
pub type RequestAssertion = Box<dyn Fn(&ProviderRequest) -> Result<(), String> + Send + Sync>;

/// One scripted answer, built fluently.
///
/// ```
/// use rath_provider::ScriptedResponse;
/// use serde_json::json;
///
/// let r = ScriptedResponse::tool_calls(vec![("call_1", "word_count", json!({"text": "a b"}))])
///     .usage(40, 12);
/// let r2 = ScriptedResponse::text("done").usage(70, 11).expect(|req| {
///     if req.messages.len() >= 3 { Ok(()) } else { Err("tool result missing".into()) }
/// });
/// # let _ = (r, r2);
/// ```
pub struct ScriptedResponse {
    content: Option<String>,
    tool_calls: Vec<ToolCall>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    model: Option<String>,
    error: Option<ProviderError>,
    assertion: Option<RequestAssertion>,
}

impl fmt::Debug for ScriptedResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedResponse")
            .field("content", &self.content)
            .field("tool_calls", &self.tool_calls)
            .field("finish_reason", &self.finish_reason)
            .field("usage", &self.usage)
            .field("error", &self.error)
            .field("has_assertion", &self.assertion.is_some())
            .finish()
    }
}

impl ScriptedResponse {
    fn empty() -> Self {
        Self {
            content: None,
            tool_calls: Vec::new(),
            finish_reason: None,
            usage: None,
            model: None,
            error: None,
            assertion: None,
        }
    }

    /// A text reply (finish reason `stop`).
    pub fn text(content: impl Into<String>) -> Self {
        Self {
            content: Some(content.into()),
            finish_reason: Some("stop".to_owned()),
            ..Self::empty()
        }
    }

    /// A reply requesting tool calls `(id, name, arguments)` (finish reason `tool_calls`).
    /// Arguments that are JSON strings are used verbatim (so malformed arguments can be
    /// scripted); any other value is serialised.
    pub fn tool_calls<I, S1, S2>(calls: I) -> Self
    where
        I: IntoIterator<Item = (S1, S2, Value)>,
        S1: Into<String>,
        S2: Into<String>,
    {
        let tool_calls = calls
            .into_iter()
            .map(|(id, name, args)| {
                let text = match args {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                ToolCall::function(id, name, text)
            })
            .collect();
        Self {
            tool_calls,
            finish_reason: Some("tool_calls".to_owned()),
            ..Self::empty()
        }
    }

    /// A scripted failure: the provider returns this error for the request.
    pub fn error(error: ProviderError) -> Self {
        Self {
            error: Some(error),
            ..Self::empty()
        }
    }

    /// Adds text to a tool-call reply (or replaces the text).
    pub fn with_text(mut self, content: impl Into<String>) -> Self {
        self.content = Some(content.into());
        self
    }

    /// Sets usage (`total = prompt + completion`).
    pub fn usage(mut self, prompt_tokens: u64, completion_tokens: u64) -> Self {
        self.usage = Some(Usage::new(prompt_tokens, completion_tokens));
        self
    }

    /// Sets the finish reason.
    pub fn finish_reason(mut self, reason: impl Into<String>) -> Self {
        self.finish_reason = Some(reason.into());
        self
    }

    /// Sets the model name reported.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Checks the request before serving this response; an `Err(message)` fails the call
    /// with [`ProviderError::ScriptAssertion`].
    pub fn expect(
        mut self,
        check: impl Fn(&ProviderRequest) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.assertion = Some(Box::new(check));
        self
    }
}

#[derive(Debug, Default)]
struct ScriptState {
    responses: Vec<ScriptedResponse>,
    served: usize,
    requests: Vec<ProviderRequest>,
}

/// Serves [`ScriptedResponse`]s in order; `Send + Sync`, usable as `Arc<dyn Provider>`.
///
/// ```
/// use rath_provider::{Provider, ProviderRequest, ScriptedProvider, ScriptedResponse};
/// use rath_session::{Session, Stamper};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let p = ScriptedProvider::new(vec![ScriptedResponse::text("hi").usage(3, 1)]);
/// let s = Session::user_with("hello", Stamper::counter());
/// p.complete(&ProviderRequest::from_session(&s, vec![])).await.unwrap();
/// p.assert_complete().unwrap();
/// assert_eq!(p.requests().len(), 1);
/// # });
/// ```
#[derive(Debug)]
pub struct ScriptedProvider {
    name: String,
    state: Mutex<ScriptState>,
}

impl ScriptedProvider {
    /// A provider that serves `responses` in order.
    pub fn new(responses: Vec<ScriptedResponse>) -> Self {
        Self {
            name: "scripted".to_owned(),
            state: Mutex::new(ScriptState {
                responses,
                ..ScriptState::default()
            }),
        }
    }

    /// Renames the provider (as it appears in evidence).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Appends a response to the script.
    pub fn push(&self, response: ScriptedResponse) {
        self.lock().responses.push(response);
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<ProviderRequest> {
        self.lock().requests.clone()
    }

    /// Responses served so far.
    pub fn served(&self) -> usize {
        self.lock().served
    }

    /// Responses not yet served.
    pub fn remaining(&self) -> usize {
        let st = self.lock();
        st.responses.len().saturating_sub(st.served)
    }

    /// Fails when some scripted responses were never used.
    pub fn assert_complete(&self) -> Result<(), ProviderError> {
        let st = self.lock();
        if st.served < st.responses.len() {
            return Err(ProviderError::ScriptAssertion {
                index: st.served,
                message: format!(
                    "only {} of {} scripted responses were used",
                    st.served,
                    st.responses.len()
                ),
            });
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ScriptState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl Provider for ScriptedProvider {
    fn name(&self) -> &str {
        &self.name
    }

    async fn complete(&self, req: &ProviderRequest) -> Result<ProviderResponse, ProviderError> {
        // All work happens under one lock with no await, so the call is atomic and dropping
        // the future can never leave a response half-consumed.
        let mut st = self.lock();
        let index = st.served;
        st.requests.push(req.clone());
        let Some(entry) = st.responses.get_mut(index) else {
            return Err(ProviderError::ScriptExhausted { served: index });
        };
        if let Some(check) = &entry.assertion
            && let Err(message) = check(req)
        {
            return Err(ProviderError::ScriptAssertion { index, message });
        }
        let result = match entry.error.take() {
            Some(err) => Err(err),
            None => Ok(ProviderResponse {
                request_id: req.request_id.clone(),
                chunk: Chunk::assistant(
                    entry.content.clone(),
                    if entry.tool_calls.is_empty() {
                        None
                    } else {
                        Some(entry.tool_calls.clone())
                    },
                ),
                finish_reason: entry.finish_reason.clone(),
                usage: entry.usage,
                model: entry.model.clone().or_else(|| req.model.clone()),
                provider: self.name.clone(),
                detail: Default::default(),
            }),
        };
        st.served += 1;
        result
    }

    fn manifest(&self) -> ProviderManifest {
        let st = self.lock();
        let mut m = ProviderManifest::new(self.name.clone());
        m.parameters
            .insert("scripted_responses".to_owned(), json!(st.responses.len()));
        m
    }
}
