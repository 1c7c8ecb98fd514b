//! `isolated`: the `local` contract, with every process run under bubblewrap (`bwrap`).
//!
//! ```
//! use rath_backend::{Backend, isolated::IsolatedBackend};
//!
//! let backend = IsolatedBackend::new();
//! // False, with a reason, where `bwrap` is missing or cannot create namespaces.
//! if let Some(reason) = backend.availability().reason() {
//!     println!("isolated unavailable: {reason}");
//! }
//! assert!(!backend.capabilities().network);
//! ```
//!
//! The sandbox: all namespaces unshared (so no network), a read-only view of the root with
//! home directories, `/tmp`, `/run` and password hashes masked, the workspace bound
//! read-write at its host path, a fresh `/tmp`, `/dev` and `/proc`, all capabilities dropped,
//! and `--die-with-parent` so a killed dispatch takes everything inside down with it. File
//! payloads run on the host side of the workspace with `local`'s path confinement.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use async_trait::async_trait;
use rath_session::{SandboxHandle, SandboxSpec, Stamper};

use crate::backend::{Availability, Backend, Capabilities, DispatchContext, IsolationLevel};
use crate::error::{BackendError, ToolExecutionFailure};
use crate::exec::ProcessSpec;
use crate::local::{LocalSandbox, Runner, WorkspaceBackend};
use crate::payload::{Output, Payload};

/// Directories hidden behind an empty tmpfs inside the sandbox.
const MASKED_DIRS: &[&str] = &[
    "/root", "/home", "/tmp", "/var/tmp", "/run", "/mnt", "/media",
];
/// Files replaced by an empty file inside the sandbox.
const MASKED_FILES: &[&str] = &[
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/shadow-",
    "/etc/gshadow-",
];
/// PATH inside the sandbox (host PATH entries may point into masked home directories).
const SANDBOX_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

fn find_bwrap() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/local/bin")])
        .map(|d| d.join("bwrap"))
        .find(|p| p.is_file())
}

fn probe() -> Result<PathBuf, String> {
    let bwrap = find_bwrap().ok_or_else(|| {
        "`bwrap` is not installed (Debian: apt-get install bubblewrap)".to_owned()
    })?;
    let out = std::process::Command::new(&bwrap)
        .args([
            "--unshare-all",
            "--die-with-parent",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--cap-drop",
            "ALL",
            "true",
        ])
        .env_clear()
        .env("PATH", SANDBOX_PATH)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", bwrap.display()))?;
    if out.status.success() {
        Ok(bwrap)
    } else {
        Err(format!(
            "{} cannot create a sandbox here: {}",
            bwrap.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn probed() -> &'static Result<PathBuf, String> {
    static PROBE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PROBE.get_or_init(probe)
}

struct Bubblewrap {
    bwrap: PathBuf,
}

fn arg(list: &mut Vec<String>, parts: &[&str]) {
    list.extend(parts.iter().map(|s| (*s).to_owned()));
}

impl Runner for Bubblewrap {
    fn wrap(&self, sandbox: &LocalSandbox, mut spec: ProcessSpec) -> ProcessSpec {
        let root = sandbox.root().to_string_lossy().into_owned();
        let cwd = spec.cwd.to_string_lossy().into_owned();
        let mut argv = vec![self.bwrap.to_string_lossy().into_owned()];
        arg(
            &mut argv,
            &["--unshare-all", "--die-with-parent", "--ro-bind", "/", "/"],
        );
        for d in MASKED_DIRS {
            if Path::new(d).is_dir() {
                arg(&mut argv, &["--tmpfs", d]);
            }
        }
        for f in MASKED_FILES {
            if Path::new(f).is_file() {
                arg(&mut argv, &["--ro-bind", "/dev/null", f]);
            }
        }
        arg(
            &mut argv,
            &[
                "--dev",
                "/dev",
                "--proc",
                "/proc",
                "--tmpfs",
                "/tmp",
                "--bind",
                &root,
                &root,
                "--chdir",
                &cwd,
                "--cap-drop",
                "ALL",
                "--",
            ],
        );
        argv.append(&mut spec.argv);
        spec.argv = argv;
        spec.env.insert("PATH".into(), SANDBOX_PATH.into());
        spec.env.insert("TMPDIR".into(), "/tmp".into());
        spec
    }
}

/// The `isolated` backend (bubblewrap).
#[derive(Debug, Clone)]
pub struct IsolatedBackend {
    inner: WorkspaceBackend,
}

impl Default for IsolatedBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl IsolatedBackend {
    /// An `isolated` backend. Whether `bwrap` works is probed once, on first need.
    pub fn new() -> Self {
        Self {
            inner: WorkspaceBackend::new("isolated"),
        }
    }

    /// How many sandboxes this backend (and its clones) has closed, explicitly or on drop.
    pub fn closed_count(&self) -> usize {
        self.inner.closes.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn runner(&self) -> Result<Bubblewrap, String> {
        probed().clone().map(|bwrap| Bubblewrap { bwrap })
    }
}

#[async_trait]
impl Backend for IsolatedBackend {
    fn name(&self) -> &str {
        self.inner.name
    }

    fn availability(&self) -> Availability {
        match probed() {
            Ok(_) => Availability::Available,
            Err(reason) => Availability::Unavailable {
                reason: reason.clone(),
            },
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::all_payloads(IsolationLevel::Namespace, false)
    }

    async fn open(
        &self,
        spec: &SandboxSpec,
        stamper: &Stamper,
    ) -> Result<SandboxHandle, BackendError> {
        if let Err(reason) = probed() {
            return Err(BackendError::Unavailable {
                backend: self.inner.name.to_owned(),
                reason: reason.clone(),
            });
        }
        self.inner.open(spec, stamper)
    }

    async fn dispatch(
        &self,
        handle: &SandboxHandle,
        payload: &Payload,
        cx: &DispatchContext,
    ) -> Result<Output, ToolExecutionFailure> {
        let runner = self.runner().map_err(|reason| {
            ToolExecutionFailure::new(crate::error::FailureKind::BackendUnavailable, reason)
        })?;
        self.inner.dispatch(&runner, handle, payload, cx).await
    }

    async fn close(&self, handle: &SandboxHandle) -> Result<(), BackendError> {
        self.inner.close(handle)
    }
}
