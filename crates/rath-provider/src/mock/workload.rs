//! The workload every provider's benchmark measures against its mock (rath-provider's
//! `benches/provider.rs`, rath-provider-anthropic's `benches/messages.rs`), written once so
//! the figures compare the same thing: one request (a system prompt and a question),
//! answered by one `word_count` tool call with the same arguments and usage, streamed in
//! pieces of [`FRAGMENT`] characters; and the OpenAI-compatible provider over this crate's
//! mock on loopback ([`Baseline`]), the path other providers are compared with.
//!
//! ```
//! use rath_provider::Provider;
//! use rath_provider::mock::workload::{self, Baseline};
//!
//! let b = Baseline::start()?;
//! let reply = b.rt.block_on(b.provider.complete(&b.request))?;
//! assert_eq!(reply.tool_calls()[0].function.name, workload::TOOL);
//! # Ok::<(), rath_provider::ProviderError>(())
//! ```

use serde_json::{Value, json};

use super::{MockReply, MockServer};
use crate::{OpenAiConfig, OpenAiProvider, ProviderError, ProviderRequest};
use rath_session::{Chunk, Session, Stamper};

/// The id of the tool call every reply makes.
pub const CALL_ID: &str = "call_1";
/// The tool called.
pub const TOOL: &str = "word_count";
/// The usage every reply reports: (prompt, completion) tokens.
pub const USAGE: (u64, u64) = (40, 12);
/// Streamed arguments come in pieces of this many characters.
pub const FRAGMENT: usize = 8;
/// The API key the benchmarks' providers send (the mocks accept any).
pub const API_KEY: &str = "sk-bench";

/// The tool call's arguments.
pub fn arguments() -> Value {
    json!({"text": "the quick brown fox"})
}

/// The request every benchmark sends.
pub fn request() -> ProviderRequest {
    let s = Session::system_with("You count words.", Stamper::counter())
        .push(Chunk::user("How many words in 'the quick brown fox'?"));
    ProviderRequest::from_session(&s, vec![])
}

/// The OpenAI-compatible mock's reply: the tool call, its usage, streamed in [`FRAGMENT`]s.
pub fn openai_reply() -> MockReply {
    MockReply::tool_calls(vec![(CALL_ID, TOOL, arguments())])
        .usage(USAGE.0, USAGE.1)
        .fragment(FRAGMENT)
}

/// The baseline: a two-thread runtime, this crate's mock answering every request with
/// [`openai_reply`], the OpenAI-compatible provider pointed at it, and [`request`].
#[derive(Debug)]
pub struct Baseline {
    /// The runtime the benchmarks block on (the mock serves on it too).
    pub rt: tokio::runtime::Runtime,
    /// The mock (kept alive as long as the baseline).
    pub server: MockServer,
    /// The provider under measurement.
    pub provider: OpenAiProvider,
    /// The request.
    pub request: ProviderRequest,
}

impl Baseline {
    /// Starts the runtime and the mock and builds the provider. A runtime or a mock that
    /// cannot start (no free loopback port) is [`ProviderError::Connection`].
    pub fn start() -> Result<Self, ProviderError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| ProviderError::Connection(format!("benchmark runtime: {e}")))?;
        let server = rt
            .block_on(MockServer::start())
            .map_err(|e| ProviderError::Connection(format!("mock server: {e}")))?;
        server.set_fallback(Some(openai_reply()));
        let config = OpenAiConfig::new(server.base_url(), "mock-model").with_api_key(API_KEY);
        let provider = OpenAiProvider::new(config)?;
        Ok(Self {
            rt,
            server,
            provider,
            request: request(),
        })
    }
}
