//! The OpenAI-compatible provider on `async-openai`.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::time::Instant;

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::middleware::HttpRequestFactory;
use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{Value, json};

use crate::wire::{Defaults, WireChunk, WireResponse, request_body};
use crate::{
    Attempt, AttemptMode, Provider, ProviderError, ProviderManifest, ProviderRequest,
    ProviderResponse, StreamAssembler, StreamEvent, StreamSink,
};

/// The default base URL when neither configuration nor `OPENAI_BASE_URL` names one.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// The default model when neither configuration nor `OPENAI_MODEL` names one.
pub const DEFAULT_MODEL: &str = "gpt-4o-mini";

/// Configuration of an [`OpenAiProvider`]. `Debug` never prints the key.
///
/// ```
/// use std::time::Duration;
/// use rath_provider::OpenAiConfig;
///
/// let cfg = OpenAiConfig::new("http://127.0.0.1:8099/v1", "smollm2")
///     .with_api_key("sk-test")
///     .with_timeout(Duration::from_secs(30))
///     .with_max_retries(2)
///     .with_token_budget(10_000);
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
    /// Retries after the first attempt on 429, 5xx, timeouts, cut connections and
    /// malformed answers.
    pub max_retries: u32,
    /// First backoff delay; doubles per retry, with jitter.
    pub backoff_base: Duration,
    /// Upper bound for one backoff delay (and for an honoured `Retry-After`).
    pub backoff_max: Duration,
    /// Total tokens this provider may spend; a request that could exceed it is not sent.
    pub token_budget: Option<u64>,
    /// Treat an answer without usage as malformed (retry, then [`ProviderError::InvalidResponse`]).
    pub require_usage: bool,
    /// Extra headers sent with every request (recorded redacted in the manifest).
    pub headers: BTreeMap<String, String>,
    /// Whether the server can stream an answer to a request that offers tools (default
    /// `true`). `false` (env `OPENAI_STREAM_TOOLS=false`) marks a server that cannot, such
    /// as llama-cpp-python with `chatml-function-calling` and `tool_choice: auto`: a
    /// streamed call offering tools is then sent non-streamed and its answer replayed as
    /// events (`stream_skipped` in the evidence).
    pub stream_tools: bool,
    /// The longest a call may take once it starts retrying, measured from the start of its
    /// first attempt (default 120 s; env `OPENAI_RETRY_MAX_ELAPSED_MS`): no retry starts
    /// whose backoff would end past it, and a retry's timeout is cut to what is left.
    pub retry_max_elapsed: Duration,
    /// Total time this provider may spend retrying over its lifetime — one run, as examples
    /// build one provider per run (default 600 s; env `OPENAI_RETRY_BUDGET_MS`, `none` for
    /// no limit): backoff waits plus the retried attempts. Once spent, failures are final.
    pub retry_budget: Option<Duration>,
}

/// `OPENAI_STREAM_TOOLS`: `false` marks a server that cannot stream tool calls.
pub const ENV_STREAM_TOOLS: &str = "OPENAI_STREAM_TOOLS";
/// `OPENAI_MAX_RETRIES`: retries after the first attempt.
pub const ENV_MAX_RETRIES: &str = "OPENAI_MAX_RETRIES";
/// `OPENAI_TIMEOUT_MS`: time allowed for one attempt.
pub const ENV_TIMEOUT_MS: &str = "OPENAI_TIMEOUT_MS";
/// `OPENAI_RETRY_MAX_ELAPSED_MS`: the longest one call may take once it retries.
pub const ENV_RETRY_MAX_ELAPSED_MS: &str = "OPENAI_RETRY_MAX_ELAPSED_MS";
/// `OPENAI_RETRY_BUDGET_MS`: the total retry time of a provider (`none`: unlimited).
pub const ENV_RETRY_BUDGET_MS: &str = "OPENAI_RETRY_BUDGET_MS";

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
            .field("max_retries", &self.max_retries)
            .field("token_budget", &self.token_budget)
            .field("headers", &headers)
            .field("stream_tools", &self.stream_tools)
            .field("retry_max_elapsed", &self.retry_max_elapsed)
            .field("retry_budget", &self.retry_budget)
            .finish()
    }
}

impl OpenAiConfig {
    /// A configuration for `base_url` and `model`: no key, 60 s per attempt, 3 retries with
    /// backoff from 250 ms (capped at 30 s), 120 s `retry_max_elapsed` per call, 600 s
    /// `retry_budget`, tool calls streamed.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key: None,
            model: model.into(),
            temperature: None,
            seed: None,
            max_tokens: None,
            timeout: Duration::from_secs(60),
            max_retries: 3,
            backoff_base: Duration::from_millis(250),
            backoff_max: Duration::from_secs(30),
            token_budget: None,
            require_usage: false,
            headers: BTreeMap::new(),
            stream_tools: true,
            retry_max_elapsed: Duration::from_secs(120),
            retry_budget: Some(Duration::from_secs(600)),
        }
    }

    /// From the process environment; see [`OpenAiConfig::from_lookup`].
    pub fn from_env() -> Result<Self, ProviderError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// From variables looked up with `var` (blank values count as unset):
    /// `OPENAI_BASE_URL` (default [`DEFAULT_BASE_URL`]), `OPENAI_API_KEY` (optional),
    /// `OPENAI_MODEL` (default [`DEFAULT_MODEL`]), and the optional transport settings
    /// `OPENAI_STREAM_TOOLS` (`true`/`false`), `OPENAI_MAX_RETRIES`, `OPENAI_TIMEOUT_MS`,
    /// `OPENAI_RETRY_MAX_ELAPSED_MS` and `OPENAI_RETRY_BUDGET_MS` (`none` for no limit).
    /// A value that does not parse is a [`ProviderError::Config`] naming the variable.
    ///
    /// ```
    /// use std::time::Duration;
    /// use rath_provider::OpenAiConfig;
    ///
    /// let cfg = OpenAiConfig::from_lookup(|k| match k {
    ///     "OPENAI_BASE_URL" => Some("http://127.0.0.1:8099/v1".into()),
    ///     "OPENAI_STREAM_TOOLS" => Some("false".into()),
    ///     "OPENAI_RETRY_MAX_ELAPSED_MS" => Some("5000".into()),
    ///     _ => None,
    /// })?;
    /// assert!(!cfg.stream_tools);
    /// assert_eq!(cfg.retry_max_elapsed, Duration::from_secs(5));
    /// assert!(OpenAiConfig::from_lookup(|k| (k == "OPENAI_STREAM_TOOLS").then(|| "maybe".into())).is_err());
    /// # Ok::<(), rath_provider::ProviderError>(())
    /// ```
    pub fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Self, ProviderError> {
        let var = |k: &str| var(k).filter(|v| !v.trim().is_empty());
        let mut cfg = Self::new(
            var("OPENAI_BASE_URL").unwrap_or_else(|| DEFAULT_BASE_URL.to_owned()),
            var("OPENAI_MODEL").unwrap_or_else(|| DEFAULT_MODEL.to_owned()),
        );
        cfg.api_key = var("OPENAI_API_KEY");
        if let Some(v) = var(ENV_STREAM_TOOLS) {
            cfg.stream_tools = parse_bool(ENV_STREAM_TOOLS, &v)?;
        }
        if let Some(v) = var(ENV_MAX_RETRIES) {
            cfg.max_retries = parse_u64(ENV_MAX_RETRIES, &v)?
                .try_into()
                .map_err(|_| ProviderError::Config(format!("{ENV_MAX_RETRIES} is too large")))?;
        }
        if let Some(v) = var(ENV_TIMEOUT_MS) {
            cfg.timeout = Duration::from_millis(parse_u64(ENV_TIMEOUT_MS, &v)?);
        }
        if let Some(v) = var(ENV_RETRY_MAX_ELAPSED_MS) {
            cfg.retry_max_elapsed = Duration::from_millis(parse_u64(ENV_RETRY_MAX_ELAPSED_MS, &v)?);
        }
        if let Some(v) = var(ENV_RETRY_BUDGET_MS) {
            cfg.retry_budget = match v.trim().to_ascii_lowercase().as_str() {
                "none" | "off" | "unlimited" => None,
                _ => Some(Duration::from_millis(parse_u64(ENV_RETRY_BUDGET_MS, &v)?)),
            };
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
    /// Sets the number of retries after the first attempt.
    pub fn with_max_retries(mut self, n: u32) -> Self {
        self.max_retries = n;
        self
    }
    /// Sets the backoff base and cap.
    pub fn with_backoff(mut self, base: Duration, max: Duration) -> Self {
        self.backoff_base = base;
        self.backoff_max = max;
        self
    }
    /// Sets the token budget.
    pub fn with_token_budget(mut self, tokens: u64) -> Self {
        self.token_budget = Some(tokens);
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
    /// Sets the longest a retrying call may take (from the start of its first attempt).
    pub fn with_retry_max_elapsed(mut self, d: Duration) -> Self {
        self.retry_max_elapsed = d;
        self
    }
    /// Sets the provider's total retry time (`None`: unlimited).
    pub fn with_retry_budget(mut self, d: Option<Duration>) -> Self {
        self.retry_budget = d;
        self
    }
    /// Adds a header sent with every request.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }
}

fn parse_bool(name: &str, v: &str) -> Result<bool, ProviderError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        other => Err(ProviderError::Config(format!(
            "{name} must be true or false, not {other:?}"
        ))),
    }
}

fn parse_u64(name: &str, v: &str) -> Result<u64, ProviderError> {
    v.trim().parse::<u64>().map_err(|_| {
        ProviderError::Config(format!("{name} must be a whole number, not {:?}", v.trim()))
    })
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
/// ask for usage with `stream_options.include_usage`; the provider stops before a
/// configured token budget could be exceeded.
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
/// **Retries.** HTTP 408, 409, 429, 5xx, timeouts, cut connections and malformed answers
/// are retried up to [`OpenAiConfig::max_retries`] times, with exponential backoff and
/// jitter, honouring `Retry-After` (capped at `backoff_max`), within
/// [`OpenAiConfig::retry_max_elapsed`] per call and [`OpenAiConfig::retry_budget`] per
/// provider. 400, 401, 403, 404, 422 and an empty stream are never retried. A failure
/// after several attempts is [`ProviderError::RetriesExhausted`] listing them.
///
/// ```no_run
/// use rath_provider::{OpenAiConfig, OpenAiProvider, Provider, ProviderRequest};
/// use rath_session::Session;
///
/// # async fn run() -> Result<(), rath_provider::ProviderError> {
/// let provider = OpenAiProvider::new(OpenAiConfig::from_env()?)?;
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
    used_tokens: Mutex<u64>,
    retry_spent: Mutex<Duration>,
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

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

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
            used_tokens: Mutex::new(0),
            retry_spent: Mutex::new(Duration::ZERO),
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

    /// Tokens spent so far (as reported by the server, or estimated when it reported none).
    pub fn used_tokens(&self) -> u64 {
        *self.used_tokens.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Time spent retrying so far (backoff waits plus retried attempts), counted against
    /// [`OpenAiConfig::retry_budget`].
    pub fn retry_time_spent(&self) -> Duration {
        *self.retry_spent.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn spend_retry_time(&self, d: Duration) {
        let mut spent = self.retry_spent.lock().unwrap_or_else(|p| p.into_inner());
        *spent = spent.saturating_add(d);
    }

    fn check_budget(&self, req: &ProviderRequest) -> Result<(), ProviderError> {
        let Some(budget) = self.config.token_budget else {
            return Ok(());
        };
        let used = self.used_tokens();
        let needed = req.estimated_prompt_tokens()
            + u64::from(req.max_tokens.or(self.config.max_tokens).unwrap_or(0));
        if used.saturating_add(needed) > budget {
            return Err(ProviderError::BudgetExceeded {
                budget,
                used,
                needed,
            });
        }
        Ok(())
    }

    fn charge(&self, req: &ProviderRequest, resp: &ProviderResponse) {
        let spent = match resp.usage {
            Some(u) => u.total_tokens,
            None => req.estimated_prompt_tokens(),
        };
        let mut used = self.used_tokens.lock().unwrap_or_else(|p| p.into_inner());
        *used = used.saturating_add(spent);
    }

    fn backoff(&self, retry: u32, hint: Option<Duration>) -> Duration {
        if let Some(h) = hint {
            return h.min(self.config.backoff_max);
        }
        let exp = self
            .config
            .backoff_base
            .saturating_mul(1u32 << retry.saturating_sub(1).min(16));
        let capped = exp.min(self.config.backoff_max);
        // "Equal jitter": half fixed, half random, so retries from many clients spread out.
        let jitter: f64 = rand::random::<f64>();
        capped.mul_f64(0.5 + 0.5 * jitter)
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

    /// One call: the attempts, the stream fallback, the retries and their evidence.
    /// `sink` is `Some` for [`Provider::stream`].
    async fn call(
        &self,
        req: &ProviderRequest,
        mut sink: Option<&mut StreamSink<'_>>,
    ) -> Result<ProviderResponse, ProviderError> {
        self.check_budget(req)?;
        let tools = !req.tools.is_empty();
        let mut detail: BTreeMap<String, Value> = BTreeMap::new();
        let mut mode = AttemptMode::Complete;
        if sink.is_some() {
            if tools && !self.config.stream_tools {
                detail.insert("stream_skipped".into(), json!(STREAM_SKIPPED_DISABLED));
            } else if tools && self.tools_stream_failed.load(Ordering::Relaxed) {
                detail.insert(
                    "stream_skipped".into(),
                    json!(STREAM_SKIPPED_FAILED_EARLIER),
                );
            } else {
                mode = AttemptMode::Stream;
            }
        }
        let started = Instant::now();
        // `None`: so far off that it cannot be represented (no limit in practice).
        let deadline = started.checked_add(self.config.retry_max_elapsed);
        let mut history: Vec<Attempt> = Vec::new();
        let mut retries = 0u32;
        let mut fallback: Option<String> = None;
        let mut timeout = self.config.timeout;
        let mut retrying = false;
        let mut fresh_next = false;
        loop {
            let n = u32::try_from(history.len()).unwrap_or(u32::MAX - 1) + 1;
            let t0 = Instant::now();
            let mut events = 0usize;
            // Only the attempt right after a failed stream needs a fresh connection.
            let fresh = std::mem::take(&mut fresh_next);
            let result = match (mode, sink.as_deref_mut()) {
                (AttemptMode::Stream, Some(s)) => {
                    self.attempt_stream(req, s, timeout, &mut events).await
                }
                _ => self.attempt_complete(req, timeout, fresh).await,
            };
            let took = t0.elapsed();
            if retrying {
                self.spend_retry_time(took);
            }
            let err = match result {
                Ok(mut resp) => {
                    history.push(Attempt::ok(n, mode, millis(took)));
                    if mode == AttemptMode::Complete
                        && let Some(s) = sink
                    {
                        for ev in StreamAssembler::events_for(&resp) {
                            s(ev);
                        }
                    }
                    if fallback.is_some() && tools {
                        self.tools_stream_failed.store(true, Ordering::Relaxed);
                    }
                    detail.insert("stream".into(), json!(mode == AttemptMode::Stream));
                    if let Some(reason) = fallback {
                        detail.insert("stream_fallback".into(), json!(reason));
                    }
                    if history.len() > 1 {
                        detail.insert(
                            "attempts".into(),
                            serde_json::to_value(&history).unwrap_or(Value::Null),
                        );
                    }
                    resp.detail = detail;
                    self.charge(req, &resp);
                    return Ok(resp);
                }
                Err(e) => self.secrets.scrub_error(e),
            };
            let mut record = Attempt::failed(n, mode, millis(took), &err);

            // A stream that cannot answer: one non-streamed fallback, at once.
            if mode == AttemptMode::Stream
                && fallback.is_none()
                && let Some(reason) = fallback_reason(&err)
            {
                record.fallback = true;
                history.push(record);
                if events > 0
                    && let Some(s) = sink.as_deref_mut()
                {
                    s(StreamEvent::Retry {
                        attempt: n + 1,
                        reason: format!("falling back to a non-streamed request: {err}"),
                    });
                }
                fallback = Some(reason);
                fresh_next = true;
                mode = AttemptMode::Complete;
                timeout = self.config.timeout;
                retrying = false;
                continue;
            }

            let stopped = if !err.is_retryable() {
                Some("not_retryable")
            } else if retries >= self.config.max_retries {
                Some("max_retries")
            } else {
                None
            };
            if let Some(stopped) = stopped {
                history.push(record);
                return Err(give_up(err, history, stopped));
            }
            let wait = self.backoff(retries + 1, err.retry_after());
            let left = deadline.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(Instant::now())
            });
            let budget_left = self
                .config
                .retry_budget
                .map(|b| b.saturating_sub(self.retry_time_spent()));
            if wait >= left {
                history.push(record);
                return Err(give_up(err, history, "retry_max_elapsed"));
            }
            if budget_left.is_some_and(|b| wait >= b) {
                history.push(record);
                return Err(give_up(err, history, "retry_budget"));
            }
            record.backoff_ms = Some(millis(wait));
            history.push(record);
            tokio::time::sleep(wait).await;
            self.spend_retry_time(wait);
            retries += 1;
            retrying = true;
            // The retry may use only what is left of both limits.
            timeout = self.config.timeout.min(left - wait);
            if let Some(b) = budget_left {
                timeout = timeout.min(b - wait);
            }
            if mode == AttemptMode::Stream
                && let Some(s) = sink.as_deref_mut()
            {
                s(StreamEvent::Retry {
                    attempt: n + 1,
                    reason: err.to_string(),
                });
            }
        }
    }
}

/// The error a call ends with: the fault itself after a single attempt that cannot be
/// retried, otherwise [`ProviderError::RetriesExhausted`] listing every attempt.
fn give_up(err: ProviderError, history: Vec<Attempt>, stopped: &str) -> ProviderError {
    if history.len() == 1 && stopped == "not_retryable" {
        return err;
    }
    ProviderError::RetriesExhausted {
        attempts: u32::try_from(history.len()).unwrap_or(u32::MAX),
        last: Box::new(err),
        history,
        stopped: stopped.to_owned(),
    }
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
        p.insert("max_retries".into(), json!(c.max_retries));
        p.insert("backoff_base_ms".into(), json!(millis(c.backoff_base)));
        p.insert("backoff_max_ms".into(), json!(millis(c.backoff_max)));
        p.insert(
            "retry_max_elapsed_ms".into(),
            json!(millis(c.retry_max_elapsed)),
        );
        p.insert("retry_budget_ms".into(), json!(c.retry_budget.map(millis)));
        p.insert("stream_tools".into(), json!(c.stream_tools));
        p.insert("token_budget".into(), json!(c.token_budget));
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

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = OpenAiProvider::new(
            OpenAiConfig::new("http://127.0.0.1:1/v1", "m")
                .with_backoff(Duration::from_millis(100), Duration::from_millis(350)),
        )
        .unwrap();
        let d1 = p.backoff(1, None);
        assert!(d1 >= Duration::from_millis(50) && d1 <= Duration::from_millis(100));
        let d3 = p.backoff(3, None);
        assert!(d3 >= Duration::from_millis(175) && d3 <= Duration::from_millis(350));
        assert_eq!(
            p.backoff(1, Some(Duration::from_secs(9))),
            Duration::from_millis(350)
        );
    }
}
