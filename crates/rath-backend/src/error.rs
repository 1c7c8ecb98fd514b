//! Errors: [`BackendError`] for the backend machinery, [`ToolExecutionFailure`] for a tool's
//! side effect that did not happen.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Why a payload did not run to completion. The names are the flow layer's tool error kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailureKind {
    /// `tool_execution_exception`: the work failed (I/O error, process could not start, ...).
    ToolExecutionException,
    /// `tool_timeout`: the work ran past its timeout and was killed.
    ToolTimeout,
    /// `path_escape`: a path pointed outside the sandbox workspace.
    PathEscape,
    /// `payload_unsupported`: this backend does not run this kind of payload.
    PayloadUnsupported,
    /// `not_found`: the file or directory does not exist.
    NotFound,
    /// `sandbox_closed`: the sandbox handle was closed.
    SandboxClosed,
    /// `backend_unavailable`: the backend cannot run here, or is not registered.
    BackendUnavailable,
    /// `output_limit`: the result is larger than the backend returns.
    OutputLimit,
}

impl FailureKind {
    /// The wire name (`tool_timeout`, ...), as written into `error_kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::ToolExecutionException => "tool_execution_exception",
            FailureKind::ToolTimeout => "tool_timeout",
            FailureKind::PathEscape => "path_escape",
            FailureKind::PayloadUnsupported => "payload_unsupported",
            FailureKind::NotFound => "not_found",
            FailureKind::SandboxClosed => "sandbox_closed",
            FailureKind::BackendUnavailable => "backend_unavailable",
            FailureKind::OutputLimit => "output_limit",
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A tool's side effect that did not happen, as a value (never a panic).
///
/// ```
/// use rath_backend::{FailureKind, ToolExecutionFailure};
///
/// let f = ToolExecutionFailure::new(FailureKind::PathEscape, "'../x' leaves the workspace");
/// assert_eq!(f.kind.as_str(), "path_escape");
/// assert_eq!(f.to_string(), "path_escape: '../x' leaves the workspace");
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct ToolExecutionFailure {
    /// What kind of failure.
    pub kind: FailureKind,
    /// A one-line, secret-free message for the model and the log.
    pub message: String,
    /// Extra structured detail (partial output, the refused path, an HTTP status, ...).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub detail: Value,
}

impl ToolExecutionFailure {
    /// A failure without detail.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            detail: Value::Null,
        }
    }

    /// The same failure with `detail`.
    pub fn with_detail(mut self, detail: Value) -> Self {
        self.detail = detail;
        self
    }

    /// `tool_execution_exception` with `message`.
    pub fn exception(message: impl Into<String>) -> Self {
        Self::new(FailureKind::ToolExecutionException, message)
    }

    /// The `{"ok":false,"error_kind":...,"message":...}` object a tool result carries.
    pub fn to_tool_result_json(&self) -> Value {
        let mut v = serde_json::json!({
            "ok": false,
            "error_kind": self.kind.as_str(),
            "message": self.message,
        });
        if !self.detail.is_null() {
            v["detail"] = self.detail.clone();
        }
        v
    }
}

/// Everything that can go wrong in the backend machinery.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The backend cannot run on this machine; the reason says what to install or set.
    #[error("backend {backend} is unavailable: {reason}")]
    Unavailable {
        /// Backend name.
        backend: String,
        /// Why, and what would fix it.
        reason: String,
    },
    /// No backend of this name is registered; register it or place the session elsewhere.
    #[error("no backend named {name:?} is registered (known: {known:?})")]
    UnknownBackend {
        /// The name asked for.
        name: String,
        /// The names that are registered.
        known: Vec<String>,
    },
    /// The session has no placement; call `session.to(...)` first.
    #[error("session {session_id} is not placed on any backend; call .to(\"local\") first")]
    Unplaced {
        /// The session.
        session_id: String,
    },
    /// Opening a sandbox failed.
    #[error("backend {backend} could not open a sandbox: {message}")]
    Open {
        /// Backend name.
        backend: String,
        /// What went wrong.
        message: String,
    },
    /// A payload failed.
    #[error(transparent)]
    Dispatch(#[from] ToolExecutionFailure),
    /// The sandbox was closed; open a new one.
    #[error("sandbox {handle_id} is closed")]
    Closed {
        /// The handle.
        handle_id: String,
    },
    /// The handle belongs to another backend than the one asked to use it.
    #[error("sandbox {handle_id} belongs to backend {handle_backend}, not {backend}")]
    ForeignHandle {
        /// The handle.
        handle_id: String,
        /// The backend that opened it.
        handle_backend: String,
        /// The backend asked to use it.
        backend: String,
    },
    /// This backend does not support the operation (e.g. `attach`).
    #[error("backend {backend} does not support {operation}")]
    Unsupported {
        /// Backend name.
        backend: String,
        /// The operation.
        operation: String,
    },
    /// A remote backend's HTTP API failed.
    #[error("HTTP error from {backend}{}: {message}", status.map(|s| format!(" (status {s})")).unwrap_or_default())]
    Http {
        /// Backend name.
        backend: String,
        /// The HTTP status, when a response arrived.
        status: Option<u16>,
        /// What went wrong.
        message: String,
    },
}

impl BackendError {
    /// This error as a tool failure (what a tool result reports).
    pub fn to_failure(&self) -> ToolExecutionFailure {
        let kind = match self {
            BackendError::Dispatch(f) => return f.clone(),
            BackendError::Unavailable { .. } | BackendError::UnknownBackend { .. } => {
                FailureKind::BackendUnavailable
            }
            BackendError::Closed { .. } => FailureKind::SandboxClosed,
            BackendError::Unsupported { .. } => FailureKind::PayloadUnsupported,
            _ => FailureKind::ToolExecutionException,
        };
        ToolExecutionFailure::new(kind, self.to_string())
    }
}

impl From<BackendError> for ToolExecutionFailure {
    fn from(e: BackendError) -> Self {
        e.to_failure()
    }
}
