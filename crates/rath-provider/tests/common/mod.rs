//! Helpers shared by the contract tests.
#![allow(dead_code)]

use std::time::Duration;

use rath_provider::mock::MockServer;
use rath_provider::{
    OpenAiConfig, OpenAiProvider, ProviderExt, ProviderRequest, Retry, Retrying, ToolSchema,
};
use rath_session::{Session, Stamper};
use serde_json::json;

pub async fn server() -> MockServer {
    MockServer::start().await.expect("mock server starts")
}

/// The wire against the mock: 1.5 s per attempt.
pub fn config(server: &MockServer) -> OpenAiConfig {
    OpenAiConfig::new(server.base_url(), "mock-model").with_timeout(Duration::from_millis(1500))
}

/// Fast retries so fault tests stay quick: 2 retries, backoff from 10 ms.
pub fn retry() -> Retry {
    Retry::default()
        .with_max_retries(2)
        .with_backoff(Duration::from_millis(10), Duration::from_millis(1500))
}

/// The wire `cfg` wrapped in the retry layer.
pub fn stacked(cfg: OpenAiConfig, retry: Retry) -> Retrying<OpenAiProvider> {
    OpenAiProvider::new(cfg)
        .expect("valid config")
        .with_retry(retry)
}

/// The mock's wire with [`retry`].
pub fn provider(server: &MockServer) -> Retrying<OpenAiProvider> {
    stacked(config(server), retry())
}

pub fn session() -> Session {
    Session::system_with("You count words.", Stamper::counter()).push(rath_session::Chunk::user(
        "How many words in 'the quick brown fox'?",
    ))
}

pub fn word_count() -> ToolSchema {
    ToolSchema::new(
        "word_count",
        "Count the words in a text",
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
    )
}

pub fn request(s: &Session) -> ProviderRequest {
    ProviderRequest::from_session(s, vec![word_count()])
}

pub fn session_json(s: &Session) -> String {
    serde_json::to_string(s).expect("session serialises")
}

/// Time since `t0` on tokio's clock: virtual time in tests that run with
/// `start_paused = true` (the only ones that call this), so exact and independent of load.
pub fn since(t0: tokio::time::Instant) -> Duration {
    tokio::time::Instant::now() - t0
}

pub fn secs(ms: u64) -> Duration {
    Duration::from_millis(ms)
}
