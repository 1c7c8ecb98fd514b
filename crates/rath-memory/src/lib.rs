//! The openrath **memory plane**: stores that recall and commit, with every operation
//! recorded on the session as a memory event.
//!
//! ```
//! use rath_memory::{LocalMemory, MemoryUri, NewItem, Scope, commit_from, memory_events, recall_into};
//! use rath_session::{Session, Stamper};
//!
//! let home = tempfile::tempdir()?;
//! let mem = LocalMemory::open(home.path(), "assistant", Default::default())?;
//! let s = Session::user_with("Note: the staging database is pg-staging-3.", Stamper::counter());
//! let fact = NewItem::new(MemoryUri::new(Scope::Resources, "infra/staging-db")?,
//!                         "The staging database is pg-staging-3.");
//! let (s, receipt) = commit_from(&s, &mem, vec![fact], Some("ops"))?;
//! let (s, hits) = recall_into(&s, &mem, "which staging database?", None, 5, Some("ops"))?;
//! assert_eq!(hits[0].uri.path(), "infra/staging-db");
//!
//! let events = memory_events(&s);
//! assert_eq!(events[0].operation, "commit");
//! assert_eq!(events[1].hits[0].commit_id.as_deref(), Some(receipt.commit_id.as_str()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! - [`Memory`]: the store contract (`recall`, `commit`, `read`, `write`, `delete`, `list`)
//!   over `memory://<scope>/<path>` addresses ([`MemoryUri`], [`Scope`]).
//! - [`LocalMemory`]: a JSONL log on disk (the human-readable source of truth) and an
//!   in-memory BM25 index rebuilt from it on open; optional hybrid recall via an [`Embedder`].
//! - [`recall_into`], [`commit_from`] and friends: the same operations on a session, returning
//!   the session with a `memory_event` chunk appended.
//! - [`MemoryPolicy`]: recall-and-inject before a model call and commit-on-forward after it,
//!   for the flow layer to apply.
//!
//! This crate owns stores and their events. It knows nothing of providers, tools or agents
//! beyond an agent's name.

#![warn(missing_docs)]

mod disk;
mod embed;
mod error;
mod events;
mod index;
mod item;
mod local;
mod memory;
mod policy;
mod snippet;
mod uri;

pub use embed::{Embedder, HashEmbedder, cosine};
pub use error::MemoryError;
pub use events::{
    commit_from, commit_id_for, delete_into, memory_events, read_into, recall_event, recall_into,
    store_event, write_into,
};
pub use index::tokenize;
pub use item::{CommitReceipt, Hit, MemoryItem, NewItem};
pub use local::{CRASH_POINT_ENV, Durability, LocalMemory, LocalOptions, openrath_home, store_dir};
pub use memory::Memory;
pub use policy::{
    ChunkSelection, CommitPolicy, InjectFormat, InjectRole, MemoryPolicy, QuerySource,
    RecallPolicy, select_items,
};
pub use uri::{MemoryUri, Scope};
