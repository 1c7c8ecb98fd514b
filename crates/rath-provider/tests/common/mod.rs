//! Helpers shared by the contract tests.
#![allow(dead_code)]

use std::time::Duration;

use rath_provider::mock::MockServer;
use rath_provider::{
    OpenAiConfig, OpenAiProvider, ProviderExt, ProviderRequest, Retry, Retrying, ToolSchema,
};
use rath_session::{Session, Stamper};
use serde_json::json;

/// True under CI (`RATH_CI` set and not `0`; `.ci/run` sets `RATH_CI=1`), where a missing
/// prerequisite fails the test instead of skipping it.
pub fn in_ci() -> bool {
    std::env::var("RATH_CI").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// A test's prerequisite `what` is missing (name it and say how to get it). Under
/// `RATH_CI=1` this panics, failing the calling test; locally it prints the one marker line
/// `RATH-SKIP: <test>: <what>` and returns, and the caller returns early. The line goes
/// straight to stderr, past the harness's output capture, so `cargo test` shows what was
/// skipped and the `test_report` packet counts it as skipped, not passed (docs/TESTING.md).
pub fn skip(what: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("unnamed test")
        .to_owned();
    let what = what.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        !in_ci(),
        "{test}: RATH_CI=1 and a prerequisite is missing: {what}"
    );
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "RATH-SKIP: {test}: {what}");
}

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

pub fn secs(ms: u64) -> Duration {
    Duration::from_millis(ms)
}
