//! [`BackendRegistry`]: backends by name, so `session.to("local")` resolves at first use.
//!
//! ```
//! use rath_backend::{BackendRegistry, CommandPayload, Payload};
//! use rath_session::{Session, Stamper};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let registry = BackendRegistry::with_defaults();
//! let session = Session::user_with("hi", Stamper::counter()).to("local");
//! let fork = session.fork();
//!
//! // First use opens the sandbox; the fork shares it.
//! let handle = registry.sandbox_for(&session).await?;
//! assert_eq!(registry.sandbox_for(&fork).await?.id(), handle.id());
//!
//! let done = registry
//!     .dispatch(&handle, &Payload::Command(CommandPayload::shell("echo hi")), session.stamper())
//!     .await;
//! assert_eq!(done.evidence.exit_code, Some(0));
//! assert_eq!(done.evidence.backend, "local");
//! # Ok::<(), rath_backend::BackendError>(())
//! # }).unwrap();
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use rath_session::{SandboxHandle, SandboxSpec, Session, Stamper};

use crate::backend::{Backend, DispatchContext};
use crate::error::{BackendError, ToolError, ToolErrorKind};
use crate::evidence::{DispatchEvidence, Dispatched};
use crate::payload::Payload;

/// Backends by name. Cheap to clone (backends are shared).
#[derive(Clone, Default)]
pub struct BackendRegistry {
    backends: BTreeMap<String, Arc<dyn Backend>>,
}

impl fmt::Debug for BackendRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackendRegistry")
            .field("backends", &self.names())
            .finish()
    }
}

impl BackendRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// `local` and `isolated` registered (isolated reports itself unavailable when `bwrap`
    /// is missing).
    pub fn with_defaults() -> Self {
        Self::new()
            .with(crate::local::LocalBackend::new())
            .with(crate::isolated::IsolatedBackend::new())
    }

    /// The registry with `backend` added under its name (replacing one of the same name).
    pub fn with(mut self, backend: impl Backend + 'static) -> Self {
        self.register(Arc::new(backend));
        self
    }

    /// Adds `backend` under its name, replacing one of the same name.
    pub fn register(&mut self, backend: Arc<dyn Backend>) {
        self.backends.insert(backend.name().to_owned(), backend);
    }

    /// The backend named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Backend>> {
        self.backends.get(name)
    }

    /// Registered names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.backends.keys().cloned().collect()
    }

    /// The backend named `name`, available, or why not.
    pub fn resolve(&self, name: &str) -> Result<&Arc<dyn Backend>, BackendError> {
        let backend = self
            .backends
            .get(name)
            .ok_or_else(|| BackendError::UnknownBackend {
                name: name.to_owned(),
                known: self.names(),
            })?;
        if let Some(reason) = backend.availability().reason() {
            return Err(BackendError::Unavailable {
                backend: name.to_owned(),
                reason: reason.to_owned(),
            });
        }
        Ok(backend)
    }

    /// Opens a sandbox on backend `name`.
    pub async fn open(
        &self,
        name: &str,
        spec: &SandboxSpec,
        stamper: &Stamper,
    ) -> Result<SandboxHandle, BackendError> {
        self.resolve(name)?.open(spec, stamper).await
    }

    /// The session's sandbox: the handle its placement slot holds, or a new one opened on the
    /// placement's backend and bound into the slot (shared with every fork). When forks race,
    /// one handle wins and the others are dropped, which closes them.
    pub async fn sandbox_for(&self, session: &Session) -> Result<SandboxHandle, BackendError> {
        let placement = session.placement();
        if let Some(h) = placement.handle() {
            return if h.is_live() {
                Ok(h.clone())
            } else {
                Err(BackendError::Closed {
                    handle_id: h.id().to_owned(),
                })
            };
        }
        let name = placement.backend().ok_or_else(|| BackendError::Unplaced {
            session_id: session.id().to_string(),
        })?;
        let default_spec = SandboxSpec::default();
        let spec = placement.spec().unwrap_or(&default_spec);
        let opened = self.open(name, spec, session.stamper()).await?;
        Ok(placement.slot().bind(opened))
    }

    /// Runs `payload` on `handle`, routed to the backend that opened it, and records evidence
    /// (for failures too). Never panics; routing problems are failures of kind
    /// `backend_unavailable` or `sandbox_closed`.
    pub async fn dispatch(
        &self,
        handle: &SandboxHandle,
        payload: &Payload,
        stamper: &Stamper,
    ) -> Dispatched {
        let cx = DispatchContext::new(stamper);
        let outcome = match self.backends.get(handle.backend()) {
            None => Err(ToolError::new(
                ToolErrorKind::BackendUnavailable,
                format!(
                    "sandbox {} belongs to backend {}, which is not registered",
                    handle.id(),
                    handle.backend()
                ),
            )),
            Some(_) if !handle.is_live() => Err(ToolError::new(
                ToolErrorKind::SandboxClosed,
                format!("sandbox {} is closed", handle.id()),
            )),
            Some(b) => b.dispatch(handle, payload, &cx).await,
        };
        let evidence = DispatchEvidence::record(
            handle.backend(),
            handle.id(),
            payload,
            &outcome,
            cx.elapsed_ms(),
        );
        Dispatched { outcome, evidence }
    }

    /// Closes `handle` through the backend that opened it.
    pub async fn close(&self, handle: &SandboxHandle) -> Result<(), BackendError> {
        let backend =
            self.backends
                .get(handle.backend())
                .ok_or_else(|| BackendError::UnknownBackend {
                    name: handle.backend().to_owned(),
                    known: self.names(),
                })?;
        backend.close(handle).await
    }
}
