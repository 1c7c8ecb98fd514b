//! The one error type of the runtime.

use rath_flow::FlowError;
use rath_persist::PersistError;

/// Everything that can go wrong in the runtime.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The run store's database failed (connection, SQL, constraint).
    #[error("run store {store}: {message}")]
    Db {
        /// The store's name (never a password).
        store: String,
        /// What the driver said.
        message: String,
    },
    /// A run store URL that is neither `sqlite:` nor `postgres://`/`postgresql://`.
    #[error("not a run store URL (sqlite:<file> or postgres://...): {0}")]
    BadUrl(String),
    /// The store was written by a newer runtime (its schema version is above ours).
    #[error("run store schema version {found} is newer than this runtime's {supported}")]
    NewerSchema {
        /// Version found in the store.
        found: i64,
        /// Highest version this build knows.
        supported: i64,
    },
    /// A duration over its bound (a lease longer than [`crate::MAX_LEASE`]): refused,
    /// so the time it ends at cannot overflow. Pass a shorter one.
    #[error("{what} of {ms} ms is too long (at most {max_ms} ms)")]
    BadDuration {
        /// What the duration is for (`lease`).
        what: &'static str,
        /// The duration asked for, in milliseconds.
        ms: u128,
        /// The longest one accepted, in milliseconds.
        max_ms: u64,
    },
    /// No run with this id.
    #[error("no run {0}")]
    NoSuchRun(String),
    /// A write carried a fencing token that is no longer the run's lease: another worker
    /// (or an operator's cancel) took the run. Nothing was written.
    #[error("run {run}: write fenced (token {token} is stale; the lease is at {current})")]
    Fenced {
        /// The run.
        run: String,
        /// The token the write carried.
        token: i64,
        /// The lease's token now.
        current: i64,
    },
    /// The run's workflow is not registered with this worker.
    #[error("workflow {0:?} is not registered")]
    UnknownWorkflow(String),
    /// The registered workflow's definition hash differs from the one the run was
    /// submitted with (and the worker was not told to accept that).
    #[error(
        "workflow {name:?} changed since submission (submitted {submitted}, registered {registered})"
    )]
    DefinitionChanged {
        /// The workflow.
        name: String,
        /// The hash the run was submitted with.
        submitted: String,
        /// The hash registered now.
        registered: String,
    },
    /// Re-execution asked something other than what the journal recorded under this key:
    /// the workflow is not deterministic over its recorded replies, or it changed.
    #[error("run {run}: replay mismatch at {key}: the recorded request differs")]
    ReplayMismatch {
        /// The run.
        run: String,
        /// The journal key (`segment/step#seq`).
        key: String,
    },
    /// A tool call was dispatched and never answered by a worker that died, and the tool is
    /// not idempotent: a person decides (`rath runs resolve`).
    #[error("run {run}: call {call_id} of {tool} is ambiguous (dispatched, never answered)")]
    Ambiguous {
        /// The run.
        run: String,
        /// The tool.
        tool: String,
        /// The call id.
        call_id: String,
    },
    /// An operation that the run's status does not allow (approving a run that is not
    /// waiting, resolving one that is not in review, ...).
    #[error("run {run} is {status}: {what}")]
    BadState {
        /// The run.
        run: String,
        /// Its status.
        status: String,
        /// What was refused.
        what: String,
    },
    /// Stored data that does not parse (a hand-edited row, a foreign table).
    #[error("run store: corrupt {what}: {message}")]
    Corrupt {
        /// What did not parse.
        what: &'static str,
        /// Why.
        message: String,
    },
    /// The worker process itself failed (a signal handler, its task pool).
    #[error("worker: {0}")]
    Worker(String),
    /// The session store failed.
    #[error(transparent)]
    Persist(#[from] PersistError),
    /// The workflow failed.
    #[error(transparent)]
    Flow(#[from] FlowError),
}

pub(crate) fn corrupt(what: &'static str, e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::Corrupt {
        what,
        message: e.to_string(),
    }
}
