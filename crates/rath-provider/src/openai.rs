//! The OpenAI-compatible provider on `async-openai`.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use std::time::Instant;

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::middleware::HttpRequestFactory;
use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{Value, json};

use crate::env::{millis, non_blank, parse_bool, parse_u64};
use crate::wire::{Defaults, WireChunk, WireResponse, request_body};
use crate::{
    Attempt, AttemptMode, Provider, ProviderError, ProviderManifest, ProviderRequest,
    ProviderResponse, StreamAssembler, StreamEvent, StreamSink,
};

/// The default base URL when neither configuration nor `OPENAI_BASE_URL` names one.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// The default model when neither configuration nor `OPENAI_MODEL` names one.
pub const DEFAULT_MODEL: &str = "gpt-4o-mini";

/// Configuration of an [`OpenAiProvider`]: the wire only (server, model, defaults,
/// timeout, headers, streaming). Retries and budgets are layers
/// ([`crate::ProviderExt`]); [`crate::StackConfig`] builds the usual stack from the
/// environment. `Debug` never prints the key.
///
/// ```
/// use std::time::Duration;
/// use rath_provider::OpenAiConfig;
///
/// let cfg = OpenAiConfig::new("http://127.0.0.1:8099/v1", "smollm2")
///     .with_api_key("sk-test")
///     .with_timeout(Duration::from_secs(30));
/// assert!(!format!("{cfg:?}").contains("sk-test"));
/// ```
#[derive(Clone)]
pub struct OpenAiConfig {
    /// Base URL including `/v1` (e.g. `https://api.openai.com/v1`).
    pub base_url: String,
    /// API key; `None` sends no `Authorization` header (local servers).
    pub api_key: Option<String>,
    /// Model used when the request names none.
    pub model: String,
    /// Default temperature.
    pub temperature: Option<f32>,
    /// Default seed.
    pub seed: Option<i64>,
    /// Default completion token limit.
    pub max_tokens: Option<u32>,
    /// Time allowed for one attempt (for streams: the whole stream).
    pub timeout: Duration,
    /// Treat an answer without usage as malformed ([`ProviderError::InvalidResponse`],
    /// which the retry layer retries).
    pub require_usage: bool,
    /// Extra headers sent with every request (recorded redacted in the manifest).
    pub headers: BTreeMap<String, String>,
    /// Whether the server can stream an answer to a request that offers tools (default
    /// `true`). `false` (env `OPENAI_STREAM_TOOLS=false`) marks a server that cannot, such
    /// as llama-cpp-python with `chatml-function-calling` and `tool_choice: auto`: a
    /// streamed call offering tools is then sent non-streamed and its answer replayed as
    /// events (`stream_skipped` in the evidence).
    pub stream_tools: bool,
}

/// `OPENAI_STREAM_TOOLS`: `false` marks a server that cannot stream tool calls.
pub const ENV_STREAM_TOOLS: &str = "OPENAI_STREAM_TOOLS";
/// `OPENAI_TIMEOUT_MS`: time allowed for one attempt.
pub const ENV_TIMEOUT_MS: &str = "OPENAI_TIMEOUT_MS";

impl fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: BTreeMap<&str, &str> = self
            .headers
            .iter()
            .map(|(k, v)| {
                let v = if crate::is_secret_name(k) {
                    crate::REDACTED
                } else {
                    v.as_str()
                };
                (k.as_str(), v)
            })
            .collect();
        f.debug_struct("OpenAiConfig")
            .field("base_url_host", &host_of(&self.base_url))
            .field("api_key", &self.api_key.as_ref().map(|_| crate::REDACTED))
            .field("model", &self.model)
            .field("temperature", &self.temperature)
            .field("seed", &self.seed)
            .field("max_tokens", &self.max_tokens)
            .field("timeout", &self.timeout)
            .field("require_usage", &self.require_usage)
            .field("headers", &headers)
            .field("stream_tools", &self.stream_tools)
            .finish()
    }
}

impl OpenAiConfig {
    /// A configuration for `base_url` and `model`: no key, 60 s per attempt, tool calls
    /// streamed.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key: None,
            model: model.into(),
            temperature: None,
            seed: None,
            max_tokens: None,
            timeout: Duration::from_secs(60),
            require_usage: false,
            headers: BTreeMap::new(),
            stream_tools: true,
        }
    }

    /// From the process environment; see [`OpenAiConfig::from_lookup`].
    pub fn from_env() -> Result<Self, ProviderError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// From variables looked up with `var` (blank values count as unset):
    /// `OPENAI_BASE_URL` (default [`DEFAULT_BASE_URL`]), `OPENAI_API_KEY` (optional),
    /// `OPENAI_MODEL` (default [`DEFAULT_MODEL`]), and the optional wire settings
    /// `OPENAI_STREAM_TOOLS` (`true`/`false`) and `OPENAI_TIMEOUT_MS`. A value that does not
    /// parse is a [`ProviderError::Config`] naming the variable. (The retry and budget
    /// variables are read by [`crate::Retry::from_lookup`] and [`crate::StackConfig`].)
    ///
    /// ```
    /// use std::time::Duration;
    /// use rath_provider::OpenAiConfig;
    ///
    /// let cfg = OpenAiConfig::from_lookup(|k| match k {
    ///     "OPENAI_BASE_URL" => Some("http://127.0.0.1:8099/v1".into()),
    ///     "OPENAI_STREAM_TOOLS" => Some("false".into()),
    ///     "OPENAI_TIMEOUT_MS" => Some("5000".into()),
    ///     _ => None,
    /// })?;
    /// assert!(!cfg.stream_tools);
    /// assert_eq!(cfg.timeout, Duration::from_secs(5));
    /// assert!(OpenAiConfig::from_lookup(|k| (k == "OPENAI_STREAM_TOOLS").then(|| "maybe".into())).is_err());
    /// # Ok::<(), rath_provider::ProviderError>(())
    /// ```
    pub fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Self, ProviderError> {
        let var = |k: &str| non_blank(&var, k);
        let mut cfg = Self::new(
            var("OPENAI_BASE_URL").unwrap_or_else(|| DEFAULT_BASE_URL.to_owned()),
            var("OPENAI_MODEL").unwrap_or_else(|| DEFAULT_MODEL.to_owned()),
        );
        cfg.api_key = var("OPENAI_API_KEY");
        if let Some(v) = var(ENV_STREAM_TOOLS) {
            cfg.stream_tools = parse_bool(ENV_STREAM_TOOLS, &v)?;
        }
        if let Some(v) = var(ENV_TIMEOUT_MS) {
            cfg.timeout = Duration::from_millis(parse_u64(ENV_TIMEOUT_MS, &v)?);
        }
        Ok(cfg)
    }

    /// True when `OPENAI_BASE_URL` or `OPENAI_API_KEY` is set: examples use this to switch
    /// from their offline provider to a live one.
    pub fn env_is_live() -> bool {
        ["OPENAI_BASE_URL", "OPENAI_API_KEY"]
            .iter()
            .any(|k| std::env::var(k).is_ok_and(|v| !v.trim().is_empty()))
    }

    /// Sets the key.
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }
    /// Sets the default temperature.
    pub fn with_temperature(mut self, t: f32) -> Self {
        self.temperature = Some(t);
        self
    }
    /// Sets the default seed.
    pub fn with_seed(mut self, seed: i64) -> Self {
        self.seed = Some(seed);
        self
    }
    /// Sets the default completion token limit.
    pub fn with_max_tokens(mut self, n: u32) -> Self {
        self.max_tokens = Some(n);
        self
    }
    /// Sets the per-attempt timeout.
    pub fn with_timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }
    /// Requires usage in every answer.
    pub fn with_require_usage(mut self, on: bool) -> Self {
        self.require_usage = on;
        self
    }
    /// Marks whether the server can stream answers to requests that offer tools.
    pub fn with_stream_tools(mut self, on: bool) -> Self {
        self.stream_tools = on;
        self
    }
    /// Adds a header sent with every request.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }
}

/// `host[:port]` of a URL, without scheme, credentials, path or query.
pub(crate) fn host_of(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    (!host.is_empty()).then(|| host.to_owned())
}

/// A non-success HTTP answer, captured with its `Retry-After` before async-openai sees it.
#[derive(Debug)]
struct HttpFailure {
    status: u16,
    retry_after: Option<Duration>,
    body: String,
}

impl fmt::Display for HttpFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HTTP {}: {}", self.status, self.body)
    }
}

impl std::error::Error for HttpFailure {}

fn parse_retry_after(v: &str) -> Option<Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    v.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
}

/// Secret strings (the key, secret header values, a password in the base URL) that must not
/// reach an error message: servers and proxies sometimes echo what they were sent.
#[derive(Clone, Default)]
struct Secrets(Arc<Vec<String>>);

impl Secrets {
    fn of(config: &OpenAiConfig) -> Self {
        let mut v: Vec<String> = Vec::new();
        v.extend(config.api_key.clone());
        for (k, val) in &config.headers {
            if crate::is_secret_name(k) {
                v.push(val.clone());
                // `Bearer <token>`: the token alone may be echoed too.
                if let Some((_, token)) = val.split_once(' ') {
                    v.push(token.to_owned());
                }
            }
        }
        if let Some(rest) = config.base_url.split_once("://").map(|(_, r)| r)
            && let Some(authority) = rest.split(['/', '?', '#']).next()
            && let Some((userinfo, _)) = authority.rsplit_once('@')
        {
            v.push(userinfo.to_owned());
            if let Some((_, pw)) = userinfo.split_once(':') {
                v.push(pw.to_owned());
            }
        }
        v.retain(|s| s.trim().len() >= 4);
        // Longest first, so a token inside a longer secret is not half-replaced.
        v.sort_by_key(|s| std::cmp::Reverse(s.len()));
        v.dedup();
        Self(Arc::new(v))
    }

    fn scrub(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for secret in self.0.iter() {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), crate::REDACTED);
            }
        }
        out
    }

    fn scrub_error(&self, e: ProviderError) -> ProviderError {
        if self.0.is_empty() {
            return e;
        }
        match e {
            ProviderError::Http {
                status,
                message,
                retry_after,
            } => ProviderError::Http {
                status,
                message: self.scrub(&message),
                retry_after,
            },
            ProviderError::Connection(m) => ProviderError::Connection(self.scrub(&m)),
            ProviderError::InvalidResponse(m) => ProviderError::InvalidResponse(self.scrub(&m)),
            ProviderError::Config(m) => ProviderError::Config(self.scrub(&m)),
            other => other,
        }
    }
}

/// The HTTP layer under async-openai: plain reqwest, no built-in retries (ours classify and
/// back off), and non-success statuses turned into [`HttpFailure`] so `Retry-After` survives.
#[derive(Clone)]
struct Transport {
    client: reqwest::Client,
    secrets: Secrets,
}

type TransportFuture =
    Pin<Box<dyn Future<Output = Result<reqwest::Response, OpenAIError>> + Send + 'static>>;

impl tower::Service<HttpRequestFactory> for Transport {
    type Response = reqwest::Response;
    type Error = OpenAIError;
    type Future = TransportFuture;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, factory: HttpRequestFactory) -> Self::Future {
        let client = self.client.clone();
        let secrets = self.secrets.clone();
        Box::pin(async move {
            let request = factory.build().await?;
            let response = client.execute(request).await?;
            let status = response.status();
            if status.is_success() {
                return Ok(response);
            }
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_retry_after);
            let mut body = secrets.scrub(&response.text().await.unwrap_or_default());
            truncate_at_char(&mut body, 2000);
            Err(OpenAIError::Boxed(Box::new(HttpFailure {
                status: status.as_u16(),
                retry_after,
                body,
            })))
        })
    }
}

fn map_error(e: OpenAIError, timeout: Duration) -> ProviderError {
    match e {
        OpenAIError::Boxed(b) => match b.downcast::<HttpFailure>() {
            Ok(h) => ProviderError::Http {
                status: h.status,
                message: h.body,
                retry_after: h.retry_after,
            },
            Err(other) => ProviderError::Connection(other.to_string()),
        },
        OpenAIError::Reqwest(r) if r.is_timeout() => ProviderError::Timeout { after: timeout },
        OpenAIError::Reqwest(r) if r.is_decode() => ProviderError::InvalidResponse(r.to_string()),
        OpenAIError::Reqwest(r) => ProviderError::Connection(error_chain(&r)),
        OpenAIError::ApiError(api) => ProviderError::Http {
            status: api.status_code.as_u16(),
            message: api.api_error.to_string(),
            retry_after: None,
        },
        OpenAIError::JSONDeserialize(err, content) => {
            let mut content = content;
            truncate_at_char(&mut content, 300);
            ProviderError::InvalidResponse(format!("{err}; body starts: {content}"))
        }
        OpenAIError::StreamError(s) => ProviderError::Connection(format!("stream failed: {s}")),
        OpenAIError::InvalidArgument(m) => ProviderError::Config(m),
        other => ProviderError::Connection(other.to_string()),
    }
}

/// Cuts `s` to at most `max` bytes, on a character boundary (never panics).
fn truncate_at_char(s: &mut String, max: usize) {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    out
}

/// A provider for OpenAI and any compatible server (vLLM, llama.cpp, Ollama).
///
/// Built on `async-openai` (its `byot` chat calls, with our own lenient wire types) over a
/// rustls `reqwest` client, so HTTPS endpoints such as api.openai.com work. Streamed calls
/// ask for usage with `stream_options.include_usage`. This is the wire only: one call is
/// one request (or a stream and its one fallback); retries, a token budget, a rate limit or
/// a second provider are layers ([`crate::ProviderExt`]), and [`crate::from_env`] builds
/// the usual stack.
///
/// **Streams that cannot answer.** When a streamed request yields no event (llama-cpp-python
/// answers a streamed request offering tools with `tool_choice: auto` with HTTP 200 and an
/// empty stream), ends without a finish reason, or is refused with 400/422, the provider
/// falls back once to a non-streamed request and replays its answer as events; the
/// `model_call` evidence records `stream_fallback` (the reason) and the `attempts`. After
/// such a fallback for a request with tools, later tool-offering calls of this provider are
/// sent non-streamed (`stream_skipped: tools_stream_failed_earlier`);
/// [`OpenAiConfig::stream_tools`] `= false` does so from the start.
///
/// **Faults** come back typed: [`ProviderError::Http`] with the status and the server's
/// `Retry-After`, [`ProviderError::Timeout`], [`ProviderError::Connection`],
/// [`ProviderError::InvalidResponse`], so the retry layer classifies them. A stream
/// fallback that fails too is a [`ProviderError::RetriesExhausted`] listing both attempts.
///
/// ```no_run
/// use rath_provider::{OpenAiConfig, OpenAiProvider, Provider, ProviderExt, ProviderRequest, Retry};
/// use rath_session::Session;
///
/// # async fn run() -> Result<(), rath_provider::ProviderError> {
/// let provider = OpenAiProvider::new(OpenAiConfig::from_env()?)?
///     .with_retry(Retry::default())
///     .with_budget(100_000);
/// let s = Session::user("Say hi");
/// let req = ProviderRequest::from_session(&s, vec![]);
/// let resp = provider.complete(&req).await?;
/// let s = resp.apply(&s, &req, 0.0);
/// # let _ = s; Ok(()) }
/// ```
pub struct OpenAiProvider {
    config: OpenAiConfig,
    client: Client<OpenAIConfig>,
    /// The same, without connection reuse: for the request right after a failed stream.
    fallback_client: Client<OpenAIConfig>,
    defaults: Defaults,
    secrets: Secrets,
    tools_stream_failed: AtomicBool,
}

impl fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiProvider")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The name this provider reports.
pub const OPENAI_PROVIDER_NAME: &str = "openai-compatible";

/// `stream_skipped` when [`OpenAiConfig::stream_tools`] is false and tools are offered.
pub const STREAM_SKIPPED_DISABLED: &str = "stream_tools_disabled";
/// `stream_skipped` when an earlier streamed call with tools needed a fallback.
pub const STREAM_SKIPPED_FAILED_EARLIER: &str = "tools_stream_failed_earlier";

/// Why a failed streamed attempt gets a non-streamed fallback, if it does.
fn fallback_reason(e: &ProviderError) -> Option<String> {
    match e {
        ProviderError::StreamIncomplete { .. } => Some(e.kind().to_owned()),
        ProviderError::Http {
            status: status @ (400 | 422),
            ..
        } => Some(format!("http_{status}")),
        _ => None,
    }
}

impl OpenAiProvider {
    /// A provider for `config`. Fails with [`ProviderError::Config`] on a bad URL or header.
    pub fn new(config: OpenAiConfig) -> Result<Self, ProviderError> {
        if !(config.base_url.starts_with("http://") || config.base_url.starts_with("https://")) {
            return Err(ProviderError::Config(format!(
                "base URL must start with http:// or https:// (host: {})",
                host_of(&config.base_url).unwrap_or_default()
            )));
        }
        if config.model.trim().is_empty() {
            return Err(ProviderError::Config("model is empty".to_owned()));
        }
        let secrets = Secrets::of(&config);
        let mut oa = OpenAIConfig::new()
            .with_api_base(config.base_url.trim_end_matches('/'))
            .with_api_key(config.api_key.clone().unwrap_or_default())
            .with_org_id("")
            .with_project_id("");
        for (k, v) in &config.headers {
            let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                .map_err(|e| ProviderError::Config(format!("header name {k}: {e}")))?;
            oa = oa
                .with_header(name, v.as_str())
                .map_err(|e| ProviderError::Config(secrets.scrub(&format!("header {k}: {e}"))))?;
        }
        let connect = config.timeout.min(Duration::from_secs(30));
        let http = reqwest::Client::builder()
            .connect_timeout(connect)
            .build()
            .map_err(|e| ProviderError::Config(format!("HTTP client: {e}")))?;
        // A stream fallback goes out on a fresh connection: a server that gave up on the
        // stream (llama-cpp-python's ASGI app raising mid-response) closes the pooled
        // connection just after the empty stream, and a request sent on it at once fails.
        let fresh = reqwest::Client::builder()
            .connect_timeout(connect)
            .pool_max_idle_per_host(0)
            .build()
            .map_err(|e| ProviderError::Config(format!("HTTP client: {e}")))?;
        let client = Client::with_config(oa.clone()).with_http_service(Transport {
            client: http,
            secrets: secrets.clone(),
        });
        let fallback_client = Client::with_config(oa).with_http_service(Transport {
            client: fresh,
            secrets: secrets.clone(),
        });
        let defaults = Defaults {
            model: config.model.clone(),
            temperature: config.temperature,
            seed: config.seed,
            max_tokens: config.max_tokens,
        };
        Ok(Self {
            config,
            client,
            fallback_client,
            defaults,
            secrets,
            tools_stream_failed: AtomicBool::new(false),
        })
    }

    /// From the environment; see [`OpenAiConfig::from_lookup`].
    pub fn from_env() -> Result<Self, ProviderError> {
        Self::new(OpenAiConfig::from_env()?)
    }

    /// The configuration.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    async fn attempt_complete(
        &self,
        req: &ProviderRequest,
        timeout: Duration,
        fresh_connection: bool,
    ) -> Result<ProviderResponse, ProviderError> {
        let body = request_body(req, &self.defaults, false);
        let client = if fresh_connection {
            &self.fallback_client
        } else {
            &self.client
        };
        let chat = client.chat();
        let call = chat.create_byot::<_, Value>(body);
        let value = match tokio::time::timeout(timeout, call).await {
            Err(_) => return Err(ProviderError::Timeout { after: timeout }),
            Ok(r) => r.map_err(|e| map_error(e, timeout))?,
        };
        let wire: WireResponse = serde_json::from_value(value)
            .map_err(|e| ProviderError::InvalidResponse(format!("not a chat completion: {e}")))?;
        let parsed = wire
            .into_parsed(&req.request_id)
            .map_err(ProviderError::InvalidResponse)?;
        self.finish(
            req,
            parsed.chunk,
            parsed.finish_reason,
            parsed.usage,
            parsed.model,
        )
    }

    /// One streamed attempt. `events` counts what reached `sink`, so the caller knows
    /// whether a fallback must first tell the sink to discard them.
    async fn attempt_stream(
        &self,
        req: &ProviderRequest,
        sink: &mut StreamSink<'_>,
        timeout: Duration,
        events: &mut usize,
    ) -> Result<ProviderResponse, ProviderError> {
        let work = async {
            let body = request_body(req, &self.defaults, true);
            let mut stream = self
                .client
                .chat()
                .create_stream_byot::<_, WireChunk>(body)
                .await
                .map_err(|e| map_error(e, timeout))?;
            let mut asm = StreamAssembler::default();
            let mut model = None;
            while let Some(item) = stream.next().await {
                let chunk = match item {
                    Ok(c) => c,
                    // Cut after HTTP 200 but before anything arrived: the same dead end as
                    // an empty stream (llama-cpp-python may drop the connection instead).
                    Err(OpenAIError::StreamError(_)) if *events == 0 => {
                        return Err(ProviderError::StreamIncomplete { events: 0 });
                    }
                    Err(e) => return Err(map_error(e, timeout)),
                };
                if model.is_none() {
                    model = chunk.model.clone();
                }
                for ev in chunk.events() {
                    asm.push(&ev);
                    *events += 1;
                    sink(ev);
                }
            }
            Ok::<_, ProviderError>((asm, model))
        };
        let (asm, model) = match tokio::time::timeout(timeout, work).await {
            Err(_) => return Err(ProviderError::Timeout { after: timeout }),
            Ok(r) => r?,
        };
        if asm.finish_reason.is_none() {
            return Err(ProviderError::StreamIncomplete { events: *events });
        }
        let chunk = asm.chunk_for(&req.request_id);
        self.finish(req, chunk, asm.finish_reason.clone(), asm.usage, model)
    }

    fn finish(
        &self,
        req: &ProviderRequest,
        chunk: rath_session::Chunk,
        finish_reason: Option<String>,
        usage: Option<rath_session::Usage>,
        model: Option<String>,
    ) -> Result<ProviderResponse, ProviderError> {
        if self.config.require_usage && usage.is_none() {
            return Err(ProviderError::InvalidResponse(
                "the answer carries no usage".to_owned(),
            ));
        }
        Ok(ProviderResponse {
            request_id: req.request_id.clone(),
            chunk,
            finish_reason,
            usage,
            model: model.or_else(|| {
                Some(
                    req.model
                        .clone()
                        .unwrap_or_else(|| self.defaults.model.clone()),
                )
            }),
            provider: OPENAI_PROVIDER_NAME.to_owned(),
            detail: BTreeMap::new(),
        })
    }

    /// How a call asks first: a stream when the caller streams and the server can take
    /// this request streamed; `detail` says why not when it cannot.
    fn first_mode(
        &self,
        req: &ProviderRequest,
        streaming: bool,
        detail: &mut BTreeMap<String, Value>,
    ) -> AttemptMode {
        let tools = !req.tools.is_empty();
        let skipped = if !streaming {
            return AttemptMode::Complete;
        } else if tools && !self.config.stream_tools {
            STREAM_SKIPPED_DISABLED
        } else if tools && self.tools_stream_failed.load(Ordering::Relaxed) {
            STREAM_SKIPPED_FAILED_EARLIER
        } else {
            return AttemptMode::Stream;
        };
        detail.insert("stream_skipped".into(), json!(skipped));
        AttemptMode::Complete
    }

    /// One attempt in `mode` (a fallback on a fresh connection), its error scrubbed of
    /// secrets, and how long it took. `events` counts what reached `sink`.
    async fn attempt(
        &self,
        req: &ProviderRequest,
        mode: AttemptMode,
        sink: Option<&mut StreamSink<'_>>,
        fresh: bool,
        events: &mut usize,
    ) -> (Result<ProviderResponse, ProviderError>, Duration) {
        let t0 = Instant::now();
        let timeout = self.config.timeout;
        let result = match (mode, sink) {
            (AttemptMode::Stream, Some(s)) => self.attempt_stream(req, s, timeout, events).await,
            _ => self.attempt_complete(req, timeout, fresh).await,
        };
        (
            result.map_err(|e| self.secrets.scrub_error(e)),
            t0.elapsed(),
        )
    }

    /// One call: one request, or a stream and, when the stream cannot answer, one
    /// non-streamed fallback at once. `sink` is `Some` for [`Provider::stream`].
    async fn call(
        &self,
        req: &ProviderRequest,
        mut sink: Option<&mut StreamSink<'_>>,
    ) -> Result<ProviderResponse, ProviderError> {
        let mut detail = BTreeMap::new();
        let mode = self.first_mode(req, sink.is_some(), &mut detail);
        let mut events = 0usize;
        let (result, took) = self
            .attempt(req, mode, sink.as_deref_mut(), false, &mut events)
            .await;
        let err = match result {
            Ok(resp) => return Ok(answered(resp, mode, sink, detail, Vec::new())),
            Err(e) => e,
        };
        let reason = (mode == AttemptMode::Stream)
            .then(|| fallback_reason(&err))
            .flatten();
        let Some(reason) = reason else {
            return Err(err);
        };
        let mut first = Attempt::failed(1, mode, millis(took), &err);
        first.fallback = true;
        if events > 0
            && let Some(s) = sink.as_deref_mut()
        {
            s(StreamEvent::Retry {
                attempt: 2,
                reason: format!("falling back to a non-streamed request: {err}"),
            });
        }
        detail.insert("stream_fallback".into(), json!(reason));
        let (result, took) = self
            .attempt(req, AttemptMode::Complete, None, true, &mut events)
            .await;
        self.after_fallback(req, first, result, took, sink, detail)
    }

    /// The end of a call whose stream fell back: the answer with both attempts in its
    /// evidence, or [`ProviderError::RetriesExhausted`] listing them. A stream of a request
    /// with tools that failed so (unless the request itself was refused) marks this
    /// server as one that cannot stream tool calls, for later calls.
    fn after_fallback(
        &self,
        req: &ProviderRequest,
        first: Attempt,
        result: Result<ProviderResponse, ProviderError>,
        took: Duration,
        sink: Option<&mut StreamSink<'_>>,
        detail: BTreeMap<String, Value>,
    ) -> Result<ProviderResponse, ProviderError> {
        let refused = result.as_ref().is_err_and(|e| !e.is_retryable());
        if !req.tools.is_empty() && !refused {
            self.tools_stream_failed.store(true, Ordering::Relaxed);
        }
        match result {
            Ok(resp) => {
                let second = Attempt::ok(2, AttemptMode::Complete, millis(took));
                let history = vec![first, second];
                Ok(answered(resp, AttemptMode::Complete, sink, detail, history))
            }
            Err(e) => {
                let second = Attempt::failed(2, AttemptMode::Complete, millis(took), &e);
                let stopped = if refused {
                    "not_retryable"
                } else {
                    "max_retries"
                };
                Err(ProviderError::RetriesExhausted {
                    attempts: 2,
                    last: Box::new(e),
                    history: vec![first, second],
                    stopped: stopped.to_owned(),
                })
            }
        }
    }
}

/// The answer of a call: replayed to `sink` as events when it was fetched non-streamed,
/// with its evidence (`stream`, why a stream was skipped or replaced, and the attempts
/// when there were several).
fn answered(
    mut resp: ProviderResponse,
    mode: AttemptMode,
    sink: Option<&mut StreamSink<'_>>,
    mut detail: BTreeMap<String, Value>,
    history: Vec<Attempt>,
) -> ProviderResponse {
    if mode == AttemptMode::Complete
        && let Some(s) = sink
    {
        for ev in StreamAssembler::events_for(&resp) {
            s(ev);
        }
    }
    detail.insert("stream".into(), json!(mode == AttemptMode::Stream));
    if history.len() > 1 {
        detail.insert(
            "attempts".into(),
            serde_json::to_value(&history).unwrap_or(Value::Null),
        );
    }
    resp.detail = detail;
    resp
}

#[async_trait]
impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        OPENAI_PROVIDER_NAME
    }

    async fn complete(&self, req: &ProviderRequest) -> Result<ProviderResponse, ProviderError> {
        self.call(req, None).await
    }

    async fn stream(
        &self,
        req: &ProviderRequest,
        sink: &mut StreamSink<'_>,
    ) -> Result<ProviderResponse, ProviderError> {
        self.call(req, Some(sink)).await
    }

    fn manifest(&self) -> ProviderManifest {
        let c = &self.config;
        let mut m = ProviderManifest::new(OPENAI_PROVIDER_NAME);
        m.model = Some(c.model.clone());
        m.base_url_host = host_of(&c.base_url);
        let p = &mut m.parameters;
        p.insert("temperature".into(), json!(c.temperature));
        p.insert("seed".into(), json!(c.seed));
        p.insert("max_tokens".into(), json!(c.max_tokens));
        p.insert("timeout_ms".into(), json!(millis(c.timeout)));
        p.insert("stream_tools".into(), json!(c.stream_tools));
        p.insert("require_usage".into(), json!(c.require_usage));
        p.insert("stream_include_usage".into(), json!(true));
        p.insert("api_key_set".into(), json!(c.api_key.is_some()));
        for (k, v) in &c.headers {
            m.set_header(k, v);
        }
        m.library_versions
            .insert("async-openai".into(), "0.43".into());
        m.library_versions.insert("reqwest".into(), "0.13".into());
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_drop_credentials_and_paths() {
        assert_eq!(
            host_of("https://user:pw@api.openai.com/v1?x=1").as_deref(),
            Some("api.openai.com")
        );
        assert_eq!(
            host_of("http://127.0.0.1:8099/v1").as_deref(),
            Some("127.0.0.1:8099")
        );
    }

    #[test]
    fn retry_after_parses_seconds() {
        assert_eq!(parse_retry_after("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015"), None);
    }
}
