//! Tamper evidence for session stores: a seal ledger of Merkle roots, ed25519 signatures,
//! verification that names what changed, and erasure that keeps the proof.
//!
//! ```
//! use std::sync::Arc;
//! use rath_persist::{SessionStore, Store};
//! use rath_seal::{FailureKind, Sealer, VerifyOptions, keys, verify_store};
//! use rath_session::{Chunk, Session, Stamper};
//!
//! # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
//! let dir = tempfile::tempdir()?;
//! let sessions = dir.path().join("sessions");
//! let store: Arc<dyn SessionStore> = Arc::new(Store::at(&sessions));
//! let s = Session::user_with("hi", Stamper::counter()).push(Chunk::assistant_text("hello"));
//! store.save(&s).await?;
//!
//! // The key lives outside the store; its public half goes into the ledger.
//! keys::generate(&dir.path().join("signing.key"))?;
//! let key = keys::load(&dir.path().join("signing.key"))?;
//! let sealer = Sealer::open(store.clone(), Some(key), Stamper::counter()).await?;
//! sealer.seal_all().await?;
//! assert!(verify_store(store.as_ref(), &VerifyOptions::default()).await?.is_clean());
//!
//! // Someone edits the stored answer.
//! let file = sessions.join(format!("{}.jsonl", s.id()));
//! let text = std::fs::read_to_string(&file)?.replace("hello", "HELLO");
//! std::fs::write(&file, text)?;
//! let report = verify_store(store.as_ref(), &VerifyOptions::default()).await?;
//! assert_eq!(report.failures[0].kind, FailureKind::ContentChanged);
//! assert_eq!(report.failures[0].chunk, Some(1));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! This crate owns the ledger format ([`record`]), sealing ([`Sealer`]), verification
//! ([`verify_store`]), keys ([`keys`]), erasure ([`erase`]) and [`SealedStore`], the layer
//! that seals every session a store commits. The digests and roots
//! themselves are `rath_session::merkle`'s; stores are reached only through the
//! [`rath_persist::SessionStore`] contract, so every store kind is sealed the same way and
//! this crate knows none of them. It must not change how any store writes a session.

#![warn(missing_docs)]

pub mod erase;
pub mod keys;
pub mod ledger;
pub mod record;
pub mod sealed;
pub mod verify;

pub use ledger::{LEDGER_AUTHOR, LEDGER_ID, ReadEntry, Sealer, read_ledger};
pub use sealed::SealedStore;
pub use verify::{Failure, FailureKind, Report, VerifyOptions, verify_store};

use rath_persist::PersistError;

/// Everything that can go wrong sealing, verifying or erasing (tampering found by
/// verification is not an error: it is the [`Report`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] PersistError),
    /// A key file or key text is not a key.
    #[error("not a signing key: {what}")]
    Key {
        /// What is wrong.
        what: String,
    },
    /// A key file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The ledger is damaged, so a sealer cannot extend it; `rath verify` says how.
    #[error("the seal ledger is damaged at entry {entry}: {why}")]
    Ledger {
        /// The entry's index.
        entry: usize,
        /// What is wrong.
        why: String,
    },
    /// A session is shorter than its latest seal: sealing it would hide removed chunks.
    #[error("session {id} has {len} chunks but was sealed with {sealed}")]
    Shorter {
        /// The session.
        id: String,
        /// Its latest seal's length.
        sealed: u64,
        /// Its length now.
        len: u64,
    },
    /// Other sealers kept winning the race to append to the ledger.
    #[error("the seal ledger changed under this sealer {tries} times in a row")]
    Contended {
        /// Attempts made.
        tries: usize,
    },
    /// A chunk reference is not `SESSION:INDEX`.
    #[error("{what:?} is not SESSION:INDEX")]
    BadChunkRef {
        /// What was given.
        what: String,
    },
    /// The session has no such chunk.
    #[error("session {session} has {len} chunks, no chunk {index}")]
    NoSuchChunk {
        /// The session.
        session: String,
        /// The index asked for.
        index: usize,
        /// Its length.
        len: usize,
    },
}
