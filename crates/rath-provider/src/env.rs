//! Reading settings from environment-style variables.

use std::time::Duration;

use crate::ProviderError;

/// `var` with blank values counted as unset.
pub(crate) fn non_blank(var: &impl Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    var(name).filter(|v| !v.trim().is_empty())
}

/// `true`/`false` (also `1`/`0`, `yes`/`no`, `on`/`off`); anything else names `name`.
pub(crate) fn parse_bool(name: &str, v: &str) -> Result<bool, ProviderError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        other => Err(ProviderError::Config(format!(
            "{name} must be true or false, not {other:?}"
        ))),
    }
}

/// A whole number; anything else names `name`.
pub(crate) fn parse_u64(name: &str, v: &str) -> Result<u64, ProviderError> {
    v.trim().parse::<u64>().map_err(|_| {
        ProviderError::Config(format!("{name} must be a whole number, not {:?}", v.trim()))
    })
}

/// A number of milliseconds, or `none`/`off`/`unlimited` for no limit.
pub(crate) fn parse_limit_ms(name: &str, v: &str) -> Result<Option<Duration>, ProviderError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "none" | "off" | "unlimited" => Ok(None),
        _ => Ok(Some(Duration::from_millis(parse_u64(name, v)?))),
    }
}

/// Whole milliseconds of `d`, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
