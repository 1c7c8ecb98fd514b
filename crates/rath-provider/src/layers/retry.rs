//! The retry layer: any provider, retried with exponential backoff and jitter.
//!
//! ```
//! use std::time::Duration;
//! use rath_provider::{
//!     Provider, ProviderError, ProviderExt, ProviderRequest, Retry, ScriptedProvider,
//!     ScriptedResponse,
//! };
//! use rath_session::{Session, Stamper};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let flaky = ScriptedProvider::new(vec![
//!     ScriptedResponse::error(ProviderError::http(503, "busy", None)),
//!     ScriptedResponse::text("hello").usage(3, 1),
//! ]);
//! let p = flaky.with_retry(
//!     Retry::default().with_backoff(Duration::from_millis(1), Duration::from_millis(5)),
//! );
//! let s = Session::user_with("hi", Stamper::counter());
//! let resp = p.complete(&ProviderRequest::from_session(&s, vec![])).await?;
//! assert_eq!(resp.text(), Some("hello"));
//! assert_eq!(resp.detail["attempts"].as_array().unwrap().len(), 2);
//! # Ok::<(), ProviderError>(())
//! # }).unwrap();
//! ```
//!
//! What is retried is [`ProviderError::is_retryable`]: HTTP 408, 409, 429 and 5xx, timeouts,
//! cut connections and malformed answers; 400, 401, 403, 404 and 422 are not. A server's
//! `Retry-After` replaces the computed backoff (capped at [`Retry::backoff_max`]).

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::env::{millis, non_blank, parse_limit_ms, parse_u64};
use crate::{
    Attempt, AttemptMode, LayerManifest, Provider, ProviderError, ProviderManifest,
    ProviderRequest, ProviderResponse, StreamEvent, StreamSink,
};

/// `OPENAI_MAX_RETRIES`: retries after the first attempt.
pub const ENV_MAX_RETRIES: &str = "OPENAI_MAX_RETRIES";
/// `OPENAI_RETRY_MAX_ELAPSED_MS`: the longest one call may take once it retries.
pub const ENV_RETRY_MAX_ELAPSED_MS: &str = "OPENAI_RETRY_MAX_ELAPSED_MS";
/// `OPENAI_RETRY_BUDGET_MS`: the total retry time of a provider (`none`: unlimited).
pub const ENV_RETRY_BUDGET_MS: &str = "OPENAI_RETRY_BUDGET_MS";

/// Where the random part of a backoff comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jitter {
    /// Seeded from the operating system once per layer (the default).
    Random,
    /// A fixed seed: the same seed gives the same sequence of waits.
    Seeded(u64),
    /// No jitter: every wait is the full exponential backoff.
    Off,
}

/// Settings of the retry layer ([`Retrying`]).
///
/// ```
/// use std::time::Duration;
/// use rath_provider::{Jitter, Retry};
///
/// let r = Retry::default().with_max_retries(2).with_jitter(Jitter::Seeded(7));
/// assert_eq!(r.max_retries, 2);
/// // Equal jitter: the first retry waits between half and all of `backoff_base`.
/// assert_eq!(r.backoff(1, None, 0.0), Duration::from_millis(125));
/// assert_eq!(r.backoff(1, None, 1.0), Duration::from_millis(250));
/// // A server's Retry-After wins, capped at backoff_max.
/// assert_eq!(r.backoff(1, Some(Duration::from_secs(99)), 0.5), Duration::from_secs(30));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Retry {
    /// Retries after the first attempt (default 3; env `OPENAI_MAX_RETRIES`).
    pub max_retries: u32,
    /// First backoff delay (default 250 ms); doubles per retry, with jitter.
    pub backoff_base: Duration,
    /// Upper bound for one backoff delay and for an honoured `Retry-After` (default 30 s).
    pub backoff_max: Duration,
    /// The longest a call may take once it starts retrying, measured from the start of its
    /// first attempt (default 120 s; env `OPENAI_RETRY_MAX_ELAPSED_MS`): no retry starts
    /// whose backoff would end past it, and a retry is cut off at what is left.
    pub max_elapsed: Duration,
    /// Total time the layer may spend retrying over its lifetime — one run, as examples
    /// build one provider per run (default 600 s; env `OPENAI_RETRY_BUDGET_MS`, `none` for
    /// no limit): backoff waits plus the retried attempts. Once spent, failures are final.
    pub budget: Option<Duration>,
    /// The random part of each wait.
    pub jitter: Jitter,
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            max_retries: 3,
            backoff_base: Duration::from_millis(250),
            backoff_max: Duration::from_secs(30),
            max_elapsed: Duration::from_secs(120),
            budget: Some(Duration::from_secs(600)),
            jitter: Jitter::Random,
        }
    }
}

impl Retry {
    /// The defaults, overridden by `OPENAI_MAX_RETRIES`, `OPENAI_RETRY_MAX_ELAPSED_MS` and
    /// `OPENAI_RETRY_BUDGET_MS` (`none` for no limit) as looked up with `var` (blank values
    /// count as unset). A value that does not parse is a [`ProviderError::Config`] naming
    /// the variable.
    ///
    /// ```
    /// use std::time::Duration;
    /// use rath_provider::Retry;
    ///
    /// let r = Retry::from_lookup(|k| match k {
    ///     "OPENAI_MAX_RETRIES" => Some("1".into()),
    ///     "OPENAI_RETRY_BUDGET_MS" => Some("none".into()),
    ///     _ => None,
    /// })?;
    /// assert_eq!((r.max_retries, r.budget), (1, None));
    /// let bad = Retry::from_lookup(|k| (k == "OPENAI_RETRY_MAX_ELAPSED_MS").then(|| "soon".into()));
    /// assert!(bad.unwrap_err().to_string().contains("OPENAI_RETRY_MAX_ELAPSED_MS"));
    /// # Ok::<(), rath_provider::ProviderError>(())
    /// ```
    pub fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Self, ProviderError> {
        let mut r = Self::default();
        if let Some(v) = non_blank(&var, ENV_MAX_RETRIES) {
            r.max_retries = parse_u64(ENV_MAX_RETRIES, &v)?
                .try_into()
                .map_err(|_| ProviderError::Config(format!("{ENV_MAX_RETRIES} is too large")))?;
        }
        if let Some(v) = non_blank(&var, ENV_RETRY_MAX_ELAPSED_MS) {
            r.max_elapsed = Duration::from_millis(parse_u64(ENV_RETRY_MAX_ELAPSED_MS, &v)?);
        }
        if let Some(v) = non_blank(&var, ENV_RETRY_BUDGET_MS) {
            r.budget = parse_limit_ms(ENV_RETRY_BUDGET_MS, &v)?;
        }
        Ok(r)
    }

    /// From the process environment; see [`Retry::from_lookup`].
    pub fn from_env() -> Result<Self, ProviderError> {
        Self::from_lookup(|k| std::env::var(k).ok())
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
    /// Sets the longest a retrying call may take (from the start of its first attempt).
    pub fn with_max_elapsed(mut self, d: Duration) -> Self {
        self.max_elapsed = d;
        self
    }
    /// Sets the layer's total retry time (`None`: unlimited).
    pub fn with_budget(mut self, d: Option<Duration>) -> Self {
        self.budget = d;
        self
    }
    /// Sets where the random part of each wait comes from.
    pub fn with_jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// The wait before retry number `retry` (1 for the first): the server's `hint`
    /// (`Retry-After`) if any, else `backoff_base · 2^(retry-1)`, both capped at
    /// `backoff_max`; the computed backoff keeps half and scales the other half by `unit`
    /// ("equal jitter", `unit` in `[0, 1]`, clamped), so waits lie in `[cap/2, cap]`.
    pub fn backoff(&self, retry: u32, hint: Option<Duration>, unit: f64) -> Duration {
        if let Some(h) = hint {
            return h.min(self.backoff_max);
        }
        let exp = self
            .backoff_base
            .saturating_mul(1u32 << retry.saturating_sub(1).min(16));
        let capped = exp.min(self.backoff_max);
        let unit = if unit.is_finite() {
            unit.clamp(0.0, 1.0)
        } else {
            1.0
        };
        capped.mul_f64(0.5 + 0.5 * unit)
    }

    fn layer_manifest(&self) -> LayerManifest {
        let jitter = match self.jitter {
            Jitter::Random => json!("random"),
            Jitter::Seeded(seed) => json!({ "seed": seed }),
            Jitter::Off => json!("off"),
        };
        LayerManifest::new("retry")
            .with("max_retries", json!(self.max_retries))
            .with("backoff_base_ms", json!(millis(self.backoff_base)))
            .with("backoff_max_ms", json!(millis(self.backoff_max)))
            .with("retry_max_elapsed_ms", json!(millis(self.max_elapsed)))
            .with("retry_budget_ms", json!(self.budget.map(millis)))
            .with("jitter", jitter)
    }
}

/// A provider whose calls are retried on faults that retrying can fix; see the module
/// docs. Built with [`crate::ProviderExt::with_retry`].
///
/// Every attempt of a call that needed more than one is recorded ([`Attempt`]) in the
/// response's `detail.attempts`, or in [`ProviderError::RetriesExhausted`] (which also
/// says why it stopped: `max_retries`, `retry_max_elapsed`, `retry_budget`,
/// `not_retryable`). Attempts the provider below made itself (an OpenAI stream fallback)
/// are listed in order with the layer's own. A streamed call tells its sink to discard
/// what arrived with a [`StreamEvent::Retry`] before each retry. Cancellation-safe: a
/// dropped call holds nothing.
#[derive(Debug)]
pub struct Retrying<P> {
    inner: P,
    retry: Retry,
    rng: Mutex<Option<StdRng>>,
    spent: Mutex<Duration>,
}

impl<P: Provider> Retrying<P> {
    /// `inner`, retried as `retry` says.
    pub fn new(inner: P, retry: Retry) -> Self {
        let rng = match retry.jitter {
            Jitter::Random => Some(StdRng::seed_from_u64(rand::random())),
            Jitter::Seeded(seed) => Some(StdRng::seed_from_u64(seed)),
            Jitter::Off => None,
        };
        Self {
            inner,
            retry,
            rng: Mutex::new(rng),
            spent: Mutex::new(Duration::ZERO),
        }
    }

    /// The wrapped provider.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// The settings.
    pub fn settings(&self) -> &Retry {
        &self.retry
    }

    /// Time spent retrying so far (backoff waits plus retried attempts), counted against
    /// [`Retry::budget`].
    pub fn retry_time_spent(&self) -> Duration {
        *self.spent.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn spend(&self, d: Duration) {
        let mut spent = self.spent.lock().unwrap_or_else(|p| p.into_inner());
        *spent = spent.saturating_add(d);
    }

    fn next_backoff(&self, retry: u32, hint: Option<Duration>) -> Duration {
        let unit = match &mut *self.rng.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(rng) => rng.random::<f64>(),
            None => 1.0,
        };
        self.retry.backoff(retry, hint, unit)
    }

    /// The wait before the next retry, or why there is none. Sets the retry's time limit.
    fn plan(&self, call: &mut CallState, err: &ProviderError) -> Result<Duration, &'static str> {
        if !err.is_retryable() {
            return Err("not_retryable");
        }
        if call.retries >= self.retry.max_retries {
            return Err("max_retries");
        }
        let wait = self.next_backoff(call.retries + 1, err.retry_after());
        let left = call.deadline.map_or(Duration::MAX, |d| {
            d.saturating_duration_since(Instant::now())
        });
        if wait >= left {
            return Err("retry_max_elapsed");
        }
        let budget_left = self
            .retry
            .budget
            .map(|b| b.saturating_sub(self.retry_time_spent()));
        if budget_left.is_some_and(|b| wait >= b) {
            return Err("retry_budget");
        }
        // The retry may use only what is left of both limits.
        call.limit = Some(budget_left.map_or(left, |b| b.min(left)) - wait);
        Ok(wait)
    }

    /// One try of the provider below, its stream events renumbered after `offset` earlier
    /// attempts and, for a retry, cut off at `limit`.
    async fn try_once(
        &self,
        req: &ProviderRequest,
        sink: Option<&mut StreamSink<'_>>,
        offset: u32,
        limit: Option<Duration>,
    ) -> Result<ProviderResponse, ProviderError> {
        let work = async {
            match sink {
                Some(s) => {
                    let mut renumbered = |ev: StreamEvent| s(shift_retry(ev, offset));
                    self.inner.stream(req, &mut renumbered).await
                }
                None => self.inner.complete(req).await,
            }
        };
        match limit {
            None => work.await,
            Some(after) => tokio::time::timeout(after, work)
                .await
                .unwrap_or(Err(ProviderError::Timeout { after })),
        }
    }

    /// One call: tries, waits and the evidence of every attempt.
    async fn call(
        &self,
        req: &ProviderRequest,
        mut sink: Option<&mut StreamSink<'_>>,
    ) -> Result<ProviderResponse, ProviderError> {
        let mode = if sink.is_some() {
            AttemptMode::Stream
        } else {
            AttemptMode::Complete
        };
        let mut call = CallState::new(self.retry.max_elapsed);
        loop {
            let offset = call.attempts();
            let t0 = Instant::now();
            let result = self
                .try_once(req, sink.as_deref_mut(), offset, call.limit)
                .await;
            let took = t0.elapsed();
            if call.retries > 0 {
                self.spend(took);
            }
            let err = match result {
                Ok(resp) => return Ok(call.answered(resp, mode, took)),
                Err(e) => call.failed(e, mode, took),
            };
            let wait = match self.plan(&mut call, &err) {
                Ok(wait) => wait,
                Err(stopped) => return Err(give_up(err, call.history, stopped)),
            };
            if let Some(last) = call.history.last_mut() {
                last.backoff_ms = Some(millis(wait));
            }
            tokio::time::sleep(wait).await;
            self.spend(wait);
            call.retries += 1;
            if let Some(s) = sink.as_deref_mut() {
                s(StreamEvent::Retry {
                    attempt: call.attempts() + 1,
                    reason: err.to_string(),
                });
            }
        }
    }
}

/// A stream event from the provider below, its `Retry` attempt counted after `offset`.
fn shift_retry(ev: StreamEvent, offset: u32) -> StreamEvent {
    match ev {
        StreamEvent::Retry { attempt, reason } => StreamEvent::Retry {
            attempt: attempt.saturating_add(offset),
            reason,
        },
        other => other,
    }
}

/// What one call of the layer has done so far.
struct CallState {
    /// `None`: so far off that it cannot be represented (no limit in practice).
    deadline: Option<Instant>,
    history: Vec<Attempt>,
    retries: u32,
    /// The time the next try may take (set for retries).
    limit: Option<Duration>,
}

impl CallState {
    fn new(max_elapsed: Duration) -> Self {
        Self {
            deadline: Instant::now().checked_add(max_elapsed),
            history: Vec::new(),
            retries: 0,
            limit: None,
        }
    }

    fn attempts(&self) -> u32 {
        u32::try_from(self.history.len()).unwrap_or(u32::MAX - 1)
    }

    /// Appends the attempts of one try, renumbered after those already listed.
    fn extend(&mut self, attempts: Vec<Attempt>) {
        let offset = self.attempts();
        self.history.extend(attempts.into_iter().map(|mut a| {
            a.attempt = a.attempt.saturating_add(offset);
            a
        }));
    }

    /// Records a failed try; returns its final error.
    fn failed(&mut self, err: ProviderError, mode: AttemptMode, took: Duration) -> ProviderError {
        match err {
            ProviderError::RetriesExhausted { history, last, .. } if !history.is_empty() => {
                self.extend(history);
                *last
            }
            e => {
                self.extend(vec![Attempt::failed(1, mode, millis(took), &e)]);
                e
            }
        }
    }

    /// The answer, with every attempt in its evidence when there was more than one, and
    /// the reason of a stream fallback an earlier try made.
    fn answered(
        mut self,
        mut resp: ProviderResponse,
        mode: AttemptMode,
        took: Duration,
    ) -> ProviderResponse {
        let own: Option<Vec<Attempt>> = resp
            .detail
            .get("attempts")
            .and_then(|v| serde_json::from_value(v.clone()).ok());
        let mode = match resp.detail.get("stream").and_then(Value::as_bool) {
            Some(true) => AttemptMode::Stream,
            Some(false) => AttemptMode::Complete,
            None => mode,
        };
        self.extend(own.unwrap_or_else(|| vec![Attempt::ok(1, mode, millis(took))]));
        if self.history.len() > 1 {
            resp.detail.insert(
                "attempts".into(),
                serde_json::to_value(&self.history).unwrap_or(Value::Null),
            );
        }
        if !resp.detail.contains_key("stream_fallback")
            && let Some(a) = self.history.iter().find(|a| a.fallback)
        {
            let reason = match a.status {
                Some(status) if a.outcome == "http" => format!("http_{status}"),
                _ => a.outcome.clone(),
            };
            resp.detail.insert("stream_fallback".into(), json!(reason));
        }
        resp
    }
}

/// The error a call ends with: the fault itself after a single attempt that cannot be
/// retried, otherwise [`ProviderError::RetriesExhausted`] listing every attempt.
pub(crate) fn give_up(err: ProviderError, history: Vec<Attempt>, stopped: &str) -> ProviderError {
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
impl<P: Provider> Provider for Retrying<P> {
    fn name(&self) -> &str {
        self.inner.name()
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
        self.inner.manifest().wrapped(self.retry.layer_manifest())
    }
}
