//! Anthropic's Messages API as an openrath provider.
//!
//! ```
//! use rath_provider::{Provider, ProviderRequest};
//! use rath_provider_anthropic::mock::{MockAnthropic, MockMessage};
//! use rath_provider_anthropic::{AnthropicConfig, AnthropicProvider};
//! use rath_session::{Session, Stamper};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let server = MockAnthropic::start().await.unwrap();
//! server.push(MockMessage::text("hello").usage(9, 2));
//! let p = AnthropicProvider::new(AnthropicConfig::new(server.base_url(), "test-key", "claude-test"))?;
//! let s = Session::user_with("hi", Stamper::counter());
//! let resp = p.complete(&ProviderRequest::from_session(&s, vec![])).await?;
//! assert_eq!(resp.text(), Some("hello"));
//! assert_eq!(resp.finish_reason.as_deref(), Some("stop"));
//! assert_eq!(server.requests()[0]["messages"][0]["content"][0]["text"], "hi");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! (The example needs the `mock-server` feature, which this crate's tests enable.)
//!
//! The provider speaks the API natively: content blocks, `tool_use` / `tool_result`, its
//! own streaming events and usage fields. It answers with the same
//! [`rath_provider::ProviderResponse`] every provider does, so sessions, cassettes and
//! provider layers (retry, budget, fallback) work unchanged. Errors are
//! [`rath_provider::ProviderError::Http`] with the status and `retry-after`, so a retry
//! layer retries 429, 529 and 5xx and leaves 4xx alone. See [`wire`] for the mapping.

#![warn(missing_docs)]

mod error;
#[cfg(feature = "mock-server")]
pub mod mock;
mod provider;
pub mod stream;
pub mod wire;

pub use error::AnthropicError;
pub use provider::{
    ANTHROPIC_PROVIDER_NAME, ANTHROPIC_VERSION, AnthropicConfig, AnthropicProvider,
    DEFAULT_BASE_URL, DEFAULT_MAX_TOKENS,
};
