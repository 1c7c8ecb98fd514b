//! Layers: wrapping a workflow gives a workflow. Memory recall and commit, the
//! persist-as-you-go sink, an extra observer and a token/step budget are wrappers built
//! through [`crate::WorkflowExt`], so they apply to any workflow (an agent, a team, a
//! selector), not only to one agent.
//!
//! ```
//! use rath_flow::{Agent, Budget, FlowEvent, WorkflowExt};
//! use rath_provider::{ScriptedProvider, ScriptedResponse};
//! use rath_session::{Session, Stamper};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let dir = tempfile::tempdir().unwrap();
//! let agent = Agent::new("a", "Be brief.", ScriptedProvider::new(vec![ScriptedResponse::text("hi").usage(5, 1)]))
//!     .persist_to(rath_persist::Store::at(dir.path()))
//!     .observe(|ev: &FlowEvent<'_>| if let FlowEvent::Usage { usage, .. } = ev { assert_eq!(usage.total_tokens, 6) })
//!     .with_budget(Budget::steps(4));
//! let out = agent.run(Session::user_with("Say hi.", Stamper::counter())).await?;
//! assert_eq!(rath_persist::Store::at(dir.path()).load(out.id())?.session.len(), out.len());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use rath_session::Session;

use crate::FlowError;
use crate::context::{Budget, FlowContext, Observer, SessionSink, StoreSink};
use crate::error::{FailedAt, fail_from};
use crate::memory::MemoryHook;
use crate::resume::is_resumption;
use crate::workflow::{Workflow, WorkflowRole};
use rath_persist::Store;

/// The describing methods of a layer: its inner workflow's.
macro_rules! delegate_describe {
    () => {
        fn name(&self) -> &str {
            self.inner.name()
        }
        fn description(&self) -> &str {
            self.inner.description()
        }
        fn role(&self) -> WorkflowRole {
            WorkflowRole::Wrapper
        }
        fn children(&self, visit: &mut dyn FnMut(&dyn Workflow)) {
            visit(&self.inner);
        }
    };
}

/// Memory around a workflow ([`crate::WorkflowExt::with_memory`]): before a fresh forward,
/// recall and inject (a `memory_event` chunk, and the recalled text when something was
/// found); after a forward that finished (no pending work), commit what it added. A forward
/// that resumes stopped work does not recall again. Usage and events are attributed to the
/// inner workflow's name.
pub struct WithMemory<W> {
    inner: W,
    memory: Arc<dyn MemoryHook>,
}

impl<W: Workflow> WithMemory<W> {
    /// `inner` with `memory`.
    pub fn new(inner: W, memory: Arc<dyn MemoryHook>) -> Self {
        Self { inner, memory }
    }

    fn recall(&self, session: &Session) -> Result<Session, FlowError> {
        if is_resumption(session) {
            return Ok(session.clone());
        }
        let name = self.inner.name();
        self.memory
            .before_model_call(session, Some(name))
            .map_err(|e| {
                fail_from(
                    e,
                    session,
                    "Memory.recall",
                    FailedAt::new(Some(name), "memory"),
                )
            })
    }

    fn commit(&self, input: &Session, out: Session) -> Result<Session, FlowError> {
        if !out.pending().is_empty() {
            return Ok(out);
        }
        let name = self.inner.name();
        self.memory
            .after_forward(input, &out, Some(name))
            .map_err(|e| {
                fail_from(
                    e,
                    &out,
                    "Memory.commit",
                    FailedAt::new(Some(name), "memory"),
                )
            })
    }
}

impl<W> fmt::Debug for WithMemory<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WithMemory").finish_non_exhaustive()
    }
}

impl<W: Workflow> Workflow for WithMemory<W> {
    fn forward<'a>(
        &'a self,
        session: Session,
        cx: &'a FlowContext,
    ) -> BoxFuture<'a, Result<Session, FlowError>> {
        Box::pin(async move {
            let recalled = self.recall(&session)?;
            let out = cx.forward(&self.inner, recalled).await?;
            self.commit(&session, out)
        })
    }
    delegate_describe!();
}

/// A workflow whose session loops stream their outputs to a sink as they grow
/// ([`crate::WorkflowExt::with_sink`], [`crate::WorkflowExt::persist_to`]).
pub struct WithSink<W> {
    inner: W,
    sink: Arc<dyn SessionSink>,
}

impl<W: Workflow> WithSink<W> {
    /// `inner` streaming to `sink`.
    pub fn new(inner: W, sink: Arc<dyn SessionSink>) -> Self {
        Self { inner, sink }
    }
}

impl<W> fmt::Debug for WithSink<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WithSink").finish_non_exhaustive()
    }
}

impl<W: Workflow> Workflow for WithSink<W> {
    fn forward<'a>(
        &'a self,
        session: Session,
        cx: &'a FlowContext,
    ) -> BoxFuture<'a, Result<Session, FlowError>> {
        Box::pin(async move {
            let child = cx.clone().with_shared_sink(self.sink.clone());
            child.forward(&self.inner, session).await
        })
    }
    delegate_describe!();
}

/// A workflow with one more observer ([`crate::WorkflowExt::observe`]): it sees the events
/// of this workflow only, beside the context's own observer.
pub struct Observed<W> {
    inner: W,
    observer: Arc<dyn Observer>,
}

impl<W: Workflow> Observed<W> {
    /// `inner` observed by `observer`.
    pub fn new(inner: W, observer: Arc<dyn Observer>) -> Self {
        Self { inner, observer }
    }
}

impl<W> fmt::Debug for Observed<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observed").finish_non_exhaustive()
    }
}

impl<W: Workflow> Workflow for Observed<W> {
    fn forward<'a>(
        &'a self,
        session: Session,
        cx: &'a FlowContext,
    ) -> BoxFuture<'a, Result<Session, FlowError>> {
        Box::pin(async move {
            let child = cx.clone().also_observe_shared(self.observer.clone());
            child.forward(&self.inner, session).await
        })
    }
    delegate_describe!();
}

/// A workflow limited by a [`Budget`] per forward ([`crate::WorkflowExt::with_budget`]):
/// once the limit is reached the next model call is not sent and the run fails with
/// [`FlowError::BudgetSpent`] (kind `budget_exhausted` in its `run_failure` chunk).
pub struct WithBudget<W> {
    inner: W,
    budget: Budget,
}

impl<W: Workflow> WithBudget<W> {
    /// `inner` within `budget`.
    pub fn new(inner: W, budget: Budget) -> Self {
        Self { inner, budget }
    }
}

impl<W> fmt::Debug for WithBudget<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WithBudget")
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl<W: Workflow> Workflow for WithBudget<W> {
    fn forward<'a>(
        &'a self,
        session: Session,
        cx: &'a FlowContext,
    ) -> BoxFuture<'a, Result<Session, FlowError>> {
        Box::pin(async move {
            let child = cx.clone().with_budget(self.budget);
            child.forward(&self.inner, session).await
        })
    }
    delegate_describe!();
}

/// Conveniences for every [`Workflow`]: running with a default context, and the layers that
/// wrap a workflow into another one.
///
/// ```
/// use rath_flow::{FnWorkflow, WorkflowExt};
/// use rath_session::{Chunk, Session};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let note = FnWorkflow::new("note", "Adds a note.", |s: Session| Ok(s.push(Chunk::note("me", "seen"))));
/// let out = note.run(Session::user("hi")).await?;
/// assert_eq!(out.len(), 2);
/// # Ok::<(), rath_flow::FlowError>(())
/// # }).unwrap();
/// ```
pub trait WorkflowExt: Workflow {
    /// Runs on `session` with a default [`FlowContext`] (local backends, no observer).
    fn run(&self, session: Session) -> BoxFuture<'_, Result<Session, FlowError>> {
        Box::pin(async move {
            let cx = FlowContext::new();
            cx.forward(self, session).await
        })
    }

    /// Recalls from `memory` before each fresh forward and commits after each finished one
    /// (see [`WithMemory`]).
    fn with_memory(self, memory: impl MemoryHook + 'static) -> WithMemory<Self>
    where
        Self: Sized,
    {
        WithMemory::new(self, Arc::new(memory))
    }

    /// Streams every session loop's output inside to `sink` as it grows (see [`WithSink`]).
    fn with_sink(self, sink: impl SessionSink + 'static) -> WithSink<Self>
    where
        Self: Sized,
    {
        WithSink::new(self, Arc::new(sink))
    }

    /// Persists as it goes: [`WorkflowExt::with_sink`] with a [`StoreSink`] on `store` (each
    /// loop output is `<id>.jsonl.__partial__` while it runs, closed when it stops).
    fn persist_to(self, store: Store) -> WithSink<Self>
    where
        Self: Sized,
    {
        self.with_sink(StoreSink::new(store))
    }

    /// Sends this workflow's events to `observer` too (see [`Observed`]).
    fn observe(self, observer: impl Observer + 'static) -> Observed<Self>
    where
        Self: Sized,
    {
        Observed::new(self, Arc::new(observer))
    }

    /// Limits each forward to `budget` (see [`WithBudget`]).
    fn with_budget(self, budget: Budget) -> WithBudget<Self>
    where
        Self: Sized,
    {
        WithBudget::new(self, budget)
    }
}

impl<W: Workflow + ?Sized> WorkflowExt for W {}
