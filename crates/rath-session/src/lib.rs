//! The openrath **Session**: the runtime state of an agent system as one immutable value.
//!
//! ```
//! use rath_session::{Chunk, LineageKind, Session, Stamper};
//!
//! // Deterministic ids and clock, so this example prints the same thing every time.
//! let stamper = Stamper::counter();
//! let agent = Session::system_with("You are careful.", stamper.clone());
//! let root = Session::user_with("How many words in 'a b c'?", stamper).to("local");
//!
//! let a = root.fork().push(Chunk::assistant_text("three"));
//! let b = root.fork();
//! let merged = a.merge(&b)?;
//!
//! assert_eq!(merged.lineage().kind, LineageKind::OpMerge);
//! assert_eq!(merged.messages().len(), 3);
//! assert!(agent.placement().backend().is_none());
//! # Ok::<(), rath_session::SessionError>(())
//! ```
//!
//! A session carries ordered [`Chunk`]s (the four OpenRath conversation kinds plus evidence a
//! model never sees), [`Lineage`] (parents, operator, kind, extras), cumulative and per-agent
//! [`Usage`], [`Placement`] intent with a shared sandbox handle slot, and pending tool calls.
//! Chunks live in a persistent, height-balanced concatenation tree ([`ChunkList`]), so [`Session::fork`] is O(1) and [`Session::merge`]
//! O(log n).
//!
//! This crate owns the value and its algebra. It does no I/O and runs no async code: stores,
//! providers and sandboxes live in the crates above it.

#![warn(missing_docs)]

mod chunk;
mod error;
mod graph;
pub mod json;
mod lineage;
mod list;
pub mod merkle;
mod messages;
mod placement;
mod serde_impl;
mod session;
mod stamp;
mod usage;

pub use chunk::{
    AssistantPayload, Chunk, ChunkBody, ChunkData, ChunkKind, CompressionRecord, DroppedChunk,
    FailedAttempt, FunctionCall, MemoryEvent, MemoryHit, ModelCall, Note, PolicyDecision,
    RouteDecision, RunFailure, TextPayload, ToolCall, ToolEvidence, ToolResultPayload,
};
pub use error::SessionError;
pub use graph::LineageGraph;
pub use lineage::{Lineage, LineageKind, Parents, SessionId};
pub use list::{ChunkList, Iter as ChunkIter, LEAF_MAX};
pub use merkle::ChunkRoots;
pub use messages::{ChatMessage, Role};
pub use placement::{Placement, SandboxHandle, SandboxLease, SandboxSlot, SandboxSpec};
pub use session::{MergeStrategy, PendingCall, Session, SessionParts};
pub use stamp::{
    CounterSource, DETERMINISTIC_ENV, DETERMINISTIC_FLAG, SeededSource, StampSource, Stamper,
    StamperState, Timer, Timestamp, deterministic_from, deterministic_requested, is_uuid,
};
pub use usage::{Usage, sum_optional};
