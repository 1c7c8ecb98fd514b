//! The memory hook the [`crate::WorkflowExt::with_memory`] layer applies around a forward.
//!
//! ```
//! use std::sync::Arc;
//! use rath_flow::{MemoryHook, PolicyMemory};
//! use rath_memory::{CommitPolicy, LocalMemory, MemoryPolicy, RecallPolicy, Scope};
//!
//! let dir = tempfile::tempdir()?;
//! let mem = LocalMemory::open_at(dir.path(), "notes", Default::default())?;
//! let hook = PolicyMemory::new(
//!     MemoryPolicy {
//!         recall: Some(RecallPolicy::new(Scope::Agent, 3)),
//!         commit: Some(CommitPolicy::new(Scope::Agent, "answers")),
//!     },
//!     Arc::new(mem),
//! );
//! let s = rath_session::Session::user("kettle?");
//! let same = hook.before_model_call(&s, Some("helper"))?; // nothing stored yet
//! assert!(same.len() >= 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::sync::Arc;

use rath_memory::{Memory, MemoryPolicy};
use rath_session::Session;

use crate::FlowError;

/// Memory behaviour around a forward: recall-and-inject before it starts, commit after it
/// ends. Both steps leave `memory_event` chunks on the session.
pub trait MemoryHook: Send + Sync {
    /// Before a forward starts (not when it resumes stopped work).
    fn before_model_call(
        &self,
        session: &Session,
        agent: Option<&str>,
    ) -> Result<Session, FlowError>;
    /// After a forward from `input` produced `output` (not called when the loop stopped on
    /// pending approval).
    fn after_forward(
        &self,
        input: &Session,
        output: &Session,
        agent: Option<&str>,
    ) -> Result<Session, FlowError>;
}

impl<M: MemoryHook + ?Sized> MemoryHook for Arc<M> {
    fn before_model_call(
        &self,
        session: &Session,
        agent: Option<&str>,
    ) -> Result<Session, FlowError> {
        (**self).before_model_call(session, agent)
    }
    fn after_forward(
        &self,
        input: &Session,
        output: &Session,
        agent: Option<&str>,
    ) -> Result<Session, FlowError> {
        (**self).after_forward(input, output, agent)
    }
}

/// The adapter from a `rath_memory` [`MemoryPolicy`] and store to a [`MemoryHook`].
#[derive(Clone)]
pub struct PolicyMemory {
    policy: MemoryPolicy,
    memory: Arc<dyn Memory>,
}

impl fmt::Debug for PolicyMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyMemory")
            .field("policy", &self.policy)
            .field("store", &self.memory.store_id())
            .finish()
    }
}

impl PolicyMemory {
    /// `policy` applied to `memory`.
    pub fn new(policy: MemoryPolicy, memory: Arc<dyn Memory>) -> Self {
        Self { policy, memory }
    }
}

impl MemoryHook for PolicyMemory {
    fn before_model_call(
        &self,
        session: &Session,
        agent: Option<&str>,
    ) -> Result<Session, FlowError> {
        Ok(self
            .policy
            .recall_and_inject(session, self.memory.as_ref(), agent)?)
    }

    fn after_forward(
        &self,
        input: &Session,
        output: &Session,
        agent: Option<&str>,
    ) -> Result<Session, FlowError> {
        Ok(self
            .policy
            .commit_on_forward(input, output, self.memory.as_ref(), agent)?)
    }
}
