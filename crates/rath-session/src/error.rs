//! The crate's error type.

/// Everything that can go wrong with a session value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// Merge refused by the strict rule: both sides must share one live sandbox handle, or both
    /// be unbound and name the same backend. Re-place one side (`to`) or merge before binding.
    #[error(
        "merge refused: left session {left_id} is {left}; right session {right_id} is {right}; \
         merge needs one shared live sandbox handle, or both unbound on the same backend"
    )]
    MergeRefused {
        /// Left session id.
        left_id: String,
        /// What the left side holds.
        left: String,
        /// Right session id.
        right_id: String,
        /// What the right side holds.
        right: String,
    },
    /// No pending call with this id.
    #[error("session {session_id} has no pending tool call {call_id}")]
    PendingNotFound {
        /// The session.
        session_id: String,
        /// The call id asked for.
        call_id: String,
    },
    /// A chunk range outside the session.
    #[error("range {start}..{end} is outside session {session_id} of {len} chunks")]
    RangeOutOfBounds {
        /// The session.
        session_id: String,
        /// Range start.
        start: usize,
        /// Range end.
        end: usize,
        /// Session length.
        len: usize,
    },
}
