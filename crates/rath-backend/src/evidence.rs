//! Evidence: what every dispatch leaves on record for the session.
//!
//! ```
//! use rath_backend::{DispatchEvidence, PayloadKind};
//!
//! let ev = DispatchEvidence {
//!     backend: "local".into(),
//!     handle_id: "sbx_000001".into(),
//!     payload_kind: PayloadKind::Command,
//!     summary: "echo hi".into(),
//!     exit_code: Some(0),
//!     outcome: "ok".into(),
//!     elapsed_ms: 0.0,
//!     bytes_in: 7,
//!     bytes_out: 3,
//! };
//! let te = ev.to_tool_evidence("call_1", "shell");
//! assert_eq!(te.sandbox_handle.as_deref(), Some("sbx_000001"));
//! assert_eq!(te.outcome, "ok");
//! ```

use rath_session::ToolEvidence;
use serde::{Deserialize, Serialize};

use crate::error::ToolError;
use crate::payload::{Output, Payload, PayloadKind};

/// The record one dispatch leaves: the fields of [`rath_session::ToolEvidence`] that the
/// backend knows (the tool call id and tool name are the caller's).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DispatchEvidence {
    /// Backend name.
    pub backend: String,
    /// Sandbox handle id.
    pub handle_id: String,
    /// Payload kind.
    pub payload_kind: PayloadKind,
    /// Secret-free argument summary ([`Payload::summary`]).
    pub summary: String,
    /// Exit code, for commands that exited.
    pub exit_code: Option<i64>,
    /// `ok`, or the failure kind (`tool_timeout`, `path_escape`, ...).
    pub outcome: String,
    /// Elapsed milliseconds (0 in deterministic mode).
    pub elapsed_ms: f64,
    /// Bytes sent into the sandbox.
    pub bytes_in: u64,
    /// Bytes received from it.
    pub bytes_out: u64,
}

impl DispatchEvidence {
    /// The record for `payload` on `handle` with `outcome`.
    pub fn record(
        backend: &str,
        handle_id: &str,
        payload: &Payload,
        outcome: &Result<Output, ToolError>,
        elapsed_ms: f64,
    ) -> Self {
        let (exit_code, outcome_name, bytes_out) = match outcome {
            Ok(o) => (o.exit_code().map(i64::from), "ok".to_owned(), o.bytes_out()),
            Err(f) => (None, f.kind.as_str().to_owned(), 0),
        };
        Self {
            backend: backend.to_owned(),
            handle_id: handle_id.to_owned(),
            payload_kind: payload.kind(),
            summary: payload.summary(),
            exit_code,
            outcome: outcome_name,
            elapsed_ms,
            bytes_in: payload.bytes_in(),
            bytes_out,
        }
    }

    /// The session's evidence chunk payload for tool call `tool_call_id` of `tool`.
    pub fn to_tool_evidence(
        &self,
        tool_call_id: impl Into<String>,
        tool: impl Into<String>,
    ) -> ToolEvidence {
        ToolEvidence {
            tool_call_id: tool_call_id.into(),
            tool: tool.into(),
            backend: Some(self.backend.clone()),
            sandbox_handle: Some(self.handle_id.clone()),
            payload_kind: Some(self.payload_kind.as_str().to_owned()),
            summary: Some(self.summary.clone()),
            exit_code: self.exit_code,
            outcome: self.outcome.clone(),
            elapsed_ms: self.elapsed_ms,
            bytes_in: self.bytes_in,
            bytes_out: self.bytes_out,
            ..ToolEvidence::default()
        }
    }
}

/// A finished dispatch: the outcome and its evidence (present for failures too).
#[derive(Clone, Debug)]
pub struct Dispatched {
    /// The output, or why there is none.
    pub outcome: Result<Output, ToolError>,
    /// The record for the session.
    pub evidence: DispatchEvidence,
}

impl Dispatched {
    /// The outcome alone.
    pub fn into_result(self) -> Result<Output, ToolError> {
        self.outcome
    }

    /// The tool result JSON: the output's fields with `ok: true`, or the failure's
    /// `{"ok":false,"error_kind":...,"message":...}`.
    pub fn to_tool_result_json(&self) -> serde_json::Value {
        match &self.outcome {
            Ok(o) => o.to_tool_result_json(),
            Err(f) => f.to_tool_result_json(),
        }
    }
}
