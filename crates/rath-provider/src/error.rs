//! The one error type of this crate.

use std::time::Duration;

use crate::Attempt;

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
    /// More than one attempt was made and the last one failed: the retries ran out
    /// (`max_retries`), the retry time ran out (`retry_max_elapsed`, `retry_budget`), or a
    /// later attempt failed in a way retrying cannot fix. `history` lists every attempt
    /// (a single attempt is listed too when `max_retries` is 0); `last` is the final error.
    #[error(
        "provider failed after {attempts} attempts ({}; stopped: {stopped}); last error: {last}",
        crate::attempt::summary(.history)
    )]
    RetriesExhausted {
        /// Attempts made, the first (and a stream fallback) included.
        attempts: u32,
        /// The last error seen.
        last: Box<ProviderError>,
        /// Every attempt, in order.
        history: Vec<Attempt>,
        /// Why no further attempt was made: `max_retries`, `retry_max_elapsed`,
        /// `retry_budget` or `not_retryable`.
        stopped: String,
    },
    /// A streamed answer ended without an answer: no event at all (llama-cpp-python's
    /// answer to a streamed request offering tools with `tool_choice: auto`), or no finish
    /// reason. Not retryable: [`crate::OpenAiProvider`] falls back to a non-streamed
    /// request instead of repeating the stream.
    #[error("{}", crate::attempt::incomplete_text(.events))]
    StreamIncomplete {
        /// Events received before the stream ended.
        events: usize,
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
    /// A non-success HTTP answer with the server's `Retry-After`, if it sent one: what any
    /// provider (including one written outside this crate) returns so that the retry layer
    /// ([`crate::Retrying`]) classifies it and honours the hint.
    ///
    /// ```
    /// use std::time::Duration;
    /// use rath_provider::ProviderError;
    ///
    /// let e = ProviderError::http(429, "slow down", Some(Duration::from_secs(2)));
    /// assert!(e.is_retryable());
    /// assert_eq!(e.retry_after(), Some(Duration::from_secs(2)));
    /// assert!(!ProviderError::http(401, "bad key", None).is_retryable());
    /// ```
    pub fn http(status: u16, message: impl Into<String>, retry_after: Option<Duration>) -> Self {
        ProviderError::Http {
            status,
            message: message.into(),
            retry_after,
        }
    }

    /// True when the provider could not answer for now: the fault itself is retryable, or
    /// retries of a retryable fault ran out ([`ProviderError::RetriesExhausted`] whose
    /// final error is retryable). The fallback layer ([`crate::WithFallback`]) asks the
    /// second provider exactly then; a refused request (400, 401, budget, configuration)
    /// would fail there too and is returned as it is.
    pub fn is_unavailable(&self) -> bool {
        self.root().is_retryable()
    }

    /// True when trying the same request again may succeed: HTTP 408, 409, 429 and 5xx,
    /// timeouts, connection failures and malformed answers. A 400, 401, 403, 404 or 422, a
    /// 5xx whose text says the request failed schema validation (llama-cpp-python answers
    /// a request its pydantic schema rejects with 500 "N validation errors"), an incomplete
    /// stream (which gets a non-streamed fallback instead), configuration, budget,
    /// cassette and script errors are not.
    pub fn is_retryable(&self) -> bool {
        match self {
            ProviderError::Http {
                status, message, ..
            } => {
                matches!(*status, 408 | 409 | 429)
                    || ((500..600).contains(status) && !rejects_request_schema(message))
            }
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

    /// A short, stable name of the fault, as attempts record it: `http`, `timeout`,
    /// `connection`, `invalid_response`, `empty_stream`, `no_finish_reason`,
    /// `retries_exhausted`, `budget_exceeded`, `config`, ...
    pub fn kind(&self) -> &'static str {
        match self {
            ProviderError::Http { .. } => "http",
            ProviderError::Timeout { .. } => "timeout",
            ProviderError::Connection(_) => "connection",
            ProviderError::RetriesExhausted { .. } => "retries_exhausted",
            ProviderError::StreamIncomplete { events: 0 } => "empty_stream",
            ProviderError::StreamIncomplete { .. } => "no_finish_reason",
            ProviderError::BudgetExceeded { .. } => "budget_exceeded",
            ProviderError::InvalidResponse(_) => "invalid_response",
            ProviderError::ReplayMismatch { .. } => "replay_mismatch",
            ProviderError::ReplayExhausted { .. } => "replay_exhausted",
            ProviderError::Cassette(_) => "cassette",
            ProviderError::ScriptExhausted { .. } => "script_exhausted",
            ProviderError::ScriptAssertion { .. } => "script_assertion",
            ProviderError::Config(_) => "config",
        }
    }

    /// The HTTP status, of this error or (for [`ProviderError::RetriesExhausted`]) its last.
    pub fn status(&self) -> Option<u16> {
        match self {
            ProviderError::Http { status, .. } => Some(*status),
            ProviderError::RetriesExhausted { last, .. } => last.status(),
            _ => None,
        }
    }

    /// The attempts behind this error: the history of a
    /// [`ProviderError::RetriesExhausted`], empty for a failure of a single attempt.
    pub fn attempts(&self) -> &[Attempt] {
        match self {
            ProviderError::RetriesExhausted { history, .. } => history,
            _ => &[],
        }
    }

    /// The final error: `last` of a [`ProviderError::RetriesExhausted`], else `self`.
    pub fn root(&self) -> &ProviderError {
        match self {
            ProviderError::RetriesExhausted { last, .. } => last.root(),
            other => other,
        }
    }
}

/// True when a server's error text says the request itself failed schema validation:
/// the same request can never pass, whatever the status says.
fn rejects_request_schema(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("validation error") || m.contains("validationerror")
}
