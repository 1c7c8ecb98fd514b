//! The session loop: `(user session, agent session, provider, tools) → new session`.
//!
//! ```
//! use std::sync::Arc;
//! use rath_flow::{LoopOptions, ToolSet, run_session_loop};
//! use rath_provider::{ScriptedProvider, ScriptedResponse};
//! use rath_session::{LineageKind, Session, Stamper};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let stamper = Stamper::counter();
//! let agent = Session::system_with("Be brief.", stamper.clone());
//! let user = Session::user_with("Say hi.", stamper);
//! let provider = Arc::new(ScriptedProvider::new(vec![ScriptedResponse::text("hi").usage(5, 1)]));
//! let out = run_session_loop(&user, &agent, provider, &ToolSet::new(), &LoopOptions::default()).await?;
//! assert_eq!(out.lineage().kind, LineageKind::OpSessionLoop);
//! assert_eq!(out.lineage().parents, vec![user.id().clone(), agent.id().clone()]);
//! assert_eq!(out.conversation_len(), 2); // the agent's system row is not in the transcript
//! # Ok::<(), rath_flow::FlowError>(())
//! # }).unwrap();
//! ```
//!
//! Each round: one model call (assistant chunk + `model_call` evidence), then the requested
//! tool calls (parallel-safe ones concurrently, results always in call order), each answered
//! by a `tool_result` chunk (+ `tool_evidence`). Every failure is a tool result with an
//! `error_kind` and the loop goes on. The messages sent are the agent session's conversation
//! rows followed by the loop session's; the loop output holds the user session's chunks plus
//! the new ones, and names both sessions as parents, so nothing is kept privately.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rath_provider::{Provider, ProviderRequest, ProviderResponse, ToolChoice};
use rath_session::{
    Chunk, ChunkBody, Lineage, LineageKind, PendingCall, PolicyDecision, Session, ToolCall,
    ToolEvidence,
};
use serde_json::Value;

use crate::FlowError;
use crate::context::{FlowContext, FlowEvent};
use crate::error::{FailedAt, carry_usage, failed};
use crate::policy::{ToolPolicy, Verdict, decision_for};
use crate::service::{ModelCall, ToolRequest, text_deltas};
use crate::tool::{Registered, ToolContext, ToolError, ToolErrorKind, ToolOutput, ToolSet};

/// Pending-call reasons.
pub mod pending_reason {
    /// The policy requires a reviewer's decision.
    pub const REQUIRE_APPROVAL: &str = "require_approval";
    /// A later call of the same round as an approval-gated call (kept in call order).
    pub const QUEUED: &str = "queued_behind_approval";
    /// The run was cancelled before the call finished.
    pub const CANCELLED: &str = "cancelled";
}

/// How a loop runs.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct LoopOptions {
    /// Tool rounds allowed before the loop is truncated (`loop.truncated = true`): calls the
    /// model makes after that are answered with `max_tool_rounds_exceeded` and one last model
    /// call with `tool_choice: none` asks for a final answer.
    pub max_tool_rounds: usize,
    /// Timeout for tools that declare none; `None` waits forever.
    pub tool_timeout: Option<Duration>,
    /// Append `model_call` / `tool_evidence` chunks (on by default).
    pub evidence: bool,
    /// Model override sent with every request.
    pub model: Option<String>,
    /// `tool_choice` sent while tools are offered.
    pub tool_choice: ToolChoice,
    /// Sampling temperature override.
    pub temperature: Option<f32>,
    /// Completion token limit override.
    pub max_tokens: Option<u32>,
    /// Use the provider's streaming call, so text deltas reach the observer (on by
    /// default). A stream is requested only when someone consumes the deltas: the
    /// context has an observer and asked for them ([`FlowContext::with_text_deltas`]);
    /// otherwise every call is a plain, non-streamed one.
    pub stream: bool,
}

impl Default for LoopOptions {
    fn default() -> Self {
        Self {
            max_tool_rounds: 16,
            tool_timeout: Some(Duration::from_secs(300)),
            evidence: true,
            model: None,
            tool_choice: ToolChoice::Auto,
            temperature: None,
            max_tokens: None,
            stream: true,
        }
    }
}

impl LoopOptions {
    /// Sets `max_tool_rounds`.
    pub fn max_tool_rounds(mut self, n: usize) -> Self {
        self.max_tool_rounds = n;
        self
    }
    /// Sets the default tool timeout.
    pub fn tool_timeout(mut self, t: Option<Duration>) -> Self {
        self.tool_timeout = t;
        self
    }
    /// Turns evidence chunks on or off.
    pub fn evidence(mut self, on: bool) -> Self {
        self.evidence = on;
        self
    }
    /// Sets the model.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }
    /// Sets `tool_choice`.
    pub fn tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = choice;
        self
    }
    /// Sets the temperature.
    pub fn temperature(mut self, t: f32) -> Self {
        self.temperature = Some(t);
        self
    }
    /// Sets the completion token limit.
    pub fn max_tokens(mut self, n: u32) -> Self {
        self.max_tokens = Some(n);
        self
    }
    /// Turns streaming on or off.
    pub fn stream(mut self, on: bool) -> Self {
        self.stream = on;
        self
    }
}

/// A configured loop: provider, tools, policy, options and agent name. The sink its outputs
/// stream to comes from the [`FlowContext`] ([`FlowContext::with_sink`]).
/// Cheap to clone; [`crate::Agent`] wraps one.
#[derive(Clone)]
pub struct SessionLoop {
    provider: Arc<dyn Provider>,
    tools: ToolSet,
    policy: ToolPolicy,
    options: LoopOptions,
    agent: Option<String>,
}

impl std::fmt::Debug for SessionLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionLoop")
            .field("provider", &self.provider.name())
            .field("tools", &self.tools)
            .field("policy", &self.policy)
            .field("options", &self.options)
            .field("agent", &self.agent)
            .finish_non_exhaustive()
    }
}

/// `run_session_loop(user, agent, provider, tools, options)` with a default
/// [`FlowContext`] (local backends, no observer): OpenRath's entry point.
pub async fn run_session_loop(
    user: &Session,
    agent: &Session,
    provider: impl Provider + 'static,
    tools: &ToolSet,
    options: &LoopOptions,
) -> Result<Session, FlowError> {
    SessionLoop::new(provider, tools.clone())
        .with_options(options.clone())
        .run(user, agent, &FlowContext::new())
        .await
}

/// How a call reaches the round: through the policy, or already decided by a reviewer.
enum Gate {
    Policy,
    Approved,
    Rejected(PolicyDecision),
}

/// What became of one tool call: its answer and, with evidence on, its complete
/// `tool_evidence` (outcome and elapsed time filled in).
struct Outcome {
    answer: Result<ToolOutput, ToolError>,
    evidence: Option<ToolEvidence>,
}

/// A call whose tool is resolved and whose arguments are checked, ready to run.
struct Exec<'a> {
    call: &'a ToolCall,
    reg: &'a Registered,
    args: Value,
}

/// One call of a round on its way from its gate to its answer.
// Every slot ends `Answered`, so boxing the large variant would only add an allocation per call.
#[allow(clippy::large_enum_variant)]
enum Slot<'a> {
    /// Ready to run.
    Run(Exec<'a>),
    /// Answered; a policy decision chunk goes before the result when there is one.
    Answered(Option<Chunk>, Outcome),
}

impl Slot<'_> {
    fn parallel_safe(&self) -> bool {
        matches!(self, Slot::Run(e) if e.reg.tool.parallel_safe())
    }

    fn resource_key(&self) -> Option<String> {
        match self {
            Slot::Run(e) => e.reg.tool.resource_key(&e.args),
            Slot::Answered(..) => None,
        }
    }
}

/// A round's calls up to the first one that needs approval, and that call's index.
struct Plan<'a> {
    slots: Vec<Slot<'a>>,
    gated: Option<usize>,
}

impl SessionLoop {
    /// A loop over `provider` offering `tools`, every call allowed, default options.
    pub fn new(provider: impl Provider + 'static, tools: ToolSet) -> Self {
        Self {
            provider: crate::service::shared_provider(provider),
            tools,
            policy: ToolPolicy::allow_all(),
            options: LoopOptions::default(),
            agent: None,
        }
    }

    /// Replaces the tools offered.
    pub fn with_tools(mut self, tools: ToolSet) -> Self {
        self.tools = tools;
        self
    }

    /// Sets the tool policy.
    pub fn with_policy(mut self, policy: ToolPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Sets the options.
    pub fn with_options(mut self, options: LoopOptions) -> Self {
        self.options = options;
        self
    }

    /// Names the agent (usage attribution, evidence, pending work).
    pub fn with_agent_name(mut self, name: impl Into<String>) -> Self {
        self.agent = Some(name.into());
        self
    }

    /// The tools offered.
    pub fn tools(&self) -> &ToolSet {
        &self.tools
    }

    /// The options.
    pub fn options(&self) -> &LoopOptions {
        &self.options
    }

    /// The provider.
    pub fn provider(&self) -> &Arc<dyn Provider> {
        &self.provider
    }

    /// The agent name.
    pub fn agent_name(&self) -> Option<&str> {
        self.agent.as_deref()
    }

    /// Runs the loop: a new session with parents `[user, agent]`, operator
    /// `run_session_loop`, kind `op_session_loop`, holding `user`'s chunks plus the new ones.
    /// Usage carries `user`'s totals plus every model call's. The context records both
    /// inputs and the result (the output, or the session a failure carries).
    pub async fn run(
        &self,
        user: &Session,
        agent: &Session,
        cx: &FlowContext,
    ) -> Result<Session, FlowError> {
        cx.through(&[user, agent], async {
            let lineage = Lineage::new(
                vec![user.id().clone(), agent.id().clone()],
                "run_session_loop",
                LineageKind::OpSessionLoop,
            );
            let out = at_position(carry_usage(user, user.derive(lineage)), cx);
            let out = self.begin(out, 0, cx)?;
            self.drive(out, agent, cx, Vec::new(), 0).await
        })
        .await
    }

    /// Continues a session that stopped on pending work (approval, cancellation), also one
    /// loaded from a store in another process: a new session with parents
    /// `[stopped, agent]`, operator `resume_session_loop`, kind `op_resume`. Approved calls
    /// run, rejected ones are answered with `denied_by_policy`, queued or cancelled ones go
    /// through the policy again; then the rounds continue. The context records both inputs
    /// and the result, as [`SessionLoop::run`] does.
    pub async fn resume(
        &self,
        stopped: &Session,
        agent: &Session,
        cx: &FlowContext,
    ) -> Result<Session, FlowError> {
        let run = self.resume_inner(stopped, agent, cx);
        cx.through(&[stopped, agent], run).await
    }

    async fn resume_inner(
        &self,
        stopped: &Session,
        agent: &Session,
        cx: &FlowContext,
    ) -> Result<Session, FlowError> {
        // A session cut off by a crash (its file has no trailer) counts its calls again.
        let stopped = &crate::resume::with_evidence_usage(stopped.clone());
        let rounds = stopped
            .lineage()
            .extra("loop.rounds")
            .and_then(Value::as_u64)
            .unwrap_or(0) as usize;
        let lineage = Lineage::new(
            vec![stopped.id().clone(), agent.id().clone()],
            "resume_session_loop",
            LineageKind::OpResume,
        );
        let out = at_position(carry_usage(stopped, stopped.derive(lineage)), cx);
        let (out, work) = self.resumed_work(stopped, out)?;
        let out = self.begin(out, rounds, cx)?;
        self.drive(out, agent, cx, work, rounds).await
    }

    /// The stopped round's calls with their gates: the pending calls (or, for a session
    /// cut off between the assistant chunk and its results, the unanswered ones), taken off
    /// `out`. A call still waiting for its decision is an error.
    fn resumed_work(
        &self,
        stopped: &Session,
        mut out: Session,
    ) -> Result<(Session, Vec<(ToolCall, Gate)>), FlowError> {
        let mut pending: Vec<PendingCall> = out.pending().to_vec();
        for p in &pending {
            out = out.take_pending(&p.call.id)?.1;
        }
        if pending.is_empty() {
            pending = out
                .unanswered_tool_calls()
                .into_iter()
                .map(|call| self.pending(call, pending_reason::CANCELLED))
                .collect();
        }
        let mut work = Vec::with_capacity(pending.len());
        for p in pending {
            let gate = match decision_for(&out, &p.call.id) {
                Some(d) if d.decision == "approved" => Gate::Approved,
                Some(d) => Gate::Rejected(d.clone()),
                None if p.reason == pending_reason::REQUIRE_APPROVAL => {
                    return Err(FlowError::AwaitingDecision {
                        session_id: stopped.id().to_string(),
                        call_id: p.call.id,
                    });
                }
                None => Gate::Policy,
            };
            work.push((p.call, gate));
        }
        Ok((out, work))
    }

    /// Opens `out` in the context's sink.
    fn begin(&self, out: Session, rounds: usize, cx: &FlowContext) -> Result<Session, FlowError> {
        match cx.sink().map(|sink| sink.begin(&out)) {
            Some(Err(e)) => Err(self.fail(e, Some(out), self.at("persist", rounds), cx)),
            _ => Ok(out),
        }
    }

    /// The rounds: a resumed round first (if any), then model call, tool round, model call,
    /// ... until the model answers without calls or a call waits for approval.
    async fn drive(
        &self,
        mut out: Session,
        agent: &Session,
        cx: &FlowContext,
        resumed: Vec<(ToolCall, Gate)>,
        mut rounds: usize,
    ) -> Result<Session, FlowError> {
        let mut convo = Conversation::new(self.request(agent));
        convo.sync(&out);
        if !resumed.is_empty() {
            rounds += 1;
            match self.tool_round(out, resumed, rounds, cx).await? {
                Step::Continue(s) => out = s,
                Step::Stopped(s) => return Ok(s),
            }
            convo.sync(&out);
        }
        let mut truncated = false;
        loop {
            let resp;
            (out, resp) = self.model_turn(out, &mut convo.req, rounds, cx).await?;
            let calls = resp.tool_calls();
            if calls.is_empty() || truncated {
                if truncated && !calls.is_empty() {
                    out = self.refuse_all(out, calls);
                }
                break;
            }
            if rounds >= self.options.max_tool_rounds {
                truncated = true;
                out = self
                    .refuse_all(out, calls)
                    .with_extra("loop.truncated", true);
                convo.req.tool_choice = ToolChoice::None;
                out = self.persist_round(out, rounds, cx)?;
            } else {
                rounds += 1;
                let work = calls.iter().cloned().map(|c| (c, Gate::Policy)).collect();
                match self.tool_round(out, work, rounds, cx).await? {
                    Step::Continue(s) => out = s,
                    Step::Stopped(s) => return Ok(s),
                }
            }
            convo.sync(&out);
        }
        self.finish(out, rounds, cx)
    }

    /// The request every model call of this loop starts from (its messages grow each round).
    fn request(&self, agent: &Session) -> ProviderRequest {
        // Messages, and reasoning blocks the session's evidence keeps (sent back with them).
        let mut req = ProviderRequest::new(String::new(), Vec::new());
        for chunk in agent.chunks().iter() {
            req.push_chunk(chunk);
        }
        req.model = self.options.model.clone();
        req.tools = self.tools.schemas();
        req.tool_choice = self.options.tool_choice.clone();
        req.temperature = self.options.temperature;
        req.max_tokens = self.options.max_tokens;
        req.agent = self.agent.clone();
        req
    }

    /// One model call: cancellation and admission checks, the request event, the call
    /// (cancellable), the reply applied to `out` and its usage reported.
    async fn model_turn(
        &self,
        out: Session,
        req: &mut ProviderRequest,
        rounds: usize,
        cx: &FlowContext,
    ) -> Result<(Session, ProviderResponse), FlowError> {
        let agent = self.agent.as_deref();
        if cx.is_cancelled() {
            return Err(self.fail(cancelled(out), None, self.at("model_call", rounds), cx));
        }
        if let Err(e) = cx.admit(agent) {
            return Err(self.fail(e, Some(out), self.at("model_call", rounds), cx));
        }
        req.request_id = out.stamper().next_token("req");
        let timer = out.stamper().start_timer();
        let at = || self.at("model_call", rounds).request(&req.request_id);
        let resp = tokio::select! {
            biased;
            () = cx.cancel_token().cancelled() => {
                return Err(self.fail(cancelled(out), None, at(), cx));
            }
            r = self.call_model(req, cx) => r,
        };
        let resp = match resp {
            Ok(r) => r,
            Err(e) => return Err(self.fail(e.into(), Some(out), at(), cx)),
        };
        let out = self.apply(out, req, &resp, timer.elapsed_ms());
        Ok((out, resp))
    }

    /// One round of tool calls, fresh or resumed: the calls appended to the sink first (so a
    /// process that dies while they run leaves them on record, unanswered: forwarding that
    /// session resumes the round), then answered, then the answers appended; a round that
    /// stops for approval comes back `Stopped`, already closed.
    async fn tool_round(
        &self,
        out: Session,
        work: Vec<(ToolCall, Gate)>,
        rounds: usize,
        cx: &FlowContext,
    ) -> Result<Step, FlowError> {
        let out = self.persist_round(out, rounds, cx)?;
        match self.answer_calls(out, work, cx).await {
            Ok(Step::Continue(s)) => Ok(Step::Continue(self.persist_round(s, rounds, cx)?)),
            Ok(Step::Stopped(s)) => Ok(Step::Stopped(self.stop(s, rounds, cx)?)),
            Err(e) => Err(self.fail(e, None, self.at("tool_calls", rounds), cx)),
        }
    }

    /// Appends the round's chunks to the context's sink.
    fn persist_round(
        &self,
        out: Session,
        rounds: usize,
        cx: &FlowContext,
    ) -> Result<Session, FlowError> {
        match cx.sink().map(|sink| sink.append(&out)) {
            Some(Err(e)) => Err(self.fail(e, Some(out), self.at("persist", rounds), cx)),
            _ => Ok(out),
        }
    }

    /// Closes a finished run in the sink.
    fn finish(&self, out: Session, rounds: usize, cx: &FlowContext) -> Result<Session, FlowError> {
        if let Some(Err(e)) = cx.sink().map(|sink| sink.finish(&out)) {
            return Err(self.fail(e, Some(out), self.at("persist", rounds), cx));
        }
        Ok(out)
    }

    fn at(&self, step: &'static str, rounds: usize) -> FailedAt {
        let mut at = FailedAt::new(self.agent.as_deref(), step);
        at.round = Some(rounds as u64);
        at
    }

    fn stop(&self, out: Session, rounds: usize, cx: &FlowContext) -> Result<Session, FlowError> {
        let out = out
            .with_extra("loop.rounds", rounds as u64)
            .with_extra("loop.stopped", "pending_approval");
        if let Some(sink) = cx.sink() {
            sink.finish(&out)?;
        }
        Ok(out)
    }

    /// Ends a failed run: `e` with the session it reached (`out`, or the one a cancellation
    /// carries) plus a `run_failure` chunk; the session is closed in the sink (and the
    /// context records it as the run's result), so a failed run is kept. A failure to close
    /// the sink does not hide `e`.
    fn fail(
        &self,
        e: FlowError,
        out: Option<Session>,
        at: FailedAt,
        cx: &FlowContext,
    ) -> FlowError {
        let e = failed(e, out, at);
        if let (Some(session), Some(sink)) = (e.partial_session(), cx.sink()) {
            let _ = sink.finish(session);
        }
        e
    }

    async fn call_model(
        &self,
        req: &ProviderRequest,
        cx: &FlowContext,
    ) -> Result<ProviderResponse, rath_provider::ProviderError> {
        let call = ModelCall::new(self.provider.as_ref(), req);
        match cx.observer() {
            Some(obs) if self.options.stream && cx.wants_text_deltas() => {
                let agent = self.agent.as_deref();
                let mut sink = text_deltas(|text| {
                    obs.on_event(&FlowEvent::TextDelta { agent, text });
                });
                cx.call_model(call.streamed(&mut sink)).await
            }
            _ => cx.call_model(call).await,
        }
    }

    /// Appends the reply (and its evidence) to `out`, which the loop owns: chunks go in
    /// place, with no copy of the last leaf.
    fn apply(
        &self,
        mut out: Session,
        req: &ProviderRequest,
        resp: &ProviderResponse,
        elapsed_ms: f64,
    ) -> Session {
        if self.options.evidence {
            return resp.apply_owned(out, req, elapsed_ms);
        }
        out.push_mut(resp.chunk.clone());
        if let Some(u) = resp.usage {
            out.add_usage(req.agent.as_deref(), u);
        }
        out
    }

    fn refuse_all(&self, mut out: Session, calls: &[ToolCall]) -> Session {
        for call in calls {
            let err = ToolError::new(
                ToolErrorKind::MaxToolRoundsExceeded,
                format!(
                    "max_tool_rounds ({}) reached; answer without calling tools",
                    self.options.max_tool_rounds
                ),
            );
            let outcome = self.settle(call, err);
            out = self.push_answer(out, call, outcome);
        }
        out
    }

    /// Appends the call's `tool_result` chunk and, with evidence on, its `tool_evidence`.
    fn push_answer(&self, mut out: Session, call: &ToolCall, outcome: Outcome) -> Session {
        let content = match outcome.answer {
            Ok(o) => o.content,
            Err(e) => e.to_content(),
        };
        out.push_mut(Chunk::tool_result(
            call.id.clone(),
            call.function.name.clone(),
            content,
        ));
        if let Some(ev) = outcome.evidence {
            out.push_mut(Chunk::new(ChunkBody::ToolEvidence(ev)));
        }
        out
    }

    /// A call answered with `error` without running.
    fn settle(&self, call: &ToolCall, error: ToolError) -> Outcome {
        let answer = Err(error);
        Outcome {
            evidence: self.evidence(call, &answer, None),
            answer,
        }
    }

    /// The call's `tool_evidence`, built in one place (`None` with evidence off). A call that
    /// ran (`ran`: its context and elapsed time) reports what it recorded, else its last
    /// sandbox dispatch, else an in-process record; a call answered without running reports
    /// its outcome alone.
    fn evidence(
        &self,
        call: &ToolCall,
        answer: &Result<ToolOutput, ToolError>,
        ran: Option<(&ToolContext, f64)>,
    ) -> Option<ToolEvidence> {
        if !self.options.evidence {
            return None;
        }
        let mut ev = match ran {
            Some((tcx, _)) => ran_evidence(call, answer, tcx),
            None => ToolEvidence {
                tool_call_id: call.id.clone(),
                tool: call.function.name.clone(),
                ..ToolEvidence::default()
            },
        };
        ev.outcome = outcome_name(answer);
        ev.elapsed_ms = ran.map_or(0.0, |(_, ms)| ms);
        Some(ev)
    }

    fn policy_chunk(&self, call: &ToolCall, decision: &str, reason: &str) -> Chunk {
        Chunk::new(ChunkBody::PolicyDecision(PolicyDecision {
            agent: self.agent.clone(),
            tool_call_id: call.id.clone(),
            tool: call.function.name.clone(),
            decision: decision.to_owned(),
            reason: reason.to_owned(),
            decided_by: "policy".to_owned(),
        }))
    }

    fn pending(&self, call: ToolCall, reason: &str) -> PendingCall {
        PendingCall {
            call,
            agent: self.agent.clone(),
            reason: reason.to_owned(),
        }
    }

    /// Answers `work` in call order: plan (gates and arguments), run what is ready, record
    /// the answers. Returns `Stopped` when a call needs approval: earlier calls are
    /// answered, that call and the later ones become pending.
    async fn answer_calls(
        &self,
        out: Session,
        work: Vec<(ToolCall, Gate)>,
        cx: &FlowContext,
    ) -> Result<Step, FlowError> {
        let Plan { mut slots, gated } = self.plan(&work);
        let finished = tokio::select! {
            biased;
            () = cx.cancel_token().cancelled() => false,
            () = self.run_slots(&out, &mut slots, cx) => true,
        };
        if !finished {
            // Nothing of this round is recorded as answered: all of it becomes pending work.
            drop(slots);
            let mut out = out;
            for (call, _) in work {
                out = out.with_pending(self.pending(call, pending_reason::CANCELLED));
            }
            return Err(cancelled(out));
        }
        let out = self.record(out, &work, slots);
        Ok(match gated {
            None => Step::Continue(out),
            Some(at) => Step::Stopped(self.park(out, work, at)),
        })
    }

    /// Takes the calls through their gates in order, up to the first that needs approval.
    fn plan<'a>(&'a self, work: &'a [(ToolCall, Gate)]) -> Plan<'a> {
        let mut slots = Vec::with_capacity(work.len());
        for (i, (call, gate)) in work.iter().enumerate() {
            match self.triage(call, gate) {
                Some(slot) => slots.push(slot),
                None => {
                    return Plan {
                        slots,
                        gated: Some(i),
                    };
                }
            }
        }
        Plan { slots, gated: None }
    }

    /// One call through its gate: answered (rejected, denied, bad arguments), ready to run,
    /// or `None` when the policy wants a reviewer's decision first.
    fn triage<'a>(&'a self, call: &'a ToolCall, gate: &Gate) -> Option<Slot<'a>> {
        let denied = match gate {
            Gate::Rejected(d) => {
                Some((None, format!("rejected by {}: {}", d.decided_by, d.reason)))
            }
            Gate::Policy if !self.policy.is_permissive() => {
                match self.policy.check(&call.function.name) {
                    Verdict::Allow => None,
                    Verdict::Deny(reason) => {
                        Some((Some(self.policy_chunk(call, "deny", &reason)), reason))
                    }
                    Verdict::RequireApproval => return None,
                }
            }
            _ => None,
        };
        if let Some((decision, message)) = denied {
            let err = ToolError::new(ToolErrorKind::DeniedByPolicy, message);
            return Some(Slot::Answered(decision, self.settle(call, err)));
        }
        Some(match self.prepare(call) {
            Ok((reg, args)) => Slot::Run(Exec { call, reg, args }),
            Err(e) => Slot::Answered(None, self.settle(call, e)),
        })
    }

    /// Appends every answered slot (decision chunk, result, evidence) in call order.
    fn record(&self, mut out: Session, work: &[(ToolCall, Gate)], slots: Vec<Slot<'_>>) -> Session {
        for ((call, _), slot) in work.iter().zip(slots) {
            // Every slot has run by now.
            if let Slot::Answered(decision, outcome) = slot {
                if let Some(d) = decision {
                    out.push_mut(d);
                }
                out = self.push_answer(out, call, outcome);
            }
        }
        out
    }

    /// Stops the round at call `at`: it waits for approval, the later calls queue behind it.
    fn park(&self, mut out: Session, work: Vec<(ToolCall, Gate)>, at: usize) -> Session {
        if let Some((gated, _)) = work.get(at) {
            out.push_mut(self.policy_chunk(
                gated,
                pending_reason::REQUIRE_APPROVAL,
                &format!("tool {} requires approval", gated.function.name),
            ));
        }
        for (k, (call, _)) in work.into_iter().enumerate().skip(at) {
            let reason = if k == at {
                pending_reason::REQUIRE_APPROVAL
            } else {
                pending_reason::QUEUED
            };
            out = out.with_pending(self.pending(call, reason));
        }
        out
    }

    /// Resolves the tool and parses and validates the arguments.
    fn prepare<'t>(&'t self, call: &ToolCall) -> Result<(&'t Registered, Value), ToolError> {
        let name = &call.function.name;
        let Some(reg) = self.tools.registered(name) else {
            return Err(ToolError::new(
                ToolErrorKind::UnknownTool,
                format!(
                    "unknown tool {name:?}; available: {}",
                    self.tools.names().join(", ")
                ),
            ));
        };
        let raw = call.function.arguments.trim();
        let args: Value = if raw.is_empty() {
            Value::Object(Default::default())
        } else {
            serde_json::from_str(raw).map_err(|e| {
                ToolError::invalid_arguments(format!("arguments are not valid JSON: {e}"))
            })?
        };
        reg.validate(&args).map_err(|problems| {
            ToolError::invalid_arguments(format!(
                "arguments do not match the schema of {name}: {problems}"
            ))
        })?;
        Ok((reg, args))
    }

    /// Runs the slots that are ready, each answered in place: consecutive parallel-safe
    /// calls concurrently (calls sharing a resource key one after another), every other
    /// call alone, in call order.
    async fn run_slots(&self, out: &Session, slots: &mut [Slot<'_>], cx: &FlowContext) {
        let mut batch: Vec<&mut Slot<'_>> = Vec::new();
        for slot in slots.iter_mut() {
            if !matches!(slot, Slot::Run(_)) {
                continue;
            }
            if slot.parallel_safe() {
                batch.push(slot);
                continue;
            }
            self.run_batch(out, std::mem::take(&mut batch), cx).await;
            self.run_slot(out, slot, cx).await;
        }
        self.run_batch(out, batch, cx).await;
    }

    async fn run_batch(&self, out: &Session, batch: Vec<&mut Slot<'_>>, cx: &FlowContext) {
        if batch.len() <= 1 {
            for slot in batch {
                self.run_slot(out, slot, cx).await;
            }
            return;
        }
        let groups = by_resource(batch).into_iter().map(|group| async move {
            for slot in group {
                self.run_slot(out, slot, cx).await;
            }
        });
        futures::future::join_all(groups).await;
    }

    async fn run_slot(&self, out: &Session, slot: &mut Slot<'_>, cx: &FlowContext) {
        if let Slot::Run(e) = slot {
            let outcome = self.execute(out, e, cx).await;
            *slot = Slot::Answered(None, outcome);
        }
    }

    /// One call: start and end events, its answer, its evidence.
    async fn execute(&self, out: &Session, e: &mut Exec<'_>, cx: &FlowContext) -> Outcome {
        let agent = self.agent.as_deref();
        cx.emit(&FlowEvent::ToolStart {
            agent,
            call: e.call,
        });
        let tcx = ToolContext::new(
            out.clone(),
            cx.backends().clone(),
            self.agent.clone(),
            e.call.id.clone(),
        );
        let timer = out.stamper().start_timer();
        let call = ToolRequest {
            tool: e.reg.tool.clone(),
            context: tcx.clone(),
            args: std::mem::take(&mut e.args),
        };
        let timeout = e.reg.tool.timeout().or(self.options.tool_timeout);
        let answer = cx.call_tool(call, timeout).await;
        let evidence = self.evidence(e.call, &answer, Some((&tcx, timer.elapsed_ms())));
        if let Some(obs) = cx.observer() {
            let content = match &answer {
                Ok(o) => o.content.clone(),
                Err(err) => err.to_content(),
            };
            obs.on_event(&FlowEvent::ToolEnd {
                agent,
                call: e.call,
                outcome: &outcome_name(&answer),
                content: &content,
            });
        }
        Outcome { answer, evidence }
    }
}

/// Groups a batch by resource key: calls on one key run one after another, in call order.
fn by_resource<'s, 'a>(batch: Vec<&'s mut Slot<'a>>) -> Vec<Vec<&'s mut Slot<'a>>> {
    let mut groups: Vec<Vec<&'s mut Slot<'a>>> = Vec::new();
    let mut by_key: HashMap<String, usize> = HashMap::new();
    for slot in batch {
        let Some(key) = slot.resource_key() else {
            groups.push(vec![slot]);
            continue;
        };
        match by_key.get(&key) {
            Some(&g) => groups[g].push(slot),
            None => {
                by_key.insert(key, groups.len());
                groups.push(vec![slot]);
            }
        }
    }
    groups
}

/// `ok`, or the error kind: a call's `outcome` in evidence and events.
fn outcome_name(answer: &Result<ToolOutput, ToolError>) -> String {
    match answer {
        Ok(_) => "ok".to_owned(),
        Err(e) => e.kind.as_str().to_owned(),
    }
}

/// The evidence of a call that ran: what the tool recorded, else its last sandbox dispatch
/// (with the dispatch count when there were several), else an in-process record.
fn ran_evidence(
    call: &ToolCall,
    answer: &Result<ToolOutput, ToolError>,
    tcx: &ToolContext,
) -> ToolEvidence {
    let dispatched = tcx.dispatch_evidence();
    match (tcx.recorded_evidence(), dispatched.last()) {
        (Some(ev), _) => ToolEvidence {
            tool_call_id: call.id.clone(),
            tool: call.function.name.clone(),
            ..ev
        },
        (None, Some(d)) => {
            let mut ev = d.to_tool_evidence(call.id.clone(), call.function.name.clone());
            if dispatched.len() > 1 {
                ev.detail.insert(
                    "dispatches".to_owned(),
                    Value::from(dispatched.len() as u64),
                );
            }
            ev
        }
        (None, None) => ToolEvidence {
            tool_call_id: call.id.clone(),
            tool: call.function.name.clone(),
            backend: Some("in-process".to_owned()),
            bytes_in: call.function.arguments.len() as u64,
            bytes_out: answer.as_ref().map_or(0, |o| o.content.len() as u64),
            ..ToolEvidence::default()
        },
    }
}

enum Step {
    Continue(Session),
    Stopped(Session),
}

/// `out` with the context's position in the workflow (the lineage extra `flow.at`), when
/// it runs inside a `LoopUntil` or a `Parallel`: a session a crash cuts off then says which
/// iteration and which branch it was (see [`crate::resume`]).
fn at_position(out: Session, cx: &FlowContext) -> Session {
    if cx.position().is_empty() {
        return out;
    }
    out.with_extra(
        crate::resume::POSITION_KEY,
        Value::Array(cx.position().to_vec()),
    )
}

fn cancelled(session: Session) -> FlowError {
    FlowError::Cancelled {
        session: Box::new(session),
    }
}

/// The request of a loop and how much of the output session its messages already hold.
struct Conversation {
    req: ProviderRequest,
    synced: usize,
}

impl Conversation {
    fn new(req: ProviderRequest) -> Self {
        Self { req, synced: 0 }
    }

    /// Adds what `session`'s chunks not yet synced contribute: messages, reasoning blocks.
    fn sync(&mut self, session: &Session) {
        for i in self.synced..session.len() {
            if let Some(chunk) = session.get(i) {
                self.req.push_chunk(chunk);
            }
        }
        self.synced = self.synced.max(session.len());
    }
}
