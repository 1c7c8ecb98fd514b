//! Declared workflows: agents and their combinators written in TOML files, for people who
//! do not want to compile. Every file of a directory is read, parsed and checked whole
//! when it is loaded (a bad file is refused then, naming the file and line, never at the
//! first run), and the result is a [`WorkflowRegistry`], served and worked like compiled
//! workflows.
//!
//! ```
//! use std::sync::Arc;
//! use rath_declare::Declared;
//! use rath_provider::{Provider, ScriptedProvider, ScriptedResponse};
//!
//! let text = r#"
//! description = "Answers briefly."
//!
//! [agents.helper]
//! instructions = "Answer in one sentence."
//! "#;
//! let declared = Declared::parse_str("helper.toml", text)?;
//! assert_eq!(declared.names(), vec!["helper"]);
//! let registry = declared.registry(|_agent: &str| {
//!     Ok(Arc::new(ScriptedProvider::new(vec![ScriptedResponse::text("Yes.")])) as Arc<dyn Provider>)
//! });
//! assert_eq!(registry.names(), vec!["helper"]);
//! # Ok::<(), rath_declare::DeclareError>(())
//! ```
//!
//! The format (`docs/workflows.md` has it whole):
//!
//! ```toml
//! name = "team"                      # default: the file's stem
//! description = "Research, then write."
//! flow = { sequence = ["researcher", "writer"] }
//!
//! [agents.researcher]
//! instructions = "List the facts the question needs."
//! model = "gpt-4o-mini"              # the model name asked for; the provider and its
//!                                    # credentials come from the environment only
//! tools = ["read_workspace_file",    # built-in workspace tools,
//!          "mcp:docs/search"]        # and MCP servers' (mcp:SERVER or mcp:SERVER/TOOL)
//! approve = []                       # tools whose calls wait for a person's decision
//! max_tool_rounds = 8
//!
//! [agents.writer]
//! instructions = "Answer from those facts."
//!
//! [mcp.docs]                         # an MCP server: `command` (stdio) or `url` (HTTP)
//! command = "docs-mcp-server"
//! ```
//!
//! A file that declares MCP servers needs them started before its workflows run:
//! [`Declared::connect_mcp`] starts each one, lists its tools and refuses a tool it does not
//! have, naming the file and line.
//!
//! A step of `flow` is an agent's name, another declared workflow's name, or a table:
//! `{ sequence = [steps] }`, `{ parallel = [steps] }`, `{ select = [steps] }` (a model
//! picks the next candidate) or `{ loop = step, until = "TEXT", max = N }` (again until
//! the final text contains TEXT); each table may have a `name`. Without `flow`, a file
//! with one agent runs that agent.

#![warn(missing_docs)]

mod check;
mod spec;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rath_flow::{
    Agent, FlowError, LoopOptions, LoopUntil, Parallel, Selector, Sequence, SharedWorkflow, Tool,
    ToolPolicy, ToolSet,
};
use rath_mcp::{ConnectOptions, McpClient};
use rath_provider::{Provider, ProviderError};
use rath_runtime::WorkflowRegistry;

pub use spec::{AgentSpec, McpSpec, Step, ToolRef, WorkflowSpec};

/// Why declared workflows were refused: one line naming the file and the line.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeclareError {
    /// A file is wrong: its syntax, a field, a name it uses, a key in it.
    #[error("{}:{line}: {message}", file.display())]
    Invalid {
        /// The file.
        file: PathBuf,
        /// Its line, from 1.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A file or directory could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// What was read.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
}

/// Gives each agent its model: the agent's name in, a provider out (credentials from the
/// environment, or a script in a test).
pub trait Models: Send + Sync + 'static {
    /// The provider of agent `agent`.
    fn provider(&self, agent: &str) -> Result<Arc<dyn Provider>, ProviderError>;
}

impl<F> Models for F
where
    F: Fn(&str) -> Result<Arc<dyn Provider>, ProviderError> + Send + Sync + 'static,
{
    fn provider(&self, agent: &str) -> Result<Arc<dyn Provider>, ProviderError> {
        self(agent)
    }
}

/// Declared workflows, checked: every name a flow uses resolves, no workflow reaches
/// itself, no file holds a key.
#[derive(Clone, Debug, Default)]
pub struct Declared {
    workflows: BTreeMap<String, Arc<WorkflowSpec>>,
    /// The MCP servers' tools, once [`Declared::connect_mcp`] started them.
    mcp: Arc<Connected>,
}

/// The tools of each started MCP server, by workflow and server name. The tools hold their
/// server's connection: a stdio server lives while a workflow built with its tools does.
#[derive(Default)]
struct Connected(BTreeMap<(String, String), Vec<Arc<dyn Tool>>>);

impl std::fmt::Debug for Connected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

impl Declared {
    /// Every `*.toml` file of `dir` (in name order), checked together: a workflow may use
    /// another file's workflow by name.
    pub fn load_dir(dir: impl AsRef<Path>) -> Result<Self, DeclareError> {
        let dir = dir.as_ref();
        let io = |source| DeclareError::Io {
            path: dir.to_owned(),
            source,
        };
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(io)?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()
            .map_err(io)?;
        files.retain(|p| p.extension().is_some_and(|e| e == "toml") && p.is_file());
        files.sort();
        if files.is_empty() {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no workflow files (*.toml) in this directory",
            )));
        }
        let mut texts = Vec::new();
        for f in files {
            let text = std::fs::read_to_string(&f).map_err(|source| DeclareError::Io {
                path: f.clone(),
                source,
            })?;
            texts.push((f, text));
        }
        Self::parse_all(texts)
    }

    /// One file's text (`file` names it in errors and gives the default name).
    pub fn parse_str(file: impl Into<PathBuf>, text: &str) -> Result<Self, DeclareError> {
        Self::parse_all(vec![(file.into(), text.to_owned())])
    }

    /// Files' texts, checked together.
    pub fn parse_all(files: Vec<(PathBuf, String)>) -> Result<Self, DeclareError> {
        let mut workflows = BTreeMap::new();
        for (file, text) in files {
            let spec = spec::parse(&file, &text)?;
            if let Some(first) = workflows.get(&spec.name) {
                let first: &Arc<WorkflowSpec> = first;
                return Err(spec.error_at(
                    spec.name_line,
                    format!(
                        "workflow {:?} is also declared in {}",
                        spec.name,
                        first.file.display()
                    ),
                ));
            }
            workflows.insert(spec.name.clone(), Arc::new(spec));
        }
        check::check(&workflows)?;
        Ok(Self {
            workflows,
            mcp: Arc::default(),
        })
    }

    /// True when some file declares MCP servers (`[mcp.NAME]`), which
    /// [`Declared::connect_mcp`] starts before any of its workflows can run.
    pub fn uses_mcp(&self) -> bool {
        self.workflows.values().any(|w| !w.mcp.is_empty())
    }

    /// Starts (or reaches) every declared MCP server, lists its tools and checks that every
    /// tool an agent names is one of them and every agent's tools go together (no two of
    /// the same name, every schema usable). A server that cannot be started or reached, or
    /// a tool it does not have, is refused naming the file and line. The servers stay up
    /// while this value, its registry or a workflow built from it does (a stdio server is
    /// stopped when the last of them is dropped).
    pub async fn connect_mcp(&mut self, options: &ConnectOptions) -> Result<(), DeclareError> {
        let mut connected = Connected::default();
        for (wf, spec) in &self.workflows {
            for (server, m) in &spec.mcp {
                let at = |message: String| {
                    spec.error_at(m.line, format!("MCP server {server:?}: {message}"))
                };
                let how = m.config.spec().map_err(|e| at(e.to_string()))?;
                let mut opts = options.clone();
                if let Some(t) = m.config.call_timeout() {
                    opts = opts.call_timeout(t);
                }
                let client = McpClient::connect(server.clone(), how, &opts)
                    .await
                    .map_err(|e| at(format!("cannot be started or reached: {e}")))?;
                let tools = client
                    .tools()
                    .await
                    .map_err(|e| at(format!("cannot list its tools: {e}")))?;
                let tools = tools
                    .into_iter()
                    .map(|t| Arc::new(t) as Arc<dyn Tool>)
                    .collect();
                connected.0.insert((wf.clone(), server.clone()), tools);
            }
        }
        for spec in self.workflows.values() {
            for (agent, a) in &spec.agents {
                agent_tools(spec, agent, a, &connected)?;
            }
        }
        self.mcp = Arc::new(connected);
        Ok(())
    }

    /// The declared workflows' names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.workflows.keys().map(String::as_str).collect()
    }

    /// The declaration of workflow `name`.
    pub fn get(&self, name: &str) -> Option<&WorkflowSpec> {
        self.workflows.get(name).map(Arc::as_ref)
    }

    /// The workflows as a registry: each is registered with its file's text as its
    /// definition (any edit changes the hash a run is submitted with), and built afresh for
    /// each run, each agent's provider from `models`.
    pub fn registry(&self, models: impl Models) -> WorkflowRegistry {
        let models: Arc<dyn Models> = Arc::new(models);
        let mut registry = WorkflowRegistry::new();
        for (name, spec) in &self.workflows {
            let all = self.clone();
            let models = models.clone();
            let top = spec.clone();
            registry = registry.register(name.clone(), &spec.text, move || {
                all.build_spec(&top, models.as_ref())
            });
        }
        registry
    }

    /// Builds workflow `name` once (what a registry's constructor does for each run).
    pub fn build(&self, name: &str, models: &dyn Models) -> Result<SharedWorkflow, FlowError> {
        let spec = self
            .workflows
            .get(name)
            .ok_or_else(|| FlowError::Config(format!("no declared workflow {name:?}")))?;
        self.build_spec(spec, models)
    }

    fn build_spec(
        &self,
        spec: &WorkflowSpec,
        models: &dyn Models,
    ) -> Result<SharedWorkflow, FlowError> {
        self.build_step(spec, &spec.flow, Some(&spec.name), models)
    }

    /// The workflow of `step` of `spec` (`name`: the name a combinator at the top takes).
    fn build_step(
        &self,
        spec: &WorkflowSpec,
        step: &Step,
        name: Option<&str>,
        models: &dyn Models,
    ) -> Result<SharedWorkflow, FlowError> {
        let named = |own: &Option<String>, kind: &str| {
            own.clone()
                .or_else(|| name.map(str::to_owned))
                .unwrap_or_else(|| kind.to_owned())
        };
        Ok(match step {
            Step::Use { name: used, .. } => match spec.agents.get(used) {
                Some(agent) => Arc::new(self.build_agent(spec, used, agent, models)?),
                // The check made sure it is a declared workflow.
                None => match self.workflows.get(used) {
                    Some(other) => self.build_spec(other, models)?,
                    None => {
                        return Err(FlowError::Config(format!("no agent or workflow {used:?}")));
                    }
                },
            },
            Step::Sequence { name: own, steps } => {
                let mut s = Sequence::new(named(own, "sequence"));
                if name.is_some() {
                    // The top step is the workflow: it says what the workflow is for.
                    s = s.describe(spec.description.clone());
                }
                for st in steps {
                    s = s.then_shared(self.build_step(spec, st, None, models)?);
                }
                Arc::new(s)
            }
            Step::Parallel { name: own, steps } => {
                let mut p = Parallel::new(named(own, "parallel"));
                for st in steps {
                    p = p.branch_shared(self.build_step(spec, st, None, models)?);
                }
                Arc::new(p)
            }
            Step::Select { name: own, steps } => {
                let own = named(own, "select");
                let mut s = Selector::by_model(own.clone(), models.provider(&own)?);
                for st in steps {
                    s = s.candidate_shared(self.build_step(spec, st, None, models)?);
                }
                Arc::new(s)
            }
            Step::Loop {
                name: own,
                body,
                until,
                max,
            } => {
                let body = self.build_step(spec, body, None, models)?;
                let mut l = LoopUntil::new(named(own, "loop"), body, *max);
                if let Some(text) = until.clone() {
                    l = l.until(move |s| {
                        rath_flow::final_text(s).is_some_and(|t| t.contains(text.as_str()))
                    });
                }
                Arc::new(l)
            }
        })
    }

    fn build_agent(
        &self,
        spec: &WorkflowSpec,
        name: &str,
        a: &AgentSpec,
        models: &dyn Models,
    ) -> Result<Agent, FlowError> {
        let mut agent = Agent::new(name, a.instructions.clone(), models.provider(name)?);
        if let Some(d) = &a.description {
            agent = agent.describe(d.clone());
        }
        if !a.tools.is_empty() {
            let tools = agent_tools(spec, name, a, &self.mcp)
                .map_err(|e| FlowError::Config(e.to_string()))?;
            agent = agent.with_tools(tools);
        }
        if !a.approve.is_empty() {
            let mut policy = ToolPolicy::allow_all();
            for t in &a.approve {
                if let Some(tool) = ToolRef::of(t).tool_name() {
                    policy = policy.require_approval(tool.to_owned());
                }
            }
            agent = agent.with_policy(policy);
        }
        let mut options = LoopOptions::default();
        options.model = a.model.clone();
        if let Some(n) = a.max_tool_rounds {
            options.max_tool_rounds = n;
        }
        Ok(agent.with_options(options))
    }
}

/// The tools of agent `agent` (declared as `a` in `spec`): its built-in ones and those of
/// its MCP servers (`connected`: their tools once started). A tool named alone that the
/// server does not have or whose schema is unusable is an error at the line that names it;
/// of a server given whole, a tool whose schema is unusable is left out.
fn agent_tools(
    spec: &WorkflowSpec,
    agent: &str,
    a: &AgentSpec,
    connected: &Connected,
) -> Result<ToolSet, DeclareError> {
    let builtins = ToolSet::builtins();
    let mut tools = ToolSet::new();
    for t in &a.tools {
        let line = a.lines.get(t).copied().unwrap_or(a.line);
        let at = |message: String| spec.error_at(line, format!("agent {agent:?}: {message}"));
        let server_tools = |server: &str| {
            connected
                .0
                .get(&(spec.name.clone(), server.to_owned()))
                .ok_or_else(|| {
                    at(format!(
                        "MCP server {server:?} was not started (Declared::connect_mcp starts \
                         the servers a directory declares)"
                    ))
                })
        };
        match ToolRef::of(t) {
            ToolRef::Builtin(b) => {
                // The check made sure every such name is a built-in tool.
                if let Some(tool) = builtins.get(b) {
                    tools.add(tool.clone()).map_err(|e| at(e.to_string()))?;
                }
            }
            ToolRef::McpServer(server) => {
                for tool in server_tools(server)? {
                    match tools.add(tool.clone()) {
                        Ok(()) | Err(FlowError::InvalidTool { .. }) => {}
                        Err(e) => return Err(at(e.to_string())),
                    }
                }
            }
            ToolRef::McpTool(server, name) => {
                let all = server_tools(server)?;
                let tool = all.iter().find(|x| x.name() == name).ok_or_else(|| {
                    let mut names: Vec<&str> = all.iter().map(|x| x.name()).collect();
                    names.sort_unstable();
                    at(format!(
                        "MCP server {server:?} has no tool {name:?} (it has {})",
                        names.join(", ")
                    ))
                })?;
                tools.add(tool.clone()).map_err(|e| at(e.to_string()))?;
            }
        }
    }
    Ok(tools)
}
