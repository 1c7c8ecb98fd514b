//! **openrath**: session-centered runtime state for agent systems.
//!
//! ```
//! use openrath::prelude::*;
//!
//! let root = Session::user_with("How many words are in 'a b c'?", Stamper::counter());
//! let a = root.fork().push(Chunk::assistant_text("three"));
//! let b = root.fork();
//! let merged = a.merge(&b)?;
//! assert_eq!(merged.lineage().parents.len(), 2);
//! # Ok::<(), openrath::session::SessionError>(())
//! ```
//!
//! This facade re-exports the workspace's crates under short names, so an application can
//! depend on `openrath` alone; a library that needs one layer can depend on that crate
//! (`rath-session`, `rath-persist`, ...) and nothing else.

#![warn(missing_docs)]

pub mod demos;

pub use rath_inspect as inspect;
pub use rath_persist as persist;
pub use rath_session as session;

/// The names most programs need.
pub mod prelude {
    pub use rath_session::{
        Chunk, ChunkBody, ChunkKind, Lineage, LineageGraph, LineageKind, MergeStrategy,
        SandboxSpec, Session, SessionId, Stamper, ToolCall, Usage,
    };
}
