//! `opensandbox`: a [`rath_backend::Backend`] over the published OpenSandbox HTTP APIs.
//!
//! ```
//! use rath_backend::Backend;
//! use rath_backend_opensandbox::{OpenSandboxBackend, OpenSandboxConfig};
//!
//! // Configured from OPEN_SANDBOX_DOMAIN / OPEN_SANDBOX_API_KEY; unavailable when unset.
//! let backend = OpenSandboxBackend::from_env();
//! if let Some(reason) = backend.availability().reason() {
//!     println!("opensandbox unavailable: {reason}");
//! }
//! // Or explicitly:
//! let backend = OpenSandboxBackend::new(OpenSandboxConfig::new("http://127.0.0.1:8080"));
//! assert_eq!(backend.name(), "opensandbox");
//! ```
//!
//! `open` creates a sandbox (`POST /v1/sandboxes`), waits for `Running`, asks for the execd
//! endpoint (`GET /v1/sandboxes/{id}/endpoints/44772`) and creates the workspace directory.
//! Commands and python code runs go through execd's `POST /command` (its SSE stream, then
//! `GET /command/status/{id}` for the exit code); stdin is piped in through the shell line
//! because the API has no stdin field. Files use `/files/upload`, `/files/download`,
//! `/files/info`, `/directories` and `/directories/list`. Paths are workspace-relative and
//! confined lexically (the sandbox is remote; symlinks inside it are its own business).
//! The handle id is the server's sandbox id; closing (or dropping the last holder) deletes
//! the sandbox, once.

#![warn(missing_docs)]

mod client;
mod sse;

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use rath_backend::{
    Availability, Backend, BackendError, Capabilities, CodePayload, CommandLine, CommandOutput,
    CommandPayload, DispatchContext, EntryKind, FileEntry, IsolationLevel, OUTPUT_CAP, Output,
    Payload, ToolError, ToolErrorKind, confine_relative, shell_quote,
};
use rath_session::{SandboxHandle, SandboxLease, SandboxSpec, Stamper};
use serde_json::{Value, json};

use crate::client::{BACKEND, Execd, Lifecycle};

/// The execd port inside a sandbox.
pub const EXECD_PORT: u16 = 44772;

/// Where and how to reach OpenSandbox.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct OpenSandboxConfig {
    /// Lifecycle server: `host:port` or a URL; `/v1` is appended unless present.
    pub domain: String,
    /// Sent as `OPEN-SANDBOX-API-KEY`.
    pub api_key: Option<String>,
    /// Image when the spec names none.
    pub default_image: String,
    /// Sandbox time-to-live in seconds, sent as `timeout` on create (the API's minimum is 60).
    pub ttl_seconds: u64,
    /// Workspace when the spec names none.
    pub default_workdir: String,
    /// How long `open` waits for `Running`.
    pub start_wait: Duration,
}

impl OpenSandboxConfig {
    /// A config for `domain` with defaults: image `python:3.11`, TTL 3600 s, workspace
    /// `/workspace`, 120 s start wait, no API key.
    pub fn new(domain: impl Into<String>) -> Self {
        Self {
            domain: domain.into(),
            api_key: None,
            default_image: "python:3.11".into(),
            ttl_seconds: 3600,
            default_workdir: "/workspace".into(),
            start_wait: Duration::from_secs(120),
        }
    }

    /// The same config with an API key.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// From `OPEN_SANDBOX_DOMAIN` and `OPEN_SANDBOX_API_KEY`; `None` when the domain is unset.
    pub fn from_env() -> Option<Self> {
        let domain = std::env::var("OPEN_SANDBOX_DOMAIN")
            .ok()
            .filter(|d| !d.trim().is_empty())?;
        let mut c = Self::new(domain);
        c.api_key = std::env::var("OPEN_SANDBOX_API_KEY")
            .ok()
            .filter(|k| !k.is_empty());
        Some(c)
    }

    fn base_url(&self) -> String {
        let d = self.domain.trim().trim_end_matches('/');
        let with_scheme = if d.starts_with("http://") || d.starts_with("https://") {
            d.to_owned()
        } else {
            format!("http://{d}")
        };
        if with_scheme.ends_with("/v1") {
            with_scheme
        } else {
            format!("{with_scheme}/v1")
        }
    }
}

/// The lease of an OpenSandbox sandbox: deletes it on close or when the last holder drops.
#[derive(Debug)]
pub struct OpenSandboxLease {
    id: String,
    workdir: String,
    env: BTreeMap<String, String>,
    timeout: Option<Duration>,
    live: AtomicBool,
    lifecycle: Lifecycle,
    execd: Execd,
    closes: Arc<AtomicUsize>,
}

impl OpenSandboxLease {
    /// The sandbox's workspace directory (inside the sandbox).
    pub fn workdir(&self) -> &str {
        &self.workdir
    }

    /// Marks closed; true the first time.
    fn mark_closed(&self) -> bool {
        let first = self.live.swap(false, Ordering::SeqCst);
        if first {
            self.closes.fetch_add(1, Ordering::SeqCst);
        }
        first
    }

    fn remote(&self, rel: &str) -> Result<String, ToolError> {
        let rel = confine_relative(rel)?;
        Ok(if rel.is_empty() {
            self.workdir.clone()
        } else {
            format!("{}/{rel}", self.workdir.trim_end_matches('/'))
        })
    }
}

impl SandboxLease for OpenSandboxLease {
    fn handle_id(&self) -> &str {
        &self.id
    }
    fn backend(&self) -> &str {
        BACKEND
    }
    fn is_live(&self) -> bool {
        self.live.load(Ordering::SeqCst)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for OpenSandboxLease {
    fn drop(&mut self) {
        if !self.mark_closed() {
            return;
        }
        let lifecycle = self.lifecycle.clone();
        let id = self.id.clone();
        let delete = async move {
            let _ = lifecycle.delete(&id).await;
        };
        // Drop cannot await: hand the delete to the running runtime, or to a short-lived one.
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(delete);
            }
            Err(_) => {
                let _ = std::thread::spawn(move || {
                    if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        rt.block_on(delete);
                    }
                })
                .join();
            }
        }
    }
}

/// The `opensandbox` backend.
#[derive(Debug, Clone)]
pub struct OpenSandboxBackend {
    config: Option<OpenSandboxConfig>,
    http: reqwest::Client,
    closes: Arc<AtomicUsize>,
}

impl OpenSandboxBackend {
    /// A backend for `config`.
    pub fn new(config: OpenSandboxConfig) -> Self {
        Self {
            config: Some(config),
            http: reqwest::Client::new(),
            closes: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// A backend configured from the environment (unavailable when `OPEN_SANDBOX_DOMAIN` is
    /// unset).
    pub fn from_env() -> Self {
        Self {
            config: OpenSandboxConfig::from_env(),
            http: reqwest::Client::new(),
            closes: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// How many sandboxes this backend (and its clones) has closed.
    pub fn closed_count(&self) -> usize {
        self.closes.load(Ordering::SeqCst)
    }

    fn config(&self) -> Result<&OpenSandboxConfig, BackendError> {
        self.config
            .as_ref()
            .ok_or_else(|| BackendError::Unavailable {
                backend: BACKEND.to_owned(),
                reason: "OPEN_SANDBOX_DOMAIN is not set".to_owned(),
            })
    }

    fn lifecycle(&self) -> Result<Lifecycle, BackendError> {
        let c = self.config()?;
        Ok(Lifecycle {
            http: self.http.clone(),
            base: c.base_url(),
            api_key: c.api_key.clone(),
        })
    }

    /// Renews the sandbox's expiration to `expires_at` (RFC 3339); returns the new time.
    pub async fn renew(
        &self,
        handle: &SandboxHandle,
        expires_at: &str,
    ) -> Result<String, BackendError> {
        let lease = lease_of(handle).map_err(BackendError::Dispatch)?;
        lease.lifecycle.renew(&lease.id, expires_at).await
    }

    async fn connect(
        &self,
        id: String,
        spec: Option<&SandboxSpec>,
    ) -> Result<SandboxHandle, BackendError> {
        let c = self.config()?;
        let lifecycle = self.lifecycle()?;
        lifecycle.wait_running(&id, c.start_wait).await?;
        let ep = lifecycle.endpoint(&id, EXECD_PORT).await?;
        let base = if ep.endpoint.starts_with("http://") || ep.endpoint.starts_with("https://") {
            ep.endpoint.trim_end_matches('/').to_owned()
        } else {
            format!("http://{}", ep.endpoint.trim_end_matches('/'))
        };
        let execd = Execd {
            http: self.http.clone(),
            base,
            headers: ep.headers,
        };
        let workdir = spec
            .and_then(|s| s.working_dir.clone())
            .unwrap_or_else(|| c.default_workdir.clone());
        let lease = OpenSandboxLease {
            id,
            workdir: workdir.clone(),
            env: spec.and_then(|s| s.env.clone()).unwrap_or_default(),
            timeout: spec
                .and_then(|s| s.timeout_seconds)
                .filter(|s| s.is_finite() && *s > 0.0)
                .map(Duration::from_secs_f64),
            live: AtomicBool::new(true),
            lifecycle,
            execd,
            closes: self.closes.clone(),
        };
        // The lease exists now, so a failure below still deletes the sandbox on drop.
        lease
            .execd
            .make_dir(&workdir)
            .await
            .map_err(|f| BackendError::Open {
                backend: BACKEND.to_owned(),
                message: format!("cannot create workspace {workdir}: {f}"),
            })?;
        Ok(SandboxHandle::new(lease))
    }
}

fn lease_of(handle: &SandboxHandle) -> Result<&OpenSandboxLease, ToolError> {
    let lease = handle
        .lease()
        .as_any()
        .downcast_ref::<OpenSandboxLease>()
        .ok_or_else(|| {
            ToolError::new(
                ToolErrorKind::BackendUnavailable,
                format!(
                    "sandbox {} belongs to backend {}",
                    handle.id(),
                    handle.backend()
                ),
            )
        })?;
    if !lease.is_live() {
        return Err(ToolError::new(
            ToolErrorKind::SandboxClosed,
            format!("sandbox {} is closed", handle.id()),
        ));
    }
    Ok(lease)
}

/// Default command timeout when neither payload nor spec sets one.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// How long past the server-side timeout the client waits before giving up itself.
const CLIENT_GRACE: Duration = Duration::from_secs(5);

async fn run_line(
    lease: &OpenSandboxLease,
    line: String,
    cwd: String,
    stdin: Option<&[u8]>,
    env: &BTreeMap<String, String>,
    timeout: Duration,
    cx: &DispatchContext,
) -> Result<CommandOutput, ToolError> {
    // No stdin field in the API: feed it through the shell, and give an empty stdin otherwise
    // so nothing waits on a terminal.
    let command = match stdin {
        Some(bytes) => {
            let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
            format!("printf %s {b64} | base64 -d | ( {line}\n)")
        }
        None => format!("( {line}\n) < /dev/null"),
    };
    let mut envs = lease.env.clone();
    envs.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
    let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    let body = json!({
        "command": command,
        "cwd": cwd,
        "background": false,
        "timeout": ms,
        "envs": envs,
    });
    let timed_out = || {
        ToolError::new(
            ToolErrorKind::ToolTimeout,
            format!("command timed out after {}s", timeout.as_secs_f64()),
        )
        .with_detail(json!({ "timeout_seconds": timeout.as_secs_f64() }))
    };
    let run = match tokio::time::timeout(
        timeout + CLIENT_GRACE,
        lease.execd.run_command(&body, OUTPUT_CAP),
    )
    .await
    {
        Ok(r) => r?,
        Err(_) => return Err(timed_out()),
    };
    let (mut exit, mut status_error) = (None, None);
    if let Some(id) = &run.id {
        match lease.execd.status(id).await {
            Ok((code, err)) => (exit, status_error) = (code, err),
            Err(_) => lease.execd.interrupt(id).await,
        }
    }
    let stream_error = run.error.as_ref().map(|(n, v)| format!("{n}: {v}"));
    let is_timeout = [&status_error, &stream_error]
        .into_iter()
        .flatten()
        .any(|e| {
            let e = e.to_ascii_lowercase();
            e.contains("timeout") || e.contains("timed out") || e.contains("deadline")
        });
    if is_timeout {
        return Err(timed_out());
    }
    if exit.is_none() {
        // Without a status, an error event's value carries the exit code when it has one.
        exit = match &run.error {
            Some((_, v)) => v.trim().parse().ok().or(Some(1)),
            None => Some(0),
        };
    }
    let mut out = CommandOutput::new(
        exit,
        String::from_utf8_lossy(&run.stdout).into_owned(),
        String::from_utf8_lossy(&run.stderr).into_owned(),
    );
    out.stdout_truncated = run.stdout_total > run.stdout.len() as u64;
    out.stderr_truncated = run.stderr_total > run.stderr.len() as u64;
    out.bytes_out = run.stdout_total + run.stderr_total;
    out.elapsed_ms = cx.elapsed_ms();
    Ok(out)
}

fn line_of(c: &CommandPayload) -> String {
    match &c.line {
        CommandLine::Shell(s) => format!("sh -c {}", shell_quote(s)),
        argv @ CommandLine::Argv(_) => argv.to_shell(),
    }
}

fn code_output(out: CommandOutput) -> rath_backend::CodeOutput {
    let error = (!out.success()).then(|| {
        out.stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .unwrap_or_else(|| format!("exit code {:?}", out.exit_code))
    });
    rath_backend::CodeOutput::new(out.stdout, out.stderr, error)
}

async fn dispatch_on(
    lease: &OpenSandboxLease,
    payload: &Payload,
    cx: &DispatchContext,
) -> Result<Output, ToolError> {
    let default_timeout = lease.timeout.unwrap_or(DEFAULT_TIMEOUT);
    match payload {
        Payload::Command(c) => {
            let cwd = match &c.cwd {
                Some(d) => lease.remote(d)?,
                None => lease.workdir.clone(),
            };
            run_line(
                lease,
                line_of(c),
                cwd,
                c.stdin.as_deref(),
                &c.env,
                c.timeout.unwrap_or(default_timeout),
                cx,
            )
            .await
            .map(Output::Command)
        }
        Payload::Code(CodePayload { code, timeout, .. }) => run_line(
            lease,
            "python3 -".to_owned(),
            lease.workdir.clone(),
            Some(code.as_bytes()),
            &BTreeMap::new(),
            timeout.unwrap_or(default_timeout),
            cx,
        )
        .await
        .map(|o| Output::Code(code_output(o))),
        Payload::ReadFile { path } => {
            let remote = lease.remote(path)?;
            lease.execd.download(&remote).await.map(Output::FileContent)
        }
        Payload::WriteFile {
            path,
            content,
            mode,
        } => {
            let remote = lease.remote(path)?;
            if remote == lease.workdir {
                return Err(ToolError::exception("cannot write the workspace root"));
            }
            if let Some((parent, _)) = remote.rsplit_once('/')
                && !parent.is_empty()
            {
                lease.execd.make_dir(parent).await?;
            }
            lease
                .execd
                .upload(&remote, content.clone(), Some(mode.unwrap_or(0o644)))
                .await?;
            Ok(Output::FileWritten {
                bytes: content.len() as u64,
            })
        }
        Payload::Exists { path } => {
            let remote = lease.remote(path)?;
            lease.execd.exists(&remote).await.map(Output::Exists)
        }
        Payload::ListDir { path } => {
            let remote = lease.remote(path)?;
            let items = lease.execd.list(&remote).await?;
            let mut entries: Vec<FileEntry> = items.iter().filter_map(entry_of).collect();
            entries.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(Output::Listing(entries))
        }
        _ => Err(ToolError::new(
            ToolErrorKind::PayloadUnsupported,
            format!("opensandbox does not run {} payloads", payload.kind()),
        )),
    }
}

fn entry_of(v: &Value) -> Option<FileEntry> {
    let path = v["path"].as_str()?;
    let name = path.trim_end_matches('/').rsplit('/').next()?.to_owned();
    let kind = match v["type"].as_str() {
        Some("file") => EntryKind::File,
        Some("directory") => EntryKind::Dir,
        Some("symlink") => EntryKind::Symlink,
        _ => EntryKind::Other,
    };
    let size = if kind == EntryKind::File {
        v["size"].as_u64().unwrap_or(0)
    } else {
        0
    };
    Some(FileEntry { name, kind, size })
}

#[async_trait]
impl Backend for OpenSandboxBackend {
    fn name(&self) -> &str {
        BACKEND
    }

    fn availability(&self) -> Availability {
        match &self.config {
            Some(_) => Availability::Available,
            None => Availability::Unavailable {
                reason: "OPEN_SANDBOX_DOMAIN is not set (and OPEN_SANDBOX_API_KEY if the server needs one)".into(),
            },
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::all_payloads(IsolationLevel::Container, true)
    }

    async fn open(
        &self,
        spec: &SandboxSpec,
        _stamper: &Stamper,
    ) -> Result<SandboxHandle, BackendError> {
        let c = self.config()?;
        let mut body = json!({
            "image": { "uri": spec.image.clone().unwrap_or_else(|| c.default_image.clone()) },
            "entrypoint": spec.entrypoint.clone().unwrap_or_else(|| vec!["tail".into(), "-f".into(), "/dev/null".into()]),
            "timeout": c.ttl_seconds.max(60),
            "resourceLimits": { "cpu": "1000m", "memory": "1Gi" },
            "metadata": { "created-by": "openrath" },
        });
        if let Some(env) = &spec.env {
            body["env"] = json!(env);
        }
        let created = self.lifecycle()?.create(&body).await?;
        self.connect(created.id, Some(spec)).await
    }

    async fn dispatch(
        &self,
        handle: &SandboxHandle,
        payload: &Payload,
        cx: &DispatchContext,
    ) -> Result<Output, ToolError> {
        dispatch_on(lease_of(handle)?, payload, cx).await
    }

    async fn close(&self, handle: &SandboxHandle) -> Result<(), BackendError> {
        let lease = handle
            .lease()
            .as_any()
            .downcast_ref::<OpenSandboxLease>()
            .ok_or_else(|| BackendError::ForeignHandle {
                handle_id: handle.id().to_owned(),
                handle_backend: handle.backend().to_owned(),
                backend: BACKEND.to_owned(),
            })?;
        if lease.mark_closed() {
            lease.lifecycle.delete(&lease.id).await?;
        }
        Ok(())
    }

    async fn attach(&self, remote_id: &str) -> Result<SandboxHandle, BackendError> {
        self.lifecycle()?.get(remote_id).await?;
        self.connect(remote_id.to_owned(), None).await
    }
}
