//! The run environment shared by a workflow tree: backends, observer, cancellation, sinks,
//! budgets, and the lineage journal of the run.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use rath_flow::{Agent, FlowContext, FlowEvent};
//! use rath_provider::{ScriptedProvider, ScriptedResponse};
//! use rath_session::{Session, Stamper};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let seen = Arc::new(Mutex::new(Vec::new()));
//! let log = seen.clone();
//! let cx = FlowContext::new().with_observer(move |ev: &FlowEvent<'_>| {
//!     if let FlowEvent::Session { session } = ev {
//!         log.lock().unwrap().push(session.lineage().kind.to_string());
//!     }
//! });
//! let agent = Agent::new("a", "Be brief.", ScriptedProvider::new(vec![ScriptedResponse::text("hi")]));
//! let out = cx.forward(&agent, Session::user_with("hello", Stamper::counter())).await?;
//! // The context saw the input, the agent's system session and the output, once each.
//! assert_eq!(*seen.lock().unwrap(), ["leaf_user", "leaf_system", "op_session_loop"]);
//! assert_eq!(cx.journal().visit_order().last(), Some(out.id()));
//! # Ok::<(), rath_flow::FlowError>(())
//! # }).unwrap();
//! ```

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rath_backend::BackendRegistry;
use rath_persist::{LineageJournal, LoadedSession, SessionWriter, Store, WriterOptions};
use rath_provider::{ProviderError, ProviderRequest, ProviderResponse};
use rath_session::{Session, SessionId, Stamper, ToolCall, Usage};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::FlowError;
use crate::service::{Invoke, Layer, ModelCall, ModelService, Provide, ToolRequest, ToolService};
use crate::tool::{ToolError, ToolOutput};

/// Something that happened during a run, for progress display, logging and tests.
#[derive(Debug)]
#[non_exhaustive]
pub enum FlowEvent<'a> {
    /// A provider request is about to be sent.
    Request {
        /// The agent (or selector/compressor) making it.
        agent: Option<&'a str>,
        /// The request.
        request: &'a ProviderRequest,
    },
    /// A provider request finished: its reply, or the error it failed with (after the
    /// provider's own retries). Sent once per [`FlowEvent::Request`], by session loops,
    /// selectors and compressors.
    Reply {
        /// The agent (or selector/compressor) that made it.
        agent: Option<&'a str>,
        /// The request.
        request: &'a ProviderRequest,
        /// The reply or the error.
        outcome: Result<&'a ProviderResponse, &'a ProviderError>,
    },
    /// An agent starts working on a session.
    AgentStart {
        /// The agent's name.
        agent: &'a str,
        /// The session it was given.
        session: &'a Session,
    },
    /// An agent finished: its output session, or the error it failed with.
    AgentEnd {
        /// The agent's name.
        agent: &'a str,
        /// The output session or the error.
        outcome: Result<&'a Session, &'a FlowError>,
    },
    /// A piece of streamed reply text.
    TextDelta {
        /// The agent.
        agent: Option<&'a str>,
        /// The text.
        text: &'a str,
    },
    /// A tool call is about to run.
    ToolStart {
        /// The agent.
        agent: Option<&'a str>,
        /// The call.
        call: &'a ToolCall,
    },
    /// A tool call finished (successfully or not).
    ToolEnd {
        /// The agent.
        agent: Option<&'a str>,
        /// The call.
        call: &'a ToolCall,
        /// `ok` or the error kind.
        outcome: &'a str,
        /// The tool result content.
        content: &'a str,
    },
    /// A model call reported usage.
    Usage {
        /// The agent it is attributed to.
        agent: Option<&'a str>,
        /// The figures.
        usage: Usage,
    },
    /// The context saw a session, or a newer version of one, for the first time: the input
    /// and the result of every workflow forwarded through it ([`FlowContext::forward`]),
    /// what combinators hand their children (forks, route annotations), every session
    /// loop's inputs (the agent's system session) and output, and the session a failure
    /// carries. Each version is reported once; [`FlowContext::journal`] keeps them all.
    Session {
        /// The session.
        session: &'a Session,
    },
}

/// Receives [`FlowEvent`]s. Any `Fn(&FlowEvent)` closure is one.
pub trait Observer: Send + Sync {
    /// Called for every event, from whatever task produced it.
    fn on_event(&self, event: &FlowEvent<'_>);

    /// Whether [`FlowEvent::TextDelta`]s are wanted right now, asked before each model
    /// call of a context that asked for them ([`FlowContext::with_text_deltas`]): an
    /// observer that forwards deltas only while someone reads them says no while nobody
    /// does, and the call is made unstreamed. Yes unless overridden.
    fn wants_text_deltas(&self) -> bool {
        true
    }
}

impl<F: Fn(&FlowEvent<'_>) + Send + Sync> Observer for F {
    fn on_event(&self, event: &FlowEvent<'_>) {
        self(event)
    }
}

/// Receives a loop's output session as it grows, so chunks can be persisted as they are
/// made. `begin` sees the session before its first model call, `append` after each step,
/// `finish` once at the end (final answer, approval stop or cancellation).
pub trait SessionSink: Send + Sync {
    /// The loop started a new output session.
    fn begin(&self, session: &Session) -> Result<(), FlowError>;
    /// The output session grew.
    fn append(&self, session: &Session) -> Result<(), FlowError>;
    /// The loop stopped; the session is final (it may carry pending work).
    fn finish(&self, session: &Session) -> Result<(), FlowError>;

    /// The sessions this sink's store holds whose lineage has the extra `extra`, loaded
    /// whole, closed or not (a file a crash left partial is `closed: false`): what a
    /// [`crate::Parallel`] resuming from one cut branch takes its other branches from. A
    /// sink that cannot read its store back says so (the default: an error).
    fn stored(&self, extra: &str) -> Result<Vec<LoadedSession>, FlowError> {
        let _ = extra;
        Err(FlowError::Config(
            "this session sink cannot read back the sessions it stored".to_owned(),
        ))
    }
}

impl<S: SessionSink + ?Sized> SessionSink for Arc<S> {
    fn begin(&self, session: &Session) -> Result<(), FlowError> {
        (**self).begin(session)
    }
    fn append(&self, session: &Session) -> Result<(), FlowError> {
        (**self).append(session)
    }
    fn finish(&self, session: &Session) -> Result<(), FlowError> {
        (**self).finish(session)
    }
    fn stored(&self, extra: &str) -> Result<Vec<LoadedSession>, FlowError> {
        (**self).stored(extra)
    }
}

/// A [`SessionSink`] that streams loop outputs into a [`rath_persist::Store`]: the file is
/// `<id>.jsonl.__partial__` while the loop runs and is closed (renamed) when it stops.
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let sink = rath_flow::StoreSink::new(rath_persist::Store::at(dir.path()));
/// # let _ = sink;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct StoreSink {
    store: Store,
    options: WriterOptions,
    writers: Mutex<HashMap<SessionId, SessionWriter>>,
}

impl fmt::Debug for StoreSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreSink")
            .field("dir", &self.store.dir())
            .finish_non_exhaustive()
    }
}

impl StoreSink {
    /// Writes into `store` with default writer options.
    pub fn new(store: Store) -> Self {
        Self::with_options(store, WriterOptions::default())
    }

    /// Writes into `store` with `options`.
    pub fn with_options(store: Store, options: WriterOptions) -> Self {
        Self {
            store,
            options,
            writers: Mutex::new(HashMap::new()),
        }
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    fn writers(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, SessionWriter>> {
        self.writers.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl SessionSink for StoreSink {
    fn begin(&self, session: &Session) -> Result<(), FlowError> {
        let w = self.store.writer(session, self.options.clone())?;
        self.writers().insert(session.id().clone(), w);
        Ok(())
    }

    fn append(&self, session: &Session) -> Result<(), FlowError> {
        if let Some(w) = self.writers().get_mut(session.id()) {
            w.sync_to(session)?;
        }
        Ok(())
    }

    fn finish(&self, session: &Session) -> Result<(), FlowError> {
        let writer = self.writers().remove(session.id());
        match writer {
            Some(w) => {
                w.close_with(session)?;
            }
            None => {
                self.store.save(session)?;
            }
        }
        Ok(())
    }

    fn stored(&self, extra: &str) -> Result<Vec<LoadedSession>, FlowError> {
        let mut out = Vec::new();
        for s in self.store.list()? {
            if s.extras.iter().any(|(k, _)| k == extra) {
                out.push(rath_persist::load_file(&s.path)?);
            }
        }
        Ok(out)
    }
}

/// The environment a workflow runs in: the backend registry that opens sandboxes, an
/// optional observer, a cancellation token, sinks, budgets, and the run's
/// [`LineageJournal`]. Cheap to clone; clones share everything, the journal included, so a
/// context is one run's: start another run with a new context or
/// [`FlowContext::with_journal`].
#[derive(Clone)]
pub struct FlowContext {
    backends: Arc<BackendRegistry>,
    observer: Option<Arc<dyn Observer>>,
    text_deltas: bool,
    cancel: CancellationToken,
    sink: Option<Arc<dyn SessionSink>>,
    budgets: Vec<Arc<BudgetMeter>>,
    journal: LineageJournal,
    /// Where in the workflow this context runs: one entry per [`crate::LoopUntil`] and
    /// [`crate::Parallel`] around it (and a [`crate::Sequence`] inside those), outermost
    /// first. A session loop records it on its output (lineage extra `flow.at`).
    position: Arc<[Value]>,
    /// A session a resuming fan-out took from the store for this branch, and whether it
    /// was cut off (its file left partial) rather than finished.
    recovered: Option<(SessionId, bool)>,
    /// Every model call goes through this service: the installed layers around the
    /// provider of the call ([`FlowContext::call_model`]).
    model: Arc<dyn ModelService>,
    /// Every tool call goes through this service: the installed layers around the tool
    /// ([`FlowContext::call_tool`]).
    tool: Arc<dyn ToolService>,
    /// How many layers are installed (for `Debug`).
    layers: usize,
}

impl fmt::Debug for FlowContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlowContext")
            .field("backends", &self.backends)
            .field("observer", &self.observer.is_some())
            .field("text_deltas", &self.text_deltas)
            .field("cancelled", &self.cancel.is_cancelled())
            .field("sink", &self.sink.is_some())
            .field("budgets", &self.budgets)
            .field("journal", &self.journal.len())
            .field("layers", &self.layers)
            .finish()
    }
}

impl Default for FlowContext {
    fn default() -> Self {
        Self::new()
    }
}

impl FlowContext {
    /// `local` and `isolated` backends, no observer, a fresh cancellation token, an empty
    /// journal.
    pub fn new() -> Self {
        Self {
            backends: Arc::new(BackendRegistry::with_defaults()),
            observer: None,
            text_deltas: false,
            cancel: CancellationToken::new(),
            sink: None,
            budgets: Vec::new(),
            journal: LineageJournal::new(),
            position: Arc::from(Vec::new()),
            recovered: None,
            model: Arc::new(Provide),
            tool: Arc::new(Invoke),
            layers: 0,
        }
    }

    /// Installs `layer` around every model and tool call made in this context and in the
    /// contexts made from it (nested workflows, fan-out branches): the layer installed last
    /// is outermost. See [`crate::service`].
    pub fn with_layer(mut self, layer: impl Layer) -> Self {
        self.model = layer.model(self.model);
        self.tool = layer.tool(self.tool);
        self.layers += 1;
        self
    }

    /// The model chokepoint: every model call of a session loop, selector or compressor is
    /// made here. It reports the request ([`FlowEvent::Request`]), sends `call` through the
    /// installed layers to its provider, then reports the reply ([`FlowEvent::Reply`]) and
    /// its usage ([`FlowEvent::Usage`]). Check [`FlowContext::admit`] first.
    pub async fn call_model<'a>(
        &'a self,
        call: ModelCall<'a>,
    ) -> Result<ProviderResponse, ProviderError> {
        let (agent, request) = (call.request.agent.as_deref(), call.request);
        self.emit(&FlowEvent::Request { agent, request });
        let resp = self.model.call(call).await;
        self.emit(&FlowEvent::Reply {
            agent,
            request,
            outcome: resp.as_ref(),
        });
        if let Ok(ProviderResponse {
            usage: Some(usage), ..
        }) = &resp
        {
            self.emit(&FlowEvent::Usage {
                agent,
                usage: *usage,
            });
        }
        resp
    }

    /// The tool chokepoint: every tool call a session loop answers is made here, through
    /// the installed layers to the tool, within `timeout`. A timeout or a panic in the tool
    /// (or a layer) is the call's error: the model sees it as the call's result.
    pub async fn call_tool(
        &self,
        call: ToolRequest,
        timeout: Option<std::time::Duration>,
    ) -> Result<ToolOutput, ToolError> {
        crate::service::bounded(self.tool.as_ref(), call, timeout).await
    }

    /// Where in the workflow this context runs (see the `flow.at` lineage extra in the
    /// crate docs): empty outside every `LoopUntil` and `Parallel`.
    pub fn position(&self) -> &[Value] {
        &self.position
    }

    /// This context one level deeper, at `entry`.
    pub(crate) fn at(&self, entry: Value) -> FlowContext {
        let mut position = self.position.to_vec();
        position.push(entry);
        let mut cx = self.clone();
        cx.position = Arc::from(position);
        cx
    }

    /// This context for resuming `session`, which a fan-out took from the store (`cut`: its
    /// file was left partial).
    pub(crate) fn recovering(mut self, session: &SessionId, cut: bool) -> FlowContext {
        self.recovered = Some((session.clone(), cut));
        self
    }

    /// For the session a fan-out took from the store for this branch: whether it was cut
    /// off; `None` for any other session.
    pub(crate) fn recovered(&self, session: &SessionId) -> Option<bool> {
        match &self.recovered {
            Some((id, cut)) if id == session => Some(*cut),
            _ => None,
        }
    }

    /// Records into `journal` (shared with the caller, who reads it after or during the
    /// run) instead of the context's own.
    ///
    /// ```
    /// use rath_flow::{FlowContext, FnWorkflow};
    /// use rath_persist::LineageJournal;
    /// use rath_session::{Chunk, Session, Stamper};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let journal = LineageJournal::new();
    /// let cx = FlowContext::new().with_journal(journal.clone());
    /// let fork = FnWorkflow::new("fork", "", |s: Session| Ok(s.fork().push(Chunk::user("more"))));
    /// let out = cx.forward(&fork, Session::user_with("q", Stamper::counter())).await?;
    /// assert_eq!(journal.len(), 2); // the input and the fork
    /// assert_eq!(journal.rows()[1].parent_session_ids[0], journal.rows()[0].id);
    /// assert_eq!(journal.get(out.id()).map(|s| s.len()), Some(2));
    /// # Ok::<(), rath_flow::FlowError>(())
    /// # }).unwrap();
    /// ```
    pub fn with_journal(mut self, journal: LineageJournal) -> Self {
        self.journal = journal;
        self
    }

    /// The run's journal: every session the context saw, the latest version of each, in
    /// first-seen order ([`LineageJournal::sessions`] to save them, [`LineageJournal::rows`]
    /// for the lineage export).
    pub fn journal(&self) -> &LineageJournal {
        &self.journal
    }

    /// Records `inputs` now, then (awaited) runs `run` and records its result: how a
    /// component that is not a [`crate::Workflow`] (the session loop) reports what it is given
    /// and what it returns.
    pub(crate) fn through<'f>(
        &'f self,
        inputs: &[&Session],
        run: impl Future<Output = Result<Session, FlowError>> + 'f,
    ) -> impl Future<Output = Result<Session, FlowError>> + 'f {
        for s in inputs {
            self.record(s);
        }
        self.settle(run)
    }

    /// Awaits `run`, then records what it returned (the session, or the one its failure
    /// carries).
    pub(crate) async fn settle(
        &self,
        run: impl Future<Output = Result<Session, FlowError>>,
    ) -> Result<Session, FlowError> {
        let result = run.await;
        match &result {
            Ok(s) => self.record(s),
            Err(e) => {
                if let Some(s) = e.partial_session() {
                    self.record(s);
                }
            }
        }
        result
    }

    /// Streams every session loop's output in this context to `sink` as it grows (what the
    /// [`crate::WorkflowExt::with_sink`] layer sets for the workflow it wraps).
    pub fn with_sink(self, sink: impl SessionSink + 'static) -> Self {
        self.with_shared_sink(Arc::new(sink))
    }

    /// [`FlowContext::with_sink`] with a shared sink.
    pub fn with_shared_sink(mut self, sink: Arc<dyn SessionSink>) -> Self {
        self.sink = Some(sink);
        self
    }

    /// The sink session loops stream to, if any.
    pub fn sink(&self) -> Option<&Arc<dyn SessionSink>> {
        self.sink.as_ref()
    }

    /// Adds an observer beside the current one (both see every event, the current one first).
    pub fn also_observe(self, observer: impl Observer + 'static) -> Self {
        self.also_observe_shared(Arc::new(observer))
    }

    /// [`FlowContext::also_observe`] with a shared observer.
    pub fn also_observe_shared(mut self, added: Arc<dyn Observer>) -> Self {
        self.observer = Some(match self.observer.take() {
            Some(first) => Arc::new(Both(first, added)),
            None => added,
        });
        self
    }

    /// Counts model calls and tokens against `budget` in this context (and in contexts made
    /// from it); [`FlowContext::admit`] refuses a call once a limit is reached.
    pub fn with_budget(mut self, budget: Budget) -> Self {
        self.budgets.push(Arc::new(BudgetMeter::new(budget)));
        self
    }

    /// Checks every budget before a model call by `agent`: `Err` (nothing sent) when one is
    /// spent. Components that call a model call this first.
    pub fn admit(&self, agent: Option<&str>) -> Result<(), FlowError> {
        self.budgets.iter().try_for_each(|b| b.admit(agent))
    }

    /// Uses `backends` to open sandboxes.
    pub fn with_backends(mut self, backends: BackendRegistry) -> Self {
        self.backends = Arc::new(backends);
        self
    }

    /// Sends events to `observer`.
    pub fn with_observer(mut self, observer: impl Observer + 'static) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// Sends events to a shared observer.
    pub fn with_shared_observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Asks for [`FlowEvent::TextDelta`]s: with `on` and an observer, session loops use the
    /// provider's streaming call (when their [`crate::LoopOptions::stream`] allows it) and
    /// pass the reply text to the observer as it arrives. Off by default: a loop whose
    /// deltas nobody reads makes plain, non-streamed calls, which every compatible server
    /// answers (some cannot stream tool calls).
    pub fn with_text_deltas(mut self, on: bool) -> Self {
        self.text_deltas = on;
        self
    }

    /// True when someone consumes text deltas: [`FlowContext::with_text_deltas`] asked for
    /// them and the observer wants them now ([`Observer::wants_text_deltas`]).
    pub fn wants_text_deltas(&self) -> bool {
        self.text_deltas
            && self
                .observer
                .as_ref()
                .is_some_and(|o| o.wants_text_deltas())
    }

    /// Uses `token` for cancellation (cancel it to stop every loop running in this context).
    pub fn with_cancel(mut self, token: CancellationToken) -> Self {
        self.cancel = token;
        self
    }

    /// The backend registry.
    pub fn backends(&self) -> &Arc<BackendRegistry> {
        &self.backends
    }

    /// The observer, if any.
    pub fn observer(&self) -> Option<&Arc<dyn Observer>> {
        self.observer.as_ref()
    }

    /// The cancellation token.
    pub fn cancel_token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// True once cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Sends `event` to the observer.
    pub fn emit(&self, event: &FlowEvent<'_>) {
        if !self.budgets.is_empty() {
            for b in &self.budgets {
                b.count(event);
            }
        }
        if let Some(o) = &self.observer {
            o.on_event(event);
        }
    }

    /// A context for one branch of a fan-out that starts from `start`: `start` is recorded
    /// here now (in the caller's order), and the branch records into a journal of its own
    /// that [`FlowContext::join`] folds back, so the run's journal does not depend on which
    /// branch happens to finish first. Everything else is shared with `self`.
    pub(crate) fn branch(&self, start: &Session) -> FlowContext {
        self.record(start);
        let journal = LineageJournal::new();
        journal.record(start);
        self.clone().with_journal(journal)
    }

    /// Folds the journals of `branches` (made by [`FlowContext::branch`]) into this one, in
    /// the order given. Observers already saw every session as its branch recorded it, so
    /// nothing is reported twice.
    pub(crate) fn join(&self, branches: &[FlowContext]) {
        for b in branches {
            for s in b.journal.sessions() {
                self.journal.record(&s);
            }
        }
    }

    /// Records a session in the journal and, when this version is new to it, reports it to
    /// the observer ([`FlowEvent::Session`]). [`FlowContext::forward`] does this for what
    /// workflows are given and return; call it for a session made outside any workflow.
    pub fn record(&self, session: &Session) {
        if self.journal.record(session) {
            self.emit(&FlowEvent::Session { session });
        }
    }
}

/// Two observers as one.
struct Both(Arc<dyn Observer>, Arc<dyn Observer>);

impl Observer for Both {
    fn on_event(&self, event: &FlowEvent<'_>) {
        self.0.on_event(event);
        self.1.on_event(event);
    }

    fn wants_text_deltas(&self) -> bool {
        self.0.wants_text_deltas() || self.1.wants_text_deltas()
    }
}

/// Limits on what a workflow may spend: model calls (`steps`) and tokens, counted over one
/// forward of the workflow a [`crate::WorkflowExt::with_budget`] layer wraps.
///
/// ```
/// use rath_flow::Budget;
///
/// let b = Budget::tokens(10_000).and_steps(20);
/// assert_eq!((b.tokens, b.steps), (Some(10_000), Some(20)));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Budget {
    /// Total tokens (prompt + completion) the model calls may use; a call is refused once
    /// this many were used.
    pub tokens: Option<u64>,
    /// Model calls allowed.
    pub steps: Option<u64>,
}

impl Budget {
    /// At most `n` tokens.
    pub fn tokens(n: u64) -> Self {
        Self {
            tokens: Some(n),
            steps: None,
        }
    }

    /// At most `n` model calls.
    pub fn steps(n: u64) -> Self {
        Self {
            tokens: None,
            steps: Some(n),
        }
    }

    /// Also at most `n` model calls.
    pub fn and_steps(mut self, n: u64) -> Self {
        self.steps = Some(n);
        self
    }

    /// Also at most `n` tokens.
    pub fn and_tokens(mut self, n: u64) -> Self {
        self.tokens = Some(n);
        self
    }
}

/// What a budget has counted so far.
#[derive(Debug)]
pub(crate) struct BudgetMeter {
    budget: Budget,
    tokens: AtomicU64,
    steps: AtomicU64,
}

impl BudgetMeter {
    fn new(budget: Budget) -> Self {
        Self {
            budget,
            tokens: AtomicU64::new(0),
            steps: AtomicU64::new(0),
        }
    }

    fn count(&self, event: &FlowEvent<'_>) {
        match event {
            FlowEvent::Request { .. } => {
                self.steps.fetch_add(1, Ordering::Relaxed);
            }
            FlowEvent::Usage { usage, .. } => {
                self.tokens.fetch_add(usage.total_tokens, Ordering::Relaxed);
            }
            _ => {}
        }
    }

    fn admit(&self, agent: Option<&str>) -> Result<(), FlowError> {
        let spent = |limit: Option<u64>, used: &AtomicU64, what: &'static str| match limit {
            Some(max) if used.load(Ordering::Relaxed) >= max => Err(FlowError::BudgetSpent {
                what,
                used: used.load(Ordering::Relaxed),
                limit: max,
                agent: agent.map(str::to_owned),
            }),
            _ => Ok(()),
        };
        spent(self.budget.steps, &self.steps, "steps")?;
        spent(self.budget.tokens, &self.tokens, "tokens")
    }
}

/// A stamper for a parallel branch: [`Stamper::branch`] (in deterministic mode a private
/// source tagged from the parent, one parent token read before the fan-out, minting UUID-shaped
/// ids; else the parent itself).
pub(crate) fn branch_stamper(parent: &Stamper) -> Stamper {
    parent.branch()
}
