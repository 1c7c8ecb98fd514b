//! Layers: wrapping a provider gives a provider.
//!
//! ```
//! use std::time::Duration;
//! use rath_provider::{
//!     Provider, ProviderExt, ProviderRequest, RateLimit, Retry, ScriptedProvider,
//!     ScriptedResponse,
//! };
//! use rath_session::{Session, Stamper};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let p = ScriptedProvider::new(vec![ScriptedResponse::text("hi").usage(5, 1)])
//!     .with_rate_limit(RateLimit::per_minute(60))
//!     .with_retry(Retry::default())
//!     .with_budget(10_000);
//! let s = Session::user_with("hello", Stamper::counter());
//! let resp = p.complete(&ProviderRequest::from_session(&s, vec![])).await.unwrap();
//! assert_eq!(resp.text(), Some("hi"));
//! let layers: Vec<_> = p.manifest().layers.iter().map(|l| l.layer.clone()).collect();
//! assert_eq!(layers, ["budget", "retry", "rate_limit"]); // outermost first
//! # });
//! ```
//!
//! Each layer is a [`Provider`] around any provider, including one written outside this
//! crate: [`Retrying`] (backoff with jitter honouring `Retry-After`), [`Budgeted`] (a token
//! budget checked before sending), [`RateLimited`] (requests per interval), [`WithFallback`]
//! (a second provider when the first is unavailable) and [`crate::RecordingProvider`] (a
//! cassette). Layers keep `stream` streaming and list themselves, with their settings, in
//! [`ProviderManifest::layers`](crate::ProviderManifest::layers).

mod budget;
mod fallback;
mod rate_limit;
mod retry;

use std::path::Path;
use std::sync::Arc;

pub use budget::Budgeted;
pub use fallback::WithFallback;
pub use rate_limit::{RateLimit, RateLimited};
pub use retry::{
    ENV_MAX_RETRIES, ENV_RETRY_BUDGET_MS, ENV_RETRY_MAX_ELAPSED_MS, Jitter, Retry, Retrying,
};

use crate::{Provider, ProviderError, RecordingProvider};

/// Wrapping as a builder: `provider.with_retry(..).with_budget(..)`. Implemented for every
/// sized [`Provider`]; each method returns the wrapped provider (itself a provider).
pub trait ProviderExt: Provider + Sized {
    /// Retries faults that retrying can fix ([`Retrying`]).
    fn with_retry(self, retry: Retry) -> Retrying<Self> {
        Retrying::new(self, retry)
    }

    /// Refuses, unsent, any request that could take the total past `tokens` ([`Budgeted`]).
    fn with_budget(self, tokens: u64) -> Budgeted<Self> {
        Budgeted::new(self, Some(tokens))
    }

    /// Spaces requests as `limit` says ([`RateLimited`]).
    fn with_rate_limit(self, limit: RateLimit) -> RateLimited<Self> {
        RateLimited::new(self, limit)
    }

    /// Asks `secondary` when this provider is unavailable ([`WithFallback`]).
    fn with_fallback<Q: Provider>(self, secondary: Q) -> WithFallback<Self, Q> {
        WithFallback::new(self, secondary)
    }

    /// Records every answered interaction to a new cassette at `path`
    /// ([`RecordingProvider::create`]).
    fn record_to(self, path: impl AsRef<Path>) -> Result<RecordingProvider<Self>, ProviderError> {
        RecordingProvider::create(self, path)
    }

    /// This provider as a shared trait object.
    fn shared(self) -> Arc<dyn Provider>
    where
        Self: 'static,
    {
        Arc::new(self)
    }
}

impl<P: Provider + Sized> ProviderExt for P {}
