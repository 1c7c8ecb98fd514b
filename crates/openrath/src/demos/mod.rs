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

pub mod dynamic_selector;
pub mod engineering_team;
pub mod hello_agent;
pub mod lineage_export;
pub mod long_running_coding;
pub mod research_synthesis;
pub mod sandbox_isolated;

use std::path::PathBuf;

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
