//! One try at a provider call, as evidence and error reports record it.

use serde::{Deserialize, Serialize};

use crate::ProviderError;

/// How an attempt asked for its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptMode {
    /// A streamed request (`"stream": true`, server-sent events).
    Stream,
    /// A non-streamed request (one JSON body).
    Complete,
}

/// One attempt of a provider call: what was asked, how it ended, how long it took, and what
/// came next. Lists of these go into the `model_call` evidence (`detail.attempts`) when a
/// call needed more than one attempt, and into [`ProviderError::RetriesExhausted`].
///
/// Carries no request or response text, headers or keys: only kinds, statuses and times.
///
/// ```
/// use rath_provider::{Attempt, AttemptMode};
///
/// let a = Attempt::ok(2, AttemptMode::Complete, 41);
/// assert_eq!(a.outcome, "ok");
/// assert_eq!(serde_json::to_value(&a).unwrap()["mode"], "complete");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// 1 for the first attempt.
    pub attempt: u32,
    /// Streamed or not.
    pub mode: AttemptMode,
    /// `ok`, or the fault's [`ProviderError::kind`] (`http`, `timeout`, `connection`,
    /// `invalid_response`, `empty_stream`, `no_finish_reason`, ...).
    pub outcome: String,
    /// The HTTP status of a failed attempt that got one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Wall-clock milliseconds the attempt took.
    pub elapsed_ms: u64,
    /// The server's `Retry-After`, in milliseconds, when it sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// The wait before the next attempt, when the call was retried after this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_ms: Option<u64>,
    /// True when this attempt's failure made the provider fall back from a stream to a
    /// non-streamed request (no wait, not counted as a retry).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fallback: bool,
}

impl Attempt {
    /// A successful attempt.
    pub fn ok(attempt: u32, mode: AttemptMode, elapsed_ms: u64) -> Self {
        Self {
            attempt,
            mode,
            outcome: "ok".to_owned(),
            status: None,
            elapsed_ms,
            retry_after_ms: None,
            backoff_ms: None,
            fallback: false,
        }
    }

    /// A failed attempt.
    pub fn failed(attempt: u32, mode: AttemptMode, elapsed_ms: u64, err: &ProviderError) -> Self {
        Self {
            attempt,
            mode,
            outcome: err.kind().to_owned(),
            status: err.status(),
            elapsed_ms,
            retry_after_ms: err
                .retry_after()
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            backoff_ms: None,
            fallback: false,
        }
    }

    /// `"#2 stream http 503 12ms, retried after 250ms"`-style text for error messages.
    pub fn describe(&self) -> String {
        let mode = match self.mode {
            AttemptMode::Stream => "stream",
            AttemptMode::Complete => "complete",
        };
        let mut s = format!("#{} {mode} {}", self.attempt, self.outcome);
        if let Some(st) = self.status {
            s.push_str(&format!(" {st}"));
        }
        s.push_str(&format!(" {}ms", self.elapsed_ms));
        if self.fallback {
            s.push_str(", fell back to a non-streamed request");
        }
        if let Some(b) = self.backoff_ms {
            s.push_str(&format!(", retried after {b}ms"));
        }
        s
    }
}

/// The attempts as one line: `#1 stream http 503 3ms, retried after 10ms; #2 ...`.
pub(crate) fn summary(history: &[Attempt]) -> String {
    history
        .iter()
        .map(Attempt::describe)
        .collect::<Vec<_>>()
        .join("; ")
}

pub(crate) fn incomplete_text(events: &usize) -> String {
    match *events {
        0 => "the stream yielded no event".to_owned(),
        n => format!("the stream ended before a finish reason arrived ({n} events)"),
    }
}
