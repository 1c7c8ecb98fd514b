//! The provider conformance kit against the OpenAI-compatible provider and its mock.

use rath_provider::conformance::{self, ProviderUnderTest};
use rath_provider::mock::MockServer;
use rath_provider::{OpenAiConfig, OpenAiProvider, ProviderError};

struct OpenAiCompatible;

impl ProviderUnderTest for OpenAiCompatible {
    type Mock = MockServer;
    type Wire = OpenAiProvider;

    async fn start_mock(&self) -> std::io::Result<MockServer> {
        MockServer::start().await
    }

    fn wire(&self, mock: &MockServer, api_key: &str) -> Result<OpenAiProvider, ProviderError> {
        let cfg = OpenAiConfig::new(mock.base_url(), "mock-model")
            .with_api_key(api_key)
            .with_timeout(std::time::Duration::from_secs(5));
        OpenAiProvider::new(cfg)
    }
}

#[tokio::test]
async fn openai_compatible_passes_the_conformance_kit() {
    let report = conformance::run_all(&OpenAiCompatible).await;
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.passed, conformance::CHECKS);
    assert_eq!(report.provider, "openai-compatible");
}
