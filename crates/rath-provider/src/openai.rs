//! The OpenAI-compatible provider on `async-openai`.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::middleware::HttpRequestFactory;
use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{Value, json};

use crate::wire::{Defaults, WireChunk, WireResponse, request_body};
use crate::{
    Provider, ProviderError, ProviderManifest, ProviderRequest, ProviderResponse, StreamAssembler,
    StreamEvent, StreamSink,
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
}

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
            .finish()
    }
}

impl OpenAiConfig {
    /// A configuration for `base_url` and `model`, no key, 60 s timeout, 3 retries starting at
    /// 250 ms.
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
        }
    }

    /// From `OPENAI_BASE_URL` (default [`DEFAULT_BASE_URL`]), `OPENAI_API_KEY` (optional) and
    /// `OPENAI_MODEL` (default [`DEFAULT_MODEL`]).
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let mut cfg = Self::new(
            var("OPENAI_BASE_URL").unwrap_or_else(|| DEFAULT_BASE_URL.to_owned()),
            var("OPENAI_MODEL").unwrap_or_else(|| DEFAULT_MODEL.to_owned()),
        );
        cfg.api_key = var("OPENAI_API_KEY");
        cfg
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

/// The HTTP layer under async-openai: plain reqwest, no built-in retries (ours classify and
/// back off), and non-success statuses turned into [`HttpFailure`] so `Retry-After` survives.
#[derive(Clone)]
struct Transport {
    client: reqwest::Client,
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
            let mut body = response.text().await.unwrap_or_default();
            body.truncate(2000);
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
            content.truncate(300);
            ProviderError::InvalidResponse(format!("{err}; body starts: {content}"))
        }
        OpenAIError::StreamError(s) => ProviderError::Connection(format!("stream failed: {s}")),
        OpenAIError::InvalidArgument(m) => ProviderError::Config(m),
        other => ProviderError::Connection(other.to_string()),
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
/// rustls `reqwest` client, so HTTPS endpoints such as api.openai.com work. It retries 429,
/// 5xx, timeouts, cut connections and malformed answers with exponential backoff and jitter,
/// honouring `Retry-After`; it stops before a configured token budget could be exceeded; and
/// streamed calls ask for usage with `stream_options.include_usage`.
///
/// ```no_run
/// use rath_provider::{OpenAiConfig, OpenAiProvider, Provider, ProviderRequest};
/// use rath_session::Session;
///
/// # async fn run() -> Result<(), rath_provider::ProviderError> {
/// let provider = OpenAiProvider::new(OpenAiConfig::from_env())?;
/// let s = Session::user("Say hi");
/// let req = ProviderRequest::from_session(&s, vec![]);
/// let resp = provider.complete(&req).await?;
/// let s = resp.apply(&s, &req, 0.0);
/// # let _ = s; Ok(()) }
/// ```
pub struct OpenAiProvider {
    config: OpenAiConfig,
    client: Client<OpenAIConfig>,
    defaults: Defaults,
    used_tokens: Mutex<u64>,
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
                .map_err(|e| ProviderError::Config(format!("header {k}: {e}")))?;
        }
        let http = reqwest::Client::builder()
            .connect_timeout(config.timeout.min(Duration::from_secs(30)))
            .build()
            .map_err(|e| ProviderError::Config(format!("HTTP client: {e}")))?;
        let client = Client::with_config(oa).with_http_service(Transport { client: http });
        let defaults = Defaults {
            model: config.model.clone(),
            temperature: config.temperature,
            seed: config.seed,
            max_tokens: config.max_tokens,
        };
        Ok(Self {
            config,
            client,
            defaults,
            used_tokens: Mutex::new(0),
        })
    }

    /// From the environment; see [`OpenAiConfig::from_env`].
    pub fn from_env() -> Result<Self, ProviderError> {
        Self::new(OpenAiConfig::from_env())
    }

    /// The configuration.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    /// Tokens spent so far (as reported by the server, or estimated when it reported none).
    pub fn used_tokens(&self) -> u64 {
        *self.used_tokens.lock().unwrap_or_else(|p| p.into_inner())
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
    ) -> Result<ProviderResponse, ProviderError> {
        let body = request_body(req, &self.defaults, false);
        let chat = self.client.chat();
        let call = chat.create_byot::<_, Value>(body);
        let value = match tokio::time::timeout(self.config.timeout, call).await {
            Err(_) => {
                return Err(ProviderError::Timeout {
                    after: self.config.timeout,
                });
            }
            Ok(r) => r.map_err(|e| map_error(e, self.config.timeout))?,
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

    async fn attempt_stream(
        &self,
        req: &ProviderRequest,
        sink: &mut StreamSink<'_>,
    ) -> Result<ProviderResponse, ProviderError> {
        let timeout = self.config.timeout;
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
                let chunk = item.map_err(|e| map_error(e, timeout))?;
                if model.is_none() {
                    model = chunk.model.clone();
                }
                for ev in chunk.events() {
                    asm.push(&ev);
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
            return Err(ProviderError::Connection(
                "stream ended before a finish reason arrived".to_owned(),
            ));
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
        })
    }
}

#[async_trait]
impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        OPENAI_PROVIDER_NAME
    }

    async fn complete(&self, req: &ProviderRequest) -> Result<ProviderResponse, ProviderError> {
        self.check_budget(req)?;
        let mut attempt = 1u32;
        loop {
            match self.attempt_complete(req).await {
                Ok(resp) => {
                    self.charge(req, &resp);
                    return Ok(resp);
                }
                Err(e) if e.is_retryable() && attempt <= self.config.max_retries => {
                    tokio::time::sleep(self.backoff(attempt, e.retry_after())).await;
                    attempt += 1;
                }
                Err(e) if e.is_retryable() => {
                    return Err(ProviderError::RetriesExhausted {
                        attempts: attempt,
                        last: Box::new(e),
                    });
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn stream(
        &self,
        req: &ProviderRequest,
        sink: &mut StreamSink<'_>,
    ) -> Result<ProviderResponse, ProviderError> {
        self.check_budget(req)?;
        let mut attempt = 1u32;
        loop {
            match self.attempt_stream(req, sink).await {
                Ok(resp) => {
                    self.charge(req, &resp);
                    return Ok(resp);
                }
                Err(e) if e.is_retryable() && attempt <= self.config.max_retries => {
                    tokio::time::sleep(self.backoff(attempt, e.retry_after())).await;
                    attempt += 1;
                    sink(StreamEvent::Retry {
                        attempt,
                        reason: e.to_string(),
                    });
                }
                Err(e) if e.is_retryable() => {
                    return Err(ProviderError::RetriesExhausted {
                        attempts: attempt,
                        last: Box::new(e),
                    });
                }
                Err(e) => return Err(e),
            }
        }
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
        p.insert("timeout_ms".into(), json!(c.timeout.as_millis() as u64));
        p.insert("max_retries".into(), json!(c.max_retries));
        p.insert(
            "backoff_base_ms".into(),
            json!(c.backoff_base.as_millis() as u64),
        );
        p.insert(
            "backoff_max_ms".into(),
            json!(c.backoff_max.as_millis() as u64),
        );
        p.insert("token_budget".into(), json!(c.token_budget));
        p.insert("require_usage".into(), json!(c.require_usage));
        p.insert("stream_include_usage".into(), json!(true));
        p.insert("api_key_set".into(), json!(c.api_key.is_some()));
        for (k, v) in &c.headers {
            m.set_header(k, v);
        }
        m.library_versions
            .insert("async-openai".into(), "0.43".into());
        m.library_versions.insert("reqwest".into(), "0.12".into());
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
