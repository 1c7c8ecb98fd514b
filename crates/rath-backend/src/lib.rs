//! Sandbox backends for openrath: where a tool's side effects happen.
//!
//! ```
//! use rath_backend::{BackendRegistry, Output, Payload};
//! use rath_session::{Session, Stamper};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let registry = BackendRegistry::with_defaults();
//! // Placement is intent; the sandbox opens on first use.
//! let session = Session::user_with("hi", Stamper::counter()).to("local");
//! let sandbox = registry.sandbox_for(&session).await?;
//! let done = registry.dispatch(&sandbox, &Payload::write("a.txt", "hi"), session.stamper()).await;
//! assert_eq!(done.outcome, Ok(Output::FileWritten { bytes: 2 }));
//! let evidence = done.evidence.to_tool_evidence("call_1", "write_file");
//! assert_eq!(evidence.payload_kind.as_deref(), Some("file_write"));
//! # Ok::<(), rath_backend::BackendError>(())
//! # }).unwrap();
//! ```
//!
//! The crate owns the [`Backend`] trait, typed [`Payload`]s and [`Output`]s, the
//! [`ToolError`] value, [`DispatchEvidence`], the [`BackendRegistry`], and two
//! backends: [`local::LocalBackend`] (a confined host directory) and
//! [`isolated::IsolatedBackend`] (the same under bubblewrap). A sandbox is a
//! [`rath_session::SandboxHandle`] whose lease a backend implements: forks share it, and the
//! last holder's drop (or an explicit close) closes it exactly once. With the `conformance`
//! feature, the `conformance` module holds the suite every backend must pass.
//!
//! This crate knows nothing of providers, tools or the flow loop.

#![warn(missing_docs)]

mod backend;
mod confine;
mod error;
mod evidence;
mod exec;
mod payload;
mod registry;

#[cfg(feature = "conformance")]
pub mod conformance;
pub mod isolated;
pub mod local;

pub use backend::{
    Availability, Backend, Capabilities, DispatchContext, FileConfinement, FilesystemView,
    IsolationLevel, Mount, MountAccess,
};
pub use confine::confine_relative;
pub use error::{BackendError, ToolError, ToolErrorKind};
pub use evidence::{DispatchEvidence, Dispatched};
pub use exec::{ENV_ALLOW_LIST, OUTPUT_CAP};
pub use payload::{
    CodeLanguage, CodeOutput, CodePayload, CommandLine, CommandOutput, CommandPayload, EntryKind,
    FileEntry, Output, Payload, PayloadKind, SUMMARY_LIMIT, shell_quote,
};
pub use registry::BackendRegistry;
