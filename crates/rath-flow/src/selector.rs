//! [`Selector`]: picks the next workflow among self-describing candidates, by model or by a
//! deterministic function, and records every decision as a `route_decision` chunk.
//!
//! ```
//! use rath_flow::{Agent, Decision, Selector, WorkflowExt};
//! use rath_provider::{ScriptedProvider, ScriptedResponse};
//! use rath_session::{ChunkKind, Session, Stamper};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let helper = Agent::new("helper", "Help.", ScriptedProvider::new(vec![ScriptedResponse::text("done!")]))
//!     .describe("Does the work.");
//! // Route to `helper` until it has answered once, then finish.
//! let sel = Selector::by_function("router", |s: &Session, _c: &[rath_flow::Candidate]| {
//!     if rath_flow::final_text(s).is_some() { Decision::done("answered") } else { Decision::to("helper", "needs work") }
//! })
//! .candidate(helper);
//! let out = sel.run(Session::user_with("Work, please.", Stamper::counter())).await?;
//! let routes = out.chunks().iter().filter(|c| c.kind() == ChunkKind::RouteDecision).count();
//! assert_eq!(routes, 2); // "helper", then done
//! # Ok::<(), rath_flow::FlowError>(())
//! # }).unwrap();
//! ```
//!
//! A decision annotates the session: a new session (parents `[input]`, operator
//! `Selector.route`, kind `op_annotate`) carrying a `route_decision` chunk with the
//! candidates, the choice (`None` = done), the reason and who decided (`function` or
//! `model:<name>`). A model decision also leaves its `model_call` evidence and usage
//! (attributed to the selector); the router's own reply is not added to the conversation.

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use rath_provider::{Provider, ProviderRequest, ToolChoice, ToolSchema};
use rath_session::{
    ChatMessage, Chunk, ChunkBody, Lineage, LineageKind, Role, RouteDecision, Session,
};
use serde_json::{Value, json};

use crate::FlowError;
use crate::context::FlowContext;
use crate::error::carry_usage;
use crate::error::{FailedAt, failed};
use crate::resume;
use crate::service::ModelCall;
use crate::workflow::{EmptyWorkflow, SharedWorkflow, Workflow, WorkflowRole};

/// A candidate as a decider sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Its name (what a decision names).
    pub name: String,
    /// Its description.
    pub description: String,
}

/// A decider's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The chosen candidate; `None` means done.
    pub choice: Option<String>,
    /// Why.
    pub reason: String,
}

impl Decision {
    /// Run `candidate` next.
    pub fn to(candidate: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            choice: Some(candidate.into()),
            reason: reason.into(),
        }
    }

    /// Finish.
    pub fn done(reason: impl Into<String>) -> Self {
        Self {
            choice: None,
            reason: reason.into(),
        }
    }
}

/// The boxed function of a function decider.
pub type DecideFn = dyn Fn(&Session, &[Candidate]) -> Decision + Send + Sync;

enum Decider {
    Function(Box<DecideFn>),
    Model {
        provider: Arc<dyn Provider>,
        model: Option<String>,
        instructions: String,
    },
}

/// Routes among candidate workflows. As a [`Workflow`] it repeats select-and-run until the
/// decider says done (or `max_steps` ran).
pub struct Selector {
    name: String,
    description: String,
    candidates: Vec<SharedWorkflow>,
    decider: Decider,
    max_steps: usize,
}

impl fmt::Debug for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Selector")
            .field("name", &self.name)
            .field("candidates", &self.candidate_infos())
            .field("max_steps", &self.max_steps)
            .finish_non_exhaustive()
    }
}

/// The name of the routing tool a model decider offers.
pub const ROUTE_TOOL: &str = "route";

impl Selector {
    fn with_decider(name: impl Into<String>, decider: Decider) -> Self {
        Self {
            name: name.into(),
            description: String::new(),
            candidates: Vec::new(),
            decider,
            max_steps: 8,
        }
    }

    /// A selector whose decisions come from `f` (deterministic routing).
    pub fn by_function(
        name: impl Into<String>,
        f: impl Fn(&Session, &[Candidate]) -> Decision + Send + Sync + 'static,
    ) -> Self {
        Self::with_decider(name, Decider::Function(Box::new(f)))
    }

    /// A selector that asks `provider`: the model sees the candidates' names and
    /// descriptions and the conversation, and answers with a `route` tool call
    /// (`{"choice": <name or "done">, "reason": ...}`) or a bare candidate name. A choice
    /// that names no candidate (small models do that) finishes the selector, recorded with a
    /// `fallback:` reason, so a confused model cannot stall or crash the run.
    pub fn by_model(name: impl Into<String>, provider: impl Provider + 'static) -> Self {
        Self::with_decider(
            name,
            Decider::Model {
                provider: crate::service::shared_provider(provider),
                model: None,
                instructions: "You route work to the next worker. Pick the candidate that should act next, or \"done\" when the task is complete.".to_owned(),
            },
        )
    }

    /// Adds a candidate.
    pub fn candidate(mut self, w: impl Workflow + 'static) -> Self {
        self.candidates.push(Arc::new(w));
        self
    }

    /// Adds a shared candidate.
    pub fn candidate_shared(mut self, w: SharedWorkflow) -> Self {
        self.candidates.push(w);
        self
    }

    /// Sets the description.
    pub fn describe(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Caps select-and-run steps when used as a workflow (default 8).
    pub fn max_steps(mut self, n: usize) -> Self {
        self.max_steps = n;
        self
    }

    /// Sets the model name sent by a model decider.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        if let Decider::Model { model: m, .. } = &mut self.decider {
            *m = Some(model.into());
        }
        self
    }

    /// Replaces a model decider's instructions.
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        if let Decider::Model { instructions, .. } = &mut self.decider {
            *instructions = text.into();
        }
        self
    }

    /// The candidates as deciders see them.
    pub fn candidate_infos(&self) -> Vec<Candidate> {
        self.candidates
            .iter()
            .map(|c| Candidate {
                name: c.name().to_owned(),
                description: c.description().to_owned(),
            })
            .collect()
    }

    /// Decides the next workflow for `session`: the annotated session and the chosen
    /// workflow ([`EmptyWorkflow`] when done).
    pub async fn select(
        &self,
        session: &Session,
        cx: &FlowContext,
    ) -> Result<(Session, SharedWorkflow), FlowError> {
        let infos = self.candidate_infos();
        let lineage = Lineage::new(
            vec![session.id().clone()],
            "Selector.route",
            LineageKind::OpAnnotate,
        );
        let out = carry_usage(session, session.derive(lineage));
        let (mut out, decision, decided_by) = self.decide(session, out, &infos, cx).await?;
        let (chosen, decision) = match self.resolve(decision) {
            Ok(resolved) => resolved,
            Err(e) => return Err(self.failed(e, out, None)),
        };
        out.push_mut(Chunk::new(ChunkBody::RouteDecision(RouteDecision {
            selector: self.name.clone(),
            candidates: infos.iter().map(|c| c.name.clone()).collect(),
            choice: decision.choice.clone(),
            reason: decision.reason,
            decided_by,
        })));
        let wf: SharedWorkflow = chosen.unwrap_or_else(|| Arc::new(EmptyWorkflow));
        Ok((out, wf))
    }

    /// The decider's answer for `session`, who gave it (`function` or `model:<name>`), and
    /// the annotated session `out` (with a model decider's evidence and usage).
    async fn decide(
        &self,
        session: &Session,
        out: Session,
        infos: &[Candidate],
        cx: &FlowContext,
    ) -> Result<(Session, Decision, String), FlowError> {
        match &self.decider {
            Decider::Function(f) => Ok((out, f(session, infos), "function".to_owned())),
            Decider::Model {
                provider,
                model,
                instructions,
            } => {
                if let Err(e) = cx.admit(Some(&self.name)) {
                    return Err(self.failed(e, out, None));
                }
                let req = self.route_request(&out, model.as_deref(), instructions, infos);
                let (out, d) = self
                    .ask_model(out, provider.as_ref(), req, infos, cx)
                    .await?;
                let who = model.clone().unwrap_or_else(|| provider.name().to_owned());
                Ok((out, d, format!("model:{who}")))
            }
        }
    }

    /// The chosen candidate (`None`: done) and the decision as recorded. A model may name
    /// anything: a name that is no candidate finishes, and the record says so; from a
    /// function it is a configuration error.
    fn resolve(&self, decision: Decision) -> Result<(Option<SharedWorkflow>, Decision), FlowError> {
        let Some(name) = decision.choice.as_deref() else {
            return Ok((None, decision));
        };
        if let Some(c) = self.candidates.iter().find(|c| c.name() == name) {
            return Ok((Some(c.clone()), decision));
        }
        if matches!(self.decider, Decider::Model { .. }) {
            let reason = format!(
                "fallback: the model chose {name:?}, which is not a candidate ({})",
                decision.reason
            );
            return Ok((None, Decision::done(reason)));
        }
        Err(FlowError::Config(format!(
            "selector {} chose {name:?}, which is not a candidate",
            self.name
        )))
    }

    /// The routing request: the instructions with the candidate listing as the system
    /// message, the conversation, and the `route` tool the model must call.
    fn route_request(
        &self,
        session: &Session,
        model: Option<&str>,
        instructions: &str,
        infos: &[Candidate],
    ) -> ProviderRequest {
        let mut listing = String::from(instructions);
        listing.push_str("\n\nCandidates:");
        for c in infos {
            listing.push_str(&format!("\n- {}: {}", c.name, c.description));
        }
        listing.push_str("\n- done: the task is complete.");
        let mut messages = vec![ChatMessage {
            role: Role::System,
            content: Some(listing),
            tool_call_id: None,
            tool_calls: None,
        }];
        messages.extend(session.messages());
        let mut names: Vec<Value> = infos.iter().map(|c| Value::from(c.name.clone())).collect();
        names.push(Value::from("done"));
        let tool = ToolSchema::new(
            ROUTE_TOOL,
            "Choose who acts next.",
            json!({
                "type": "object",
                "properties": {
                    "choice": {"type": "string", "enum": names},
                    "reason": {"type": "string"}
                },
                "required": ["choice", "reason"],
                "additionalProperties": false
            }),
        );
        let mut req = ProviderRequest::new(session.stamper().next_token("req"), messages)
            .with_tools(vec![tool])
            .with_tool_choice(ToolChoice::function(ROUTE_TOOL))
            .with_agent(self.name.clone());
        req.model = model.map(str::to_owned);
        req
    }

    /// Sends the routing request `req` and reads the decision; `session` gains the
    /// `model_call` evidence and the selector's usage.
    async fn ask_model(
        &self,
        session: Session,
        provider: &dyn Provider,
        req: ProviderRequest,
        infos: &[Candidate],
        cx: &FlowContext,
    ) -> Result<(Session, Decision), FlowError> {
        let timer = session.stamper().start_timer();
        let resp = cx.call_model(ModelCall::new(provider, &req)).await;
        let resp = match resp {
            Ok(r) => r,
            Err(e) => return Err(self.failed(e.into(), session, Some(&req.request_id))),
        };
        let mut out = session.push(resp.model_call_chunk(&req, timer.elapsed_ms()));
        if let Some(u) = resp.usage {
            out = out.with_usage(Some(&self.name), u);
        }
        Ok((out, parse_decision(&resp.chunk, infos)))
    }
}

impl Selector {
    /// The candidate a stopped selector was running and its step, from the marker `key`.
    fn resumed(&self, session: &Session, key: &str) -> (Option<SharedWorkflow>, usize) {
        let Some(m) = resume::marker(session, key) else {
            // Cut off by a crash (no marker): the candidate whose agent was running.
            let cut = resume::cut_in(session, &self.candidates);
            return (cut.map(|i| self.candidates[i].clone()), 0);
        };
        let name = m.get("candidate").and_then(Value::as_str).unwrap_or("");
        let step = m.get("step").and_then(Value::as_u64).unwrap_or(0) as usize;
        let running = self.candidates.iter().find(|c| c.name() == name).cloned();
        (running, step)
    }

    /// `e` as this selector's failure, on the annotated session `out` it had reached.
    fn failed(&self, e: FlowError, out: Session, request_id: Option<&str>) -> FlowError {
        let mut at = FailedAt::new(Some(&self.name), "route");
        at.request_id = request_id.map(str::to_owned);
        failed(e, Some(out), at)
    }
}

fn parse_decision(chunk: &Chunk, infos: &[Candidate]) -> Decision {
    if let Some(call) = chunk.tool_calls().first() {
        let args: Value = serde_json::from_str(&call.function.arguments).unwrap_or(Value::Null);
        let choice = args.get("choice").and_then(Value::as_str).unwrap_or("done");
        let reason = args
            .get("reason")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        return if choice == "done" {
            Decision::done(reason)
        } else {
            Decision::to(choice, reason)
        };
    }
    let text = chunk.text().unwrap_or("").trim();
    match infos
        .iter()
        .find(|c| text == c.name || text.starts_with(&format!("{} ", c.name)))
    {
        Some(c) => Decision::to(c.name.clone(), text.to_owned()),
        None => Decision::done(if text.is_empty() {
            "the model named no candidate".to_owned()
        } else {
            text.to_owned()
        }),
    }
}

impl Workflow for Selector {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn forward<'a>(
        &'a self,
        session: Session,
        cx: &'a FlowContext,
    ) -> BoxFuture<'a, Result<Session, FlowError>> {
        Box::pin(async move {
            let key = resume::key("selector", &self.name);
            let session = resume::restored(session);
            let (mut running, start) = self.resumed(&session, &key);
            let mut s = session;
            for step in start..self.max_steps {
                let next = match running.take() {
                    Some(c) => c,
                    None => {
                        let (annotated, next) = self.select(&s, cx).await?;
                        s = annotated;
                        let done = s.chunks().last().is_some_and(|c| {
                            matches!(c.body(), ChunkBody::RouteDecision(d) if d.choice.is_none())
                        });
                        if done {
                            break;
                        }
                        next
                    }
                };
                s = cx.forward(next.as_ref(), s).await?;
                if !s.pending().is_empty() {
                    let marker = json!({"candidate": next.name(), "step": step});
                    return Ok(resume::stopped(s, key, marker));
                }
            }
            Ok(s)
        })
    }
    fn role(&self) -> WorkflowRole {
        WorkflowRole::Group
    }
    fn children(&self, visit: &mut dyn FnMut(&dyn Workflow)) {
        for w in &self.candidates {
            visit(w.as_ref());
        }
    }
}
