//! A run's status change as an operator or worker asks for it.

use super::*;

#[derive(Clone, Copy)]
pub(super) struct Change<'a> {
    pub(super) to: RunStatus,
    pub(super) resume: Option<&'a str>,
    pub(super) bump_segment: bool,
    pub(super) detail: Option<&'a str>,
}

impl Change<'_> {
    pub(super) fn to(to: RunStatus) -> Self {
        Self {
            to,
            resume: None,
            bump_segment: false,
            detail: None,
        }
    }
}

/// Where [`RunStore::finish`] moves a run.
#[derive(Clone, Copy, Debug)]
pub struct Transition<'a> {
    /// The new status.
    pub status: RunStatus,
    /// The output session id, if it has one now.
    pub output: Option<&'a str>,
    /// An error or review detail (JSON or text).
    pub detail: Option<&'a str>,
    /// The session the next claim forwards (a stopped session).
    pub resume: Option<&'a str>,
    /// True when this attempt failed (counts against the retry policy).
    pub failed: bool,
    /// A run handed back for a retry: no worker claims it before this time (ms since the
    /// Unix epoch).
    pub not_before_ms: Option<i64>,
}

impl<'a> Transition<'a> {
    /// A move to `status` with nothing else.
    pub fn to(status: RunStatus) -> Self {
        Self {
            status,
            output: None,
            detail: None,
            resume: None,
            failed: false,
            not_before_ms: None,
        }
    }
}
