//! The [`Backend`] trait and what a backend claims about itself.

use std::fmt;

use async_trait::async_trait;
use rath_session::{SandboxHandle, SandboxSpec, Stamper, Timer};
use serde::{Deserialize, Serialize};

use crate::error::{BackendError, ToolError};
use crate::payload::{Output, Payload, PayloadKind};

/// How strongly a backend separates a tool's side effects from the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum IsolationLevel {
    /// A child process on the host; only paths and environment are confined.
    Process,
    /// Linux namespaces (bubblewrap): own mount, pid, net and user namespaces.
    Namespace,
    /// A container.
    Container,
    /// A micro-VM.
    MicroVm,
}

/// What a backend claims it can do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Capabilities {
    /// The isolation level.
    pub isolation: IsolationLevel,
    /// The payload kinds it runs.
    pub payloads: Vec<PayloadKind>,
    /// Whether sandboxed work can reach a network.
    pub network: bool,
    /// What sandboxed work can see of the host file system, when the backend states it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filesystem: Option<FilesystemView>,
}

impl Capabilities {
    /// A claim for every payload kind (no file system claim).
    pub fn all_payloads(isolation: IsolationLevel, network: bool) -> Self {
        Self {
            isolation,
            payloads: PayloadKind::ALL.to_vec(),
            network,
            filesystem: None,
        }
    }

    /// The same claim, stating what the sandbox sees of the file system.
    pub fn with_filesystem(mut self, view: FilesystemView) -> Self {
        self.filesystem = Some(view);
        self
    }

    /// True when `kind` is claimed.
    pub fn supports(&self, kind: PayloadKind) -> bool {
        self.payloads.contains(&kind)
    }
}

/// How file payloads (read, write, list, exists) are kept inside the workspace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FileConfinement {
    /// Every path is resolved beneath an open descriptor of the workspace directory
    /// (`openat2` with `RESOLVE_BENEATH`, or an `O_NOFOLLOW` walk), so no symlink or rename
    /// race reaches outside; writes never follow a final symlink; a file with more than one
    /// hard link is refused.
    WorkspaceHandle,
    /// Only the path text is checked (no absolute paths, no `..` above the root); the
    /// sandbox itself (a remote server) keeps the rest confined.
    Lexical,
}

/// How one path of a command's view is provided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum MountAccess {
    /// The host path, writable.
    ReadWrite,
    /// The host path, read-only.
    ReadOnly,
    /// A fresh, private, empty tmpfs.
    Tmpfs,
    /// A minimal `/dev` (null, zero, full, random, urandom, tty, shm, pts).
    Devices,
    /// A `/proc` of the sandbox's own pid namespace.
    Proc,
    /// A symlink (the target is in [`Mount::target`]).
    Symlink,
}

/// One path visible to a command in the sandbox.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Mount {
    /// The path inside the sandbox (`<workspace>` for the workspace, at its host path).
    pub path: String,
    /// How it is provided.
    pub access: MountAccess,
    /// A symlink's target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

impl Mount {
    /// A mount of `path` provided as `access`.
    pub fn new(path: impl Into<String>, access: MountAccess) -> Self {
        Self {
            path: path.into(),
            access,
            target: None,
        }
    }

    /// A symlink at `path` to `target`.
    pub fn symlink(path: impl Into<String>, target: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            access: MountAccess::Symlink,
            target: Some(target.into()),
        }
    }
}

/// What sandboxed work sees of the host file system.
///
/// ```
/// use rath_backend::{Backend, FileConfinement, local::LocalBackend};
///
/// let view = LocalBackend::new().capabilities().filesystem.unwrap();
/// assert_eq!(view.file_tools, FileConfinement::WorkspaceHandle);
/// assert!(view.command_view.is_none()); // `local` commands see the host as the user does
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FilesystemView {
    /// How file payloads are confined.
    pub file_tools: FileConfinement,
    /// Everything a command sees, in mount order; nothing else of the host is visible.
    /// `None` when commands see the host file system as the user does.
    pub command_view: Option<Vec<Mount>>,
}

impl FilesystemView {
    /// A view: file payloads confined as `file_tools`, commands seeing `command_view`.
    pub fn new(file_tools: FileConfinement, command_view: Option<Vec<Mount>>) -> Self {
        Self {
            file_tools,
            command_view,
        }
    }
}

/// Whether a backend can run here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Availability {
    /// Ready.
    Available,
    /// Not usable; the reason says what to install or set.
    Unavailable {
        /// Why.
        reason: String,
    },
}

impl Availability {
    /// True when available.
    pub fn is_available(&self) -> bool {
        matches!(self, Availability::Available)
    }

    /// The reason, when unavailable.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Availability::Available => None,
            Availability::Unavailable { reason } => Some(reason),
        }
    }
}

/// What a dispatch gets besides the handle and payload: a timer from the session's stamper,
/// so elapsed readings are zero in deterministic mode.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DispatchContext {
    /// Started when the dispatch began.
    pub timer: Timer,
}

impl DispatchContext {
    /// A context whose timer starts now, from `stamper`.
    pub fn new(stamper: &Stamper) -> Self {
        Self {
            timer: stamper.start_timer(),
        }
    }

    /// Milliseconds since the dispatch began (0.0 in deterministic mode).
    pub fn elapsed_ms(&self) -> f64 {
        self.timer.elapsed_ms()
    }
}

/// A place where a tool's side effects happen.
///
/// A backend opens sandboxes ([`SandboxHandle`]s whose lease it implements), runs
/// [`Payload`]s in them, and closes them. Dropping the last holder of a handle closes the
/// sandbox too, exactly once. Failures of the work itself are [`ToolError`] values,
/// never panics.
///
/// ```
/// use rath_backend::{Backend, CommandPayload, DispatchContext, Output, Payload, local::LocalBackend};
/// use rath_session::{SandboxSpec, Stamper};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let backend = LocalBackend::new();
/// let stamper = Stamper::counter();
/// let handle = backend.open(&SandboxSpec::default(), &stamper).await?;
/// let out = backend
///     .dispatch(&handle, &Payload::Command(CommandPayload::argv(["echo", "hi"])), &DispatchContext::new(&stamper))
///     .await?;
/// assert!(matches!(out, Output::Command(c) if c.stdout == "hi\n"));
/// backend.close(&handle).await?;
/// assert!(!handle.is_live());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[async_trait]
pub trait Backend: Send + Sync + fmt::Debug {
    /// The registry name (`local`, `isolated`, `opensandbox`).
    fn name(&self) -> &str;

    /// Whether the backend can run on this machine (and why not).
    fn availability(&self) -> Availability;

    /// What it claims: isolation level, payload kinds, network.
    fn capabilities(&self) -> Capabilities;

    /// Opens a sandbox for `spec`. Handle ids come from `stamper` where the backend mints them
    /// (remote backends use the id the server assigns).
    async fn open(
        &self,
        spec: &SandboxSpec,
        stamper: &Stamper,
    ) -> Result<SandboxHandle, BackendError>;

    /// Runs `payload` in the sandbox behind `handle`.
    async fn dispatch(
        &self,
        handle: &SandboxHandle,
        payload: &Payload,
        cx: &DispatchContext,
    ) -> Result<Output, ToolError>;

    /// Closes the sandbox now; later dispatches fail with `sandbox_closed`. Closing twice is
    /// a no-op.
    async fn close(&self, handle: &SandboxHandle) -> Result<(), BackendError>;

    /// Attaches to an existing remote sandbox by its id. Backends without remote sandboxes
    /// return [`BackendError::Unsupported`].
    async fn attach(&self, remote_id: &str) -> Result<SandboxHandle, BackendError> {
        let _ = remote_id;
        Err(BackendError::Unsupported {
            backend: self.name().to_owned(),
            operation: "attach".to_owned(),
        })
    }
}
