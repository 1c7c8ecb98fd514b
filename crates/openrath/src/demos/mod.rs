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

use std::path::PathBuf;

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

pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> DemoError {
    let path = path.into();
    move |source| DemoError::Io { path, source }
}
