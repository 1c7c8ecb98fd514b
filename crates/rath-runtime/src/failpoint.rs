//! Crash, stop and pause points for the fault tests: a worker SIGKILLs itself, stops
//! (SIGSTOP) or sleeps where `RATH_RUNTIME_CRASH`, `RATH_RUNTIME_STOP` or
//! `RATH_RUNTIME_PAUSE` names a [`CrashPoint`] and its count (`tool_effect:3`). Compiled in
//! only with the `failpoints` feature, which the fault tests turn on (rath-runtime's own
//! tests, rath-cli's and xtask's); a default or release build has no such hook and reads no
//! such variable: [`crash_point`] does nothing there and [`armed`] is false.

/// A place where a test can make the worker process die or stall.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashPoint {
    /// A model reply arrived and is not recorded yet.
    ModelReply,
    /// A tool ran and its answer is not recorded yet.
    ToolEffect,
    /// A model reply is recorded and the workflow has not seen it.
    Step,
}

#[cfg(feature = "failpoints")]
mod on {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use super::CrashPoint;

    /// Held shared by every store transaction this process runs while a stop point is armed,
    /// and whole by the stop point before it stops the process: a worker stopped there holds no
    /// open transaction. (A process stopped inside one would keep every other worker from
    /// writing until it continued: SQLite's write lock, PostgreSQL's lease row locks.)
    static QUIET: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

    /// A share of [`QUIET`] for one store transaction, when `RATH_RUNTIME_STOP` is set (else
    /// nothing: no cost outside the tests that stop a worker).
    pub(crate) async fn quiet_share() -> Option<tokio::sync::RwLockReadGuard<'static, ()>> {
        static ARMED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        if *ARMED.get_or_init(|| std::env::var_os("RATH_RUNTIME_STOP").is_some()) {
            Some(QUIET.read().await)
        } else {
            None
        }
    }

    static CRASH_COUNTS: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

    impl CrashPoint {
        fn name(self) -> &'static str {
            match self {
                CrashPoint::ModelReply => "model_reply",
                CrashPoint::ToolEffect => "tool_effect",
                CrashPoint::Step => "step",
            }
        }
        fn index(self) -> usize {
            match self {
                CrashPoint::ModelReply => 0,
                CrashPoint::ToolEffect => 1,
                CrashPoint::Step => 2,
            }
        }
    }

    /// The crash, stop and pause specs of the environment (`RATH_RUNTIME_CRASH`,
    /// `RATH_RUNTIME_STOP`, `RATH_RUNTIME_PAUSE`), read once: a step reaches several points, and
    /// reading the environment takes its lock and scans it each time.
    fn specs() -> &'static [Option<String>; 3] {
        static SPECS: std::sync::OnceLock<[Option<String>; 3]> = std::sync::OnceLock::new();
        SPECS.get_or_init(|| {
            [
                "RATH_RUNTIME_CRASH",
                "RATH_RUNTIME_STOP",
                "RATH_RUNTIME_PAUSE",
            ]
            .map(|v| std::env::var(v).ok())
        })
    }

    /// True when the environment names `point` for a crash, stop or pause.
    pub(crate) fn armed(point: CrashPoint) -> bool {
        specs()
            .iter()
            .flatten()
            .any(|s| s.split(':').next() == Some(point.name()))
    }

    /// Reaches `point`: SIGKILLs the process or sleeps when the environment asks for it here.
    pub async fn crash_point(point: CrashPoint) {
        let n = CRASH_COUNTS[point.index()].fetch_add(1, Ordering::SeqCst) + 1;
        let [crash, stop, pause] = specs();
        if let Some(spec) = crash {
            let mut it = spec.split(':');
            if it.next() == Some(point.name()) && it.next().and_then(|s| s.parse().ok()) == Some(n)
            {
                tracing::warn!(point = point.name(), n, "crash point: SIGKILL");
                // SAFETY: kill(2) on our own pid with a valid signal number has no memory effects.
                unsafe {
                    libc::kill(libc::getpid(), libc::SIGKILL);
                }
            }
        }
        if let Some(spec) = stop {
            let mut it = spec.split(':');
            if it.next() == Some(point.name()) && it.next().and_then(|s| s.parse().ok()) == Some(n)
            {
                // Waits for the transactions under way and lets no new one start until the
                // process is continued: until SIGCONT is seen, since kill(2) returns before
                // every thread has stopped.
                let _quiet = QUIET.write().await;
                let continued = tokio::signal::unix::signal(
                    tokio::signal::unix::SignalKind::from_raw(libc::SIGCONT),
                );
                tracing::warn!(point = point.name(), n, "stop point: SIGSTOP");
                // SAFETY: as above.
                unsafe {
                    libc::kill(libc::getpid(), libc::SIGSTOP);
                }
                match continued {
                    Ok(mut c) => {
                        c.recv().await;
                    }
                    // No signal driver: hold it a while instead (the stop lands within it).
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        }
        if let Some(spec) = pause {
            let parts: Vec<&str> = spec.split(':').collect();
            if parts.len() == 3
                && parts[0] == point.name()
                && parts[1].parse::<u64>().ok() == Some(n)
                && let Ok(ms) = parts[2].parse::<u64>()
            {
                tracing::warn!(point = point.name(), n, ms, "pause point");
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
        }
    }
}

#[cfg(feature = "failpoints")]
pub use on::crash_point;
#[cfg(feature = "failpoints")]
pub(crate) use on::{armed, quiet_share};

/// Reaches `point`: nothing happens in a build without the `failpoints` feature.
#[cfg(not(feature = "failpoints"))]
pub async fn crash_point(point: CrashPoint) {
    let _ = point;
}

/// False in a build without the `failpoints` feature.
#[cfg(not(feature = "failpoints"))]
pub(crate) fn armed(point: CrashPoint) -> bool {
    let _ = point;
    false
}

/// Nothing to share in a build without the `failpoints` feature.
#[cfg(not(feature = "failpoints"))]
pub(crate) async fn quiet_share() -> Option<()> {
    None
}
