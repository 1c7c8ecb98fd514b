//! Erasure that keeps the proof: a chunk's payload replaced by a tombstone that names its
//! digest, recorded (who, when, why; signed) in the ledger.
//!
//! ```
//! use std::sync::Arc;
//! use rath_persist::{SessionStore, Store};
//! use rath_seal::{Sealer, VerifyOptions, erase::{ChunkRef, erase}, verify_store};
//! use rath_session::{Chunk, Session, Stamper};
//!
//! # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
//! let dir = tempfile::tempdir()?;
//! let store: Arc<dyn SessionStore> = Arc::new(Store::at(dir.path()));
//! let s = Session::user_with("my card is 4111", Stamper::counter()).push(Chunk::assistant_text("noted"));
//! store.save(&s).await?;
//! let sealer = Sealer::open(store.clone(), None, Stamper::counter()).await?;
//! sealer.seal_all().await?;
//! let at = ChunkRef { session: s.id().to_string(), index: 0 };
//! let done = erase(&sealer, &at, "dpo", "GDPR art. 17 request", "2026-01-01T00:00:00+00:00").await?;
//! assert_eq!(done.replaced, 1);
//! let report = verify_store(store.as_ref(), &VerifyOptions::default()).await?;
//! assert!(report.is_clean());
//! assert_eq!(report.erased, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **Design.** The tombstone ([`tombstone`]) is a chunk of the same kind whose text is
//! `[erased sha256:…]` with the erased chunk's digest (evidence becomes a `note`), so Python
//! OpenRath and every export show the marker where the text was and the conversation keeps
//! its shape. The seals are not touched: they keep the erased chunk's digest as a
//! leaf, so every root still verifies; a verifier accepts the tombstone in place of a leaf
//! only when the ledger records that digest as erased. The content is replaced wherever the
//! store holds it (a chunk shared by forks is one document in the SQL stores, one line per
//! file in JSONL): [`rath_persist::SessionStore::replace_chunk_doc`] rewrites it and leaves no copy in the
//! store's files. Crypto-shredding (per-tenant payload keys) was not chosen: it needs every
//! reader to hold keys, and Python OpenRath could no longer read any payload.

use rath_persist::doc;
use rath_session::merkle::{self, Digest};
use rath_session::{Chunk, ChunkBody, SessionId};

use crate::record::Erasure;
use crate::{SealError, Sealer};

/// The author of every tombstone note.
pub const TOMBSTONE_AUTHOR: &str = "rath-erase";

/// The text a tombstone holds for an erased chunk whose digest is `digest`.
pub fn marker(digest: &Digest) -> String {
    format!("[erased sha256:{}]", merkle::hex(digest))
}

/// The tombstone that replaces `chunk`: a chunk of the same conversation kind whose text is
/// the [`marker`] (a tool result keeps its call id and tool name, an assistant turn loses its
/// tool calls), so the conversation keeps its shape and every count stays; evidence becomes
/// a `note` by `rath-erase`.
pub fn tombstone(chunk: &Chunk) -> Chunk {
    let text = marker(&chunk.digest());
    match chunk.body() {
        ChunkBody::System(_) => Chunk::system(text),
        ChunkBody::User(_) => Chunk::user(text),
        ChunkBody::Assistant(_) => Chunk::assistant_text(text),
        ChunkBody::ToolResult(r) => {
            Chunk::tool_result(r.tool_call_id.clone(), r.name.clone(), text)
        }
        _ => Chunk::note(TOMBSTONE_AUTHOR, text),
    }
}

/// A chunk of a stored session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkRef {
    /// The session.
    pub session: String,
    /// The chunk's index.
    pub index: usize,
}

impl std::str::FromStr for ChunkRef {
    type Err = SealError;

    /// `SESSION:INDEX`.
    fn from_str(s: &str) -> Result<Self, SealError> {
        let (session, index) = s
            .rsplit_once(':')
            .ok_or_else(|| SealError::BadChunkRef { what: s.to_owned() })?;
        let index = index
            .parse()
            .map_err(|_| SealError::BadChunkRef { what: s.to_owned() })?;
        Ok(ChunkRef {
            session: session.to_owned(),
            index,
        })
    }
}

/// What an erasure did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Erased {
    /// The erased chunk's digest.
    pub digest: Digest,
    /// Stored chunks replaced by the tombstone (every session holding the chunk).
    pub replaced: u64,
}

/// Erases chunk `at`: seals its session first if the seal does not cover the chunk yet,
/// records the erasure (`by`, `at_time`, `reason`) in the ledger, then replaces the chunk's
/// document everywhere the store holds it.
pub async fn erase(
    sealer: &Sealer,
    at: &ChunkRef,
    by: &str,
    reason: &str,
    at_time: &str,
) -> Result<Erased, SealError> {
    let store = sealer.store().clone();
    let loaded = store.load(&SessionId::new(&at.session)).await?;
    let chunk = loaded
        .session
        .get(at.index)
        .cloned()
        .ok_or_else(|| SealError::NoSuchChunk {
            session: at.session.clone(),
            index: at.index,
            len: loaded.session.len(),
        })?;
    if sealer
        .sealed(&at.session)
        .await
        .is_none_or(|(len, _)| len <= at.index as u64)
    {
        sealer.seal(&loaded.session).await?;
    }
    let digest = chunk.digest();
    sealer
        .record_erasure(Erasure {
            session: at.session.clone(),
            index: at.index as u64,
            digest: merkle::hex(&digest),
            by: by.to_owned(),
            at: at_time.to_owned(),
            reason: reason.to_owned(),
        })
        .await?;
    let old = doc::encode_chunk(&chunk)?;
    let new = doc::encode_chunk(&tombstone(&chunk))?;
    let replaced = store.replace_chunk_doc(&old, &new).await?;
    Ok(Erased { digest, replaced })
}
