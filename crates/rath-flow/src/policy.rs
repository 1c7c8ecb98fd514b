//! Per-agent tool policy (allow / deny / require approval) and approval decisions.
//!
//! ```
//! use rath_flow::{ToolPolicy, Verdict};
//!
//! let p = ToolPolicy::allow_all()
//!     .deny("run_code")
//!     .require_approval("write_workspace_file");
//! assert_eq!(p.check("read_workspace_file"), Verdict::Allow);
//! assert!(matches!(p.check("run_code"), Verdict::Deny(_)));
//! assert_eq!(p.check("write_workspace_file"), Verdict::RequireApproval);
//! ```
//!
//! A denied call becomes a `policy_decision` chunk and a `denied_by_policy` tool result, and
//! the loop goes on. An approval-gated call stops the loop: the call (and any later call of
//! the same round) is recorded as pending work on the session. [`approve`] or [`reject`]
//! records the reviewer's decision as a chunk; resuming the loop (also on a session loaded
//! from a store in another process) continues exactly there.

use std::collections::BTreeSet;

use rath_session::{Chunk, ChunkBody, PolicyDecision, Session, SessionError};

use crate::FlowError;

/// What a policy says about one call.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Run it.
    Allow,
    /// Refuse it, for this reason.
    Deny(String),
    /// Stop and wait for a reviewer.
    RequireApproval,
}

/// Which tools an agent may call, and which need approval first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolPolicy {
    allow: Option<BTreeSet<String>>,
    deny: BTreeSet<String>,
    approval: BTreeSet<String>,
}

impl ToolPolicy {
    /// Every tool allowed, none gated.
    pub fn allow_all() -> Self {
        Self::default()
    }

    /// Only the named tools allowed.
    pub fn allow_only<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            allow: Some(names.into_iter().map(Into::into).collect()),
            ..Self::default()
        }
    }

    /// Denies `name`.
    pub fn deny(mut self, name: impl Into<String>) -> Self {
        self.deny.insert(name.into());
        self
    }

    /// Requires approval before `name` runs.
    pub fn require_approval(mut self, name: impl Into<String>) -> Self {
        self.approval.insert(name.into());
        self
    }

    /// True when nothing is restricted (the loop skips policy work entirely).
    pub fn is_permissive(&self) -> bool {
        self.allow.is_none() && self.deny.is_empty() && self.approval.is_empty()
    }

    /// The verdict for a call of `tool`.
    pub fn check(&self, tool: &str) -> Verdict {
        if self.deny.contains(tool) {
            return Verdict::Deny(format!("tool {tool} is denied by the agent's policy"));
        }
        if let Some(allow) = &self.allow
            && !allow.contains(tool)
        {
            return Verdict::Deny(format!("tool {tool} is not in the agent's allow list"));
        }
        if self.approval.contains(tool) {
            return Verdict::RequireApproval;
        }
        Verdict::Allow
    }
}

/// Records that `by` approved pending call `call_id` (a `policy_decision` chunk with
/// decision `approved`). The call runs when the loop resumes.
pub fn approve(session: &Session, call_id: &str, by: &str) -> Result<Session, FlowError> {
    decide(
        session,
        call_id,
        "approved",
        format!("approved by {by}"),
        by,
    )
}

/// Records that `by` rejected pending call `call_id`; on resume the call is answered with a
/// `denied_by_policy` tool result carrying `reason`, and the loop goes on.
pub fn reject(
    session: &Session,
    call_id: &str,
    by: &str,
    reason: &str,
) -> Result<Session, FlowError> {
    decide(session, call_id, "rejected", reason.to_owned(), by)
}

fn decide(
    session: &Session,
    call_id: &str,
    decision: &str,
    reason: String,
    by: &str,
) -> Result<Session, FlowError> {
    let pending = session
        .pending()
        .iter()
        .find(|p| p.call.id == call_id)
        .ok_or_else(|| SessionError::PendingNotFound {
            session_id: session.id().to_string(),
            call_id: call_id.to_owned(),
        })?;
    Ok(
        session.push(Chunk::new(ChunkBody::PolicyDecision(PolicyDecision {
            agent: pending.agent.clone(),
            tool_call_id: call_id.to_owned(),
            tool: pending.call.function.name.clone(),
            decision: decision.to_owned(),
            reason,
            decided_by: by.to_owned(),
        }))),
    )
}

/// The latest `approved` / `rejected` decision recorded for `call_id`, if any.
pub fn decision_for<'a>(session: &'a Session, call_id: &str) -> Option<&'a PolicyDecision> {
    session.chunks().iter().rev().find_map(|c| match c.body() {
        ChunkBody::PolicyDecision(d)
            if d.tool_call_id == call_id
                && (d.decision == "approved" || d.decision == "rejected") =>
        {
            Some(d)
        }
        _ => None,
    })
}
