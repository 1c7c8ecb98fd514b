//! A worker process's main loop: run until SIGTERM or ctrl-c, then hand runs back.
//!
//! ```no_run
//! use std::sync::Arc;
//! use rath_runtime::bundled::{self, BundledOptions};
//! use rath_runtime::{Runtime, WorkerOptions, serve_worker};
//!
//! # async fn main_() -> Result<(), rath_runtime::RuntimeError> {
//! // Your own workflows: start from the bundled ones or from `WorkflowRegistry::new()`.
//! let registry = bundled::registry(&BundledOptions::default());
//! let sessions = Arc::new(rath_persist::Store::at("sessions"));
//! let rt = Runtime::connect("postgres://rath@db-host/runs", sessions, registry).await?;
//! let report = serve_worker(rt, WorkerOptions::named("worker-a").concurrency(4)).await?;
//! println!("stopped on {}", report.signal);
//! # Ok(())
//! # }
//! ```
//!
//! On the first SIGTERM or SIGINT the worker stops claiming; runs in flight get
//! [`WorkerOptions::grace`] to finish, and the ones still going after it are handed back:
//! their tool calls already dispatched are let finish and recorded, then the run goes back
//! to `queued` at once (no lease left to expire), so another worker picks it up on its next
//! poll and re-executes it from the journal. A second signal ends the grace at once.

use rath_flow::CancellationToken;

use crate::worker::{Worker, WorkerOptions};
use crate::{Runtime, RuntimeError};

/// How [`serve_worker`] ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServeReport {
    /// The signal that stopped it (`SIGTERM`, `SIGINT`).
    pub signal: String,
}

/// Runs a worker over `rt` with `opts` until SIGTERM or SIGINT: the library entry point
/// behind `rath worker`, for a binary that registers its own workflows.
///
/// On the first signal the worker stops claiming; runs in flight get
/// [`WorkerOptions::grace`] to finish, then are handed back: tool calls already dispatched
/// finish and are recorded, and the run goes back to `queued` at once for another worker's
/// next poll (no lease left to expire). A second signal ends the grace at once.
///
/// ```no_run
/// use std::sync::Arc;
/// use rath_runtime::{Runtime, WorkerOptions, WorkflowRegistry, serve_worker};
///
/// # async fn main_() -> Result<(), rath_runtime::RuntimeError> {
/// let registry = WorkflowRegistry::new(); // .register("mine", "mine v1", || ...)
/// let sessions = Arc::new(rath_persist::Store::at("sessions"));
/// let rt = Runtime::connect("sqlite:runs.db", sessions, registry).await?;
/// serve_worker(rt, WorkerOptions::named("w1").concurrency(4)).await?;
/// # Ok(())
/// # }
/// ```
pub async fn serve_worker(rt: Runtime, opts: WorkerOptions) -> Result<ServeReport, RuntimeError> {
    let shutdown = CancellationToken::new();
    let hurry = CancellationToken::new();
    let mut term = signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut int = signal(tokio::signal::unix::SignalKind::interrupt())?;
    tracing::info!(
        worker = %opts.name,
        concurrency = opts.concurrency,
        lease_ms = opts.lease.as_millis() as u64,
        grace_ms = opts.grace.as_millis() as u64,
        store = %rt.runs().name(),
        "worker started"
    );
    let name = opts.name.clone();
    let worker = Worker::new(rt, opts).with_hurry(hurry.clone());
    let pool = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { worker.run(shutdown).await }
    });
    let first = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    tracing::info!(worker = %name, signal = first, "shutting down: no new claims");
    shutdown.cancel();
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::info!("second signal: handing runs back now");
        hurry.cancel();
    });
    let done = pool
        .await
        .map_err(|e| RuntimeError::Worker(format!("worker pool task: {e}")))?;
    done?;
    tracing::info!(worker = %name, "worker stopped");
    Ok(ServeReport {
        signal: first.to_owned(),
    })
}

fn signal(
    kind: tokio::signal::unix::SignalKind,
) -> Result<tokio::signal::unix::Signal, RuntimeError> {
    tokio::signal::unix::signal(kind)
        .map_err(|e| RuntimeError::Worker(format!("cannot install a signal handler: {e}")))
}
