//! [`Agent`]: a system prompt, a provider, tools and a policy — a [`Workflow`] whose
//! forward is one session loop. Memory, sinks, observers and budgets are layers
//! ([`crate::layers`]).
//!
//! ```
//! use rath_flow::{Agent, ToolSet, WorkflowExt};
//! use rath_provider::{ScriptedProvider, ScriptedResponse};
//! use rath_session::{Session, Stamper};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let provider = ScriptedProvider::new(vec![ScriptedResponse::text("Paris.").usage(9, 2)]);
//! let agent = Agent::new("geo", "Answer in one word.", provider)
//!     .describe("Answers geography questions.")
//!     .with_tools(ToolSet::new());
//! let out = agent.run(Session::user_with("Capital of France?", Stamper::counter())).await?;
//! assert_eq!(rath_flow::final_text(&out), Some("Paris."));
//! assert_eq!(out.agent_usage()["geo"].total_tokens, 11);
//! # Ok::<(), rath_flow::FlowError>(())
//! # }).unwrap();
//! ```

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use rath_provider::Provider;
use rath_session::Session;

use crate::FlowError;
use crate::context::{FlowContext, FlowEvent};
use crate::policy::ToolPolicy;
use crate::resume::is_resumption;
use crate::session_loop::{LoopOptions, SessionLoop};
use crate::tool::{Tool, ToolSet};
use crate::workflow::{Workflow, WorkflowRole};

struct Inner {
    name: String,
    description: String,
    system_prompt: String,
    looper: SessionLoop,
}

/// A named agent. Cheap to clone (shared); the builder methods return a new agent.
#[derive(Clone)]
pub struct Agent(Arc<Inner>);

impl fmt::Debug for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("name", &self.0.name)
            .field("description", &self.0.description)
            .field("looper", &self.0.looper)
            .finish()
    }
}

impl Agent {
    /// An agent named `name` with `system_prompt`, answering through `provider`, no tools.
    pub fn new(
        name: impl Into<String>,
        system_prompt: impl Into<String>,
        provider: impl Provider + 'static,
    ) -> Self {
        let name = name.into();
        Self(Arc::new(Inner {
            looper: SessionLoop::new(provider, ToolSet::new()).with_agent_name(name.clone()),
            name,
            description: String::new(),
            system_prompt: system_prompt.into(),
        }))
    }

    fn edit(self, f: impl FnOnce(&mut Inner)) -> Self {
        let mut inner = match Arc::try_unwrap(self.0) {
            Ok(inner) => inner,
            Err(shared) => Inner {
                name: shared.name.clone(),
                description: shared.description.clone(),
                system_prompt: shared.system_prompt.clone(),
                looper: shared.looper.clone(),
            },
        };
        f(&mut inner);
        Self(Arc::new(inner))
    }

    /// Sets the description a selector shows to its model.
    pub fn describe(self, description: impl Into<String>) -> Self {
        let d = description.into();
        self.edit(|i| i.description = d)
    }

    /// Offers `tools` (replacing earlier ones). Build the set with [`ToolSet::builtins`] and
    /// [`ToolSet::with`], which refuse name clashes.
    pub fn with_tools(self, tools: ToolSet) -> Self {
        self.edit(|i| i.looper = i.looper.clone().with_tools(tools))
    }

    /// Adds one tool to the agent's set, keeping the others; a tool whose name is already
    /// offered is refused with [`FlowError::ToolNameClash`].
    ///
    /// ```
    /// use rath_flow::{Agent, FlowError, ToolContext, typed_tool};
    /// use rath_provider::ScriptedProvider;
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Args { text: String }
    ///
    /// let echo = || typed_tool("echo", "Echo.", |_cx, a: Args| async move { Ok(a.text) });
    /// let agent = Agent::new("a", "Use tools.", ScriptedProvider::new(vec![])).with_tool(echo())?;
    /// assert_eq!(agent.session_loop().tools().names(), ["echo"]);
    /// assert!(matches!(agent.with_tool(echo()), Err(FlowError::ToolNameClash { .. })));
    /// # Ok::<(), FlowError>(())
    /// ```
    pub fn with_tool(self, tool: impl Tool + 'static) -> Result<Self, FlowError> {
        let tools = self.0.looper.tools().clone().with(tool)?;
        Ok(self.with_tools(tools))
    }

    /// Sets the tool policy.
    pub fn with_policy(self, policy: ToolPolicy) -> Self {
        self.edit(|i| i.looper = i.looper.clone().with_policy(policy))
    }

    /// Sets the loop options.
    pub fn with_options(self, options: LoopOptions) -> Self {
        self.edit(|i| i.looper = i.looper.clone().with_options(options))
    }

    /// The agent's name (usage attribution key).
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The system prompt.
    pub fn system_prompt(&self) -> &str {
        &self.0.system_prompt
    }

    /// The configured loop.
    pub fn session_loop(&self) -> &SessionLoop {
        &self.0.looper
    }

    /// The agent's system session, stamped from `like`'s stamper (a `leaf_system`, made
    /// fresh for every forward; the session loop records it in the context as one of its
    /// inputs).
    pub fn agent_session(&self, like: &Session) -> Session {
        Session::system_with(self.0.system_prompt.clone(), like.stamper().clone())
    }
}

impl Workflow for Agent {
    fn name(&self) -> &str {
        &self.0.name
    }

    fn description(&self) -> &str {
        &self.0.description
    }

    fn forward<'a>(
        &'a self,
        session: Session,
        cx: &'a FlowContext,
    ) -> BoxFuture<'a, Result<Session, FlowError>> {
        Box::pin(async move {
            let name = self.0.name.as_str();
            cx.emit(&FlowEvent::AgentStart {
                agent: name,
                session: &session,
            });
            let agent = self.agent_session(&session);
            let out = if is_resumption(&session) {
                // Pending work (an approval stop, an interrupted round): continue it after
                // the reviewers' approve/reject decisions (see SessionLoop::resume).
                self.0.looper.resume(&session, &agent, cx).await
            } else {
                self.0.looper.run(&session, &agent, cx).await
            };
            cx.emit(&FlowEvent::AgentEnd {
                agent: name,
                outcome: out.as_ref(),
            });
            out
        })
    }

    fn role(&self) -> WorkflowRole {
        WorkflowRole::Agent
    }
}
