//! The crate's one error type.

use rath_backend::BackendError;
use rath_memory::MemoryError;
use rath_persist::PersistError;
use rath_provider::ProviderError;
use rath_session::{Session, SessionError};

/// Everything that can stop a flow component.
///
/// Tool failures are *not* errors: they become `tool_result` chunks with an `error_kind`
/// and the loop goes on. A `FlowError` means the component itself could not continue.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FlowError {
    /// The model provider failed (after its own retries). Retry later or switch provider.
    #[error("provider failed: {0}")]
    Provider(#[from] ProviderError),
    /// The sandbox machinery failed outside a tool call (e.g. opening the shared sandbox
    /// before a parallel fan-out). Check the placement and the backend's availability.
    #[error("backend failed: {0}")]
    Backend(#[from] BackendError),
    /// Writing or reading a session store failed.
    #[error("persistence failed: {0}")]
    Persist(#[from] PersistError),
    /// A session operation was refused (e.g. a merge of branches on different sandboxes).
    #[error("session operation failed: {0}")]
    Session(#[from] SessionError),
    /// A memory store failed.
    #[error("memory failed: {0}")]
    Memory(#[from] MemoryError),
    /// The run was cancelled. `session` is valid and persistable: every tool call it
    /// requested is either answered or listed as pending work, so it can be resumed.
    #[error("cancelled; partial session {} is valid and resumable", session.id())]
    Cancelled {
        /// The session as it stood when cancellation was observed.
        session: Box<Session>,
    },
    /// Two tools share a name. Rename one of them (or drop a built-in).
    #[error("tool name {name:?} is defined twice; rename one of the tools")]
    ToolNameClash {
        /// The clashing name.
        name: String,
    },
    /// A tool's definition is unusable (e.g. its parameter schema does not compile).
    #[error("tool {name:?} is invalid: {message}")]
    InvalidTool {
        /// The tool.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// A pending call needs an `approve` or `reject` decision before the loop can resume.
    #[error(
        "pending call {call_id} of session {session_id} awaits approval; record approve() or \
         reject() before resuming"
    )]
    AwaitingDecision {
        /// The session.
        session_id: String,
        /// The call.
        call_id: String,
    },
    /// A component is misconfigured (empty parallel, unknown candidate, ...).
    #[error("configuration error: {0}")]
    Config(String),
}
