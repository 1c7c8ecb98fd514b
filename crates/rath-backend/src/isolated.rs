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
//! // The claim lists every path a command can see; the workspace is the only writable one
//! // besides a private /tmp.
//! let view = backend.capabilities().filesystem.unwrap().command_view.unwrap();
//! assert!(view.iter().any(|m| m.path == "/usr"));
//! assert!(!view.iter().any(|m| m.path == "/home" || m.path == "/root"));
//! ```
//!
//! The sandbox: all namespaces unshared (so no network), all capabilities dropped, and
//! `--die-with-parent` so a killed dispatch takes everything inside down with it. Its file
//! system is built from nothing (bubblewrap's empty root, remounted read-only once set up):
//!
//! - `/usr`, `/bin`, `/sbin`, `/lib`, `/lib32`, `/lib64`, `/libx32` where the host has them,
//!   read-only (the top-level ones recreated as symlinks where the host's are, merged /usr);
//! - a minimal `/etc`, read-only: `passwd`, `group` (no `shadow`), `hosts`, `host.conf`,
//!   `nsswitch.conf`, `protocols`, `services`, `ld.so.cache`, `ld.so.conf(.d)`,
//!   `alternatives`, `ssl/certs`, `ssl/openssl.cnf` (not `ssl/private`), `localtime`,
//!   `timezone` and `python3*`, each where present;
//! - the installation prefix of the Python interpreter code payloads use, read-only, only
//!   when it lies outside those directories (a pyenv or `/opt` install);
//! - bubblewrap's minimal `/dev`, a `/proc` of the sandbox's own pid namespace, a private
//!   empty `/tmp`, and the workspace read-write at its host path (its parent directories
//!   exist inside as empty, read-only directories, so the path resolves).
//!
//! Nothing else of the host (home directories, `/work`-style trees, `/opt`, `/var`, `/run`,
//! `/srv`, `/mnt`) exists inside. [`Capabilities::filesystem`](crate::Capabilities) states
//! exactly this list, as computed on the running host. File payloads run on the host side
//! and resolve beneath the workspace descriptor exactly as under `local` (see
//! [`local`](crate::local)), so a command swapping directories for symlinks inside the
//! workspace cannot make them read or write anything outside it.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use async_trait::async_trait;
use rath_session::{SandboxHandle, SandboxSpec, Stamper};

use crate::backend::{
    Availability, Backend, Capabilities, DispatchContext, FileConfinement, FilesystemView,
    IsolationLevel, Mount, MountAccess,
};
use crate::error::{BackendError, ToolError};
use crate::exec::ProcessSpec;
use crate::local::{LocalSandbox, Runner, WorkspaceBackend};
use crate::payload::{Output, Payload};

/// The path the workspace mount is named by in the claim (it is bound at its host path).
pub const WORKSPACE: &str = "<workspace>";

/// System directories bound read-only (or recreated as the symlinks they are on the host,
/// as on merged-/usr systems), where present.
const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// What of `/etc` a command sees, where present: accounts (no password hashes), name
/// resolution files, the dynamic linker's configuration, Debian's alternatives, TLS
/// certificates and OpenSSL's configuration (not `/etc/ssl/private`), the time zone, and
/// Python's configuration directories (`/etc/python3*`, added by prefix).
const ETC_FILES: &[&str] = &[
    "passwd",
    "group",
    "hosts",
    "host.conf",
    "nsswitch.conf",
    "protocols",
    "services",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "ssl/certs",
    "ssl/openssl.cnf",
    "localtime",
    "timezone",
];

/// PATH inside the sandbox.
const SANDBOX_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The first `bwrap` on PATH. PATH alone decides (no fixed fallback directories), so a
/// process whose PATH holds no bubblewrap sees `isolated` as unavailable, as it would see any
/// other missing program.
fn find_bwrap() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("bwrap"))
        .find(|p| p.is_file())
}

/// One host path of the view: a read-only bind or a symlink, as found on this host.
fn host_entry(path: &Path) -> Option<Mount> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    let name = path.to_string_lossy().into_owned();
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(path).ok()?;
        Some(Mount::symlink(name, target.to_string_lossy().into_owned()))
    } else {
        Some(Mount::new(name, MountAccess::ReadOnly))
    }
}

/// True when `p` lies under one of the system directories bound above.
fn under_system_dirs(p: &Path) -> bool {
    SYSTEM_DIRS.iter().any(|d| p.starts_with(d))
}

/// The mounts of every sandbox on this host, in the order bwrap makes them. Computed once.
fn view() -> &'static [Mount] {
    static VIEW: OnceLock<Vec<Mount>> = OnceLock::new();
    VIEW.get_or_init(|| {
        let mut v: Vec<Mount> = SYSTEM_DIRS
            .iter()
            .filter_map(|d| host_entry(Path::new(d)))
            .collect();
        let mut etc: Vec<PathBuf> = ETC_FILES
            .iter()
            .map(|f| Path::new("/etc").join(f))
            .collect();
        if let Ok(rd) = std::fs::read_dir("/etc") {
            let mut py: Vec<PathBuf> = rd
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
                .map(|e| e.path())
                .collect();
            py.sort();
            etc.extend(py);
        }
        v.extend(etc.iter().filter_map(|p| host_entry(p)));
        // The interpreter code payloads run: when it lives outside the system directories
        // (a pyenv or /opt install), its installation prefix is bound read-only too.
        if let Ok(py) = std::fs::canonicalize(crate::exec::python())
            && !under_system_dirs(&py)
            && let Some(prefix) = py.parent().and_then(Path::parent)
        {
            v.push(Mount::new(
                prefix.to_string_lossy().into_owned(),
                MountAccess::ReadOnly,
            ));
        }
        v.extend([
            Mount::new("/dev", MountAccess::Devices),
            Mount::new("/proc", MountAccess::Proc),
            Mount::new("/tmp", MountAccess::Tmpfs),
            Mount::new(WORKSPACE, MountAccess::ReadWrite),
        ]);
        v
    })
}

/// The bwrap arguments for `view()`, with the workspace at `root` and the working
/// directory `cwd`, up to and including `--`.
fn bwrap_args(root: &str, cwd: &str) -> Vec<String> {
    let mut a: Vec<String> = ["--unshare-all", "--die-with-parent"]
        .map(String::from)
        .to_vec();
    for m in view() {
        let path = if m.path == WORKSPACE { root } else { &m.path };
        let flag_args: Vec<&str> = match m.access {
            MountAccess::ReadOnly => vec!["--ro-bind", path, path],
            MountAccess::ReadWrite => vec!["--bind", path, path],
            MountAccess::Tmpfs => vec!["--tmpfs", path],
            MountAccess::Devices => vec!["--dev", path],
            MountAccess::Proc => vec!["--proc", path],
            MountAccess::Symlink => vec!["--symlink", m.target.as_deref().unwrap_or(""), path],
        };
        a.extend(flag_args.into_iter().map(String::from));
    }
    // The tmpfs root bwrap builds (holding the mount points above) becomes read-only.
    a.extend(
        [
            "--remount-ro",
            "/",
            "--chdir",
            cwd,
            "--cap-drop",
            "ALL",
            "--",
        ]
        .map(String::from),
    );
    a
}

fn probe() -> Result<PathBuf, String> {
    let bwrap = find_bwrap().ok_or_else(|| {
        "`bwrap` (bubblewrap) is not on PATH (Debian: apt-get install bubblewrap)".to_owned()
    })?;
    let probe_dir = std::env::temp_dir();
    let dir = probe_dir.to_string_lossy();
    let out = std::process::Command::new(&bwrap)
        .args(bwrap_args(&dir, &dir))
        .arg("true")
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

impl Runner for Bubblewrap {
    fn wrap(&self, sandbox: &LocalSandbox, mut spec: ProcessSpec) -> ProcessSpec {
        let root = sandbox.root().to_string_lossy().into_owned();
        let cwd = spec.cwd.to_string_lossy().into_owned();
        let mut argv = vec![self.bwrap.to_string_lossy().into_owned()];
        argv.extend(bwrap_args(&root, &cwd));
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
        Capabilities::all_payloads(IsolationLevel::Namespace, false).with_filesystem(
            FilesystemView::new(FileConfinement::WorkspaceHandle, Some(view().to_vec())),
        )
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
    ) -> Result<Output, ToolError> {
        let runner = self.runner().map_err(|reason| {
            ToolError::new(crate::error::ToolErrorKind::BackendUnavailable, reason)
        })?;
        self.inner.dispatch(&runner, handle, payload, cx).await
    }

    async fn close(&self, handle: &SandboxHandle) -> Result<(), BackendError> {
        self.inner.close(handle)
    }
}
