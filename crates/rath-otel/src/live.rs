//! Live spans: a workflow wrapped by [`Traced`] reports `invoke_workflow`, `invoke_agent`,
//! `chat` and `execute_tool` spans as it runs, through the flow layer's observer events.
//!
//! ```
//! use rath_otel::{SpanBuffer, Traced};
//! use rath_flow::{Agent, WorkflowExt};
//! use rath_provider::{ScriptedProvider, ScriptedResponse};
//! use rath_session::{Session, Stamper};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let model = ScriptedProvider::new(vec![ScriptedResponse::text("hi").usage(3, 1)]);
//! let spans = SpanBuffer::new();
//! let traced = Traced::new(Agent::new("greeter", "Greet.", model), spans.clone());
//! traced.run(Session::user_with("hello", Stamper::counter())).await?;
//! let names: Vec<String> = spans.spans().iter().map(|s| s.name.clone()).collect();
//! assert_eq!(names, ["chat", "invoke_agent greeter", "invoke_workflow greeter"]);
//! # Ok::<(), rath_flow::FlowError>(())
//! # }).unwrap();
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use rath_flow::{FlowContext, FlowError, FlowEvent, Observer, Workflow, WorkflowRole};
use rath_provider::{ProviderRequest, ProviderResponse};
use rath_session::{ChunkBody, LineageKind, Session, SessionId, Stamper, Timestamp};

use crate::SpanSink;
use crate::conv::*;
use crate::genai::{
    capture_opted_in, chat_name, compression_event, json_text, provider_name, route_event,
    set_cache, set_lineage, set_usage,
};
use crate::span::{Span, SpanId, SpanKind, Status, TraceId};
use crate::store::{lineage_links, route_decision_of, session_key};

/// Where a live tracer takes its clock from: the system clock, or a stamper of its own
/// (never the run's, whose ids and times must not move because it is traced).
#[derive(Clone, Debug)]
pub enum Clock {
    /// The system clock.
    System,
    /// A stamper's clock ([`Stamper::counter`] for fixed, stepping times).
    Stamper(Stamper),
}

impl Clock {
    fn now(&self) -> i64 {
        match self {
            Clock::System => Timestamp::now_utc().unix_micros(),
            Clock::Stamper(s) => s.now().unix_micros(),
        }
    }
}

/// Options of a live tracer.
#[derive(Clone, Debug)]
pub struct TraceOptions {
    /// Record message content (`gen_ai.input.messages`, `gen_ai.output.messages`, tool
    /// arguments and results). Off unless
    /// `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`.
    pub capture_content: bool,
    /// The clock.
    pub clock: Clock,
    /// The lineage root the run belongs to (its `gen_ai.conversation.id` and the seed of its
    /// trace id); by default the input session's own root: the session itself when it has no
    /// parents, else its first parent, so a resumed run keeps its trace.
    pub root: Option<String>,
}

impl Default for TraceOptions {
    fn default() -> Self {
        Self::from_lookup(|k| std::env::var(k).ok())
    }
}

impl TraceOptions {
    /// Options from the process environment.
    pub fn from_env() -> Self {
        Self::default()
    }

    /// Options from a variable lookup (for tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        Self {
            capture_content: capture_opted_in(get(CAPTURE_CONTENT_VAR).as_deref()),
            clock: Clock::System,
            root: None,
        }
    }

    /// Sets `capture_content`.
    pub fn capture_content(mut self, on: bool) -> Self {
        self.capture_content = on;
        self
    }

    /// Sets the clock.
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Sets the lineage root.
    pub fn root(mut self, root: impl Into<String>) -> Self {
        self.root = Some(root.into());
        self
    }
}

/// A workflow whose every forward is traced: one `invoke_workflow` span, the agents, model
/// and tool calls inside it as children, lineage operations as linked spans.
pub struct Traced<W> {
    inner: W,
    sink: Arc<dyn SpanSink>,
    options: TraceOptions,
}

impl<W> fmt::Debug for Traced<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Traced")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<W: Workflow> Traced<W> {
    /// `inner`, with spans going to `sink` and options from the environment.
    pub fn new(inner: W, sink: impl SpanSink + 'static) -> Self {
        Self::with_shared_sink(inner, Arc::new(sink))
    }

    /// `inner` with a shared sink.
    pub fn with_shared_sink(inner: W, sink: Arc<dyn SpanSink>) -> Self {
        Self {
            inner,
            sink,
            options: TraceOptions::from_env(),
        }
    }

    /// Sets the options.
    pub fn with_options(mut self, options: TraceOptions) -> Self {
        self.options = options;
        self
    }
}

impl<W: Workflow> Workflow for Traced<W> {
    fn forward<'a>(
        &'a self,
        session: Session,
        cx: &'a FlowContext,
    ) -> BoxFuture<'a, Result<Session, FlowError>> {
        Box::pin(async move {
            let root = self.options.root.clone().unwrap_or_else(|| {
                session
                    .lineage()
                    .parents
                    .first()
                    .unwrap_or(session.id())
                    .as_str()
                    .to_owned()
            });
            let run = Arc::new(LiveRun::new(
                self.inner.name(),
                &root,
                crate::bridge::enclosing_span(),
                self.sink.clone(),
                self.options.clone(),
            ));
            run.begin(&session);
            let child = cx.clone().also_observe_shared(run.clone());
            let out = self.inner.forward(session, &child).await;
            run.end(out.as_ref());
            out
        })
    }

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
}

/// A span being recorded.
struct Open {
    span: Span,
}

/// The state of one traced forward.
struct LiveRun {
    trace: TraceId,
    /// The enclosing span (a worker's) this run's spans are nested under, if any.
    enclosing: Option<SpanId>,
    root: String,
    workflow_id: SpanId,
    sink: Arc<dyn SpanSink>,
    options: TraceOptions,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    workflow: Option<Span>,
    /// Open agent spans by agent name (a stack: the same agent may run nested).
    agents: HashMap<String, Vec<Open>>,
    /// Open model calls by request id.
    chats: HashMap<String, Open>,
    /// Open tool calls by (agent, call id).
    tools: HashMap<(String, String), Open>,
    /// How many spans of each key were made (agents and tools may repeat).
    counts: HashMap<String, u64>,
    /// Sessions with a span of their own, and that span.
    session_spans: HashMap<SessionId, SpanId>,
    /// Sessions already reported (route and compression events once each).
    seen: std::collections::HashSet<SessionId>,
}

impl State {
    fn next(&mut self, key: String) -> String {
        let n = self.counts.entry(key.clone()).or_insert(0);
        *n += 1;
        format!("{key}#{n}")
    }
}

impl LiveRun {
    /// A run of `workflow` in the trace of `root`, or, inside an enclosing OpenTelemetry span
    /// (a worker's `worker.execute`), in that span's trace and under it; span ids are then
    /// keyed by the enclosing span too, so two claims of one run never repeat an id.
    fn new(
        workflow: &str,
        root: &str,
        enclosing: Option<(TraceId, SpanId)>,
        sink: Arc<dyn SpanSink>,
        options: TraceOptions,
    ) -> Self {
        let trace = enclosing.map_or_else(|| TraceId::for_root(root), |(t, _)| t);
        let enclosing = enclosing.map(|(_, s)| s);
        let workflow_id = span_id(trace, enclosing, "workflow");
        let mut span = Span::new(
            format!("{OP_INVOKE_WORKFLOW} {workflow}"),
            SpanKind::Internal,
            trace,
            workflow_id,
        )
        .attr(GEN_AI_OPERATION_NAME, OP_INVOKE_WORKFLOW)
        .attr(GEN_AI_WORKFLOW_NAME, workflow)
        .attr(GEN_AI_CONVERSATION_ID, root);
        span.parent = enclosing;
        let state = State {
            workflow: Some(span),
            ..State::default()
        };
        Self {
            trace,
            enclosing,
            root: root.to_owned(),
            workflow_id,
            sink,
            options,
            state: Mutex::new(state),
        }
    }

    /// The id of the span named `key` in this run.
    fn id(&self, key: &str) -> SpanId {
        span_id(self.trace, self.enclosing, key)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn begin(&self, input: &Session) {
        let now = self.options.clock.now();
        let mut st = self.lock();
        if let Some(w) = st.workflow.as_mut() {
            w.start_unix_micros = now;
            w.attributes.set(RATH_SESSION_ID, input.id().as_str());
        }
        let key = session_key(input.id().as_str());
        st.session_spans.insert(input.id().clone(), self.id(&key));
    }

    fn end(&self, out: Result<&Session, &FlowError>) {
        // The result itself (a selector's final decision is on it), as the caller's context
        // will record it once the forward returns.
        if let Ok(s) = out {
            self.session(s);
        }
        let now = self.options.clock.now();
        let mut spans = Vec::new();
        {
            let mut st = self.lock();
            // Anything still open (a cancelled or failed run) ends with the workflow.
            let chats: Vec<Open> = st.chats.drain().map(|(_, o)| o).collect();
            let tools: Vec<Open> = st.tools.drain().map(|(_, o)| o).collect();
            let agents: Vec<Open> = st.agents.drain().flat_map(|(_, v)| v).collect();
            for mut o in chats.into_iter().chain(tools).chain(agents) {
                o.span.end_unix_micros = now;
                o.span.status = Status::Error("unfinished".into());
                spans.push(o.span);
            }
            if let Some(mut w) = st.workflow.take() {
                w.end_unix_micros = now;
                match out {
                    Ok(s) => {
                        if let Some(u) = s.usage() {
                            set_usage(&mut w.attributes, &u);
                            w.attributes.set(RATH_USAGE_TOTAL_TOKENS, u.total_tokens);
                        }
                    }
                    Err(e) => {
                        w.attributes.set(ERROR_TYPE, e.failure_kind());
                        w.status = Status::Error(e.to_string());
                    }
                }
                spans.sort_by_key(|s| s.start_unix_micros);
                spans.push(w);
            }
        }
        for s in spans {
            self.sink.emit(s);
        }
    }

    fn parent_of(&self, st: &State, agent: Option<&str>) -> SpanId {
        agent
            .and_then(|a| st.agents.get(a))
            .and_then(|v| v.last())
            .map_or(self.workflow_id, |o| o.span.span_id)
    }

    fn agent_start(&self, agent: &str, input: &Session) {
        let now = self.options.clock.now();
        let mut st = self.lock();
        let key = st.next(format!("agent:{agent}"));
        let mut span = Span::new(
            format!("{OP_INVOKE_AGENT} {agent}"),
            SpanKind::Internal,
            self.trace,
            self.id(&key),
        )
        .attr(GEN_AI_OPERATION_NAME, OP_INVOKE_AGENT)
        .attr(GEN_AI_AGENT_NAME, agent)
        .attr(GEN_AI_CONVERSATION_ID, self.root.as_str());
        span.parent = Some(self.workflow_id);
        span.start_unix_micros = now;
        let _ = input;
        st.agents
            .entry(agent.to_owned())
            .or_default()
            .push(Open { span });
    }

    fn agent_end(&self, agent: &str, out: Result<&Session, &FlowError>) {
        let now = self.options.clock.now();
        let span = {
            let mut st = self.lock();
            let Some(mut open) = st.agents.get_mut(agent).and_then(Vec::pop) else {
                return;
            };
            let span = &mut open.span;
            span.end_unix_micros = now;
            match out {
                Ok(s) => {
                    set_lineage(&mut span.attributes, s);
                    if let Some(u) = s.agent_usage().get(agent) {
                        set_usage(&mut span.attributes, u);
                    }
                    span.links = self.links(&st, s);
                    st.session_spans.insert(s.id().clone(), span.span_id);
                }
                Err(e) => {
                    span.attributes.set(ERROR_TYPE, e.failure_kind());
                    span.status = Status::Error(e.to_string());
                }
            }
            open.span
        };
        self.sink.emit(span);
    }

    /// Links to the spans of `s`'s parents (their own span when they have one in this run).
    fn links(&self, st: &State, s: &Session) -> Vec<crate::span::Link> {
        let mut links = lineage_links(s, self.trace);
        for (l, p) in links.iter_mut().zip(s.lineage().parents.iter()) {
            if let Some(id) = st.session_spans.get(p) {
                l.span_id = *id;
            }
        }
        links
    }

    fn request(&self, agent: Option<&str>, req: &ProviderRequest) {
        let now = self.options.clock.now();
        let mut st = self.lock();
        let mut span = Span::new(
            chat_name(req.model.as_deref()),
            SpanKind::Client,
            self.trace,
            self.id(&format!("chat:{}", req.request_id)),
        )
        .attr(GEN_AI_OPERATION_NAME, OP_CHAT)
        .attr(GEN_AI_CONVERSATION_ID, self.root.as_str());
        if let Some(m) = &req.model {
            span.attributes.set(GEN_AI_REQUEST_MODEL, m);
        }
        if let Some(n) = req.max_tokens {
            span.attributes.set(GEN_AI_REQUEST_MAX_TOKENS, u64::from(n));
        }
        if let Some(t) = req.temperature {
            span.attributes
                .set(GEN_AI_REQUEST_TEMPERATURE, f64::from(t));
        }
        if let Some(a) = agent {
            span.attributes.set(GEN_AI_AGENT_NAME, a);
        }
        if self.options.capture_content {
            span.attributes
                .set(GEN_AI_INPUT_MESSAGES, json_text(&req.messages));
        }
        span.parent = Some(self.parent_of(&st, agent));
        span.start_unix_micros = now;
        st.chats.insert(req.request_id.clone(), Open { span });
    }

    fn reply(
        &self,
        req: &ProviderRequest,
        outcome: Result<&ProviderResponse, &rath_provider::ProviderError>,
    ) {
        let now = self.options.clock.now();
        let Some(mut open) = self.lock().chats.remove(&req.request_id) else {
            return;
        };
        let span = &mut open.span;
        span.end_unix_micros = now;
        match outcome {
            Ok(r) => {
                let a = &mut span.attributes;
                a.set(GEN_AI_PROVIDER_NAME, provider_name(&r.provider));
                a.set(GEN_AI_RESPONSE_ID, &r.request_id);
                if let Some(m) = r.model.as_ref().or(req.model.as_ref()) {
                    a.set(GEN_AI_RESPONSE_MODEL, m);
                }
                if let Some(f) = &r.finish_reason {
                    a.set(GEN_AI_RESPONSE_FINISH_REASONS, vec![f.clone()]);
                }
                if let Some(u) = &r.usage {
                    set_usage(a, u);
                }
                set_cache(a, &r.detail);
                if self.options.capture_content {
                    a.set(GEN_AI_OUTPUT_MESSAGES, json_text(r.chunk.body()));
                }
                if let Some(m) = r.model.as_deref().filter(|m| !m.is_empty()) {
                    span.name = chat_name(Some(m));
                }
            }
            Err(e) => {
                span.attributes.set(ERROR_TYPE, e.kind());
                span.status = Status::Error(e.to_string());
            }
        }
        self.sink.emit(open.span);
    }

    fn tool_start(&self, agent: Option<&str>, call: &rath_session::ToolCall) {
        let now = self.options.clock.now();
        let mut st = self.lock();
        let who = agent.unwrap_or("-").to_owned();
        let key = st.next(format!("tool:{who}:{}", call.id));
        let mut span = Span::new(
            format!("{OP_EXECUTE_TOOL} {}", call.function.name),
            SpanKind::Internal,
            self.trace,
            self.id(&key),
        )
        .attr(GEN_AI_OPERATION_NAME, OP_EXECUTE_TOOL)
        .attr(GEN_AI_TOOL_NAME, call.function.name.as_str())
        .attr(GEN_AI_TOOL_CALL_ID, call.id.as_str())
        .attr(GEN_AI_TOOL_TYPE, "function")
        .attr(GEN_AI_CONVERSATION_ID, self.root.as_str());
        if let Some(a) = agent {
            span.attributes.set(GEN_AI_AGENT_NAME, a);
        }
        if self.options.capture_content {
            span.attributes
                .set(GEN_AI_TOOL_CALL_ARGUMENTS, call.function.arguments.as_str());
        }
        span.parent = Some(self.parent_of(&st, agent));
        span.start_unix_micros = now;
        st.tools.insert((who, call.id.clone()), Open { span });
    }

    fn tool_end(
        &self,
        agent: Option<&str>,
        call: &rath_session::ToolCall,
        outcome: &str,
        content: &str,
    ) {
        let now = self.options.clock.now();
        let who = agent.unwrap_or("-").to_owned();
        let Some(mut open) = self.lock().tools.remove(&(who, call.id.clone())) else {
            return;
        };
        let span = &mut open.span;
        span.end_unix_micros = now;
        span.attributes.set(RATH_TOOL_OUTCOME, outcome);
        if outcome != "ok" {
            span.attributes.set(ERROR_TYPE, outcome);
            span.status = Status::Error(outcome.to_owned());
        }
        if self.options.capture_content {
            span.attributes.set(GEN_AI_TOOL_CALL_RESULT, content);
        }
        self.sink.emit(open.span);
    }

    /// A session the flow layer made: forks and merges get a span linked to their parents;
    /// route decisions and compression records become workflow events.
    fn session(&self, s: &Session) {
        let now = self.options.clock.now();
        let mut st = self.lock();
        if !st.seen.insert(s.id().clone()) {
            return;
        }
        let kind = s.lineage().kind.clone();
        if let Some(r) = route_decision_of(s)
            && let Some(w) = st.workflow.as_mut()
        {
            w.events.push(route_event(r, now));
        }
        if kind == LineageKind::OpSessionCompress {
            let events: Vec<_> = s
                .chunks()
                .iter()
                .filter_map(|c| match c.body() {
                    ChunkBody::CompressionRecord(r) => Some(compression_event(r, s, now)),
                    _ => None,
                })
                .collect();
            if let Some(w) = st.workflow.as_mut() {
                w.events.extend(events);
            }
        }
        if !matches!(kind, LineageKind::OpFork | LineageKind::OpMerge) {
            return;
        }
        let sid = self.id(&session_key(s.id().as_str()));
        let mut span = Span::new(
            s.lineage().operator.to_string(),
            SpanKind::Internal,
            self.trace,
            sid,
        )
        .attr(GEN_AI_CONVERSATION_ID, self.root.as_str());
        set_lineage(&mut span.attributes, s);
        span.links = self.links(&st, s);
        span.parent = Some(self.workflow_id);
        span.start_unix_micros = now;
        span.end_unix_micros = now;
        st.session_spans.insert(s.id().clone(), sid);
        drop(st);
        self.sink.emit(span);
    }
}

/// A span id of a run's trace: keyed by the enclosing span too when there is one.
fn span_id(trace: TraceId, enclosing: Option<SpanId>, key: &str) -> SpanId {
    match enclosing {
        None => trace.span(key),
        Some(e) => trace.span(&format!("{}/{key}", e.to_hex())),
    }
}

impl Observer for LiveRun {
    fn on_event(&self, event: &FlowEvent<'_>) {
        match event {
            FlowEvent::AgentStart { agent, session } => self.agent_start(agent, session),
            FlowEvent::AgentEnd { agent, outcome } => self.agent_end(agent, *outcome),
            FlowEvent::Request { agent, request } => self.request(*agent, request),
            FlowEvent::Reply {
                request, outcome, ..
            } => self.reply(request, *outcome),
            FlowEvent::ToolStart { agent, call } => self.tool_start(*agent, call),
            FlowEvent::ToolEnd {
                agent,
                call,
                outcome,
                content,
            } => self.tool_end(*agent, call, outcome, content),
            FlowEvent::Session { session } => self.session(session),
            _ => {}
        }
    }
}
