//! Errors: [`BackendError`] for the backend machinery, [`ToolError`] for a tool call that did
//! not succeed (the one tool-failure type: backends return it, `rath-flow` re-exports it and
//! the session loop writes it into the call's `tool_result`).
//!
//! ```
//! use rath_backend::{ToolError, ToolErrorKind};
//!
//! let e = ToolError::new(ToolErrorKind::PathEscape, "'../x' leaves the workspace");
//! assert_eq!(e.to_content(),
//!            r#"{"ok": false, "error_kind": "path_escape", "message": "'../x' leaves the workspace"}"#);
//! // A kind read from a stored session that this version does not know is kept as written.
//! assert_eq!(ToolErrorKind::parse("quota_exceeded").as_str(), "quota_exceeded");
//! ```

use std::fmt;
use std::hash::{Hash, Hasher};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// The `error_kind` of a failed tool call: OpenRath's names plus the backends' own.
///
/// Compared and hashed by wire name, so `ToolErrorKind::parse("tool_timeout")` equals
/// [`ToolErrorKind::ToolTimeout`], and a kind this version does not know (from a stored
/// session, an MCP server, a user's tool) survives as [`ToolErrorKind::Other`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum ToolErrorKind {
    /// `invalid_tool_arguments`: the arguments were not JSON or did not match the schema.
    InvalidToolArguments,
    /// `unknown_tool`: no tool of that name is offered.
    UnknownTool,
    /// `tool_execution_exception`: the work failed (I/O error, process could not start,
    /// the tool panicked, ...).
    ToolExecutionException,
    /// `tool_timeout`: the work ran past its timeout and was stopped.
    ToolTimeout,
    /// `denied_by_policy`: the agent's policy denied the call, or a reviewer rejected it.
    DeniedByPolicy,
    /// `max_tool_rounds_exceeded`: the model called a tool after the loop's last tool round.
    MaxToolRoundsExceeded,
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
    /// Any other name, kept as written (build it with [`ToolErrorKind::parse`]).
    Other(String),
}

impl ToolErrorKind {
    const KNOWN: [ToolErrorKind; 12] = [
        ToolErrorKind::InvalidToolArguments,
        ToolErrorKind::UnknownTool,
        ToolErrorKind::ToolExecutionException,
        ToolErrorKind::ToolTimeout,
        ToolErrorKind::DeniedByPolicy,
        ToolErrorKind::MaxToolRoundsExceeded,
        ToolErrorKind::PathEscape,
        ToolErrorKind::PayloadUnsupported,
        ToolErrorKind::NotFound,
        ToolErrorKind::SandboxClosed,
        ToolErrorKind::BackendUnavailable,
        ToolErrorKind::OutputLimit,
    ];

    /// The wire name (`tool_timeout`, ...), as written into `error_kind`.
    pub fn as_str(&self) -> &str {
        match self {
            ToolErrorKind::InvalidToolArguments => "invalid_tool_arguments",
            ToolErrorKind::UnknownTool => "unknown_tool",
            ToolErrorKind::ToolExecutionException => "tool_execution_exception",
            ToolErrorKind::ToolTimeout => "tool_timeout",
            ToolErrorKind::DeniedByPolicy => "denied_by_policy",
            ToolErrorKind::MaxToolRoundsExceeded => "max_tool_rounds_exceeded",
            ToolErrorKind::PathEscape => "path_escape",
            ToolErrorKind::PayloadUnsupported => "payload_unsupported",
            ToolErrorKind::NotFound => "not_found",
            ToolErrorKind::SandboxClosed => "sandbox_closed",
            ToolErrorKind::BackendUnavailable => "backend_unavailable",
            ToolErrorKind::OutputLimit => "output_limit",
            ToolErrorKind::Other(name) => name,
        }
    }

    /// The kind named `name`: a known variant, or [`ToolErrorKind::Other`].
    pub fn parse(name: &str) -> Self {
        Self::KNOWN
            .iter()
            .find(|k| k.as_str() == name)
            .cloned()
            .unwrap_or_else(|| ToolErrorKind::Other(name.to_owned()))
    }
}

impl PartialEq for ToolErrorKind {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for ToolErrorKind {}

impl Hash for ToolErrorKind {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Display for ToolErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for ToolErrorKind {
    fn from(name: &str) -> Self {
        Self::parse(name)
    }
}

impl From<String> for ToolErrorKind {
    fn from(name: String) -> Self {
        Self::parse(&name)
    }
}

impl Serialize for ToolErrorKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ToolErrorKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Ok(Self::parse(&name))
    }
}

/// A tool call that did not succeed, as a value (never a panic): what a backend returns for
/// a side effect that did not happen and what a tool returns for any failure. It becomes the
/// call's `tool_result` content, `{"ok": false, "error_kind": ..., "message": ...}`.
///
/// ```
/// use rath_backend::{ToolError, ToolErrorKind};
/// use serde_json::json;
///
/// let e = ToolError::exception("disk on fire").with_detail(json!({"exit_code": 1}));
/// assert_eq!(e.kind, ToolErrorKind::ToolExecutionException);
/// assert_eq!(e.to_string(), "tool_execution_exception: disk on fire");
/// assert_eq!(e.to_content(), concat!(r#"{"ok": false, "error_kind": "tool_execution_exception", "#,
///                                    r#""message": "disk on fire", "detail": {"exit_code": 1}}"#));
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct ToolError {
    /// What kind of failure.
    pub kind: ToolErrorKind,
    /// A one-line, secret-free message for the model and the log.
    pub message: String,
    /// Extra structured detail (partial output, the refused path, an HTTP status, ...),
    /// `null` when none.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub detail: Value,
}

impl ToolError {
    /// A failure of `kind` (a [`ToolErrorKind`] or its wire name) without detail.
    pub fn new(kind: impl Into<ToolErrorKind>, message: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
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
        Self::new(ToolErrorKind::ToolExecutionException, message)
    }

    /// `invalid_tool_arguments` with `message`.
    pub fn invalid_arguments(message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::InvalidToolArguments, message)
    }

    /// The tool result content: `{"ok": false, "error_kind": ..., "message": ...}` (plus
    /// `"detail"` when there is one), in Python's `json.dumps` layout (OpenRath's text).
    pub fn to_content(&self) -> String {
        // A `Value` and plain strings always serialise; the fallback keeps the kind and message.
        rath_session::json::to_string(&self.wire()).unwrap_or_else(|_| {
            let bare = Wire {
                detail: &Value::Null,
                ..self.wire()
            };
            rath_session::json::to_string(&bare).unwrap_or_default()
        })
    }

    /// The same object as a JSON value (for reports that embed tool results).
    pub fn to_tool_result_json(&self) -> Value {
        serde_json::to_value(self.wire()).unwrap_or(Value::Null)
    }

    fn wire(&self) -> Wire<'_> {
        Wire {
            ok: false,
            error_kind: self.kind.as_str(),
            message: &self.message,
            detail: &self.detail,
        }
    }
}

/// The tool result object of a failure, in OpenRath's field order.
#[derive(Serialize)]
struct Wire<'a> {
    ok: bool,
    error_kind: &'a str,
    message: &'a str,
    #[serde(skip_serializing_if = "Value::is_null")]
    detail: &'a Value,
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
    Dispatch(#[from] ToolError),
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
    pub fn to_failure(&self) -> ToolError {
        let kind = match self {
            BackendError::Dispatch(f) => return f.clone(),
            BackendError::Unavailable { .. } | BackendError::UnknownBackend { .. } => {
                ToolErrorKind::BackendUnavailable
            }
            BackendError::Closed { .. } => ToolErrorKind::SandboxClosed,
            BackendError::Unsupported { .. } => ToolErrorKind::PayloadUnsupported,
            _ => ToolErrorKind::ToolExecutionException,
        };
        ToolError::new(kind, self.to_string())
    }
}

impl From<BackendError> for ToolError {
    fn from(e: BackendError) -> Self {
        e.to_failure()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_known_kind_round_trips_by_name() {
        for k in ToolErrorKind::KNOWN {
            let parsed = ToolErrorKind::parse(k.as_str());
            assert!(!matches!(parsed, ToolErrorKind::Other(_)), "{k}");
            assert_eq!(parsed, k);
            let text = serde_json::to_string(&k).unwrap();
            assert_eq!(serde_json::from_str::<ToolErrorKind>(&text).unwrap(), k);
        }
    }

    #[test]
    fn unknown_kinds_are_kept_and_compare_by_name() {
        let k = ToolErrorKind::parse("quota_exceeded");
        assert_eq!(k, ToolErrorKind::Other("quota_exceeded".to_owned()));
        assert_eq!(
            ToolErrorKind::Other("tool_timeout".into()),
            ToolErrorKind::ToolTimeout
        );
        let e: ToolError =
            serde_json::from_value(json!({"kind": "quota_exceeded", "message": "m"})).unwrap();
        assert_eq!(e.kind.as_str(), "quota_exceeded");
        assert_eq!(
            e.to_content(),
            r#"{"ok": false, "error_kind": "quota_exceeded", "message": "m"}"#
        );
    }

    #[test]
    fn content_is_openrath_text_and_the_json_value_agrees() {
        let e = ToolError::new(ToolErrorKind::ToolTimeout, "slow: é")
            .with_detail(json!({"elapsed": 2.0, "b": [1, null]}));
        let text = e.to_content();
        assert_eq!(
            text,
            r#"{"ok": false, "error_kind": "tool_timeout", "message": "slow: é", "detail": {"b": [1, null], "elapsed": 2.0}}"#
        );
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, e.to_tool_result_json());
        let failure = BackendError::Closed {
            handle_id: "h1".into(),
        }
        .to_failure();
        assert_eq!(failure.kind, ToolErrorKind::SandboxClosed);
    }
}
