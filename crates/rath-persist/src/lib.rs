//! Sessions that outlive the process: a JSONL session store, a lineage journal and lineage
//! exports, all readable by (and read from) Python OpenRath.
//!
//! ```
//! use rath_persist::{LineageJournal, Store, WriterOptions, export_jsonl_string};
//! use rath_session::{Chunk, Session, Stamper, Usage};
//!
//! let dir = tempfile::tempdir()?;
//! let store = Store::at(dir.path());
//! let journal = LineageJournal::new();
//!
//! let root = Session::user_with("How many words in 'a b c'?", Stamper::counter());
//! journal.record(&root);
//! let mut writer = store.writer(&root, WriterOptions::default())?;
//! let answered = root
//!     .push(Chunk::assistant_text("three"))
//!     .with_usage(Some("counter"), Usage::new(10, 2));
//! writer.sync_to(&answered)?; // append-as-you-go
//! writer.close()?;
//! journal.record(&answered);
//!
//! let loaded = store.load(root.id())?;
//! assert!(loaded.closed);
//! assert_eq!(loaded.session.len(), 2);
//! assert_eq!(loaded.session.agent_usage()["counter"], Usage::new(10, 2));
//! assert_eq!(export_jsonl_string(&journal.rows()).lines().count(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! This crate owns the on-disk formats (`docs/formats.md`): it reads and writes files and
//! knows nothing of tools, providers or loops. Timestamps come from the session's
//! [`rath_session::Stamper`], so counter-stamped runs write byte-identical files.

#![warn(missing_docs)]

#[cfg(feature = "conformance")]
pub mod conformance;
pub mod contract;
mod copy;
pub mod doc;
mod error;
mod fast;
pub mod journal;
pub mod loader;
mod mapped;
mod raw;
mod record;
pub mod recorder;
pub mod spans;
pub mod store;
pub mod stream;
pub mod url;
pub mod writer;

pub use contract::{
    Capabilities, Fence, GcReport, SessionStore, StoredDoc, Write, WriteBatch, WriteReport,
};
pub use copy::{CopyOptions, CopyReport, copy_store, copy_store_with};
pub use error::PersistError;
pub use journal::{
    LineageJournal, LineageRow, export_jsonl_string, export_sessions, export_sessions_to_file,
    parse_lineage_jsonl, to_dot, to_mermaid,
};
pub use loader::{LoadedSession, load_bytes, load_file};
/// Python's `json.dumps` layout (it lives in `rath-session`, so every crate writes it the same way).
pub use rath_session::json;
pub use record::{EXT_KEY, SCHEMA_VERSION};
pub use recorder::SessionRecorder;
pub use store::{
    PARTIAL_SUFFIX, SESSION_SUFFIX, SessionSummary, Store, openrath_home, summarize_file,
};
pub use url::StoreUrl;
pub use writer::{Durability, SessionWriter, WriterOptions};
