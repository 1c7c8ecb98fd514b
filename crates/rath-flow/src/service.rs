//! Calls as services: every model call and every tool call in a workflow tree goes through
//! one of the context's two chokepoints, [`crate::FlowContext::call_model`] and
//! [`crate::FlowContext::call_tool`], and a [`Layer`] installed on the context
//! ([`crate::FlowContext::with_layer`]) wraps them: it sees every call of every agent, selector and
//! compressor under it, nested workflows included.
//!
//! A service takes one request type and gives one response type: a [`ModelService`] turns
//! a [`ModelCall`] into a [`ProviderResponse`], a [`ToolService`] turns a [`ToolRequest`]
//! into a [`ToolOutput`]. A layer is tower's shape: it wraps a service and gives a service
//! back. This one redacts a secret pattern from every tool result:
//!
//! ```
//! use std::sync::Arc;
//! use rath_flow::service::BoxFuture;
//! use rath_flow::{Layer, ToolError, ToolOutput, ToolRequest, ToolService};
//!
//! /// Replaces every word that starts with `sk-` by `[redacted]`.
//! fn redact(text: &str) -> String {
//!     let words = text.split(' ').map(|w| if w.starts_with("sk-") { "[redacted]" } else { w });
//!     words.collect::<Vec<_>>().join(" ")
//! }
//!
//! struct Redact;
//! struct Redacted(Arc<dyn ToolService>);
//!
//! impl Layer for Redact {
//!     fn tool(&self, inner: Arc<dyn ToolService>) -> Arc<dyn ToolService> {
//!         Arc::new(Redacted(inner))
//!     }
//! }
//!
//! impl ToolService for Redacted {
//!     fn call(&self, call: ToolRequest) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
//!         Box::pin(async move {
//!             let out = self.0.call(call).await?;
//!             Ok(ToolOutput::text(redact(&out.content)))
//!         })
//!     }
//! }
//! # use rath_flow::{Agent, FlowContext, RawTool};
//! # use rath_provider::{ScriptedProvider, ScriptedResponse};
//! # use rath_session::{ChunkKind, Session, Stamper};
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let leaky = RawTool::new("env", "Show the config.", serde_json::json!({"type": "object"}), |_, _| {
//!     Box::pin(async { Ok(ToolOutput::text("key: sk-live-123 region: eu")) })
//! });
//! let model = ScriptedProvider::new(vec![
//!     ScriptedResponse::tool_calls(vec![("c1", "env", serde_json::json!({}))]),
//!     ScriptedResponse::text("done"),
//! ]);
//! let agent = Agent::new("a", "Check.", model).with_tool(leaky)?;
//! let cx = FlowContext::new().with_layer(Redact);
//! let out = cx.forward(&agent, Session::user_with("go", Stamper::counter())).await?;
//! let result = out.chunks().iter().find(|c| c.kind() == ChunkKind::ToolResult).unwrap();
//! assert_eq!(result.text(), Some("key: [redacted] region: eu"));
//! # Ok::<(), rath_flow::FlowError>(())
//! # }).unwrap();
//! ```
//!
//! The durable runtime installs its replay journal (model replies) and effect ledger (tool
//! calls) as a layer on each run's context, so a workflow it runs is plain flow code and no
//! call can escape them; a tool declares itself idempotent with [`Tool::idempotent`].

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
/// The boxed future a service returns (`futures`' own, re-exported so a layer needs no
/// other crate).
pub use futures::future::BoxFuture;
use rath_provider::{
    Provider, ProviderError, ProviderRequest, ProviderResponse, StreamEvent, StreamSink,
};
use serde_json::Value;

use crate::tool::{Tool, ToolContext, ToolError, ToolErrorKind, ToolOutput};

/// One model call: the provider it goes to, the request, and where streamed events go (a
/// streaming call when set).
pub struct ModelCall<'a> {
    /// The provider the caller chose.
    pub provider: &'a dyn Provider,
    /// The request (its `agent` names the caller: an agent, selector or compressor).
    pub request: &'a ProviderRequest,
    /// Receives the reply's stream events, when the caller asked for a streamed call.
    pub stream: Option<&'a mut StreamSink<'a>>,
}

impl<'a> ModelCall<'a> {
    /// A plain (not streamed) call of `request` on `provider`.
    pub fn new(provider: &'a dyn Provider, request: &'a ProviderRequest) -> Self {
        Self {
            provider,
            request,
            stream: None,
        }
    }

    /// The call streamed: `sink` receives the reply's events as they arrive.
    pub fn streamed(mut self, sink: &'a mut StreamSink<'a>) -> Self {
        self.stream = Some(sink);
        self
    }

    /// The agent (or selector, compressor) making the call.
    pub fn agent(&self) -> Option<&str> {
        self.request.agent.as_deref()
    }
}

/// Serves model calls: a provider at the bottom of the stack, a layer above it.
pub trait ModelService: Send + Sync {
    /// Answers `call`.
    fn call<'a>(
        &'a self,
        call: ModelCall<'a>,
    ) -> BoxFuture<'a, Result<ProviderResponse, ProviderError>>;
}

/// One tool call: the tool, the context it runs in (session, agent, call id, sandbox) and
/// its validated arguments.
#[derive(Clone)]
pub struct ToolRequest {
    /// The tool.
    pub tool: Arc<dyn Tool>,
    /// What the call can see.
    pub context: ToolContext,
    /// The arguments, validated against the tool's schema.
    pub args: Value,
}

impl ToolRequest {
    /// The tool's name.
    pub fn name(&self) -> &str {
        self.tool.name()
    }
}

/// Serves tool calls: the tool itself at the bottom of the stack, a layer above it.
pub trait ToolService: Send + Sync {
    /// Answers `call`.
    fn call(&self, call: ToolRequest) -> BoxFuture<'_, Result<ToolOutput, ToolError>>;
}

/// Wraps the context's model and tool services; each method gives back the service to use
/// in place of `inner` (by default `inner` itself, so a layer implements only what it
/// wraps). Installed with [`FlowContext::with_layer`]: the last one installed is outermost.
///
/// [`FlowContext::with_layer`]: crate::FlowContext::with_layer
pub trait Layer: Send + Sync {
    /// The model service with this layer around `inner`.
    fn model(&self, inner: Arc<dyn ModelService>) -> Arc<dyn ModelService> {
        inner
    }
    /// The tool service with this layer around `inner`.
    fn tool(&self, inner: Arc<dyn ToolService>) -> Arc<dyn ToolService> {
        inner
    }
}

impl<L: Layer + ?Sized> Layer for Arc<L> {
    fn model(&self, inner: Arc<dyn ModelService>) -> Arc<dyn ModelService> {
        (**self).model(inner)
    }
    fn tool(&self, inner: Arc<dyn ToolService>) -> Arc<dyn ToolService> {
        (**self).tool(inner)
    }
}

/// The bottom of the model stack: the call's own provider.
pub(crate) struct Provide;

impl ModelService for Provide {
    fn call<'a>(
        &'a self,
        call: ModelCall<'a>,
    ) -> BoxFuture<'a, Result<ProviderResponse, ProviderError>> {
        match call.stream {
            Some(sink) => call.provider.stream(call.request, sink),
            None => call.provider.complete(call.request),
        }
    }
}

/// The bottom of the tool stack: the call's own tool.
pub(crate) struct Invoke;

impl ToolService for Invoke {
    fn call(&self, call: ToolRequest) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        Box::pin(async move { call.tool.call(&call.context, call.args).await })
    }
}

/// Runs `call` through `service` within `timeout`; a timeout or a panic anywhere in the
/// stack is a tool error (the call is answered, the run goes on).
pub(crate) async fn bounded(
    service: &dyn ToolService,
    call: ToolRequest,
    timeout: Option<Duration>,
) -> Result<ToolOutput, ToolError> {
    let name = call.name().to_owned();
    let fut = AssertUnwindSafe(service.call(call)).catch_unwind();
    let finished = match timeout {
        Some(d) => tokio::time::timeout(d, fut).await.ok(),
        None => Some(fut.await),
    };
    match finished {
        None => Err(ToolError::new(
            ToolErrorKind::ToolTimeout,
            format!(
                "tool {name} did not finish within {}",
                fmt_duration(timeout.unwrap_or_default())
            ),
        )),
        Some(Err(panic)) => Err(ToolError::exception(format!(
            "tool {name} panicked: {}",
            panic_message(panic.as_ref())
        ))),
        Some(Ok(answer)) => answer,
    }
}

/// A stream sink that forwards text deltas to `f`.
pub(crate) fn text_deltas<'a>(
    mut f: impl FnMut(&str) + Send + 'a,
) -> impl FnMut(StreamEvent) + Send + 'a {
    move |ev: StreamEvent| {
        if let StreamEvent::TextDelta { text } = &ev {
            f(text);
        }
    }
}

/// `provider` as a shared trait object, without a second layer of `Arc` when it already is
/// an `Arc<dyn Provider>` (so an agent built from a shared provider calls it directly).
pub(crate) fn shared_provider<P: Provider + 'static>(provider: P) -> Arc<dyn Provider> {
    match (&provider as &dyn Any).downcast_ref::<Arc<dyn Provider>>() {
        Some(shared) => shared.clone(),
        None => Arc::new(provider),
    }
}

pub(crate) fn fmt_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}
