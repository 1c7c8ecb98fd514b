//! The standard stack: the OpenAI-compatible wire with the retry and budget layers, as the
//! environment configures them. Examples and tools build their live provider here.
//!
//! ```
//! use std::time::Duration;
//! use rath_provider::{Provider, StackConfig};
//!
//! let cfg = StackConfig::from_lookup(|k| match k {
//!     "OPENAI_BASE_URL" => Some("http://127.0.0.1:8099/v1".into()),
//!     "OPENAI_MAX_RETRIES" => Some("1".into()),
//!     "OPENAI_TOKEN_BUDGET" => Some("50000".into()),
//!     _ => None,
//! })?;
//! assert_eq!(cfg.retry.max_retries, 1);
//! let provider = cfg.build()?; // Budgeted<Retrying<OpenAiProvider>>
//! assert_eq!(provider.limit(), Some(50_000));
//! let m = provider.manifest();
//! assert_eq!(m.layers[0].layer, "budget");
//! assert_eq!(m.layers[1].layer, "retry");
//! assert_eq!(m.provider, "openai-compatible");
//! # Ok::<(), rath_provider::ProviderError>(())
//! ```

use crate::env::{non_blank, parse_u64};
use crate::{Budgeted, OpenAiConfig, OpenAiProvider, ProviderError, ProviderExt, Retry, Retrying};

/// `OPENAI_TOKEN_BUDGET`: total tokens the standard stack may spend (unset: no limit).
pub const ENV_TOKEN_BUDGET: &str = "OPENAI_TOKEN_BUDGET";

/// The standard stack: the OpenAI-compatible wire, retried, within a token budget
/// (outermost first: budget, retry, wire).
pub type StandardProvider = Budgeted<Retrying<OpenAiProvider>>;

/// What the standard stack is built from; each part can be changed before
/// [`StackConfig::build`].
#[derive(Clone, Debug)]
pub struct StackConfig {
    /// The wire ([`OpenAiConfig::from_lookup`]).
    pub openai: OpenAiConfig,
    /// The retry layer ([`Retry::from_lookup`]).
    pub retry: Retry,
    /// The token budget (`OPENAI_TOKEN_BUDGET`; `None`: no limit, tokens still counted).
    pub token_budget: Option<u64>,
}

impl StackConfig {
    /// `openai` with the default retry settings and no token budget.
    pub fn new(openai: OpenAiConfig) -> Self {
        Self {
            openai,
            retry: Retry::default(),
            token_budget: None,
        }
    }

    /// From variables looked up with `var`: the wire's (see [`OpenAiConfig::from_lookup`]),
    /// the retry layer's (see [`Retry::from_lookup`]) and `OPENAI_TOKEN_BUDGET`. A value
    /// that does not parse is a [`ProviderError::Config`] naming the variable.
    pub fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Self, ProviderError> {
        let token_budget = non_blank(&var, ENV_TOKEN_BUDGET)
            .map(|v| parse_u64(ENV_TOKEN_BUDGET, &v))
            .transpose()?;
        Ok(Self {
            openai: OpenAiConfig::from_lookup(&var)?,
            retry: Retry::from_lookup(&var)?,
            token_budget,
        })
    }

    /// From the process environment; see [`StackConfig::from_lookup`].
    pub fn from_env() -> Result<Self, ProviderError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// The preset for short, reproducible answers from small local models (what the live
    /// examples use): where the wire config leaves them unset, at most
    /// [`Self::SHORT_MAX_TOKENS`] tokens per answer, temperature 0 and seed 0. A value
    /// already set is kept.
    ///
    /// ```
    /// use rath_provider::StackConfig;
    ///
    /// let cfg = StackConfig::from_lookup(|k| match k {
    ///     "OPENAI_BASE_URL" => Some("http://127.0.0.1:8099/v1".into()),
    ///     _ => None,
    /// })?;
    /// let mut cfg = cfg.with_token_budget(Some(20_000));
    /// cfg.openai.seed = Some(7);
    /// let cfg = cfg.short_answers();
    /// assert_eq!(cfg.openai.max_tokens, Some(StackConfig::SHORT_MAX_TOKENS));
    /// assert_eq!(cfg.openai.temperature, Some(0.0));
    /// assert_eq!(cfg.openai.seed, Some(7)); // already set: kept
    /// let _live = cfg.build()?;
    /// # Ok::<(), rath_provider::ProviderError>(())
    /// ```
    pub fn short_answers(mut self) -> Self {
        self.openai.max_tokens.get_or_insert(Self::SHORT_MAX_TOKENS);
        self.openai.temperature.get_or_insert(0.0);
        self.openai.seed.get_or_insert(0);
        self
    }

    /// The answer length [`StackConfig::short_answers`] sets: 96 tokens.
    pub const SHORT_MAX_TOKENS: u32 = 96;

    /// Sets the retry settings.
    pub fn with_retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// Sets the token budget (`None`: no limit).
    pub fn with_token_budget(mut self, tokens: Option<u64>) -> Self {
        self.token_budget = tokens;
        self
    }

    /// The stack. Fails with [`ProviderError::Config`] on a bad URL or header.
    pub fn build(self) -> Result<StandardProvider, ProviderError> {
        let wire = OpenAiProvider::new(self.openai)?.with_retry(self.retry);
        Ok(Budgeted::new(wire, self.token_budget))
    }
}

/// The standard stack from the process environment:
/// `StackConfig::from_env()?.build()`.
pub fn from_env() -> Result<StandardProvider, ProviderError> {
    StackConfig::from_env()?.build()
}
