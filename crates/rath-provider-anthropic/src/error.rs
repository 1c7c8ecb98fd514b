//! The one error type of this crate: what can go wrong building a provider.

use rath_provider::ProviderError;

/// Why an [`crate::AnthropicProvider`] could not be built. Calls fail with
/// [`rath_provider::ProviderError`], like every provider's.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AnthropicError {
    /// No model was configured and `ANTHROPIC_MODEL` is not set.
    #[error("no Anthropic model configured: set ANTHROPIC_MODEL or AnthropicConfig::model")]
    MissingModel,
    /// No API key was configured and `ANTHROPIC_API_KEY` is not set.
    #[error("no Anthropic API key configured: set ANTHROPIC_API_KEY")]
    MissingKey,
    /// The base URL is not an `http(s)://` URL.
    #[error("invalid Anthropic base URL {url:?}: {reason}")]
    InvalidBaseUrl {
        /// The URL as given (credentials in it are the caller's; it is never logged).
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The key cannot be sent as a header value (it holds control characters).
    #[error("the Anthropic API key is not a valid header value")]
    InvalidKey,
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
}

impl From<AnthropicError> for ProviderError {
    fn from(e: AnthropicError) -> Self {
        ProviderError::Config(e.to_string())
    }
}
