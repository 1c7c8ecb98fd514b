//! The one error type of this crate.

use std::time::Duration;

/// Everything that can go wrong asking a provider for the next chunk.
///
/// Variants say what the caller can do: [`ProviderError::is_retryable`] tells a retry loop
/// whether trying again can help; the rest point at configuration, the script, or a cassette.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// The server answered with a non-success HTTP status. 429 and 5xx are retryable;
    /// `retry_after` carries the server's `Retry-After` hint when it sent one.
    #[error("HTTP {status} from provider: {message}")]
    Http {
        /// HTTP status code.
        status: u16,
        /// The server's error text (truncated).
        message: String,
        /// The server's `Retry-After`, if any.
        retry_after: Option<Duration>,
    },
    /// No (complete) answer arrived within the per-request timeout. Retryable.
    #[error("provider request timed out after {after:?}")]
    Timeout {
        /// The timeout that elapsed.
        after: Duration,
    },
    /// The connection failed or was cut (for example mid-stream). Retryable.
    #[error("connection to provider failed: {0}")]
    Connection(String),
    /// Every attempt failed with a retryable error; `last` is the final one.
    #[error("provider failed after {attempts} attempts; last error: {last}")]
    RetriesExhausted {
        /// Attempts made, the first included.
        attempts: u32,
        /// The last error seen.
        last: Box<ProviderError>,
    },
    /// Sending this request could exceed the configured token budget, so it was not sent.
    #[error("token budget exceeded: {used} used of {budget}, this request may need up to {needed}")]
    BudgetExceeded {
        /// The budget in tokens.
        budget: u64,
        /// Tokens used so far.
        used: u64,
        /// The estimated worst case for this request.
        needed: u64,
    },
    /// The server answered, but not with a well-formed chat completion. Retryable (servers
    /// occasionally emit garbage under load); after the retry budget it surfaces as this.
    #[error("invalid response from provider: {0}")]
    InvalidResponse(String),
    /// A replayed request differs from the recorded one. Re-record the cassette or fix the
    /// change that altered the request.
    #[error("request {index} does not match the cassette:\n{diff}")]
    ReplayMismatch {
        /// Zero-based position in the cassette.
        index: usize,
        /// A line diff of the normalised requests (`-` recorded, `+` actual).
        diff: String,
    },
    /// The replay ran out of recorded interactions.
    #[error("cassette exhausted: {recorded} interactions recorded, request {index} has none")]
    ReplayExhausted {
        /// Interactions in the cassette.
        recorded: usize,
        /// The zero-based index asked for.
        index: usize,
    },
    /// A cassette file could not be read or written.
    #[error("cassette error: {0}")]
    Cassette(String),
    /// A scripted provider was asked for more responses than it holds.
    #[error("scripted provider exhausted: all {served} responses already served")]
    ScriptExhausted {
        /// Responses served so far.
        served: usize,
    },
    /// A scripted request assertion failed, or `assert_complete` found unused responses.
    #[error("scripted provider assertion failed at request {index}: {message}")]
    ScriptAssertion {
        /// Zero-based request index (or the number served, for `assert_complete`).
        index: usize,
        /// What did not hold.
        message: String,
    },
    /// The provider is misconfigured (bad URL, missing model, ...). Fix the configuration.
    #[error("provider configuration error: {0}")]
    Config(String),
}

impl ProviderError {
    /// True when trying the same request again may succeed (429, 5xx, timeout, connection
    /// failure, malformed answer).
    pub fn is_retryable(&self) -> bool {
        match self {
            ProviderError::Http { status, .. } => *status == 429 || *status >= 500,
            ProviderError::Timeout { .. }
            | ProviderError::Connection(_)
            | ProviderError::InvalidResponse(_) => true,
            _ => false,
        }
    }

    /// The server's `Retry-After` hint, if this error carries one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ProviderError::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}
