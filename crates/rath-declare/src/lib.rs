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
//! tools = ["read_workspace_file"]    # built-in workspace tools
//! approve = []                       # tools whose calls wait for a person's decision
//! max_tool_rounds = 8
//!
//! [agents.writer]
//! instructions = "Answer from those facts."
//! ```
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
    Agent, FlowError, LoopOptions, LoopUntil, Parallel, Selector, Sequence, SharedWorkflow,
    ToolPolicy, ToolSet,
};
use rath_provider::{Provider, ProviderError};
use rath_runtime::WorkflowRegistry;

pub use spec::{AgentSpec, Step, WorkflowSpec};

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
        Ok(Self { workflows })
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
            let all = self.workflows.clone();
            let models = models.clone();
            let top = spec.clone();
            registry = registry.register(name.clone(), &spec.text, move || {
                build_workflow(&all, &top, models.as_ref())
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
        build_workflow(&self.workflows, spec, models)
    }
}

fn build_workflow(
    all: &BTreeMap<String, Arc<WorkflowSpec>>,
    spec: &WorkflowSpec,
    models: &dyn Models,
) -> Result<SharedWorkflow, FlowError> {
    build_step(all, spec, &spec.flow, Some(&spec.name), models)
}

/// The workflow of `step` of `spec` (`name`: the name a combinator at the top takes).
fn build_step(
    all: &BTreeMap<String, Arc<WorkflowSpec>>,
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
            Some(agent) => Arc::new(build_agent(used, agent, models)?),
            // The check made sure it is a declared workflow.
            None => match all.get(used) {
                Some(other) => build_workflow(all, other, models)?,
                None => return Err(FlowError::Config(format!("no agent or workflow {used:?}"))),
            },
        },
        Step::Sequence { name: own, steps } => {
            let mut s = Sequence::new(named(own, "sequence"));
            if name.is_some() {
                // The top step is the workflow: it says what the workflow is for.
                s = s.describe(spec.description.clone());
            }
            for st in steps {
                s = s.then_shared(build_step(all, spec, st, None, models)?);
            }
            Arc::new(s)
        }
        Step::Parallel { name: own, steps } => {
            let mut p = Parallel::new(named(own, "parallel"));
            for st in steps {
                p = p.branch_shared(build_step(all, spec, st, None, models)?);
            }
            Arc::new(p)
        }
        Step::Select { name: own, steps } => {
            let own = named(own, "select");
            let mut s = Selector::by_model(own.clone(), models.provider(&own)?);
            for st in steps {
                s = s.candidate_shared(build_step(all, spec, st, None, models)?);
            }
            Arc::new(s)
        }
        Step::Loop {
            name: own,
            body,
            until,
            max,
        } => {
            let body = build_step(all, spec, body, None, models)?;
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

fn build_agent(name: &str, spec: &AgentSpec, models: &dyn Models) -> Result<Agent, FlowError> {
    let mut agent = Agent::new(name, spec.instructions.clone(), models.provider(name)?);
    if let Some(d) = &spec.description {
        agent = agent.describe(d.clone());
    }
    if !spec.tools.is_empty() {
        let all = ToolSet::builtins();
        let mut tools = ToolSet::new();
        for t in &spec.tools {
            // The check made sure every name is a built-in tool.
            if let Some(tool) = all.get(t) {
                tools.add(tool.clone())?;
            }
        }
        agent = agent.with_tools(tools);
    }
    if !spec.approve.is_empty() {
        let mut policy = ToolPolicy::allow_all();
        for t in &spec.approve {
            policy = policy.require_approval(t.clone());
        }
        agent = agent.with_policy(policy);
    }
    let mut options = LoopOptions::default();
    options.model = spec.model.clone();
    if let Some(n) = spec.max_tool_rounds {
        options.max_tool_rounds = n;
    }
    Ok(agent.with_options(options))
}
