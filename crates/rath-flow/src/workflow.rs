//! [`Workflow`]: `Session → Session`, and the combinators that nest workflows.
//!
//! ```
//! use rath_flow::{Agent, Parallel, Sequence, Workflow, WorkflowExt};
//! use rath_provider::{ScriptedProvider, ScriptedResponse};
//! use rath_session::{Session, Stamper};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let say = |name: &str, text: &str| {
//!     Agent::new(name, "Be brief.", ScriptedProvider::new(vec![ScriptedResponse::text(text)]))
//! };
//! let team = Sequence::new("team")
//!     .then(say("lead", "plan: a and b"))
//!     .then(Parallel::new("workers").branch(say("a", "did a")).branch(say("b", "did b")))
//!     .then(say("qa", "all good"));
//! let out = team.run(Session::user_with("Do a and b.", Stamper::counter())).await?;
//! assert_eq!(rath_flow::final_text(&out), Some("all good"));
//! let names = rath_flow::agent_paths(&team);
//! assert_eq!(names, ["team.lead", "team.workers.a", "team.workers.b", "team.qa"]);
//! # Ok::<(), rath_flow::FlowError>(())
//! # }).unwrap();
//! ```
//!
//! Like tower's `Service`, one contract composes: an [`crate::Agent`], a [`Sequence`], a
//! [`Parallel`] fan-out, a [`LoopUntil`], a [`crate::Selector`] and the compressors are all
//! workflows, and each nests inside the others.

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use rath_session::{ChunkBody, Session};

use crate::FlowError;
use crate::context::FlowContext;
use crate::error::{FailedAt, fail_from};

/// A shared workflow.
pub type SharedWorkflow = Arc<dyn Workflow>;

/// A step of a program over sessions: takes a session, returns a new one.
///
/// One method is required, [`Workflow::forward`]; `name` and `description` have defaults
/// (override them when the workflow is a selector candidate or an agent-path segment).
/// [`crate::WorkflowExt`] adds [`crate::WorkflowExt::run`] (a default context) and the layer builders.
pub trait Workflow: Send + Sync {
    /// Runs on `session` in the environment `cx`.
    fn forward<'a>(
        &'a self,
        session: Session,
        cx: &'a FlowContext,
    ) -> BoxFuture<'a, Result<Session, FlowError>>;

    /// A short name (used in agent paths and selector candidates); `"workflow"` by default.
    fn name(&self) -> &str {
        "workflow"
    }

    /// What it does, for a selector's model; empty by default.
    fn description(&self) -> &str {
        ""
    }

    /// How this workflow takes part in a walk of the workflow tree ([`agent_paths`], a
    /// resuming combinator finding the step a crash cut off): a plain step by default.
    fn role(&self) -> WorkflowRole {
        WorkflowRole::Step
    }

    /// Calls `visit` with each workflow directly inside this one, in order (a combinator's
    /// steps or branches, a selector's candidates, a layer's inner workflow); none by
    /// default. A workflow that nests others implements it, and says its [`WorkflowRole`].
    fn children(&self, visit: &mut dyn FnMut(&dyn Workflow)) {
        let _ = visit;
    }
}

/// How a workflow takes part in a walk of the workflow tree ([`Workflow::role`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WorkflowRole {
    /// A step of its own: no workflow inside, no agent.
    Step,
    /// Runs a session loop under its name: an agent path ends at it.
    Agent,
    /// Nests its children under its name (`team.workers.a`): a sequence, a fan-out, a loop,
    /// a selector.
    Group,
    /// Wraps one workflow and adds no name of its own to a path: a layer.
    Wrapper,
}

/// Every agent inside `workflow`, by its dotted path (`team.workers.a`): the names of the
/// groups around it, then its own, in the order the workflow declares them.
///
/// ```
/// use rath_flow::{Agent, Parallel, Sequence, agent_paths};
/// use rath_provider::ScriptedProvider;
///
/// let agent = |n: &str| Agent::new(n, "Work.", ScriptedProvider::new(vec![]));
/// let team = Sequence::new("team")
///     .then(agent("lead"))
///     .then(Parallel::new("workers").branch(agent("a")).branch(agent("b")));
/// assert_eq!(agent_paths(&team), ["team.lead", "team.workers.a", "team.workers.b"]);
/// ```
pub fn agent_paths(workflow: &dyn Workflow) -> Vec<String> {
    let mut out = Vec::new();
    walk_agents(workflow, "", &mut out);
    out
}

/// [`agent_paths`] below `prefix` (empty, or a path ending with `.`).
fn walk_agents(w: &dyn Workflow, prefix: &str, out: &mut Vec<String>) {
    match w.role() {
        WorkflowRole::Agent => out.push(format!("{prefix}{}", w.name())),
        WorkflowRole::Group => {
            let inner = format!("{prefix}{}.", w.name());
            w.children(&mut |c| walk_agents(c, &inner, out));
        }
        WorkflowRole::Wrapper => w.children(&mut |c| walk_agents(c, prefix, out)),
        // A step of a user's own that nests others (children, no role) adds no name.
        _ => w.children(&mut |c| walk_agents(c, prefix, out)),
    }
}

impl<W: Workflow + ?Sized> Workflow for Arc<W> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn description(&self) -> &str {
        (**self).description()
    }
    fn forward<'a>(
        &'a self,
        session: Session,
        cx: &'a FlowContext,
    ) -> BoxFuture<'a, Result<Session, FlowError>> {
        (**self).forward(session, cx)
    }
    fn role(&self) -> WorkflowRole {
        (**self).role()
    }
    fn children(&self, visit: &mut dyn FnMut(&dyn Workflow)) {
        (**self).children(visit)
    }
}

/// The text of the last assistant chunk with text (the final answer), if any.
pub fn final_text(session: &Session) -> Option<&str> {
    session.chunks().iter().rev().find_map(|c| match c.body() {
        ChunkBody::Assistant(p) => p.content.as_deref(),
        _ => None,
    })
}

/// The workflow that returns its input unchanged: what a selector returns when it is done.
#[derive(Clone, Debug, Default)]
pub struct EmptyWorkflow;

impl Workflow for EmptyWorkflow {
    fn name(&self) -> &str {
        "done"
    }
    fn description(&self) -> &str {
        "Finish: nothing more to do."
    }
    fn forward<'a>(
        &'a self,
        session: Session,
        _cx: &'a FlowContext,
    ) -> BoxFuture<'a, Result<Session, FlowError>> {
        Box::pin(async move { Ok(session) })
    }
}

/// The boxed closure of a [`FnWorkflow`].
pub type SessionFn = dyn Fn(Session) -> Result<Session, FlowError> + Send + Sync;

/// A synchronous `Session → Session` function as a workflow.
///
/// ```
/// use rath_flow::{FnWorkflow, Workflow};
/// use rath_session::{Chunk, Session};
///
/// let note = FnWorkflow::new("note", "Adds a note.", |s: Session| Ok(s.push(Chunk::note("me", "seen"))));
/// assert_eq!(note.name(), "note");
/// ```
pub struct FnWorkflow {
    name: String,
    description: String,
    f: Box<SessionFn>,
}

impl fmt::Debug for FnWorkflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnWorkflow")
            .field("name", &self.name)
            .finish()
    }
}

impl FnWorkflow {
    /// A workflow named `name` that applies `f`.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        f: impl Fn(Session) -> Result<Session, FlowError> + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            f: Box::new(f),
        }
    }
}

impl Workflow for FnWorkflow {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn forward<'a>(
        &'a self,
        session: Session,
        _cx: &'a FlowContext,
    ) -> BoxFuture<'a, Result<Session, FlowError>> {
        Box::pin(async move {
            (self.f)(session.clone()).map_err(|e| {
                let at = FailedAt::new(Some(&self.name), "function");
                fail_from(e, &session, "FnWorkflow.forward", at)
            })
        })
    }
}

/// The flow layer's entry point for a workflow, here beside the trait it runs (so the
/// context knows no workflow type).
impl FlowContext {
    /// Forwards `session` through `workflow` in this context: the one place where the flow
    /// layer sees what a workflow is given and what it returns. Combinators, layers and
    /// [`crate::WorkflowExt::run`] run their children through it; run a top-level workflow
    /// through it too (calling [`Workflow::forward`] directly skips the recording of that
    /// call's input and result). The input is recorded when the call is made (so a fan-out's
    /// forks are recorded in declared order, before any branch runs), the result when it
    /// comes back: the output session, or the session a failure carries.
    pub fn forward<'a, W: Workflow + ?Sized>(
        &'a self,
        workflow: &'a W,
        session: Session,
    ) -> BoxFuture<'a, Result<Session, FlowError>> {
        self.record(&session);
        let run = workflow.forward(session, self);
        Box::pin(self.settle(run))
    }
}
