//! The run store's clock: the time it writes and compares (submissions, backoffs, leases,
//! deadlines, events), in milliseconds since the Unix epoch.
//!
//! ```
//! use std::time::Duration;
//! use rath_runtime::RunClock;
//!
//! let clock = RunClock::manual(1_000);
//! assert_eq!(clock.now_ms(), 1_000);
//! clock.advance(Duration::from_millis(150));
//! assert_eq!(clock.now_ms(), 1_150);
//! assert!(RunClock::system().now_ms() > 1_600_000_000_000);
//! ```
//!
//! These times live in the database and are compared in SQL (a run is claimable once
//! `not_before_ms <= now`, a lease is lost once `expires_ms < now`), where tokio's paused
//! clock cannot reach. A store built with a manual clock ([`crate::RunStore::connect_with_clock`])
//! sees time move only when its clock is advanced, so a test of a backoff or a deadline asks
//! "not claimable yet", advances the clock, and asks again, with no wall-clock window that a
//! loaded machine could miss.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The system clock, or a manual one that moves only when told. Cheap to clone; clones of a
/// manual clock share its time.
#[derive(Clone, Debug, Default)]
pub struct RunClock {
    manual: Option<Arc<AtomicI64>>,
}

impl RunClock {
    /// The system clock.
    pub fn system() -> Self {
        Self::default()
    }

    /// A clock at `start_ms` that moves only through [`RunClock::advance`] and
    /// [`RunClock::set`].
    pub fn manual(start_ms: i64) -> Self {
        Self {
            manual: Some(Arc::new(AtomicI64::new(start_ms))),
        }
    }

    /// True for a manual clock.
    pub fn is_manual(&self) -> bool {
        self.manual.is_some()
    }

    /// Now, in milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> i64 {
        match &self.manual {
            Some(t) => t.load(Ordering::SeqCst),
            None => system_ms(),
        }
    }

    /// Moves a manual clock on by `d`; the system clock is not moved (returns false).
    pub fn advance(&self, d: Duration) -> bool {
        match &self.manual {
            Some(t) => {
                let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
                let _ = t.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
                    Some(v.saturating_add(ms))
                });
                true
            }
            None => false,
        }
    }

    /// Sets a manual clock to `ms`; the system clock is not set (returns false).
    pub fn set(&self, ms: i64) -> bool {
        match &self.manual {
            Some(t) => {
                t.store(ms, Ordering::SeqCst);
                true
            }
            None => false,
        }
    }
}

/// The system clock in milliseconds since the Unix epoch (0 before it).
pub fn system_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
