//! The workflows `rath serve`, `rath worker` and `rath run` offer: the declared ones of a
//! directory (`--workflows DIR`, every `*.toml` in it, checked whole when the command
//! starts: a bad file stops it with the file and line), else the bundled ones
//! (`team`, `gated`). A declared agent's model is the one the environment chooses
//! (`openrath::select`); without one, the command refuses to start.

use std::path::Path;
use std::sync::Arc;

use openrath::declare::Declared;
use openrath::provider::{Provider, ProviderError};
use openrath::runtime::WorkflowRegistry;
use openrath::runtime::bundled::{self, BundledOptions};

use crate::Failure;

impl From<openrath::declare::DeclareError> for Failure {
    fn from(e: openrath::declare::DeclareError) -> Self {
        Failure(e.to_string())
    }
}

/// A declared agent's provider: the live one the environment chooses.
fn live(_agent: &str) -> Result<Arc<dyn Provider>, ProviderError> {
    openrath::select::live()
}

/// `declared` as a registry to run, once the environment is known to choose a model and
/// the MCP servers the files declare are started (on the calling runtime, which must be
/// the one that runs the workflows: the servers' connections live on it).
pub(crate) async fn declared_registry(mut declared: Declared) -> Result<WorkflowRegistry, Failure> {
    live("").map_err(|e| Failure(format!("declared workflows need a model: {e}")))?;
    if declared.uses_mcp() {
        declared
            .connect_mcp(&openrath::mcp::ConnectOptions::default())
            .await?;
    }
    Ok(declared.registry(live))
}

/// The declared workflows of `dir` (checked, their MCP servers started), else the bundled
/// ones with `bundled`'s options.
pub(crate) async fn registry(
    dir: Option<&Path>,
    bundled: &BundledOptions,
) -> Result<WorkflowRegistry, Failure> {
    match dir {
        Some(dir) => declared_registry(Declared::load_dir(dir)?).await,
        None => Ok(bundled::registry(bundled)),
    }
}

/// [`registry`] for submitting runs and reading them: the workflows' definitions, which
/// need no model and no MCP server (both are asked for only when a run is built).
pub(crate) fn definitions(dir: Option<&Path>) -> Result<WorkflowRegistry, Failure> {
    match dir {
        Some(dir) => Ok(Declared::load_dir(dir)?.registry(live)),
        None => Ok(bundled::registry(&BundledOptions::default())),
    }
}
