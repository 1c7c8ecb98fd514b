//! The workflow registry: name → constructor and definition hash.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use rath_flow::{FlowError, SharedWorkflow, Workflow};

/// Builds a run's workflow: plain flow code, built afresh for each execution (so scripted
/// state starts over). The worker runs it in a context whose journal and ledger layer
/// ([`crate::RunScope`]) every model and tool call goes through.
pub type Constructor = Arc<dyn Fn() -> Result<SharedWorkflow, FlowError> + Send + Sync>;

/// A registered workflow.
#[derive(Clone)]
pub struct WorkflowDef {
    /// Its name (what a run names).
    pub name: String,
    /// The definition hash runs are submitted with; a worker whose registered hash differs
    /// refuses the run unless told otherwise.
    pub definition_hash: String,
    /// Its constructor.
    pub constructor: Constructor,
}

impl fmt::Debug for WorkflowDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkflowDef")
            .field("name", &self.name)
            .field("definition_hash", &self.definition_hash)
            .finish_non_exhaustive()
    }
}

/// Workflows a worker can run, by name.
#[derive(Clone, Debug, Default)]
pub struct WorkflowRegistry {
    defs: BTreeMap<String, WorkflowDef>,
}

/// The definition hash of a workflow described by `definition` (its version, its prompts,
/// its shape: whatever changes what it does): sha256, hex.
pub fn definition_hash(definition: &str) -> String {
    crate::sha256_hex(definition.as_bytes())
}

impl WorkflowRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `name` (replacing an earlier registration) with the hash of `definition`:
    /// a text that changes whenever what the workflow does changes (a version, its prompts,
    /// its shape), so a worker refuses runs submitted against another definition. The
    /// constructor returns any workflow (an `Agent`, a `Sequence`, a [`SharedWorkflow`]).
    ///
    /// ```
    /// use rath_flow::{Agent, Sequence};
    /// use rath_provider::ScriptedProvider;
    /// use rath_runtime::WorkflowRegistry;
    ///
    /// let registry = WorkflowRegistry::new()
    ///     .register("helper", "helper v1", || {
    ///         Ok(Agent::new("helper", "Answer briefly.", ScriptedProvider::new(vec![])))
    ///     })
    ///     .register("pair", "pair v1", || {
    ///         Ok(Sequence::new("pair")
    ///             .then(Agent::new("a", "Draft.", ScriptedProvider::new(vec![])))
    ///             .then(Agent::new("b", "Check.", ScriptedProvider::new(vec![]))))
    ///     });
    /// assert_eq!(registry.names(), vec!["helper", "pair"]);
    /// ```
    pub fn register<W: Workflow + 'static>(
        mut self,
        name: impl Into<String>,
        definition: &str,
        constructor: impl Fn() -> Result<W, FlowError> + Send + Sync + 'static,
    ) -> Self {
        let constructor = move || constructor().map(|w| Arc::new(w) as SharedWorkflow);
        let name = name.into();
        self.defs.insert(
            name.clone(),
            WorkflowDef {
                name,
                definition_hash: definition_hash(definition),
                constructor: Arc::new(constructor),
            },
        );
        self
    }

    /// The workflow registered as `name`.
    pub fn get(&self, name: &str) -> Option<&WorkflowDef> {
        self.defs.get(name)
    }

    /// Registered names.
    pub fn names(&self) -> Vec<&str> {
        self.defs.keys().map(String::as_str).collect()
    }
}
