//! Authentication and the per-key rate limit.
//!
//! A request names its key as `Authorization: Bearer <secret>` (or `x-api-key: <secret>`).
//! The secret is hashed and looked up ([`crate::ServerDb::authenticate`]); it is never
//! stored, logged or sent back. Each key has its own token bucket: `burst` requests at
//! once, refilled at `per_second`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;

use crate::db::Principal;
use crate::{AppState, ServerError};

/// A per-key rate limit: a token bucket of `burst` requests refilled at `per_second`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimit {
    /// Requests per second a key may make on average.
    pub per_second: f64,
    /// Requests a key may make at once.
    pub burst: f64,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The buckets of every key seen (in memory: each server process limits on its own).
#[derive(Debug, Default)]
pub(crate) struct Limiter {
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl Limiter {
    /// Takes one token of `key`'s bucket, or says how long until one is there.
    pub(crate) fn take(&self, key: &str, limit: RateLimit) -> Result<(), ServerError> {
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let b = buckets.entry(key.to_owned()).or_insert(Bucket {
            tokens: limit.burst,
            at: now,
        });
        let refill = now.duration_since(b.at).as_secs_f64() * limit.per_second;
        b.tokens = (b.tokens + refill).min(limit.burst);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - b.tokens) / limit.per_second.max(f64::MIN_POSITIVE);
            Err(ServerError::RateLimited {
                retry_after_s: wait.ceil().max(1.0) as u64,
            })
        }
    }
}

/// The secret a request carries, if any.
fn secret_of(parts: &Parts) -> Option<&str> {
    if let Some(v) = parts.headers.get(header::AUTHORIZATION) {
        let v = v.to_str().ok()?;
        return v
            .strip_prefix("Bearer ")
            .or_else(|| v.strip_prefix("bearer "));
    }
    parts.headers.get("x-api-key")?.to_str().ok()
}

impl FromRequestParts<Arc<AppState>> for Principal {
    type Rejection = ServerError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let secret = secret_of(parts).ok_or(ServerError::Unauthorized)?;
        let principal = state
            .db
            .authenticate(secret.trim())
            .await?
            .ok_or(ServerError::Unauthorized)?;
        if let Some(limit) = state.config.rate_limit {
            state.limiter.take(&principal.key_id, limit)?;
        }
        Ok(principal)
    }
}

/// An admin key's principal (403 for a tenant key).
#[derive(Clone, Debug)]
pub struct Admin(pub Principal);

impl FromRequestParts<Arc<AppState>> for Admin {
    type Rejection = ServerError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let p = Principal::from_request_parts(parts, state).await?;
        if p.admin {
            Ok(Admin(p))
        } else {
            Err(ServerError::Forbidden)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_allows_its_burst_then_refuses_with_a_wait() {
        let l = Limiter::default();
        let limit = RateLimit {
            per_second: 1.0,
            burst: 3.0,
        };
        for _ in 0..3 {
            l.take("k", limit).unwrap();
        }
        let Err(ServerError::RateLimited { retry_after_s }) = l.take("k", limit) else {
            panic!("the fourth request passed");
        };
        assert_eq!(retry_after_s, 1);
        // Another key has its own bucket.
        l.take("other", limit).unwrap();
    }
}
