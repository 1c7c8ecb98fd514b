//! The flagship example programs as library functions, so `examples/*.rs` and the tests run
//! the same code.
//!
//! ```no_run
//! use openrath::demos::engineering_team::{TeamConfig, run};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let report = run(TeamConfig::offline("/tmp/openrath-demo")).await?;
//! assert!(report.qa_passed);
//! # Ok::<(), openrath::demos::DemoError>(())
//! # });
//! ```
//!
//! Ids: every demo mints UUIDv7 ids by default ([`Stamper::system`]), offline too, so runs
//! that share an `OPENRATH_HOME` never collide. Pass `--deterministic` to an example (or set
//! `OPENRATH_DETERMINISTIC=1`; [`deterministic_requested`] reads both) for the counter stamper
//! ([`Stamper::counter`]): the same ids and clock on every run, for tests and evidence, and
//! therefore one run per store. A library caller sets the config's `deterministic` field.
//!
//! ```
//! use openrath::demos::{deterministic_from, demo_stamper};
//!
//! assert!(deterministic_from(["--deterministic"], None));
//! assert!(deterministic_from(Vec::<String>::new(), Some("1")));
//! assert!(!deterministic_from(["--live"], Some("0")));
//! assert!(demo_stamper(true).is_deterministic());
//! assert!(!demo_stamper(false).is_deterministic());
//! ```

pub mod dynamic_selector;
pub mod engineering_team;
pub mod hello_agent;
pub mod lineage_export;
pub mod long_running_coding;
pub mod research_synthesis;
pub mod sandbox_isolated;

use std::path::{Path, PathBuf};

use rath_flow::FlowError;
use rath_session::{Session, SessionId};

use rath_session::Stamper;

/// The command-line flag that selects deterministic (counter) ids in every example.
pub const DETERMINISTIC_FLAG: &str = "--deterministic";

/// The environment variable that does the same as [`DETERMINISTIC_FLAG`] when set to `1`,
/// `true` or `yes`.
pub const DETERMINISTIC_ENV: &str = "OPENRATH_DETERMINISTIC";

/// True when `args` hold [`DETERMINISTIC_FLAG`] or `env` (the value of [`DETERMINISTIC_ENV`])
/// is `1`, `true` or `yes` (any case).
pub fn deterministic_from<I, S>(args: I, env: Option<&str>) -> bool
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    args.into_iter().any(|a| a.as_ref() == DETERMINISTIC_FLAG)
        || env
            .is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
}

/// True when this process asked for deterministic ids: [`DETERMINISTIC_FLAG`] among its
/// arguments or [`DETERMINISTIC_ENV`] set. What every config's `from_env` reads.
pub fn deterministic_requested() -> bool {
    let env = std::env::var(DETERMINISTIC_ENV).ok();
    deterministic_from(std::env::args().skip(1), env.as_deref())
}

/// The stamper a demo's root sessions start from: [`Stamper::counter`] when `deterministic`,
/// else [`Stamper::system`] (UUIDv7 ids, unique across runs).
pub fn demo_stamper(deterministic: bool) -> Stamper {
    if deterministic {
        Stamper::counter()
    } else {
        Stamper::system()
    }
}

/// What can stop a demo.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DemoError {
    /// The workflow failed (a provider, tool or merge error); the message says which step.
    #[error(transparent)]
    Flow(#[from] rath_flow::FlowError),
    /// The store could not be written. Check the OPENRATH_HOME directory.
    #[error(transparent)]
    Persist(#[from] rath_persist::PersistError),
    /// The live provider could not be configured from the environment (OPENAI_BASE_URL,
    /// OPENAI_API_KEY, OPENAI_MODEL).
    #[error(transparent)]
    Provider(#[from] rath_provider::ProviderError),
    /// The run failed part way. Every session it made, the failed one included (closed,
    /// its last chunk a `run_failure` with the error, the agent, the step and the provider
    /// attempts), is saved in `store_dir`.
    #[error(
        "run failed: {error}; {saved} sessions saved in {} (failed session {session}; `rath show {session}` says why)",
        engineering_team::display(store_dir)
    )]
    RunFailed {
        /// What stopped the run.
        error: Box<FlowError>,
        /// The sessions directory.
        store_dir: PathBuf,
        /// The failed session.
        session: SessionId,
        /// Sessions saved.
        saved: usize,
    },
    /// A file next to the store (workspace, report) could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl DemoError {
    /// The one line an example prints when it ends with this error.
    pub fn line(&self) -> String {
        self.to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Ends an example that failed: prints `<example>: <the error on one line>` to stderr (for
/// a failed run, the line names the failure and the store that holds its sessions) and exits
/// with status 1.
pub fn exit_failed(example: &str, e: &DemoError) -> ! {
    eprintln!("{example}: {}", e.line());
    std::process::exit(1)
}

/// The sessions an observer has collected so far; a poisoned lock still yields them, since a
/// failed run must keep what it got.
pub(crate) fn sessions_so_far(
    collected: &std::sync::Mutex<(Vec<SessionId>, Vec<Session>)>,
) -> Vec<Session> {
    collected
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .1
        .clone()
}

/// What a flow error leaves for a demo: when the error carries a partial session (a failed
/// or cancelled run), `sessions` (the sessions recorded so far) plus that one are saved to
/// `store_dir` and the error becomes [`DemoError::RunFailed`]; otherwise it is returned as is.
pub(crate) fn keep_failed(
    store_dir: &Path,
    mut sessions: Vec<Session>,
    error: FlowError,
) -> DemoError {
    let Some(failed) = error.partial_session().cloned() else {
        return DemoError::Flow(error);
    };
    match sessions.iter_mut().find(|s| s.id() == failed.id()) {
        Some(s) => *s = failed.clone(),
        None => sessions.push(failed.clone()),
    }
    if let Err(e) = hello_agent::save_all(store_dir, &sessions) {
        return e;
    }
    DemoError::RunFailed {
        error: Box::new(error),
        store_dir: store_dir.to_path_buf(),
        session: failed.id().clone(),
        saved: sessions.len(),
    }
}

pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> DemoError {
    let path = path.into();
    move |source| DemoError::Io { path, source }
}
