//! The rate limit layer: at most so many requests start per interval; the rest wait.
//!
//! ```
//! use std::time::Duration;
//! use rath_provider::{
//!     Provider, ProviderExt, ProviderRequest, RateLimit, ScriptedProvider, ScriptedResponse,
//! };
//! use rath_session::{Session, Stamper};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap().block_on(async {
//! let p = ScriptedProvider::new(vec![ScriptedResponse::text("a"), ScriptedResponse::text("b")])
//!     .with_rate_limit(RateLimit::new(1, Duration::from_secs(2)));
//! let s = Session::user_with("hello", Stamper::counter());
//! let req = ProviderRequest::from_session(&s, vec![]);
//! let t0 = tokio::time::Instant::now();
//! p.complete(&req).await.unwrap();
//! p.complete(&req).await.unwrap(); // waits for the interval (virtual time here)
//! assert!(t0.elapsed() >= Duration::from_secs(2));
//! # });
//! ```
//!
//! A sliding window: a request starts when fewer than [`RateLimit::requests`] requests
//! started within the last [`RateLimit::per`]. Waiting takes no slot, so a call dropped
//! while it waits (cancelled, timed out) leaves the others' turns as they were.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use tokio::time::Instant;

use crate::env::millis;
use crate::{
    LayerManifest, Provider, ProviderError, ProviderManifest, ProviderRequest, ProviderResponse,
    StreamSink,
};

/// Settings of the rate limit layer ([`RateLimited`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests allowed to start per interval (at least 1).
    pub requests: u32,
    /// The interval; zero means no limit.
    pub per: Duration,
}

impl RateLimit {
    /// At most `requests` (at least 1) starts per `per`.
    pub fn new(requests: u32, per: Duration) -> Self {
        Self {
            requests: requests.max(1),
            per,
        }
    }

    /// At most `requests` starts per minute.
    pub fn per_minute(requests: u32) -> Self {
        Self::new(requests, Duration::from_secs(60))
    }
}

/// A provider whose requests are spaced as a [`RateLimit`] says; see the module docs.
/// Built with [`crate::ProviderExt::with_rate_limit`].
#[derive(Debug)]
pub struct RateLimited<P> {
    inner: P,
    limit: RateLimit,
    starts: Mutex<VecDeque<Instant>>,
}

impl<P: Provider> RateLimited<P> {
    /// `inner`, limited to `limit`.
    pub fn new(inner: P, limit: RateLimit) -> Self {
        Self {
            inner,
            limit,
            starts: Mutex::new(VecDeque::new()),
        }
    }

    /// The wrapped provider.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// The settings.
    pub fn limit(&self) -> RateLimit {
        self.limit
    }

    /// Takes a start in the window, or the instant the oldest start leaves it.
    fn try_start(&self) -> Result<(), Instant> {
        let now = Instant::now();
        let mut starts = self.starts.lock().unwrap_or_else(|p| p.into_inner());
        while starts.front().is_some_and(|t| *t + self.limit.per <= now) {
            starts.pop_front();
        }
        if starts.len() < self.limit.requests as usize {
            starts.push_back(now);
            return Ok(());
        }
        Err(starts.front().map_or(now, |t| *t + self.limit.per))
    }

    /// Waits for a turn. Cancellation-safe: a start is taken only when the wait is over.
    async fn turn(&self) {
        if self.limit.per.is_zero() {
            return;
        }
        while let Err(wake) = self.try_start() {
            tokio::time::sleep_until(wake).await;
        }
    }
}

#[async_trait]
impl<P: Provider> Provider for RateLimited<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn complete(&self, req: &ProviderRequest) -> Result<ProviderResponse, ProviderError> {
        self.turn().await;
        self.inner.complete(req).await
    }

    async fn stream(
        &self,
        req: &ProviderRequest,
        sink: &mut StreamSink<'_>,
    ) -> Result<ProviderResponse, ProviderError> {
        self.turn().await;
        self.inner.stream(req, sink).await
    }

    fn manifest(&self) -> ProviderManifest {
        self.inner.manifest().wrapped(
            LayerManifest::new("rate_limit")
                .with("requests", json!(self.limit.requests))
                .with("per_ms", json!(millis(self.limit.per))),
        )
    }
}
