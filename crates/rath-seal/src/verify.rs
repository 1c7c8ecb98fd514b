//! Verification: recompute every digest and root from what the store holds and compare with
//! the ledger.
//!
//! ```
//! use std::sync::Arc;
//! use rath_persist::{SessionStore, Store};
//! use rath_seal::{Sealer, VerifyOptions, verify_store};
//! use rath_session::{Chunk, Session, Stamper};
//!
//! # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
//! let dir = tempfile::tempdir()?;
//! let store: Arc<dyn SessionStore> = Arc::new(Store::at(dir.path()));
//! let s = Session::user_with("hi", Stamper::counter()).push(Chunk::assistant_text("hello"));
//! store.save(&s).await?;
//! Sealer::open(store.clone(), None, Stamper::counter()).await?.seal_all().await?;
//! let report = verify_store(store.as_ref(), &VerifyOptions::default()).await?;
//! assert!(report.is_clean(), "{}", report.render());
//! assert_eq!(report.chunks, 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! For each sealed session: its stored chunk documents are read undecoded
//! ([`SessionStore::chunk_docs`]); each must decode, encode back to the very bytes stored
//! (so a change that parses to the same chunk, a space become a tab, is seen) and hash to the
//! digest its seal recorded, unless it is the tombstone of a recorded erasure. The stored
//! lineage with the recorded leaves and parents' roots must give the sealed root; each
//! recorded parent root must be one its parent was sealed with; signatures must hold, by a
//! trusted key. The ledger itself must be an unbroken hash chain.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use rath_persist::{PersistError, SessionStore, doc};
use rath_session::merkle::{self, Digest};
use rath_session::{Chunk, ChunkRoots, Lineage, SessionId};
use serde::Serialize;

use crate::SealError;
use crate::erase::marker;
use crate::ledger::{LEDGER_ID, read_ledger};
use crate::record::{Seal, split_leaves};

/// What kind of tampering a failure is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailureKind {
    /// A chunk's stored bytes differ from what was sealed (or do not read).
    ContentChanged,
    /// Fewer chunks are stored than were sealed.
    ChunkRemoved,
    /// The sealed chunks are all there, in another order.
    ChunksReordered,
    /// The session's parents are not those sealed, or a recorded parent root is not one its
    /// parent was sealed with.
    ParentChanged,
    /// The stored lineage (operator, kind, extras) no longer gives the sealed root, or the
    /// session's record does not load.
    LineageChanged,
    /// A sealed session (or a sealed parent) is not in the store.
    SessionMissing,
    /// A signature does not hold.
    SignatureInvalid,
    /// A signature holds, by a key that is not trusted.
    UnknownKey,
    /// The ledger is damaged: an entry does not read, or the hash chain is broken.
    LedgerBroken,
}

impl FailureKind {
    /// The kind in words.
    pub fn describe(self) -> &'static str {
        match self {
            FailureKind::ContentChanged => "content changed",
            FailureKind::ChunkRemoved => "chunk removed",
            FailureKind::ChunksReordered => "chunks reordered",
            FailureKind::ParentChanged => "parent changed",
            FailureKind::LineageChanged => "lineage changed",
            FailureKind::SessionMissing => "session missing",
            FailureKind::SignatureInvalid => "signature invalid",
            FailureKind::UnknownKey => "unknown key",
            FailureKind::LedgerBroken => "ledger broken",
        }
    }
}

/// One failure: which session, which chunk (when one is to blame), what kind, details.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Failure {
    /// The session (the ledger's id for a ledger failure).
    pub session: String,
    /// The chunk's index (a ledger entry's index for a ledger failure).
    pub chunk: Option<u64>,
    /// The kind of tampering.
    pub kind: FailureKind,
    /// What was found.
    pub detail: String,
}

/// What verification found. Clean when [`Report::failures`] is empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Report {
    /// True when the store has a ledger.
    pub sealed: bool,
    /// Sealed sessions checked.
    pub sessions: usize,
    /// Chunks checked against their seals.
    pub chunks: u64,
    /// Chunks found erased as the ledger records (tombstones in place of sealed chunks).
    pub erased: u64,
    /// Stored sessions no seal covers (not verified; a store written without sealing).
    pub unsealed: Vec<String>,
    /// Stored chunks after a session's latest seal (not verified).
    pub unsealed_chunks: u64,
    /// Signing keys trusted, hex.
    pub keys: Vec<String>,
    /// Every failure, by session then chunk.
    pub failures: Vec<Failure>,
}

impl Report {
    /// True when nothing failed.
    pub fn is_clean(&self) -> bool {
        self.failures.is_empty()
    }

    /// The report for people: one line per failure, then a summary line.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if !self.sealed {
            out.push_str("store not sealed: no seal ledger (`rath seal` records one)\n");
        }
        for f in &self.failures {
            let at = f.chunk.map(|c| format!(" chunk {c}")).unwrap_or_default();
            let _ = writeln!(
                out,
                "TAMPERED {}{at}: {}: {}",
                f.session,
                f.kind.describe(),
                f.detail
            );
        }
        for s in &self.unsealed {
            let _ = writeln!(out, "unsealed {s}: not verified");
        }
        let _ = write!(
            out,
            "{}: {} session(s), {} chunk(s) verified",
            if self.is_clean() { "clean" } else { "tampered" },
            self.sessions,
            self.chunks
        );
        if self.erased > 0 {
            let _ = write!(out, ", {} chunk(s) erased", self.erased);
        }
        if self.unsealed_chunks > 0 {
            let _ = write!(
                out,
                ", {} chunk(s) after the latest seals",
                self.unsealed_chunks
            );
        }
        if !self.failures.is_empty() {
            let _ = write!(out, ", {} failure(s)", self.failures.len());
        }
        out.push('\n');
        out
    }
}

/// What to verify and whom to trust.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct VerifyOptions {
    /// Only these sessions (all sealed and stored ones when empty).
    pub sessions: Vec<String>,
    /// Public keys (hex) whose signatures are trusted. Empty: the keys the ledger recorded
    /// before its first seal (trust on first use).
    pub trusted_keys: Vec<String>,
    /// Every entry must be signed (by a trusted key).
    pub require_signatures: bool,
}

impl VerifyOptions {
    /// Only `sessions`.
    pub fn sessions(mut self, sessions: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.sessions = sessions.into_iter().map(Into::into).collect();
        self
    }

    /// Trust these public keys (hex) only.
    pub fn trusting(mut self, keys: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.trusted_keys = keys.into_iter().map(Into::into).collect();
        self
    }

    /// Refuse unsigned entries.
    pub fn require_signatures(mut self, yes: bool) -> Self {
        self.require_signatures = yes;
        self
    }
}

/// Everything the ledger says, gathered.
#[derive(Default)]
struct Recorded {
    /// Seals per session, in ledger order.
    seals: HashMap<String, Vec<Seal>>,
    /// Sessions in the order of their first seal.
    order: Vec<String>,
    /// Digests erased.
    erased: HashSet<Digest>,
}

fn fail(r: &mut Report, session: &str, chunk: Option<u64>, kind: FailureKind, detail: String) {
    r.failures.push(Failure {
        session: session.to_owned(),
        chunk,
        kind,
        detail,
    });
}

/// Verifies `store` against its seal ledger. See the [module docs](self). An error is a
/// store that cannot be read at all; everything tampered is a [`Failure`] in the report.
pub async fn verify_store(
    store: &dyn SessionStore,
    options: &VerifyOptions,
) -> Result<Report, SealError> {
    let mut report = Report::default();
    let stored: Vec<String> = store
        .list()
        .await?
        .into_iter()
        .map(|s| s.id.to_string())
        .filter(|id| id != LEDGER_ID)
        .collect();
    let Some((_, entries)) = read_ledger(store).await? else {
        report.unsealed = stored;
        return Ok(report);
    };
    report.sealed = true;
    let recorded = read_entries(entries, options, &mut report)?;
    let wanted: Vec<String> = if options.sessions.is_empty() {
        recorded.order.clone()
    } else {
        options.sessions.clone()
    };
    for id in &wanted {
        match recorded.seals.get(id) {
            Some(seals) => check_session(store, id, seals, &recorded, &mut report).await?,
            None if stored.contains(id) => report.unsealed.push(id.clone()),
            None => fail(
                &mut report,
                id,
                None,
                FailureKind::SessionMissing,
                "neither stored nor sealed".into(),
            ),
        }
    }
    if options.sessions.is_empty() {
        for id in stored {
            if !recorded.seals.contains_key(&id) {
                report.unsealed.push(id);
            }
        }
    }
    Ok(report)
}

/// Checks an entry's signature against the trusted keys (adding the key it records when
/// that is trusted: given none, the first key the ledger records, self-signed; else one an
/// already trusted key adds).
fn check_signature(
    i: u64,
    entry: &crate::record::Entry,
    who: &str,
    options: &VerifyOptions,
    tofu: bool,
    trusted: &mut Vec<[u8; 32]>,
    report: &mut Report,
) {
    match entry.check_signature() {
        Err(why) => {
            let detail = format!("ledger entry {i}: {why}");
            fail(report, who, None, FailureKind::SignatureInvalid, detail);
        }
        Ok(None) if options.require_signatures => {
            let detail = format!("ledger entry {i} is not signed");
            fail(report, who, None, FailureKind::SignatureInvalid, detail);
        }
        Ok(None) => {}
        Ok(Some(key)) => {
            if let Some(added) = entry.key_added.as_deref().and_then(merkle::from_hex)
                && ((tofu && trusted.is_empty() && added == key) || trusted.contains(&key))
                && !trusted.contains(&added)
            {
                trusted.push(added);
            }
            if !trusted.contains(&key) {
                let detail = format!("ledger entry {i} is signed by {}", hex::encode(key));
                fail(report, who, None, FailureKind::UnknownKey, detail);
            }
        }
    }
}

/// Checks the ledger's chain and signatures and gathers its seals and erasures.
fn read_entries(
    entries: Vec<crate::ledger::ReadEntry>,
    options: &VerifyOptions,
    report: &mut Report,
) -> Result<Recorded, SealError> {
    let mut trusted: Vec<[u8; 32]> = Vec::new();
    for k in &options.trusted_keys {
        trusted.push(*crate::keys::parse_public(k)?.as_bytes());
    }
    let tofu = trusted.is_empty();
    let mut recorded = Recorded::default();
    let mut tip = [0u8; 32];
    for (i, entry) in entries {
        let i = i as u64;
        let entry = match entry {
            Ok(e) => e,
            Err(why) => {
                fail(report, LEDGER_ID, Some(i), FailureKind::LedgerBroken, why);
                continue;
            }
        };
        if merkle::from_hex(&entry.prev) != Some(tip) {
            fail(
                report,
                LEDGER_ID,
                Some(i),
                FailureKind::LedgerBroken,
                "names another entry before it: one was removed, changed or put in".into(),
            );
        }
        tip = entry.digest();
        let who = entry
            .seal
            .as_ref()
            .map(|s| s.session.clone())
            .unwrap_or_else(|| LEDGER_ID.to_owned());
        check_signature(i, &entry, &who, options, tofu, &mut trusted, report);
        if let Some(seal) = entry.seal {
            if !recorded.seals.contains_key(&seal.session) {
                recorded.order.push(seal.session.clone());
            }
            recorded
                .seals
                .entry(seal.session.clone())
                .or_default()
                .push(seal);
        }
        if let Some(e) = entry.erasure
            && let Some(d) = merkle::from_hex(&e.digest)
        {
            recorded.erased.insert(d);
        }
    }
    report.keys = trusted.iter().map(hex::encode).collect();
    Ok(recorded)
}

/// The recorded leaves of a session's seals, following the `base` of its first seal down to
/// a session sealed without one, or why they do not add up.
fn leaves_of(id: &str, recorded: &Recorded) -> Result<Vec<Digest>, String> {
    // The chain of sessions whose first chunks this one shares, this one first.
    let mut chain: Vec<&[Seal]> = Vec::new();
    let mut cur = id;
    loop {
        let seals = recorded
            .seals
            .get(cur)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| format!("shares the chunks of {cur}, which has no seal"))?;
        chain.push(seals);
        if chain.len() > recorded.seals.len() {
            return Err("its seals' bases form a cycle".into());
        }
        match &seals[0].base {
            Some(b) => cur = &b.id,
            None => break,
        }
    }
    let mut leaves: Vec<Digest> = Vec::new();
    for seals in chain.iter().rev() {
        let shared = seals[0].base.as_ref().map_or(0, |b| b.len);
        if shared > leaves.len() as u64 {
            return Err(format!(
                "its base {} has {} sealed chunks, not {shared}",
                seals[0].base.as_ref().map_or("", |b| b.id.as_str()),
                leaves.len()
            ));
        }
        leaves.truncate(shared as usize);
        for s in seals.iter() {
            if s.from != leaves.len() as u64 {
                return Err(format!(
                    "a seal of {} records chunks from {} where {} were sealed before",
                    s.session,
                    s.from,
                    leaves.len()
                ));
            }
            let more = split_leaves(&s.leaves).ok_or("a seal's leaves are not hex digests")?;
            leaves.extend(more);
            if leaves.len() as u64 != s.len {
                return Err(format!(
                    "a seal of {} for {} chunks records {}",
                    s.session,
                    s.len,
                    leaves.len()
                ));
            }
        }
    }
    Ok(leaves)
}

async fn check_session(
    store: &dyn SessionStore,
    id: &str,
    seals: &[Seal],
    recorded: &Recorded,
    report: &mut Report,
) -> Result<(), SealError> {
    report.sessions += 1;
    let Some(latest) = seals.last() else {
        return Ok(());
    };
    let leaves = match leaves_of(id, recorded) {
        Ok(l) => l,
        Err(why) => {
            fail(report, id, None, FailureKind::LedgerBroken, why);
            return Ok(());
        }
    };
    let sid = SessionId::new(id);
    let docs = match store.chunk_docs(&sid).await {
        Ok(d) => d,
        Err(PersistError::NotFound { .. }) => {
            fail(
                report,
                id,
                None,
                FailureKind::SessionMissing,
                format!("sealed with {} chunks, not in the store", latest.len),
            );
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let stored = Stored::read(&docs);
    let chunks_ok = compare(id, &leaves, &stored, recorded, report);
    check_lineage(store, &sid, latest, &leaves, recorded, chunks_ok, report).await
}

/// What each stored chunk hashes to (`None` where it does not read as its canonical
/// document), its text (for tombstones), and why the unreadable ones do not read.
struct Stored {
    found: Vec<Option<Digest>>,
    texts: Vec<Option<String>>,
    unreadable: HashMap<usize, String>,
}

impl Stored {
    fn read(docs: &[Result<Vec<u8>, String>]) -> Self {
        let mut s = Stored {
            found: Vec::with_capacity(docs.len()),
            texts: Vec::with_capacity(docs.len()),
            unreadable: HashMap::new(),
        };
        for (i, d) in docs.iter().enumerate() {
            match check_doc(d) {
                Ok((digest, text)) => {
                    s.found.push(Some(digest));
                    s.texts.push(text);
                }
                Err(why) => {
                    s.unreadable.insert(i, why);
                    s.found.push(None);
                    s.texts.push(None);
                }
            }
        }
        s
    }
}

/// Compares the stored chunks with the sealed leaves, counting them and the erased ones and
/// reporting each failure; true when every sealed chunk is there as sealed (or erased).
fn compare(
    id: &str,
    leaves: &[Digest],
    stored: &Stored,
    recorded: &Recorded,
    report: &mut Report,
) -> bool {
    let Stored {
        found,
        texts,
        unreadable,
    } = stored;
    let n = leaves.len();
    let m = found.len();
    report.chunks += n.min(m) as u64;
    report.unsealed_chunks += m.saturating_sub(n) as u64;
    let mut erased = 0u64;
    let mismatched: Vec<usize> = (0..n.min(m))
        .filter(|&i| {
            let is_tombstone = found[i] != Some(leaves[i])
                && recorded.erased.contains(&leaves[i])
                && texts[i].as_deref() == Some(marker(&leaves[i]).as_str());
            if is_tombstone {
                erased += 1;
            }
            found[i] != Some(leaves[i]) && !is_tombstone
        })
        .collect();
    report.erased += erased;
    let chunks_ok = mismatched.is_empty() && m >= n;
    // A chunk that does not read changed, where it stands; a damaged record may also hide
    // the evidence riding on it, so the count is not held against it.
    let mut damaged: Vec<usize> = unreadable.keys().copied().filter(|&i| i < n).collect();
    damaged.sort_unstable();
    for &i in &damaged {
        let why = &unreadable[&i];
        let detail = format!("does not read as a chunk: {why}");
        fail(
            report,
            id,
            Some(i as u64),
            FailureKind::ContentChanged,
            detail,
        );
    }
    let readable: Vec<usize> = mismatched
        .into_iter()
        .filter(|i| !unreadable.contains_key(i))
        .collect();
    if m < n && damaged.is_empty() {
        let first = (0..m).find(|&i| found[i] != Some(leaves[i])).unwrap_or(m);
        let detail = format!("{m} of {n} sealed chunks stored; the first missing is {first}");
        fail(
            report,
            id,
            Some(first as u64),
            FailureKind::ChunkRemoved,
            detail,
        );
    } else if m >= n && !readable.is_empty() {
        mismatches(id, leaves, found, &readable, report);
    }
    chunks_ok
}

/// Reports readable chunks that differ from their seals: as one reordering when they hold
/// exactly the sealed chunks in another order, else each as changed content.
fn mismatches(
    id: &str,
    leaves: &[Digest],
    found: &[Option<Digest>],
    readable: &[usize],
    report: &mut Report,
) {
    let mut sealed: Vec<Digest> = readable.iter().map(|&i| leaves[i]).collect();
    let mut stored: Vec<Option<Digest>> = readable.iter().map(|&i| found[i]).collect();
    sealed.sort_unstable();
    stored.sort_unstable();
    let permuted = stored
        .iter()
        .zip(&sealed)
        .all(|(a, b)| a.as_ref() == Some(b));
    if permuted && readable.len() > 1 {
        let detail = format!("chunks {readable:?} hold the sealed chunks in another order");
        fail(
            report,
            id,
            Some(readable[0] as u64),
            FailureKind::ChunksReordered,
            detail,
        );
        return;
    }
    let short = |d: Option<Digest>| d.map(|d| merkle::hex(&d)[..16].to_owned());
    for &i in readable {
        let detail = format!(
            "sealed digest {}, stored content hashes to {}",
            short(Some(leaves[i])).unwrap_or_default(),
            short(found[i]).unwrap_or_default()
        );
        fail(
            report,
            id,
            Some(i as u64),
            FailureKind::ContentChanged,
            detail,
        );
    }
}

/// Decodes a stored document, checks it is the canonical encoding of what it decodes to and
/// returns its digest and text.
fn check_doc(stored: &Result<Vec<u8>, String>) -> Result<(Digest, Option<String>), String> {
    let bytes = stored.as_ref().map_err(Clone::clone)?;
    let chunk: Chunk = doc::decode_chunk(bytes).map_err(|e| e.to_string())?;
    let again = doc::encode_chunk(&chunk).map_err(|e| e.to_string())?;
    if &again != bytes {
        return Err("its stored bytes are not its canonical document".into());
    }
    let text = match chunk.body() {
        rath_session::ChunkBody::Note(n) => Some(n.text.clone()),
        _ => chunk.text().map(str::to_owned),
    };
    Ok((chunk.digest_uncached(), text))
}

/// Each recorded parent root must be one that parent was sealed with; true when all are.
fn check_parent_roots(id: &str, latest: &Seal, recorded: &Recorded, report: &mut Report) -> bool {
    let mut ok = true;
    for p in &latest.parents {
        match (&p.root, recorded.seals.get(&p.id)) {
            (None, _) => {}
            (Some(_), None) => {
                ok = false;
                let detail = format!("parent {} was sealed and is no longer in the ledger", p.id);
                fail(report, id, None, FailureKind::SessionMissing, detail);
            }
            (Some(root), Some(ps)) => {
                if !ps.iter().any(|s| &s.root == root) {
                    ok = false;
                    let detail =
                        format!("parent {}'s recorded root is none it was sealed with", p.id);
                    fail(report, id, None, FailureKind::ParentChanged, detail);
                }
            }
        }
    }
    ok
}

async fn check_lineage(
    store: &dyn SessionStore,
    sid: &SessionId,
    latest: &Seal,
    leaves: &[Digest],
    recorded: &Recorded,
    chunks_ok: bool,
    report: &mut Report,
) -> Result<(), SealError> {
    let id = sid.as_str();
    let parents_ok = check_parent_roots(id, latest, recorded, report);
    let lineage: Lineage = match store.load(sid).await {
        Ok(l) => l.session.lineage().clone(),
        Err(e) => {
            if chunks_ok {
                fail(
                    report,
                    id,
                    None,
                    FailureKind::LineageChanged,
                    format!("does not load: {e}"),
                );
            }
            return Ok(());
        }
    };
    let stored_parents: Vec<&str> = lineage.parents.iter().map(|p| p.as_str()).collect();
    let sealed_parents: Vec<&str> = latest.parents.iter().map(|p| p.id.as_str()).collect();
    if stored_parents != sealed_parents {
        fail(
            report,
            id,
            None,
            FailureKind::ParentChanged,
            format!("stored parents {stored_parents:?}, sealed {sealed_parents:?}"),
        );
        return Ok(());
    }
    let roots = crate::record::SealParent::root_digests(&latest.parents);
    let chunks_root = ChunkRoots::from_leaves(leaves.iter().copied()).root();
    let root = merkle::session_root(&chunks_root, &roots, &lineage);
    if Some(root) != merkle::from_hex(&latest.root) && parents_ok {
        fail(
            report,
            id,
            None,
            FailureKind::LineageChanged,
            "the stored operator, kind or extras (or the seal's leaves) no longer give the sealed root".into(),
        );
    }
    Ok(())
}
