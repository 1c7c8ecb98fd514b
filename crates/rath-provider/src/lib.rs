//! Model providers for openrath: the [`Provider`] trait, an OpenAI-compatible provider on
//! `async-openai`, a [`ScriptedProvider`] for tests and offline runs, and cassettes that record
//! and replay provider traffic.
//!
//! ```
//! use rath_provider::{Provider, ProviderRequest, ScriptedProvider, ScriptedResponse};
//! use rath_session::{ChunkKind, Session, Stamper};
//! use serde_json::json;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let provider = ScriptedProvider::new(vec![
//!     ScriptedResponse::tool_calls(vec![("call_1", "word_count", json!({"text": "a b c"}))])
//!         .usage(40, 12),
//! ]);
//! let session = Session::user_with("How many words in 'a b c'?", Stamper::counter());
//! let req = ProviderRequest::from_session(&session, vec![]);
//! let resp = provider.complete(&req).await?;
//! let next = resp.apply(&session, &req, 0.0);
//! assert_eq!(next.last().unwrap().kind(), ChunkKind::ModelCall);
//! assert_eq!(next.unanswered_tool_calls().len(), 1);
//! provider.assert_complete()?;
//! # Ok::<(), rath_provider::ProviderError>(())
//! # }).unwrap();
//! ```
//!
//! A provider never sees or changes a session: it takes a [`ProviderRequest`] (the
//! conversation view, tool schemas and a request id from the session's stamper) and returns
//! a [`ProviderResponse`]; [`ProviderResponse::apply`] puts the assistant chunk, the
//! `model_call` evidence (carrying the request id) and the usage on a new session.
//!
//! **Layers.** Wrapping a provider gives a provider, for any provider including one written
//! outside this crate ([`ProviderExt`] makes it read as a builder):
//!
//! ```no_run
//! use rath_provider::{OpenAiConfig, OpenAiProvider, ProviderExt, RateLimit, Retry};
//!
//! # fn main() -> Result<(), rath_provider::ProviderError> {
//! let provider = OpenAiProvider::new(OpenAiConfig::from_env()?)?
//!     .with_rate_limit(RateLimit::per_minute(60))
//!     .with_retry(Retry::default())
//!     .with_budget(100_000);
//! # let _ = provider; Ok(()) }
//! ```
//!
//! [`Retrying`] retries 408/409/429/5xx, timeouts, cut connections and malformed answers
//! with exponential backoff and jitter honouring `Retry-After`, within a per-call and a
//! per-layer time limit (400, 401, 403, 404 and 422 are not retried) and records every
//! attempt ([`Attempt`]) in the evidence or in [`ProviderError::RetriesExhausted`];
//! [`Budgeted`] refuses, unsent, a request that could pass a token budget; [`RateLimited`]
//! spaces requests; [`WithFallback`] asks a second provider when the first is unavailable;
//! [`RecordingProvider`] records a cassette. [`from_env`] builds the standard stack
//! (OpenAI wire, retry, budget) from the environment ([`StackConfig`]).
//!
//! [`OpenAiProvider`] is the wire: a streamed request that yields no event or no finish
//! reason gets one non-streamed fallback (recorded as `stream_fallback` in the evidence's
//! `detail`), a server that cannot stream tool calls can be marked so
//! ([`OpenAiConfig::stream_tools`], env `OPENAI_STREAM_TOOLS=false`), and faults come back
//! typed with their status and `Retry-After`.

#![warn(missing_docs)]

mod attempt;
mod cassette;
#[cfg(feature = "conformance")]
pub mod conformance;
mod env;
mod error;
mod layers;
#[cfg(feature = "mock-server")]
pub mod mock;
mod openai;
mod provider;
mod scripted;
mod stack;
mod types;
mod wire;

pub use attempt::{Attempt, AttemptMode};
pub use cassette::{
    Interaction, REPLAY_PROVIDER_NAME, RecordedResponse, RecordingProvider, ReplayProvider,
    json_diff,
};
pub use error::ProviderError;
pub use layers::{
    Budgeted, ENV_MAX_RETRIES, ENV_RETRY_BUDGET_MS, ENV_RETRY_MAX_ELAPSED_MS, Jitter, ProviderExt,
    RateLimit, RateLimited, Retry, Retrying, WithFallback,
};
pub use openai::{
    DEFAULT_BASE_URL, DEFAULT_MODEL, ENV_STREAM_TOOLS, ENV_TIMEOUT_MS, OPENAI_PROVIDER_NAME,
    OpenAiConfig, OpenAiProvider, STREAM_SKIPPED_DISABLED, STREAM_SKIPPED_FAILED_EARLIER,
};
pub use provider::{Provider, StreamSink};
pub use scripted::{RequestAssertion, ScriptedProvider, ScriptedResponse};
pub use stack::{ENV_TOKEN_BUDGET, StackConfig, StandardProvider, from_env};
pub use types::{
    LayerManifest, ProviderManifest, ProviderRequest, ProviderResponse, REDACTED, StreamAssembler,
    StreamEvent, ToolChoice, ToolSchema, is_secret_name,
};
