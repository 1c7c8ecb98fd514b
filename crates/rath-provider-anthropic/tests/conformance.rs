//! The provider conformance kit (rath-provider, feature `conformance`) against the
//! Anthropic provider and its mock Messages API.

use std::time::Duration;

use rath_provider::ProviderError;
use rath_provider::conformance::{self, ProviderUnderTest};
use rath_provider_anthropic::mock::MockAnthropic;
use rath_provider_anthropic::{AnthropicConfig, AnthropicProvider};

struct Anthropic;

impl ProviderUnderTest for Anthropic {
    type Mock = MockAnthropic;
    type Wire = AnthropicProvider;

    async fn start_mock(&self) -> std::io::Result<MockAnthropic> {
        MockAnthropic::start().await
    }

    fn wire(
        &self,
        mock: &MockAnthropic,
        api_key: &str,
    ) -> Result<AnthropicProvider, ProviderError> {
        let cfg = AnthropicConfig::new(mock.base_url(), api_key, "claude-mock")
            .timeout(Duration::from_secs(5));
        Ok(AnthropicProvider::new(cfg)?)
    }
}

#[tokio::test]
async fn anthropic_passes_the_conformance_kit() {
    let report = conformance::run_all(&Anthropic).await;
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.passed, conformance::CHECKS);
    assert_eq!(report.provider, "anthropic");
}
