//! The `Provider` trait.

use std::sync::Arc;

use async_trait::async_trait;

use crate::{
    ProviderError, ProviderManifest, ProviderRequest, ProviderResponse, StreamAssembler,
    StreamEvent,
};

/// A sink for stream events. It must be `Send` so provider futures stay `Send`.
pub type StreamSink<'a> = dyn FnMut(StreamEvent) + Send + 'a;

/// Turns a conversation view plus tool schemas into the model's next assistant chunk.
///
/// Object-safe: hold one as `Arc<dyn Provider>`. Implementations are cancellation-safe —
/// dropping a `complete`/`stream` future leaves the provider usable and the caller's session
/// untouched (providers never see a session, only a [`ProviderRequest`]).
///
/// ```
/// use std::sync::Arc;
/// use rath_provider::{Provider, ProviderRequest, ScriptedProvider, ScriptedResponse};
/// use rath_session::{Session, Stamper};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let p: Arc<dyn Provider> = Arc::new(ScriptedProvider::new(vec![
///     ScriptedResponse::text("three").usage(12, 1),
/// ]));
/// let s = Session::user_with("How many words in 'a b c'?", Stamper::counter());
/// let req = ProviderRequest::from_session(&s, vec![]);
/// let resp = p.complete(&req).await?;
/// let s2 = resp.apply(&s, &req, 0.0);
/// assert_eq!(s2.messages().last().unwrap().content.as_deref(), Some("three"));
/// # Ok::<(), rath_provider::ProviderError>(())
/// # }).unwrap();
/// ```
#[async_trait]
pub trait Provider: Send + Sync {
    /// A short name for evidence (`openai-compatible`, `scripted`, `replay`, ...).
    fn name(&self) -> &str;

    /// Asks for the next assistant chunk in one piece.
    async fn complete(&self, req: &ProviderRequest) -> Result<ProviderResponse, ProviderError>;

    /// Asks for the next assistant chunk as a stream: `sink` sees text deltas and tool-call
    /// fragments as they arrive; the returned response holds the same chunk `complete` would.
    ///
    /// The default calls [`Provider::complete`] and replays the result as events.
    async fn stream(
        &self,
        req: &ProviderRequest,
        sink: &mut StreamSink<'_>,
    ) -> Result<ProviderResponse, ProviderError> {
        let resp = self.complete(req).await?;
        for ev in StreamAssembler::events_for(&resp) {
            sink(ev);
        }
        Ok(resp)
    }

    /// Model, base URL host, parameters and library versions — never a key.
    fn manifest(&self) -> ProviderManifest;
}

#[async_trait]
impl<P: Provider + ?Sized> Provider for Arc<P> {
    fn name(&self) -> &str {
        (**self).name()
    }
    async fn complete(&self, req: &ProviderRequest) -> Result<ProviderResponse, ProviderError> {
        (**self).complete(req).await
    }
    async fn stream(
        &self,
        req: &ProviderRequest,
        sink: &mut StreamSink<'_>,
    ) -> Result<ProviderResponse, ProviderError> {
        (**self).stream(req, sink).await
    }
    fn manifest(&self) -> ProviderManifest {
        (**self).manifest()
    }
}

#[async_trait]
impl<P: Provider + ?Sized> Provider for Box<P> {
    fn name(&self) -> &str {
        (**self).name()
    }
    async fn complete(&self, req: &ProviderRequest) -> Result<ProviderResponse, ProviderError> {
        (**self).complete(req).await
    }
    async fn stream(
        &self,
        req: &ProviderRequest,
        sink: &mut StreamSink<'_>,
    ) -> Result<ProviderResponse, ProviderError> {
        (**self).stream(req, sink).await
    }
    fn manifest(&self) -> ProviderManifest {
        (**self).manifest()
    }
}
