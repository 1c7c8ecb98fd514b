//! `local`: a working directory on the host, every path confined to it, a scrubbed
//! environment, process-group timeouts and capped output.
//!
//! ```
//! use rath_backend::{Backend, DispatchContext, Output, Payload, local::LocalBackend};
//! use rath_session::{SandboxSpec, Stamper};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let backend = LocalBackend::new();
//! let stamper = Stamper::counter();
//! let h = backend.open(&SandboxSpec::default(), &stamper).await?;
//! let cx = DispatchContext::new(&stamper);
//! backend.dispatch(&h, &Payload::write("notes/a.txt", "hello"), &cx).await?;
//! let read = backend.dispatch(&h, &Payload::read("notes/a.txt"), &cx).await?;
//! assert_eq!(read, Output::FileContent(b"hello".to_vec()));
//! let refused = backend.dispatch(&h, &Payload::read("../../etc/passwd"), &cx).await;
//! assert_eq!(refused.unwrap_err().kind.as_str(), "path_escape");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! The workspace is `spec.working_dir` (created if missing, kept on close) or a fresh temp
//! dir that the sandbox owns and removes on close. A directory descriptor of it is opened
//! when the sandbox opens, and every file payload (read, write with its missing parents,
//! list, exists) and every command's working directory is resolved beneath that descriptor
//! (`openat2` with `RESOLVE_BENEATH`, or an `O_NOFOLLOW` walk where the kernel lacks it),
//! then used through the descriptor it opened, never reopened by path. So a command that
//! swaps a directory for a symlink to a host directory while payloads run cannot make them
//! read or write outside the workspace; writes never follow a final symlink, and files with
//! more than one hard link are refused. Details: the `confine` module in the source.
//!
//! `local` confines paths, not processes: a command itself can still read any file the user
//! can. Use `isolated` for that.

use std::any::Any;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rath_session::{SandboxHandle, SandboxLease, SandboxSpec, Stamper};

use crate::backend::{
    Availability, Backend, Capabilities, DispatchContext, FileConfinement, FilesystemView,
    IsolationLevel,
};
use crate::confine::Root;
use crate::error::{BackendError, ToolError, ToolErrorKind};
use crate::exec::{self, ProcessSpec};
use crate::payload::{CodePayload, CommandPayload, Output, Payload};

/// The largest file a read returns.
pub const READ_LIMIT: u64 = 16 << 20;

/// Timeout for payloads that set none and whose spec sets none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// The lease of a `local` or `isolated` sandbox: a workspace directory on the host.
#[derive(Debug)]
pub struct LocalSandbox {
    id: String,
    backend: &'static str,
    root: Arc<Root>,
    owned: Mutex<Option<tempfile::TempDir>>,
    live: AtomicBool,
    env: BTreeMap<String, String>,
    timeout: Option<Duration>,
    closes: Arc<AtomicUsize>,
}

impl LocalSandbox {
    /// The workspace directory (canonical host path).
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// Closes now: removes an owned temp dir. True the first time, false after.
    fn close_now(&self) -> bool {
        if !self.live.swap(false, Ordering::SeqCst) {
            return false;
        }
        let owned = match self.owned.lock() {
            Ok(mut g) => g.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        drop(owned);
        self.closes.fetch_add(1, Ordering::SeqCst);
        true
    }
}

impl SandboxLease for LocalSandbox {
    fn handle_id(&self) -> &str {
        &self.id
    }
    fn backend(&self) -> &str {
        self.backend
    }
    fn is_live(&self) -> bool {
        self.live.load(Ordering::SeqCst)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for LocalSandbox {
    fn drop(&mut self) {
        self.close_now();
    }
}

/// How commands are started: directly, or wrapped (by `isolated`).
pub(crate) trait Runner: Send + Sync {
    /// Wraps a host process spec into the one to start.
    fn wrap(&self, sandbox: &LocalSandbox, spec: ProcessSpec) -> ProcessSpec;
}

/// Starts commands as plain host processes.
pub(crate) struct Direct;

impl Runner for Direct {
    fn wrap(&self, _sandbox: &LocalSandbox, spec: ProcessSpec) -> ProcessSpec {
        spec
    }
}

/// The shared machinery of `local` and `isolated`.
#[derive(Debug, Clone)]
pub(crate) struct WorkspaceBackend {
    pub(crate) name: &'static str,
    pub(crate) closes: Arc<AtomicUsize>,
}

impl WorkspaceBackend {
    pub(crate) fn new(name: &'static str) -> Self {
        Self {
            name,
            closes: Arc::new(AtomicUsize::new(0)),
        }
    }

    pub(crate) fn open(
        &self,
        spec: &SandboxSpec,
        stamper: &Stamper,
    ) -> Result<SandboxHandle, BackendError> {
        let open_err = |message: String| BackendError::Open {
            backend: self.name.to_owned(),
            message,
        };
        let (dir, owned) = match &spec.working_dir {
            Some(d) => {
                std::fs::create_dir_all(d)
                    .map_err(|e| open_err(format!("cannot create {d:?}: {e}")))?;
                (PathBuf::from(d), None)
            }
            None => {
                let t = tempfile::Builder::new()
                    .prefix("rath-sandbox-")
                    .tempdir()
                    .map_err(|e| open_err(format!("cannot create a temp dir: {e}")))?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let root = std::fs::canonicalize(&dir)
            .and_then(|p| Root::open(&p))
            .map_err(|e| open_err(format!("cannot open the workspace {dir:?}: {e}")))?;
        let timeout = spec
            .timeout_seconds
            .filter(|s| s.is_finite() && *s > 0.0)
            .map(Duration::from_secs_f64);
        Ok(SandboxHandle::new(LocalSandbox {
            id: stamper.next_token("sbx"),
            backend: self.name,
            root: Arc::new(root),
            owned: Mutex::new(owned),
            live: AtomicBool::new(true),
            env: spec.env.clone().unwrap_or_default(),
            timeout,
            closes: self.closes.clone(),
        }))
    }

    pub(crate) fn lease<'h>(
        &self,
        handle: &'h SandboxHandle,
    ) -> Result<&'h LocalSandbox, ToolError> {
        let sandbox = handle
            .lease()
            .as_any()
            .downcast_ref::<LocalSandbox>()
            .filter(|s| s.backend == self.name)
            .ok_or_else(|| {
                ToolError::new(
                    ToolErrorKind::BackendUnavailable,
                    format!(
                        "sandbox {} belongs to backend {}, not {}",
                        handle.id(),
                        handle.backend(),
                        self.name
                    ),
                )
            })?;
        if !sandbox.is_live() {
            return Err(ToolError::new(
                ToolErrorKind::SandboxClosed,
                format!("sandbox {} is closed", handle.id()),
            ));
        }
        Ok(sandbox)
    }

    pub(crate) fn close(&self, handle: &SandboxHandle) -> Result<(), BackendError> {
        let sandbox = handle
            .lease()
            .as_any()
            .downcast_ref::<LocalSandbox>()
            .filter(|s| s.backend == self.name)
            .ok_or_else(|| BackendError::ForeignHandle {
                handle_id: handle.id().to_owned(),
                handle_backend: handle.backend().to_owned(),
                backend: self.name.to_owned(),
            })?;
        sandbox.close_now();
        Ok(())
    }

    pub(crate) async fn dispatch(
        &self,
        runner: &dyn Runner,
        handle: &SandboxHandle,
        payload: &Payload,
        cx: &DispatchContext,
    ) -> Result<Output, ToolError> {
        let sandbox = self.lease(handle)?;
        match payload {
            Payload::Command(c) => command(runner, sandbox, c, cx).await.map(Output::Command),
            Payload::Code(c) => code(runner, sandbox, c, cx).await.map(Output::Code),
            Payload::ReadFile { path } => {
                let path = path.clone();
                on_root(sandbox, move |r| r.read_file(&path, READ_LIMIT))
                    .await
                    .map(Output::FileContent)
            }
            Payload::WriteFile {
                path,
                content,
                mode,
            } => {
                let (path, content, mode) = (path.clone(), content.clone(), *mode);
                on_root(sandbox, move |r| r.write_file(&path, &content, mode))
                    .await
                    .map(|bytes| Output::FileWritten { bytes })
            }
            Payload::ListDir { path } => {
                let path = path.clone();
                on_root(sandbox, move |r| r.list(&path))
                    .await
                    .map(Output::Listing)
            }
            Payload::Exists { path } => {
                let path = path.clone();
                on_root(sandbox, move |r| r.exists(&path))
                    .await
                    .map(Output::Exists)
            }
        }
    }
}

/// Runs a blocking file operation on the sandbox's workspace root off the async threads.
async fn on_root<T: Send + 'static>(
    sandbox: &LocalSandbox,
    op: impl FnOnce(&Root) -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    let root = sandbox.root.clone();
    tokio::task::spawn_blocking(move || op(&root))
        .await
        .map_err(|e| ToolError::exception(format!("file operation failed: {e}")))?
}

async fn command(
    runner: &dyn Runner,
    sandbox: &LocalSandbox,
    c: &CommandPayload,
    cx: &DispatchContext,
) -> Result<crate::payload::CommandOutput, ToolError> {
    let rel = c.cwd.clone().unwrap_or_default();
    let (cwd_fd, cwd) = on_root(sandbox, move |r| r.open_dir(&rel)).await?;
    let spec = ProcessSpec {
        argv: c.line.to_argv(),
        env: exec::scrubbed_env(sandbox.root(), [&sandbox.env, &c.env]),
        cwd,
        cwd_fd: Some(cwd_fd),
        stdin: c.stdin.clone(),
        timeout: c.timeout.or(sandbox.timeout).or(Some(DEFAULT_TIMEOUT)),
    };
    exec::run(runner.wrap(sandbox, spec), cx).await
}

async fn code(
    runner: &dyn Runner,
    sandbox: &LocalSandbox,
    c: &CodePayload,
    cx: &DispatchContext,
) -> Result<crate::payload::CodeOutput, ToolError> {
    let (cwd_fd, cwd) = on_root(sandbox, |r| r.open_dir("")).await?;
    let spec = ProcessSpec {
        argv: vec![exec::python(), "-".into()],
        env: exec::scrubbed_env(sandbox.root(), [&sandbox.env]),
        cwd,
        cwd_fd: Some(cwd_fd),
        stdin: Some(c.code.clone().into_bytes()),
        timeout: c.timeout.or(sandbox.timeout).or(Some(DEFAULT_TIMEOUT)),
    };
    exec::run(runner.wrap(sandbox, spec), cx)
        .await
        .map(exec::code_output)
}

/// The `local` backend.
#[derive(Debug, Clone)]
pub struct LocalBackend {
    inner: WorkspaceBackend,
}

impl Default for LocalBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl LocalBackend {
    /// A `local` backend.
    pub fn new() -> Self {
        Self {
            inner: WorkspaceBackend::new("local"),
        }
    }

    /// How many sandboxes this backend (and its clones) has closed, explicitly or on drop.
    pub fn closed_count(&self) -> usize {
        self.inner.closes.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Backend for LocalBackend {
    fn name(&self) -> &str {
        self.inner.name
    }

    fn availability(&self) -> Availability {
        Availability::Available
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::all_payloads(IsolationLevel::Process, true)
            .with_filesystem(FilesystemView::new(FileConfinement::WorkspaceHandle, None))
    }

    async fn open(
        &self,
        spec: &SandboxSpec,
        stamper: &Stamper,
    ) -> Result<SandboxHandle, BackendError> {
        self.inner.open(spec, stamper)
    }

    async fn dispatch(
        &self,
        handle: &SandboxHandle,
        payload: &Payload,
        cx: &DispatchContext,
    ) -> Result<Output, ToolError> {
        self.inner.dispatch(&Direct, handle, payload, cx).await
    }

    async fn close(&self, handle: &SandboxHandle) -> Result<(), BackendError> {
        self.inner.close(handle)
    }
}
