//! The seal ledger, a session in the store it seals, and the [`Sealer`] that appends to it.
//!
//! ```
//! use std::sync::Arc;
//! use rath_persist::{SessionStore, Store};
//! use rath_seal::{LEDGER_ID, Sealer};
//! use rath_session::{Chunk, Session, Stamper};
//!
//! # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
//! let dir = tempfile::tempdir()?;
//! let store: Arc<dyn SessionStore> = Arc::new(Store::at(dir.path()));
//! let s = Session::user_with("hi", Stamper::counter());
//! store.save(&s).await?;
//! let sealer = Sealer::open(store.clone(), None, Stamper::counter()).await?;
//! let seal = sealer.seal(&s).await?.expect("a new seal");
//! assert_eq!(seal.len, 1);
//! // Sealing the same session at the same length again records nothing.
//! assert!(sealer.seal(&s).await?.is_none());
//! assert_eq!(store.stored_len(&LEDGER_ID.into()).await?, Some(1));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **Why a session.** The ledger is stored by the very store it seals, through the same
//! contract, so every store kind (JSONL, SQLite, PostgreSQL) keeps it with no new table or
//! file, `rath store copy` carries it, and Python OpenRath loads it as a session of `note`
//! chunks (its id is [`LEDGER_ID`]). No existing record changes: the sealed sessions' bytes
//! are exactly what they were. Each note's text is one [`Entry`] (JSON).
//!
//! **What a seal costs.** A seal records the digests of the chunks added since the session's
//! previous seal and its root, computed incrementally from the previous seal's Merkle peaks:
//! O(new chunks + log n). The ledger is appended through [`SessionStore::append`]; a writer
//! that lost a race to another sealer reloads the ledger and tries again.

use std::collections::HashMap;
use std::sync::Arc;

use ed25519_dalek::SigningKey;
use rath_persist::{PersistError, SessionStore};
use rath_session::merkle::{self, Digest};
use rath_session::{
    Chunk, ChunkBody, ChunkList, ChunkRoots, Lineage, LineageKind, Session, SessionId,
    SessionParts, Stamper,
};
use tokio::sync::Mutex;

use crate::SealError;
use crate::record::{Entry, Erasure, Seal, SealParent};

/// The id of the ledger session in every sealed store.
pub const LEDGER_ID: &str = "rath-seals";

/// The `author` of every ledger note.
pub const LEDGER_AUTHOR: &str = "rath-seal";

/// How many times a sealer reloads the ledger after losing an append race.
const RETRIES: usize = 16;

/// One ledger entry as read: its position and the entry, or why it does not read.
pub type ReadEntry = (usize, Result<Entry, String>);

/// Reads the ledger of `store`: `Ok(None)` when it has none.
pub async fn read_ledger(
    store: &dyn SessionStore,
) -> Result<Option<(Session, Vec<ReadEntry>)>, SealError> {
    let loaded = match store.load(&SessionId::new(LEDGER_ID)).await {
        Ok(l) => l,
        Err(PersistError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let entries = loaded
        .session
        .chunks()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let entry = match c.body() {
                ChunkBody::Note(n) if n.author == LEDGER_AUTHOR => Entry::parse(&n.text),
                _ => Err(format!("chunk {i} is not a {LEDGER_AUTHOR} note")),
            };
            (i, entry)
        })
        .collect();
    Ok(Some((loaded.session, entries)))
}

/// What the ledger says about one session so far.
#[derive(Clone, Debug, Default)]
struct Sealed {
    len: u64,
    root: Digest,
    peaks: ChunkRoots,
}

/// The ledger as a sealer needs it: the stored value, its tip and the latest seal per session.
#[derive(Default)]
struct State {
    ledger: Option<Session>,
    tip: Digest,
    sealed: HashMap<String, Sealed>,
    keys: Vec<[u8; 32]>,
    /// While [`Sealer::seal_all`] runs: entries made but not stored yet (it stores them
    /// [`BATCH`] at a time, so a store that rewrites a session whole on append, a JSONL
    /// directory, rewrites the ledger once per batch, not once per session).
    pending: Option<Vec<Entry>>,
    /// Seals this sealer has recorded (a parent sealed first included).
    made: usize,
}

/// Entries [`Sealer::seal_all`] stores at once.
const BATCH: usize = 1024;

impl State {
    fn replay(ledger: Option<(Session, Vec<ReadEntry>)>) -> Result<Self, SealError> {
        let mut state = State::default();
        let Some((session, entries)) = ledger else {
            return Ok(state);
        };
        for (i, entry) in entries {
            let entry = entry.map_err(|why| SealError::Ledger {
                entry: i,
                why: format!("{why}; `rath verify` says more"),
            })?;
            if let Some(seal) = &entry.seal {
                let leaves =
                    crate::record::split_leaves(&seal.leaves).ok_or_else(|| SealError::Ledger {
                        entry: i,
                        why: "its leaves are not hex digests".into(),
                    })?;
                // A first seal with a base starts from its base's peaks (the ledger says the
                // session's first chunks are those).
                let shared = match &seal.base {
                    Some(b) => Some(
                        state
                            .sealed
                            .get(&b.id)
                            .filter(|p| p.len == b.len)
                            .map(|p| p.peaks.clone())
                            .ok_or_else(|| SealError::Ledger {
                                entry: i,
                                why: "its base is not a sealed session of that length".into(),
                            })?,
                    ),
                    None => None,
                };
                let s = state.sealed.entry(seal.session.clone()).or_default();
                if let Some(peaks) = shared {
                    s.peaks = peaks;
                }
                for leaf in leaves {
                    s.peaks.push(leaf);
                }
                s.len = seal.len;
                s.root = merkle::from_hex(&seal.root).unwrap_or_default();
            }
            if let Some(k) = entry.key_added.as_deref().and_then(merkle::from_hex) {
                state.keys.push(k);
            }
            state.tip = entry.digest();
        }
        state.ledger = Some(session);
        Ok(state)
    }
}

/// Seals sessions of one store: records their roots (signed when it has a key) in the
/// store's ledger. Clones share the ledger state. See the [module docs](self).
#[derive(Clone)]
pub struct Sealer {
    store: Arc<dyn SessionStore>,
    signer: Option<Arc<SigningKey>>,
    stamper: Stamper,
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer")
            .field("store", &self.store.name())
            .field(
                "signer",
                &self.signer.as_deref().map(crate::keys::public_hex),
            )
            .finish()
    }
}

impl Sealer {
    /// A sealer for `store`, signing with `signer` when given; `stamper` dates the ledger
    /// session when this sealer creates it.
    pub async fn open(
        store: Arc<dyn SessionStore>,
        signer: Option<SigningKey>,
        stamper: Stamper,
    ) -> Result<Self, SealError> {
        let state = State::replay(read_ledger(store.as_ref()).await?)?;
        Ok(Self {
            store,
            signer: signer.map(Arc::new),
            stamper,
            state: Arc::new(Mutex::new(state)),
        })
    }

    /// The store sealed.
    pub fn store(&self) -> &Arc<dyn SessionStore> {
        &self.store
    }

    /// The latest sealed root and length of session `id`, if sealed.
    pub async fn sealed(&self, id: &str) -> Option<(u64, Digest)> {
        let state = self.state.lock().await;
        state.sealed.get(id).map(|s| (s.len, s.root))
    }

    /// Seals `session` as it is (it must be what the store holds, or a continuation of what
    /// an earlier seal recorded): `Ok(None)` when its latest seal already has this length
    /// and root. A parent that is stored but not sealed is sealed first (its root is what
    /// the child's binds); a parent not in the store is recorded with no root.
    pub async fn seal(&self, session: &Session) -> Result<Option<Seal>, SealError> {
        let parent_roots = self.parent_roots(session).await?;
        for _ in 0..RETRIES {
            let mut state = self.state.lock().await;
            let Some((seal, entries, sealed)) =
                self.next_seal(&state, session, &parent_roots).await?
            else {
                return Ok(None);
            };
            match self.append(&mut state, entries).await {
                Ok(()) => {
                    state.sealed.insert(seal.session.clone(), sealed);
                    state.made += 1;
                    return Ok(Some(seal));
                }
                Err(SealError::Store(PersistError::Conflict { .. })) => {
                    *state = State::replay(read_ledger(self.store.as_ref()).await?)?;
                }
                Err(e) => return Err(e),
            }
        }
        Err(SealError::Contended { tries: RETRIES })
    }

    /// The parents of `session` with their latest sealed roots, sealing first a parent that
    /// is stored but not sealed.
    async fn parent_roots(&self, session: &Session) -> Result<Vec<SealParent>, SealError> {
        let mut parent_roots = Vec::new();
        for p in session.lineage().parents.iter() {
            let root = match self.sealed(p.as_str()).await {
                Some((_, root)) => Some(root),
                None => match self.store.load(p).await {
                    Ok(loaded) => {
                        Box::pin(self.seal(&loaded.session)).await?;
                        self.sealed(p.as_str()).await.map(|(_, r)| r)
                    }
                    Err(PersistError::NotFound { .. }) => None,
                    Err(e) => return Err(e.into()),
                },
            };
            parent_roots.push(SealParent {
                id: p.to_string(),
                root: root.map(|r| merkle::hex(&r)),
            });
        }
        Ok(parent_roots)
    }

    /// The seal `session` gets now and the entries that record it (its key's first, when
    /// the ledger has not recorded it yet), with what the ledger will then know of it;
    /// `None` when its latest seal already has this length and root.
    async fn next_seal(
        &self,
        state: &State,
        session: &Session,
        parent_roots: &[SealParent],
    ) -> Result<Option<(Seal, Vec<Entry>, Sealed)>, SealError> {
        let before = state
            .sealed
            .get(session.id().as_str())
            .cloned()
            .unwrap_or_default();
        let len = session.len() as u64;
        if before.len > len {
            return Err(SealError::Shorter {
                id: session.id().to_string(),
                sealed: before.len,
                len,
            });
        }
        let base = if before.len == 0 {
            self.base_of(state, session).await
        } else {
            None
        };
        let (mut peaks, from) = match &base {
            Some((b, peaks)) => (peaks.clone(), b.len),
            None => (before.peaks.clone(), before.len),
        };
        let mut leaves = String::with_capacity((len - from) as usize * 64);
        for c in session.chunks().range(from as usize..) {
            let d = c.digest();
            peaks.push(d);
            leaves.push_str(&merkle::hex(&d));
        }
        let roots = crate::record::SealParent::root_digests(parent_roots);
        let root = merkle::session_root(&peaks.root(), &roots, session.lineage());
        if before.len == len && before.root == root {
            return Ok(None);
        }
        let seal = Seal {
            session: session.id().to_string(),
            len,
            root: merkle::hex(&root),
            parents: parent_roots.to_vec(),
            from,
            base: base.map(|(b, _)| b),
            leaves,
        };
        let mut entries = Vec::new();
        let mut tip = state.tip;
        if let Some(k) = &self.signer
            && !state.keys.contains(k.verifying_key().as_bytes())
        {
            let e = Entry::key_added(&k.verifying_key(), tip).signed(k);
            tip = e.digest();
            entries.push(e);
        }
        entries.push(self.sign(Entry::seal(seal.clone(), tip)));
        Ok(Some((seal, entries, Sealed { len, root, peaks })))
    }

    /// The sealed parent whose sealed chunks `session` starts with, and their peaks: the
    /// first parent sealed with at most as many chunks, when the store knows the session
    /// extends it (one cheap read on the SQL stores) or the session's first chunks give the
    /// parent's chunks root (their digests are cached, so this costs node hashes only).
    async fn base_of(
        &self,
        state: &State,
        session: &Session,
    ) -> Option<(crate::record::SealBase, ChunkRoots)> {
        let parent = session.lineage().parents.iter().next()?;
        let sealed = state.sealed.get(parent.as_str())?;
        if sealed.len == 0 || sealed.len > session.len() as u64 {
            return None;
        }
        let known = self
            .store
            .known_to_extend(session.id(), parent)
            .await
            .unwrap_or(false);
        let shares = known || {
            let prefix = session.chunks().range(..sealed.len as usize);
            ChunkRoots::from_leaves(prefix.iter().map(Chunk::digest)).root() == sealed.peaks.root()
        };
        shares.then(|| {
            (
                crate::record::SealBase {
                    id: parent.to_string(),
                    len: sealed.len,
                },
                sealed.peaks.clone(),
            )
        })
    }

    /// Seals every stored session (parents before children), skipping those already sealed
    /// as they are; returns how many seals were recorded (by any task of this sealer
    /// meanwhile, too).
    pub async fn seal_all(&self) -> Result<usize, SealError> {
        // The outermost `seal_all` of this sealer batches; one running meanwhile joins it.
        let owner = {
            let mut state = self.state.lock().await;
            let owner = state.pending.is_none();
            if owner {
                state.pending = Some(Vec::new());
            }
            owner
        };
        let result = self.seal_all_batched().await;
        if !owner {
            return result;
        }
        let mut state = self.state.lock().await;
        let left = state.pending.take().unwrap_or_default();
        let stored = match result {
            Ok(n) => self.store_entries(&mut state, &left).await.map(|()| n),
            Err(e) => Err(e),
        };
        if stored.is_err() {
            // Entries made but not stored: what this sealer knows must be what is stored.
            *state = State::replay(read_ledger(self.store.as_ref()).await?)?;
        }
        stored
    }

    async fn seal_all_batched(&self) -> Result<usize, SealError> {
        let before = self.state.lock().await.made;
        for summary in self.store.list().await? {
            if summary.id.as_str() == LEDGER_ID {
                continue;
            }
            let loaded = self.store.load(&summary.id).await?;
            self.seal(&loaded.session).await?;
            let mut state = self.state.lock().await;
            if state.pending.as_ref().is_some_and(|p| p.len() >= BATCH) {
                let batch = state.pending.replace(Vec::new()).unwrap_or_default();
                self.store_entries(&mut state, &batch).await?;
            }
        }
        Ok(self.state.lock().await.made.saturating_sub(before))
    }

    /// Records this sealer's public key in the ledger (signed by it), unless the ledger has
    /// it already; true when it was recorded now. Sealing records it too, before the first
    /// seal it signs. Without a key, records nothing.
    pub async fn record_key(&self) -> Result<bool, SealError> {
        let Some(k) = self.signer.clone() else {
            return Ok(false);
        };
        for _ in 0..RETRIES {
            let mut state = self.state.lock().await;
            if state.keys.contains(k.verifying_key().as_bytes()) {
                return Ok(false);
            }
            let e = Entry::key_added(&k.verifying_key(), state.tip).signed(&k);
            match self.append(&mut state, vec![e]).await {
                Ok(()) => return Ok(true),
                Err(SealError::Store(PersistError::Conflict { .. })) => {
                    *state = State::replay(read_ledger(self.store.as_ref()).await?)?;
                }
                Err(e) => return Err(e),
            }
        }
        Err(SealError::Contended { tries: RETRIES })
    }

    /// Records an erasure (see [`crate::erase`]).
    pub(crate) async fn record_erasure(&self, erasure: Erasure) -> Result<(), SealError> {
        for _ in 0..RETRIES {
            let mut state = self.state.lock().await;
            let e = self.sign(Entry::erasure(erasure.clone(), state.tip));
            match self.append(&mut state, vec![e]).await {
                Ok(()) => return Ok(()),
                Err(SealError::Store(PersistError::Conflict { .. })) => {
                    *state = State::replay(read_ledger(self.store.as_ref()).await?)?;
                }
                Err(e) => return Err(e),
            }
        }
        Err(SealError::Contended { tries: RETRIES })
    }

    fn sign(&self, entry: Entry) -> Entry {
        match &self.signer {
            Some(k) => entry.signed(k),
            None => entry,
        }
    }

    /// Appends `entries` to the ledger: stores them now, or, while [`Sealer::seal_all`] runs,
    /// keeps them for its next batch. Either way the tip and keys move on.
    async fn append(&self, state: &mut State, entries: Vec<Entry>) -> Result<(), SealError> {
        if entries.is_empty() {
            return Ok(());
        }
        match state.pending.as_mut() {
            Some(pending) => pending.extend(entries.iter().cloned()),
            None => self.store_entries(state, &entries).await?,
        }
        state.tip = entries.last().map_or(state.tip, Entry::digest);
        for e in &entries {
            if let Some(k) = e.key_added.as_deref().and_then(merkle::from_hex)
                && !state.keys.contains(&k)
            {
                state.keys.push(k);
            }
        }
        Ok(())
    }

    /// Stores `entries` at the end of the ledger session.
    async fn store_entries(&self, state: &mut State, entries: &[Entry]) -> Result<(), SealError> {
        if entries.is_empty() {
            return Ok(());
        }
        let (ledger, stored) = match &state.ledger {
            Some(l) => (l.clone(), l.len()),
            None => (self.new_ledger(), 0),
        };
        let ledger = ledger.extend(
            entries
                .iter()
                .map(|e| Chunk::note(LEDGER_AUTHOR, e.to_text())),
        );
        if stored == 0 {
            self.store.save(&ledger).await?;
        } else {
            self.store.append(&ledger, stored).await?;
        }
        state.ledger = Some(ledger);
        Ok(())
    }

    fn new_ledger(&self) -> Session {
        Session::from_parts(
            SessionParts {
                id: SessionId::new(LEDGER_ID),
                created_at: self.stamper.now(),
                lineage: Lineage::new(
                    Vec::<SessionId>::new(),
                    "seal_ledger",
                    LineageKind::OpCreate,
                ),
                chunks: ChunkList::new(),
                usage: None,
                agent_usage: Default::default(),
                placement: Default::default(),
                pending: Vec::new(),
            },
            self.stamper.clone(),
        )
    }
}
