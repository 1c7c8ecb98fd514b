//! [`AnthropicProvider`]: the Messages API over HTTP.

use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use rath_provider::{
    Provider, ProviderError, ProviderManifest, ProviderRequest, ProviderResponse, StreamSink,
};
use rath_session::Chunk;
use serde_json::{Value, json};

use crate::AnthropicError;
use crate::stream::{EventFolder, SseSplitter};
use crate::wire::{Reply, finish_reason, request_body};

/// The provider name in evidence and manifests.
pub const ANTHROPIC_PROVIDER_NAME: &str = "anthropic";
/// The API's address when `ANTHROPIC_BASE_URL` is not set.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// The `anthropic-version` header sent.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// `max_tokens` when neither the request nor the config sets it (the API requires one).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// How to reach the API. `Debug` never prints the key.
#[derive(Clone)]
pub struct AnthropicConfig {
    /// Base URL without `/v1` (default [`DEFAULT_BASE_URL`]).
    pub base_url: String,
    /// The API key, sent as `x-api-key` and nowhere else.
    pub api_key: String,
    /// The model requests use unless they name one.
    pub model: String,
    /// `max_tokens` unless a request sets it.
    pub max_tokens: u32,
    /// Per-request timeout.
    pub timeout: Duration,
}

impl std::fmt::Debug for AnthropicConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &rath_provider::REDACTED)
            .field("model", &self.model)
            .field("max_tokens", &self.max_tokens)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl AnthropicConfig {
    /// A config for `base_url` with `api_key` and `model`.
    pub fn new(
        base_url: impl Into<String>,
        api_key: impl Into<String>,
        model: impl Into<String>,
    ) -> Self {
        Self {
            base_url: base_url.into(),
            api_key: api_key.into(),
            model: model.into(),
            max_tokens: DEFAULT_MAX_TOKENS,
            timeout: Duration::from_secs(600),
        }
    }

    /// From `ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL` and `ANTHROPIC_MODEL`.
    pub fn from_env() -> Result<Self, AnthropicError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// From variables looked up with `var` (blank values count as unset): the key
    /// `ANTHROPIC_API_KEY` and the model `ANTHROPIC_MODEL` (both required), the base URL
    /// `ANTHROPIC_BASE_URL` (default [`DEFAULT_BASE_URL`]).
    ///
    /// ```
    /// use rath_provider_anthropic::{AnthropicConfig, AnthropicError};
    ///
    /// let cfg = AnthropicConfig::from_lookup(|k| match k {
    ///     "ANTHROPIC_API_KEY" => Some("sk-ant-x".into()),
    ///     "ANTHROPIC_MODEL" => Some("claude-test".into()),
    ///     _ => None,
    /// })?;
    /// assert_eq!(cfg.base_url, "https://api.anthropic.com");
    /// let no_model = AnthropicConfig::from_lookup(|k| (k == "ANTHROPIC_API_KEY").then(|| "k".into()));
    /// assert!(matches!(no_model, Err(AnthropicError::MissingModel)));
    /// # Ok::<(), AnthropicError>(())
    /// ```
    pub fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Self, AnthropicError> {
        let var = |k: &str| var(k).filter(|v| !v.trim().is_empty());
        let api_key = var("ANTHROPIC_API_KEY").ok_or(AnthropicError::MissingKey)?;
        let model = var("ANTHROPIC_MODEL").ok_or(AnthropicError::MissingModel)?;
        let base = var("ANTHROPIC_BASE_URL").unwrap_or_else(|| DEFAULT_BASE_URL.to_owned());
        Ok(Self::new(base, api_key, model))
    }

    /// Sets the default `max_tokens`.
    pub fn max_tokens(mut self, n: u32) -> Self {
        self.max_tokens = n;
        self
    }

    /// Sets the per-request timeout.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }
}

/// Anthropic's Messages API as a [`Provider`].
pub struct AnthropicProvider {
    config: AnthropicConfig,
    url: String,
    client: reqwest::Client,
}

impl std::fmt::Debug for AnthropicProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicProvider")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl AnthropicProvider {
    /// A provider for `config`: the URL and key are checked here, not at the first call.
    pub fn new(config: AnthropicConfig) -> Result<Self, AnthropicError> {
        if config.model.is_empty() {
            return Err(AnthropicError::MissingModel);
        }
        let base = config.base_url.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(AnthropicError::InvalidBaseUrl {
                url: config.base_url.clone(),
                reason: "it must start with http:// or https://".to_owned(),
            });
        }
        let mut key = reqwest::header::HeaderValue::from_str(&config.api_key)
            .map_err(|_| AnthropicError::InvalidKey)?;
        key.set_sensitive(true);
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("x-api-key", key);
        headers.insert(
            "anthropic-version",
            reqwest::header::HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        let client = reqwest::Client::builder()
            .default_headers(headers)
            .timeout(config.timeout)
            .build()
            .map_err(|e| AnthropicError::Client(e.to_string()))?;
        let url = if base.ends_with("/v1") {
            format!("{base}/messages")
        } else {
            format!("{base}/v1/messages")
        };
        Ok(Self {
            config,
            url,
            client,
        })
    }

    /// From the environment ([`AnthropicConfig::from_env`]).
    pub fn from_env() -> Result<Self, AnthropicError> {
        Self::new(AnthropicConfig::from_env()?)
    }

    /// The configuration (its `Debug` hides the key).
    pub fn config(&self) -> &AnthropicConfig {
        &self.config
    }

    fn body(&self, req: &ProviderRequest, stream: bool) -> Value {
        request_body(req, &self.config.model, self.config.max_tokens, stream)
    }

    async fn send(&self, body: &Value) -> Result<reqwest::Response, ProviderError> {
        let resp = self
            .client
            .post(&self.url)
            .json(body)
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(Duration::from_secs_f64);
        let text = resp.text().await.unwrap_or_default();
        Err(ProviderError::Http {
            status,
            message: self.scrub(&error_message(&text)),
            retry_after,
        })
    }

    fn transport(&self, e: reqwest::Error) -> ProviderError {
        if e.is_timeout() {
            ProviderError::Timeout {
                after: self.config.timeout,
            }
        } else {
            ProviderError::Connection(self.scrub(&e.without_url().to_string()))
        }
    }

    /// Removes the key from text a server or proxy echoed back.
    fn scrub(&self, text: &str) -> String {
        if self.config.api_key.is_empty() {
            return text.to_owned();
        }
        text.replace(&self.config.api_key, rath_provider::REDACTED)
    }

    fn respond(&self, req: &ProviderRequest, reply: Reply, stream: bool) -> ProviderResponse {
        let mut detail = reply.detail();
        detail.insert("stream".to_owned(), json!(stream));
        let calls = (!reply.calls.is_empty()).then(|| reply.calls.clone());
        ProviderResponse {
            request_id: req.request_id.clone(),
            chunk: Chunk::assistant(reply.text.clone(), calls),
            finish_reason: reply.stop_reason.as_deref().map(finish_reason),
            usage: reply.usage.map(|u| u.to_usage()),
            model: reply.model.clone(),
            provider: ANTHROPIC_PROVIDER_NAME.to_owned(),
            detail,
        }
    }
}

/// `"<type>: <message>"` from the API's error body, or the body's start.
fn error_message(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let field = |p: &str| {
        parsed
            .as_ref()
            .and_then(|v| v.pointer(p))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    match (field("/error/type"), field("/error/message")) {
        (Some(t), Some(m)) => format!("{t}: {m}"),
        (Some(t), None) => t,
        (None, Some(m)) => m,
        (None, None) => body.chars().take(500).collect(),
    }
}

#[async_trait]
impl Provider for AnthropicProvider {
    fn name(&self) -> &str {
        ANTHROPIC_PROVIDER_NAME
    }

    async fn complete(&self, req: &ProviderRequest) -> Result<ProviderResponse, ProviderError> {
        let resp = self.send(&self.body(req, false)).await?;
        let bytes = resp.bytes().await.map_err(|e| self.transport(e))?;
        let body: Value = serde_json::from_slice(&bytes)
            .map_err(|e| ProviderError::InvalidResponse(format!("reply is not JSON: {e}")))?;
        let reply = Reply::from_message(&body).ok_or_else(|| {
            ProviderError::InvalidResponse("reply is not a well-formed message".to_owned())
        })?;
        Ok(self.respond(req, reply, false))
    }

    async fn stream(
        &self,
        req: &ProviderRequest,
        sink: &mut StreamSink<'_>,
    ) -> Result<ProviderResponse, ProviderError> {
        let resp = self.send(&self.body(req, true)).await?;
        let mut bytes = resp.bytes_stream();
        let mut split = SseSplitter::default();
        let mut fold = EventFolder::default();
        while let Some(piece) = bytes.next().await {
            let piece = piece.map_err(|e| self.transport(e))?;
            for data in split.push(&piece) {
                let event: Value = serde_json::from_str(&data).map_err(|e| {
                    ProviderError::InvalidResponse(format!("stream event is not JSON: {e}"))
                })?;
                fold.push(&event, sink)?;
            }
        }
        let reply = fold.finish()?;
        Ok(self.respond(req, reply, true))
    }

    fn manifest(&self) -> ProviderManifest {
        let mut m = ProviderManifest::new(ANTHROPIC_PROVIDER_NAME);
        m.model = Some(self.config.model.clone());
        m.base_url_host = host_of(&self.config.base_url);
        m.parameters
            .insert("max_tokens".to_owned(), json!(self.config.max_tokens));
        m.parameters.insert(
            "timeout_ms".to_owned(),
            json!(self.config.timeout.as_millis() as u64),
        );
        m.set_header("x-api-key", &self.config.api_key);
        m.set_header("anthropic-version", ANTHROPIC_VERSION);
        m.library_versions.insert(
            "rath-provider-anthropic".to_owned(),
            env!("CARGO_PKG_VERSION").to_owned(),
        );
        m
    }
}

/// `host[:port]` of a URL, without credentials or path.
fn host_of(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split('/').next()?;
    let host = authority.rsplit('@').next()?;
    (!host.is_empty()).then(|| host.to_owned())
}
