//! The fallback layer: when the first provider is unavailable, the second answers.
//!
//! ```
//! use rath_provider::{
//!     Provider, ProviderError, ProviderExt, ProviderRequest, ScriptedProvider, ScriptedResponse,
//! };
//! use rath_session::{Session, Stamper};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let down = ScriptedProvider::new(vec![ScriptedResponse::error(ProviderError::Connection(
//!     "connection refused".into(),
//! ))])
//! .named("primary");
//! let spare = ScriptedProvider::new(vec![ScriptedResponse::text("from the spare")]).named("spare");
//! let p = down.with_fallback(spare);
//! let s = Session::user_with("hello", Stamper::counter());
//! let resp = p.complete(&ProviderRequest::from_session(&s, vec![])).await?;
//! assert_eq!(resp.text(), Some("from the spare"));
//! assert_eq!(resp.provider, "spare");
//! assert_eq!(resp.detail["provider_fallback"]["from"], "primary");
//! # Ok::<(), ProviderError>(())
//! # }).unwrap();
//! ```
//!
//! "Unavailable" is [`ProviderError::is_unavailable`]: a retryable fault (connection,
//! timeout, 429, 5xx, malformed answer), or retries of one that ran out. A request the
//! first provider refuses (400, 401, budget, configuration) is not sent to the second.
//! The answer's evidence records `detail.provider_fallback` (`from`: the first provider's
//! name, `error`: its fault kind). When the first provider's stream had already sent
//! events, the sink gets a [`StreamEvent::Retry`] before the second provider's.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::{
    LayerManifest, Provider, ProviderError, ProviderManifest, ProviderRequest, ProviderResponse,
    StreamEvent, StreamSink,
};

/// `primary`, answered by `secondary` when it is unavailable; see the module docs. Built
/// with [`crate::ProviderExt::with_fallback`].
#[derive(Debug)]
pub struct WithFallback<P, Q> {
    primary: P,
    secondary: Q,
}

impl<P: Provider, Q: Provider> WithFallback<P, Q> {
    /// `primary`, then `secondary` when it is unavailable.
    pub fn new(primary: P, secondary: Q) -> Self {
        Self { primary, secondary }
    }

    /// The first provider.
    pub fn primary(&self) -> &P {
        &self.primary
    }

    /// The provider asked when the first is unavailable.
    pub fn secondary(&self) -> &Q {
        &self.secondary
    }

    /// The evidence of a fallback, added to the second provider's answer.
    fn mark(&self, mut resp: ProviderResponse, err: &ProviderError) -> ProviderResponse {
        let mut from: BTreeMap<String, Value> = BTreeMap::new();
        from.insert("from".into(), json!(self.primary.name()));
        from.insert("error".into(), json!(err.root().kind()));
        if let Some(status) = err.status() {
            from.insert("status".into(), json!(status));
        }
        resp.detail.insert("provider_fallback".into(), json!(from));
        resp
    }
}

#[async_trait]
impl<P: Provider, Q: Provider> Provider for WithFallback<P, Q> {
    fn name(&self) -> &str {
        self.primary.name()
    }

    async fn complete(&self, req: &ProviderRequest) -> Result<ProviderResponse, ProviderError> {
        match self.primary.complete(req).await {
            Err(err) if err.is_unavailable() => {
                let resp = self.secondary.complete(req).await?;
                Ok(self.mark(resp, &err))
            }
            other => other,
        }
    }

    async fn stream(
        &self,
        req: &ProviderRequest,
        sink: &mut StreamSink<'_>,
    ) -> Result<ProviderResponse, ProviderError> {
        let mut events = 0u32;
        let first = {
            let mut counted = |ev: StreamEvent| {
                events += 1;
                sink(ev)
            };
            self.primary.stream(req, &mut counted).await
        };
        match first {
            Err(err) if err.is_unavailable() => {
                if events > 0 {
                    let tried = u32::try_from(err.attempts().len().max(1)).unwrap_or(u32::MAX);
                    sink(StreamEvent::Retry {
                        attempt: tried.saturating_add(1),
                        reason: format!("falling back to {}: {err}", self.secondary.name()),
                    });
                }
                let resp = self.secondary.stream(req, sink).await?;
                Ok(self.mark(resp, &err))
            }
            other => other,
        }
    }

    fn manifest(&self) -> ProviderManifest {
        let secondary = serde_json::to_value(self.secondary.manifest()).unwrap_or(Value::Null);
        self.primary
            .manifest()
            .wrapped(LayerManifest::new("fallback").with("secondary", secondary))
    }
}
