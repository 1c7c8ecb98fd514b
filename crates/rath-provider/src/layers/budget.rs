//! The token budget layer: a request that could exceed the budget is refused unsent.
//!
//! ```
//! use rath_provider::{
//!     Provider, ProviderError, ProviderExt, ProviderRequest, ScriptedProvider, ScriptedResponse,
//! };
//! use rath_session::{Session, Stamper};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let p = ScriptedProvider::new(vec![ScriptedResponse::text("hi").usage(40, 10)])
//!     .with_budget(60);
//! let s = Session::user_with("hello", Stamper::counter());
//! let req = ProviderRequest::from_session(&s, vec![]).with_max_tokens(5);
//! p.complete(&req).await?;
//! assert_eq!(p.used_tokens(), 50);
//! // 50 used + the prompt + 5 completion tokens could pass 60: refused, never sent.
//! let err = p.complete(&req).await.unwrap_err();
//! assert!(matches!(err, ProviderError::BudgetExceeded { budget: 60, used: 50, .. }));
//! assert_eq!(p.inner().requests().len(), 1);
//! # Ok::<(), ProviderError>(())
//! # }).unwrap();
//! ```
//!
//! The worst case of a request is its estimated prompt tokens
//! ([`ProviderRequest::estimated_prompt_tokens`]) plus its completion limit
//! (`max_tokens` of the request, else the `max_tokens` parameter of the provider's
//! manifest, else 0). Concurrent calls reserve their worst case while they run, so calls
//! in parallel cannot pass the budget together; an answer is charged its reported usage
//! (its prompt estimate when it reports none), a failed call nothing.

use std::sync::Mutex;

use async_trait::async_trait;
use serde_json::json;

use crate::{
    LayerManifest, Provider, ProviderError, ProviderManifest, ProviderRequest, ProviderResponse,
    StreamSink,
};

/// A provider with a token budget; see the module docs. Built with
/// [`crate::ProviderExt::with_budget`], or [`Budgeted::new`] with no limit to only count.
#[derive(Debug)]
pub struct Budgeted<P> {
    inner: P,
    limit: Option<u64>,
    default_max_tokens: u64,
    state: Mutex<Tokens>,
}

/// Tokens charged and reserved.
#[derive(Debug, Default)]
struct Tokens {
    used: u64,
    reserved: u64,
}

/// The worst case of one running call, released when the call ends or is dropped.
struct Reservation<'a> {
    state: &'a Mutex<Tokens>,
    needed: u64,
}

impl Reservation<'_> {
    fn charge(self, spent: u64) {
        let mut t = self.state.lock().unwrap_or_else(|p| p.into_inner());
        t.used = t.used.saturating_add(spent);
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut t = self.state.lock().unwrap_or_else(|p| p.into_inner());
        t.reserved = t.reserved.saturating_sub(self.needed);
    }
}

impl<P: Provider> Budgeted<P> {
    /// `inner` with at most `limit` tokens in total (`None`: no limit, only counting).
    pub fn new(inner: P, limit: Option<u64>) -> Self {
        let default_max_tokens = inner
            .manifest()
            .parameters
            .get("max_tokens")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        Self {
            inner,
            limit,
            default_max_tokens,
            state: Mutex::new(Tokens::default()),
        }
    }

    /// The wrapped provider.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// The budget in tokens (`None`: unlimited).
    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// Tokens spent so far (as reported, or estimated when an answer reported none).
    pub fn used_tokens(&self) -> u64 {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).used
    }

    /// Reserves the worst case of `req`, or refuses it.
    fn reserve(&self, req: &ProviderRequest) -> Result<Reservation<'_>, ProviderError> {
        let completion = req.max_tokens.map_or(self.default_max_tokens, u64::from);
        let needed = req.estimated_prompt_tokens().saturating_add(completion);
        let mut t = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let used = t.used.saturating_add(t.reserved);
        if let Some(budget) = self.limit
            && used.saturating_add(needed) > budget
        {
            return Err(ProviderError::BudgetExceeded {
                budget,
                used,
                needed,
            });
        }
        t.reserved = t.reserved.saturating_add(needed);
        Ok(Reservation {
            state: &self.state,
            needed,
        })
    }
}

/// What an answer costs: its reported total, else the request's prompt estimate.
fn cost(req: &ProviderRequest, resp: &ProviderResponse) -> u64 {
    resp.usage
        .map_or_else(|| req.estimated_prompt_tokens(), |u| u.total_tokens)
}

#[async_trait]
impl<P: Provider> Provider for Budgeted<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn complete(&self, req: &ProviderRequest) -> Result<ProviderResponse, ProviderError> {
        let reservation = self.reserve(req)?;
        let resp = self.inner.complete(req).await?;
        reservation.charge(cost(req, &resp));
        Ok(resp)
    }

    async fn stream(
        &self,
        req: &ProviderRequest,
        sink: &mut StreamSink<'_>,
    ) -> Result<ProviderResponse, ProviderError> {
        let reservation = self.reserve(req)?;
        let resp = self.inner.stream(req, sink).await?;
        reservation.charge(cost(req, &resp));
        Ok(resp)
    }

    fn manifest(&self) -> ProviderManifest {
        self.inner
            .manifest()
            .wrapped(LayerManifest::new("budget").with("token_budget", json!(self.limit)))
    }
}
