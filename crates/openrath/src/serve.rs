//! Your own workflows, served and worked: [`serve`] puts a [`WorkflowRegistry`] behind the
//! agent server (sessions and durable runs over HTTP, the LangGraph routes, the live
//! viewer), and [`work`] runs it on a worker that claims runs from a shared run store.
//! Behind the `server` feature.
//!
//! ```no_run
//! use openrath::prelude::*;
//! use openrath::runtime::WorkflowRegistry;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let registry = WorkflowRegistry::new().register("helper", "helper v1", || {
//!     Ok(Agent::new("helper", "Answer briefly.", openrath::select::live()?))
//! });
//! // Serves until Ctrl-C or SIGTERM; a first start prints a key to call it with.
//! openrath::serve("sqlite:agent.db", registry).bind("127.0.0.1:8080").await?;
//! # Ok(()) }
//! ```
//!
//! The session store is any [`crate::store::open_store`] URL: a directory of JSONL files,
//! `sqlite:FILE` or `postgres://...`. Runs (and the server's keys) are kept in a run
//! store beside it unless [`Serve::runs`] names one ([`runs_beside`]).

use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use rath_runtime::{Runtime, RuntimeError, ServeReport, WorkerOptions, WorkflowRegistry};
use rath_server::{MintedKey, Server, ServerConfig, ServerError};
use tokio::task::JoinHandle;

pub use rath_server as server;

/// The run store kept beside session store `store`: the same database for SQLite and
/// PostgreSQL; for a JSONL directory, `runs.db` in its home (the directory holding
/// `sessions/`), where `rath worker` and `rath runs` look by default.
pub fn runs_beside(store: &str) -> String {
    if store.starts_with("sqlite:")
        || store.starts_with("postgres://")
        || store.starts_with("postgresql://")
    {
        return store.to_owned();
    }
    let dir = std::path::Path::new(store.strip_prefix("jsonl:").unwrap_or(store));
    let sessions = rath_store_sql::sessions_dir(dir);
    let home = match sessions.file_name() {
        Some(n) if n == "sessions" => sessions.parent().unwrap_or(dir),
        _ => sessions.as_path(),
    };
    format!("sqlite:{}", home.join("runs.db").display())
}

/// A server to start: see [`serve`].
#[must_use = "a Serve does nothing until it is awaited or started"]
pub struct Serve {
    store: String,
    runs: Option<String>,
    bind: String,
    registry: WorkflowRegistry,
    config: ServerConfig,
}

/// Serves `registry`'s workflows over the session store at `store`: awaited, it listens
/// (on `127.0.0.1:8080` unless [`Serve::bind`] says otherwise) with one embedded worker,
/// until SIGINT or SIGTERM, then shuts down gracefully. [`Serve::start`] starts it and
/// hands back a handle instead.
pub fn serve(store: impl Into<String>, registry: WorkflowRegistry) -> Serve {
    Serve {
        store: store.into(),
        runs: None,
        bind: "127.0.0.1:8080".into(),
        registry,
        config: ServerConfig {
            workers: 1,
            worker_name: format!("serve-{}", std::process::id()),
            ..ServerConfig::default()
        },
    }
}

impl Serve {
    /// The run store (`sqlite:FILE` or `postgres://...`), which also holds the server's
    /// keys; default [`runs_beside`] the session store.
    pub fn runs(mut self, url: impl Into<String>) -> Self {
        self.runs = Some(url.into());
        self
    }

    /// The address to listen on (`127.0.0.1:0` picks a free port; see [`Served::addr`]).
    pub fn bind(mut self, addr: impl Into<String>) -> Self {
        self.bind = addr.into();
        self
    }

    /// The server's configuration (limits, CORS, embedded workers, ids and clock) in place
    /// of the default one with one embedded worker.
    pub fn config(mut self, config: ServerConfig) -> Self {
        self.config = config;
        self
    }

    /// Opens the stores, listens and serves in the background. When the run store holds
    /// no live key, a tenant key (tenant `local`) is minted: [`Served::first_key`].
    pub async fn start(self) -> Result<Served, ServerError> {
        let runs = self.runs.unwrap_or_else(|| runs_beside(&self.store));
        let server = Server::connect(&self.store, &runs, self.registry, self.config).await?;
        let live = server
            .db()
            .list_keys()
            .await?
            .iter()
            .any(|k| k.revoked_ms.is_none());
        let first_key = if live {
            None
        } else {
            Some(
                server
                    .db()
                    .create_key("local", false, "first start")
                    .await?,
            )
        };
        let listener = tokio::net::TcpListener::bind(&self.bind)
            .await
            .map_err(|e| {
                ServerError::Io(std::io::Error::new(
                    e.kind(),
                    format!("cannot listen on {}: {e}", self.bind),
                ))
            })?;
        let addr = listener.local_addr()?;
        let stop = server.shutdown_token();
        let task = tokio::spawn(server.serve(listener));
        Ok(Served {
            addr,
            first_key,
            stop,
            task,
        })
    }
}

impl IntoFuture for Serve {
    type Output = Result<(), ServerError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let served = self.start().await?;
            eprintln!(
                "openrath: serving on http://{} (Ctrl-C or SIGTERM stops)",
                served.addr()
            );
            if let Some(k) = served.first_key() {
                eprintln!(
                    "openrath: first start: key {} for tenant {} (shown once; send it as \
                     `Authorization: Bearer <key>`):\n{}",
                    k.info.id, k.info.tenant, k.secret
                );
            }
            shutdown_signal().await;
            eprintln!("openrath: shutting down");
            served.stop().await
        })
    }
}

/// A running server: see [`Serve::start`].
#[derive(Debug)]
pub struct Served {
    addr: SocketAddr,
    first_key: Option<MintedKey>,
    stop: tokio_util::sync::CancellationToken,
    task: JoinHandle<Result<(), ServerError>>,
}

impl Served {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The key minted at this start, when the run store held none: its secret is not
    /// stored anywhere else.
    pub fn first_key(&self) -> Option<&MintedKey> {
        self.first_key.as_ref()
    }

    /// Stops taking requests, lets in-flight runs finish within the grace period, and
    /// waits until the server is down.
    pub async fn stop(self) -> Result<(), ServerError> {
        self.stop.cancel();
        self.task
            .await
            .map_err(|e| ServerError::Io(std::io::Error::other(e.to_string())))?
    }
}

/// A worker to start: see [`work`].
#[must_use = "a Work does nothing until it is awaited"]
pub struct Work {
    store: String,
    runs: Option<String>,
    registry: WorkflowRegistry,
    options: WorkerOptions,
}

/// Runs `registry`'s workflows on a worker: awaited, it claims runs from the run store
/// beside session store `store` (or [`Work::runs`]), until SIGINT or SIGTERM. Any number
/// of workers, in any processes, share one run store; a run whose worker dies is resumed
/// by another from its journal, its effects not repeated.
pub fn work(store: impl Into<String>, registry: WorkflowRegistry) -> Work {
    Work {
        store: store.into(),
        runs: None,
        registry,
        options: WorkerOptions::named(format!("worker-{}", std::process::id())),
    }
}

impl Work {
    /// The run store (`sqlite:FILE` or `postgres://...`); default [`runs_beside`] the
    /// session store.
    pub fn runs(mut self, url: impl Into<String>) -> Self {
        self.runs = Some(url.into());
        self
    }

    /// The worker's options (name, concurrency, lease, poll, grace).
    pub fn options(mut self, options: WorkerOptions) -> Self {
        self.options = options;
        self
    }
}

impl IntoFuture for Work {
    type Output = Result<ServeReport, RuntimeError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let runs = self.runs.unwrap_or_else(|| runs_beside(&self.store));
            let sessions: Arc<dyn rath_persist::SessionStore> =
                Arc::from(rath_store_sql::open_store(&self.store).await?);
            let rt = Runtime::connect(&runs, sessions, self.registry).await?;
            rath_runtime::serve_worker(rt, self.options).await
        })
    }
}

/// Waits for SIGINT (Ctrl-C) or SIGTERM: what [`Serve`] and [`Work`] stop on, for a
/// program serving its own way.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_kept_beside_the_sessions() {
        assert_eq!(runs_beside("sqlite:a.db"), "sqlite:a.db");
        assert_eq!(runs_beside("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(runs_beside("home"), "sqlite:home/runs.db");
        assert_eq!(runs_beside("home/sessions"), "sqlite:home/runs.db");
    }
}
