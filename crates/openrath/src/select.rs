//! The live provider the environment chooses: `RATH_PROVIDER=openai|anthropic`, or by
//! default the one whose variables are set. Every example and the `rath` CLI choose here, so
//! one rule holds everywhere.
//!
//! ```
//! use openrath::select::{ProviderKind, live_from_lookup};
//!
//! let env = |pairs: &'static [(&'static str, &'static str)]| {
//!     move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
//! };
//! // Nothing set: offline (the caller uses its scripted provider).
//! assert_eq!(ProviderKind::from_lookup(env(&[]))?, None);
//! // Which key or base URL is set decides...
//! let anthropic = env(&[("ANTHROPIC_API_KEY", "sk-ant-x"), ("ANTHROPIC_MODEL", "claude-x")]);
//! assert_eq!(ProviderKind::from_lookup(&anthropic)?, Some(ProviderKind::Anthropic));
//! let local = env(&[("OPENAI_BASE_URL", "http://127.0.0.1:8099/v1")]);
//! assert_eq!(ProviderKind::from_lookup(&local)?, Some(ProviderKind::OpenAi));
//! // ...unless RATH_PROVIDER says.
//! let both = env(&[("RATH_PROVIDER", "anthropic"), ("OPENAI_BASE_URL", "http://h/v1"),
//!                  ("ANTHROPIC_API_KEY", "k"), ("ANTHROPIC_MODEL", "claude-x")]);
//! let live = live_from_lookup(&both)?.expect("a live provider");
//! assert_eq!(live.manifest().provider, "anthropic");
//! assert_eq!(live.manifest().layers[1].layer, "retry");
//! assert!(ProviderKind::from_lookup(env(&[("RATH_PROVIDER", "bard")])).is_err());
//! # Ok::<(), openrath::provider::ProviderError>(())
//! ```
//!
//! The stack is the same for both wires: the retry layer and the token budget read from the
//! usual variables (`OPENAI_MAX_RETRIES`, `OPENAI_RETRY_MAX_ELAPSED_MS`,
//! `OPENAI_RETRY_BUDGET_MS`, `OPENAI_TOKEN_BUDGET`; see
//! [`StackConfig`]). The OpenAI-compatible wire gets the short
//! answers small local models need ([`StackConfig::short_answers`]).

use std::sync::Arc;

use rath_provider::{Budgeted, Provider, ProviderError, ProviderExt, StackConfig};
use rath_provider_anthropic::{AnthropicConfig, AnthropicProvider};

/// `RATH_PROVIDER`: `openai` or `anthropic` (also `offline`, `scripted` or `none` for no live
/// provider); unset, the provider whose variables are set.
pub const ENV_PROVIDER: &str = "RATH_PROVIDER";

/// The live providers there are to choose from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProviderKind {
    /// The OpenAI-compatible wire (`OPENAI_BASE_URL`, `OPENAI_API_KEY`, `OPENAI_MODEL`).
    OpenAi,
    /// Anthropic's Messages API (`ANTHROPIC_API_KEY`, `ANTHROPIC_MODEL`,
    /// `ANTHROPIC_BASE_URL`).
    Anthropic,
}

impl ProviderKind {
    /// The name `RATH_PROVIDER` takes for it.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::Anthropic => "anthropic",
        }
    }

    /// The choice the variables make (blank values count as unset): `RATH_PROVIDER` when
    /// set; else OpenAI when `OPENAI_BASE_URL` or `OPENAI_API_KEY` is set (the live
    /// variables the examples always used); else Anthropic when `ANTHROPIC_API_KEY` is set;
    /// else `None`: run offline. An unknown `RATH_PROVIDER` is a
    /// [`ProviderError::Config`].
    pub fn from_lookup(
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, ProviderError> {
        let set = |k: &str| var(k).is_some_and(|v| !v.trim().is_empty());
        if let Some(v) = var(ENV_PROVIDER).filter(|v| !v.trim().is_empty()) {
            return match v.trim().to_ascii_lowercase().as_str() {
                "openai" | "openai-compatible" => Ok(Some(ProviderKind::OpenAi)),
                "anthropic" => Ok(Some(ProviderKind::Anthropic)),
                "offline" | "scripted" | "none" => Ok(None),
                other => Err(ProviderError::Config(format!(
                    "{ENV_PROVIDER} must be openai or anthropic (or offline), not {other:?}"
                ))),
            };
        }
        if set("OPENAI_BASE_URL") || set("OPENAI_API_KEY") {
            Ok(Some(ProviderKind::OpenAi))
        } else if set("ANTHROPIC_API_KEY") {
            Ok(Some(ProviderKind::Anthropic))
        } else {
            Ok(None)
        }
    }

    /// [`ProviderKind::from_lookup`] on the process environment.
    pub fn from_env() -> Result<Option<Self>, ProviderError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }
}

/// The live provider the variables choose ([`ProviderKind::from_lookup`]), stacked (budget,
/// retry, wire); `None` when they choose none. A missing or malformed setting of the chosen
/// provider (no `ANTHROPIC_MODEL`, a bad URL, a retry count that does not parse) is a
/// [`ProviderError::Config`] naming it.
pub fn live_from_lookup(
    var: impl Fn(&str) -> Option<String>,
) -> Result<Option<Arc<dyn Provider>>, ProviderError> {
    let Some(kind) = ProviderKind::from_lookup(&var)? else {
        return Ok(None);
    };
    let stack = StackConfig::from_lookup(&var)?;
    let provider: Arc<dyn Provider> = match kind {
        ProviderKind::OpenAi => Arc::new(stack.short_answers().build()?),
        ProviderKind::Anthropic => {
            let wire = AnthropicProvider::new(AnthropicConfig::from_lookup(&var)?)?;
            Arc::new(Budgeted::new(
                wire.with_retry(stack.retry),
                stack.token_budget,
            ))
        }
    };
    Ok(Some(provider))
}

/// [`live_from_lookup`] on the process environment: what examples call to pick their model.
pub fn live_provider() -> Result<Option<Arc<dyn Provider>>, ProviderError> {
    live_from_lookup(|k| std::env::var(k).ok())
}

/// True when the process environment chooses a live provider (an unknown `RATH_PROVIDER`
/// counts as live, so building it reports the error).
pub fn live_requested() -> bool {
    ProviderKind::from_env().map_or(true, |k| k.is_some())
}

/// The live provider the process environment chooses, or a [`ProviderError::Config`] saying
/// that none is chosen: what a program calls once it decided to run live
/// ([`live_requested`]).
pub fn live() -> Result<Arc<dyn Provider>, ProviderError> {
    live_provider()?.ok_or_else(|| {
        ProviderError::Config(format!(
            "no live provider chosen: set {ENV_PROVIDER}=openai|anthropic, OPENAI_BASE_URL or \
             ANTHROPIC_API_KEY"
        ))
    })
}

/// `live model: openai` / `live model: anthropic` / `offline`: a run's header line.
pub fn describe() -> String {
    match ProviderKind::from_env() {
        Ok(Some(kind)) => format!("live model: {}", kind.as_str()),
        Ok(None) => "offline".to_owned(),
        Err(e) => e.to_string(),
    }
}
