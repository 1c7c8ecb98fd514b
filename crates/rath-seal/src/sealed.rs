//! [`SealedStore`]: a store that seals every session it commits, the layer a server or worker
//! installs so that nothing it writes goes unsealed.
//!
//! ```
//! use std::sync::Arc;
//! use rath_persist::{SessionStore, Store};
//! use rath_seal::{SealedStore, VerifyOptions, verify_store};
//! use rath_session::{Chunk, Session, Stamper};
//!
//! # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
//! let dir = tempfile::tempdir()?;
//! let inner: Arc<dyn SessionStore> = Arc::new(Store::at(dir.path()));
//! let store = SealedStore::open(inner, None, Stamper::counter()).await?;
//! let s = Session::user_with("hi", Stamper::counter());
//! store.save(&s).await?;
//! store.append(&s.push(Chunk::assistant_text("hello")), 1).await?;
//! let report = verify_store(&store, &VerifyOptions::default()).await?;
//! assert!(report.is_clean() && report.unsealed.is_empty() && report.chunks == 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A write goes to the inner store first; each session it wrote is then sealed (its parents
//! first when they are stored unsealed). The seal is not in the write's transaction: a crash
//! between the two leaves the session stored and unsealed, which `rath verify` reports and
//! `rath seal` completes. A seal that fails fails the call with
//! [`PersistError::Backend`] (op `seal`), the write itself done.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ed25519_dalek::SigningKey;
use rath_persist::{
    Capabilities, GcReport, LoadedSession, PersistError, SessionStore, SessionSummary, StoredDoc,
    WriteBatch, WriteReport,
};
use rath_session::{Chunk, Session, SessionId, Stamper, Timestamp};

use crate::{LEDGER_ID, SealError, Sealer};

/// A [`SessionStore`] that seals what it commits. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct SealedStore {
    inner: Arc<dyn SessionStore>,
    sealer: Sealer,
}

impl SealedStore {
    /// Seals what is written to `inner`, signing with `signer` when given.
    pub async fn open(
        inner: Arc<dyn SessionStore>,
        signer: Option<SigningKey>,
        stamper: Stamper,
    ) -> Result<Self, SealError> {
        let sealer = Sealer::open(inner.clone(), signer, stamper).await?;
        Ok(Self { inner, sealer })
    }

    /// The sealer (for erasure, or to seal what was stored before).
    pub fn sealer(&self) -> &Sealer {
        &self.sealer
    }
}

#[async_trait]
impl SessionStore for SealedStore {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn write(&self, batch: WriteBatch<'_>) -> Result<Vec<WriteReport>, PersistError> {
        let sessions: Vec<Session> = batch
            .writes
            .iter()
            .map(|w| w.session().clone())
            .filter(|s| s.id().as_str() != LEDGER_ID)
            .collect();
        let reports = self.inner.write(batch).await?;
        for s in &sessions {
            self.sealer
                .seal(s)
                .await
                .map_err(|e| PersistError::Backend {
                    store: self.inner.name(),
                    op: "seal",
                    message: e.to_string(),
                    source: Some(Box::new(e)),
                })?;
        }
        Ok(reports)
    }

    async fn load(&self, id: &SessionId) -> Result<LoadedSession, PersistError> {
        self.inner.load(id).await
    }

    async fn stored_len(&self, id: &SessionId) -> Result<Option<usize>, PersistError> {
        self.inner.stored_len(id).await
    }

    async fn known_to_extend(
        &self,
        id: &SessionId,
        prefix: &SessionId,
    ) -> Result<bool, PersistError> {
        self.inner.known_to_extend(id, prefix).await
    }

    async fn read_chunks(
        &self,
        id: &SessionId,
        range: std::ops::Range<usize>,
    ) -> Result<Vec<Chunk>, PersistError> {
        self.inner.read_chunks(id, range).await
    }

    async fn chunk_docs(&self, id: &SessionId) -> Result<Vec<StoredDoc>, PersistError> {
        self.inner.chunk_docs(id).await
    }

    async fn replace_chunk_doc(&self, old: &[u8], new: &[u8]) -> Result<u64, PersistError> {
        self.inner.replace_chunk_doc(old, new).await
    }

    async fn revision(&self, id: &SessionId) -> Result<Option<Vec<u8>>, PersistError> {
        self.inner.revision(id).await
    }

    async fn list(&self) -> Result<Vec<SessionSummary>, PersistError> {
        self.inner.list().await
    }

    async fn list_with_unreadable(
        &self,
    ) -> Result<(Vec<SessionSummary>, Vec<PersistError>), PersistError> {
        self.inner.list_with_unreadable().await
    }

    async fn delete(&self, id: &SessionId) -> Result<bool, PersistError> {
        self.inner.delete(id).await
    }

    async fn gc(&self) -> Result<GcReport, PersistError> {
        self.inner.gc().await
    }

    async fn prune(
        &self,
        older_than: Duration,
        now: Timestamp,
    ) -> Result<Vec<SessionId>, PersistError> {
        self.inner.prune(older_than, now).await
    }
}
