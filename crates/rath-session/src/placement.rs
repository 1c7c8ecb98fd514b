//! Placement: which backend a session's tools run on, and the shared sandbox handle slot.
//!
//! ```
//! use rath_session::{SandboxSpec, Session, Stamper};
//!
//! let s = Session::user_with("hi", Stamper::counter())
//!     .to_with("local", SandboxSpec::working_dir("/workspace/demo"));
//! assert_eq!(s.placement().backend(), Some("local"));
//! // Placement is intent only: nothing is opened until a tool needs it.
//! assert!(s.placement().handle().is_none());
//! ```
//!
//! The session never opens a sandbox itself (this crate does no I/O). A backend crate
//! implements [`SandboxLease`]; a tool that first needs the sandbox opens one and calls
//! [`SandboxSlot::bind`]. Forks share the slot, so the handle is shared by every session
//! derived from the one that was placed, and it is released when the last holder drops.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// How to open a sandbox: OpenRath's `SandboxSpec` fields.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SandboxSpec {
    /// Container image, for backends that use one.
    pub image: Option<String>,
    /// Entrypoint argv, for backends that use one.
    pub entrypoint: Option<Vec<String>>,
    /// Extra environment for the sandbox.
    pub env: Option<BTreeMap<String, String>>,
    /// Default timeout for work in the sandbox, in seconds.
    #[serde(
        serialize_with = "ser_seconds",
        deserialize_with = "de_seconds",
        default
    )]
    pub timeout_seconds: Option<f64>,
    /// Working directory.
    pub working_dir: Option<String>,
}

impl SandboxSpec {
    /// A spec with only a working directory (what OpenRath's `to("local", spec="/dir")` makes).
    pub fn working_dir(dir: impl Into<String>) -> Self {
        Self {
            working_dir: Some(dir.into()),
            ..Self::default()
        }
    }
}

// Whole seconds are written as integers, the way Python's json writes an int.
fn ser_seconds<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        None => s.serialize_none(),
        Some(x) if x.fract() == 0.0 && x.abs() < 9.0e15 => s.serialize_i64(*x as i64),
        Some(x) => s.serialize_f64(*x),
    }
}

fn de_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    Option::<f64>::deserialize(d)
}

/// A live sandbox as seen from a session: implemented by backend crates.
///
/// Dropping the last [`SandboxHandle`] drops the lease; a backend closes the sandbox in the
/// lease's `Drop` (or earlier, on explicit close, after which [`SandboxLease::is_live`] is false).
pub trait SandboxLease: Send + Sync + fmt::Debug {
    /// The handle id: what the merge rule compares and the store records.
    fn handle_id(&self) -> &str;
    /// The backend that opened it.
    fn backend(&self) -> &str;
    /// False once the sandbox was closed.
    fn is_live(&self) -> bool;
    /// For the backend to recover its own type.
    fn as_any(&self) -> &dyn Any;
}

/// A reference-counted handle to a live sandbox.
#[derive(Clone, Debug)]
pub struct SandboxHandle(Arc<dyn SandboxLease>);

impl SandboxHandle {
    /// Wraps a lease.
    pub fn new(lease: impl SandboxLease + 'static) -> Self {
        Self(Arc::new(lease))
    }

    /// Wraps an already shared lease.
    pub fn from_arc(lease: Arc<dyn SandboxLease>) -> Self {
        Self(lease)
    }

    /// The handle id.
    pub fn id(&self) -> &str {
        self.0.handle_id()
    }

    /// The backend name.
    pub fn backend(&self) -> &str {
        self.0.backend()
    }

    /// False once closed.
    pub fn is_live(&self) -> bool {
        self.0.is_live()
    }

    /// The lease, for the backend to downcast.
    pub fn lease(&self) -> &Arc<dyn SandboxLease> {
        &self.0
    }

    /// How many holders share this handle (slots and clones).
    pub fn holders(&self) -> usize {
        Arc::strong_count(&self.0)
    }
}

/// A slot, shared by a session and its forks, that holds the sandbox handle once opened.
#[derive(Clone, Default)]
pub struct SandboxSlot(Arc<OnceLock<SandboxHandle>>);

impl SandboxSlot {
    /// An empty slot.
    pub fn new() -> Self {
        Self::default()
    }

    /// The handle, once bound.
    pub fn get(&self) -> Option<&SandboxHandle> {
        self.0.get()
    }

    /// Binds `handle` if the slot is empty; returns the handle the slot holds afterwards
    /// (the earlier one if another holder bound first).
    pub fn bind(&self, handle: SandboxHandle) -> SandboxHandle {
        self.0.get_or_init(|| handle).clone()
    }

    /// Returns the bound handle, or opens one with `open` and binds it. Only one opener wins
    /// when several forks race; the others' handles are dropped (and so closed).
    pub fn get_or_try_bind<E>(
        &self,
        open: impl FnOnce() -> Result<SandboxHandle, E>,
    ) -> Result<SandboxHandle, E> {
        if let Some(h) = self.0.get() {
            return Ok(h.clone());
        }
        let handle = open()?;
        Ok(self.bind(handle))
    }

    /// True when both are the same slot.
    pub fn same_slot(&self, other: &SandboxSlot) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl fmt::Debug for SandboxSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.get() {
            Some(h) => write!(f, "SandboxSlot({})", h.id()),
            None => f.write_str("SandboxSlot(unbound)"),
        }
    }
}

/// Placement intent: a backend name, a spec, the shared handle slot, and (for sessions loaded
/// from a store) the handle id that was recorded.
#[derive(Clone, Debug, Default)]
pub struct Placement {
    backend: Option<Arc<str>>,
    spec: Option<Arc<SandboxSpec>>,
    slot: SandboxSlot,
    recorded_handle_id: Option<Arc<str>>,
}

impl Placement {
    /// No placement.
    pub fn none() -> Self {
        Self::default()
    }

    /// Intent for `backend` with an optional spec and a fresh, empty slot.
    pub fn new(backend: impl Into<String>, spec: Option<SandboxSpec>) -> Self {
        Self {
            backend: Some(Arc::from(backend.into())),
            spec: spec.map(Arc::new),
            slot: SandboxSlot::new(),
            recorded_handle_id: None,
        }
    }

    /// Placement as read back from a store: no live handle, the recorded id kept for writing.
    pub fn restored(
        backend: Option<String>,
        spec: Option<SandboxSpec>,
        recorded_handle_id: Option<String>,
    ) -> Self {
        Self {
            backend: backend.map(Arc::from),
            spec: spec.map(Arc::new),
            slot: SandboxSlot::new(),
            recorded_handle_id: recorded_handle_id.map(Arc::from),
        }
    }

    /// The backend name, if placed.
    pub fn backend(&self) -> Option<&str> {
        self.backend.as_deref()
    }

    /// The spec, if any.
    pub fn spec(&self) -> Option<&SandboxSpec> {
        self.spec.as_deref()
    }

    /// The shared slot.
    pub fn slot(&self) -> &SandboxSlot {
        &self.slot
    }

    /// The live handle, if bound.
    pub fn handle(&self) -> Option<&SandboxHandle> {
        self.slot.get()
    }

    /// The handle id to record: the live one, else the one read from a store.
    pub fn handle_id(&self) -> Option<&str> {
        self.slot
            .get()
            .map(SandboxHandle::id)
            .or(self.recorded_handle_id.as_deref())
    }

    /// The same placement with its slot bound to `handle` (a new slot if this one was bound to
    /// another handle).
    pub fn bound_to(&self, handle: SandboxHandle) -> Self {
        let slot = match self.slot.get() {
            Some(h) if h.id() == handle.id() => self.slot.clone(),
            Some(_) => {
                let s = SandboxSlot::new();
                s.bind(handle);
                s
            }
            None => {
                self.slot.bind(handle);
                self.slot.clone()
            }
        };
        Self {
            backend: self.backend.clone(),
            spec: self.spec.clone(),
            slot,
            recorded_handle_id: None,
        }
    }

    /// A short description for error messages: `bound to sandbox h1 on local`,
    /// `unbound, backend local`, `unplaced`.
    pub fn describe(&self) -> String {
        match (self.handle(), self.backend()) {
            (Some(h), _) if !h.is_live() => {
                format!("bound to closed sandbox {} on {}", h.id(), h.backend())
            }
            (Some(h), _) => format!("bound to live sandbox {} on {}", h.id(), h.backend()),
            (None, Some(b)) => format!("unbound, backend {b}"),
            (None, None) => "unplaced".to_owned(),
        }
    }
}
