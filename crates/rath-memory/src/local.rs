//! The local store: a human-readable JSONL log on disk plus a BM25 index rebuilt from it.
//!
//! ```
//! use rath_memory::{LocalMemory, Memory, MemoryUri, NewItem, Scope};
//!
//! let home = tempfile::tempdir()?;
//! let mem = LocalMemory::open(home.path(), "team", Default::default())?;
//! assert!(mem.dir().ends_with("memory/local/team"));
//! mem.write(NewItem::new(MemoryUri::new(Scope::User, "name")?, "the user is called Ada"))?;
//! drop(mem);
//! let again = LocalMemory::open(home.path(), "team", Default::default())?;
//! assert_eq!(again.list(None)?.len(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Layout of `<home>/memory/local/<store-id>/`:
//! - `store.json` — format marker and store id.
//! - `items.jsonl` — the source of truth, one record per line: `{"op":"commit","commit_id":..,
//!   "items":[{"uri":..,"text":..}]}`, `{"op":"put","uri":..,"text":..}` or
//!   `{"op":"delete","uri":..}`. A commit is one line, so it is stored whole or not at all.
//! - `LOCK` — held (`flock`) while a process has the store open.
//!
//! Writes append a line (and `fsync` it under [`Durability::Fsync`]) before touching the
//! in-memory index. On open the log is replayed; a torn last line (a crash mid-write) is cut
//! off, so a crash at any point leaves a store that reopens with every acknowledged item.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::disk::{
    check_or_write_meta, crash_point, die, lock_dir, sync_dir, truncate, write_synced,
};
use crate::embed::{Embedder, cosine};
use crate::index::{Bm25Index, tokenize};
use crate::snippet::snippet;
use crate::{CommitReceipt, Hit, Memory, MemoryError, MemoryItem, MemoryUri, NewItem, Scope};

const LOG: &str = "items.jsonl";
/// Reciprocal-rank-fusion constant for hybrid recall.
const RRF_C: f64 = 60.0;
/// Environment variable naming a crash point, for crash-safety tests:
/// `mid_log_write` or `after_log_write`. The process SIGKILLs itself there.
pub const CRASH_POINT_ENV: &str = "RATH_MEMORY_CRASH_POINT";

/// When appended records reach the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// `fsync` after every write or commit: an acknowledged item survives power loss.
    #[default]
    Fsync,
    /// Leave flushing to the OS: survives a process crash, not a power cut. For bulk loads.
    Buffered,
}

/// How to open a [`LocalMemory`].
#[derive(Clone, Debug)]
pub struct LocalOptions {
    /// When writes reach the disk.
    pub durability: Durability,
    /// An embedder for hybrid (BM25 + vector) recall; lexical only when `None`.
    pub embedder: Option<Arc<dyn Embedder>>,
    /// How long opening waits for the store's lock before it reports
    /// [`MemoryError::Locked`]; [`rath_lock::DEFAULT_WAIT`] by default. A child process
    /// between `fork` and `exec` briefly shares its parent's lock, so a store closed and
    /// reopened meanwhile finds it held for a moment.
    pub lock_wait: Duration,
}

impl Default for LocalOptions {
    fn default() -> Self {
        Self {
            durability: Durability::default(),
            embedder: None,
            lock_wait: rath_lock::DEFAULT_WAIT,
        }
    }
}

impl LocalOptions {
    /// Options with hybrid recall through `embedder`.
    pub fn embedder(mut self, embedder: Arc<dyn Embedder>) -> Self {
        self.embedder = Some(embedder);
        self
    }

    /// Options with the given durability.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Options whose open waits up to `wait` for the store's lock (`Duration::ZERO`: try
    /// once).
    pub fn lock_wait(mut self, wait: Duration) -> Self {
        self.lock_wait = wait;
        self
    }
}

/// `$OPENRATH_HOME` when set and non-empty, else `./.openrath`.
pub fn openrath_home() -> PathBuf {
    match std::env::var_os("OPENRATH_HOME") {
        Some(h) if !h.is_empty() => PathBuf::from(h),
        _ => PathBuf::from(".openrath"),
    }
}

/// The directory of local store `store_id` under `home`: `<home>/memory/local/<store_id>`.
pub fn store_dir(home: &Path, store_id: &str) -> Result<PathBuf, MemoryError> {
    check_store_id(store_id)?;
    Ok(home.join("memory").join("local").join(store_id))
}

fn check_store_id(id: &str) -> Result<(), MemoryError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(MemoryError::InvalidStoreId(id.to_owned()))
    }
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Record {
    Commit {
        commit_id: String,
        items: Vec<NewItem>,
    },
    Put(NewItem),
    Delete {
        uri: MemoryUri,
    },
}

#[derive(Debug, Default)]
struct ScopeIndex {
    bm25: Bm25Index,
    items: Vec<Option<Arc<MemoryItem>>>,
    vectors: Vec<Option<Vec<f32>>>,
}

#[derive(Debug, Default)]
struct State {
    scopes: [ScopeIndex; 4],
    by_uri: HashMap<MemoryUri, u32>,
    /// Every commit id in the log, with a digest of the items it committed.
    commits: HashMap<String, [u8; 16]>,
}

/// A digest of a commit's items, to tell a repeated commit from a different one under the
/// same id.
fn items_digest(items: &[NewItem]) -> [u8; 16] {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for item in items {
        for part in [
            item.uri.to_string().as_str(),
            item.text.as_str(),
            item.agent.as_deref().unwrap_or(""),
            item.session_id.as_deref().unwrap_or(""),
        ] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
    }
    let mut out = [0u8; 16];
    out.copy_from_slice(&h.finalize()[..16]);
    out
}

impl State {
    fn put(&mut self, item: MemoryItem, vector: Option<Vec<f32>>) {
        self.remove(&item.uri);
        let ix = &mut self.scopes[item.uri.scope().index()];
        // Dead slots are dropped on compaction; rebuild when they dominate.
        let slot = ix.bm25.add(&item.text);
        let uri = item.uri.clone();
        ix.items.push(Some(Arc::new(item)));
        ix.vectors.push(vector);
        self.by_uri.insert(uri, slot);
    }

    fn remove(&mut self, uri: &MemoryUri) -> bool {
        let Some(slot) = self.by_uri.remove(uri) else {
            return false;
        };
        let ix = &mut self.scopes[uri.scope().index()];
        if let Some(item) = ix.items.get_mut(slot as usize).and_then(Option::take) {
            ix.bm25.remove(slot, &item.text);
        }
        if let Some(v) = ix.vectors.get_mut(slot as usize) {
            *v = None;
        }
        true
    }

    fn get(&self, uri: &MemoryUri) -> Option<&Arc<MemoryItem>> {
        let slot = *self.by_uri.get(uri)?;
        self.scopes[uri.scope().index()]
            .items
            .get(slot as usize)?
            .as_ref()
    }

    fn live_items(&self) -> impl Iterator<Item = &Arc<MemoryItem>> {
        self.scopes
            .iter()
            .flat_map(|s| s.items.iter().filter_map(Option::as_ref))
    }

    fn apply(&mut self, record: Record) {
        match record {
            Record::Commit { commit_id, items } => {
                self.commits
                    .entry(commit_id.clone())
                    .or_insert_with(|| items_digest(&items));
                for item in items {
                    self.put(MemoryItem::from_new(item, Some(commit_id.clone())), None);
                }
            }
            Record::Put(item) => self.put(MemoryItem::from_new(item, None), None),
            Record::Delete { uri } => {
                self.remove(&uri);
            }
        }
    }

    fn dead_slots(&self) -> usize {
        self.scopes
            .iter()
            .map(|s| s.bm25.slots() - s.bm25.live())
            .sum()
    }
}

#[derive(Debug)]
struct Inner {
    log: File,
    state: State,
}

/// A memory store on local disk: `items.jsonl` (the source of truth, one record per line) plus
/// an in-memory BM25 index rebuilt from it on open, under `<home>/memory/local/<store-id>/`.
#[derive(Debug)]
pub struct LocalMemory {
    dir: PathBuf,
    store_id: String,
    options: LocalOptions,
    inner: RwLock<Inner>,
    _lock: File,
}

impl LocalMemory {
    /// Opens (creating if needed) store `store_id` under `home` (see [`store_dir`]).
    pub fn open(home: &Path, store_id: &str, options: LocalOptions) -> Result<Self, MemoryError> {
        Self::open_at(&store_dir(home, store_id)?, store_id, options)
    }

    /// Opens store `store_id` under [`openrath_home`].
    pub fn open_default(store_id: &str, options: LocalOptions) -> Result<Self, MemoryError> {
        Self::open(&openrath_home(), store_id, options)
    }

    /// Opens (creating if needed) the store whose directory is exactly `dir`.
    pub fn open_at(dir: &Path, store_id: &str, options: LocalOptions) -> Result<Self, MemoryError> {
        check_store_id(store_id)?;
        std::fs::create_dir_all(dir).map_err(MemoryError::io(dir))?;
        let lock = lock_dir(dir, options.lock_wait)?;
        check_or_write_meta(dir, store_id)?;
        let log_path = dir.join(LOG);
        let log = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&log_path)
            .map_err(MemoryError::io(&log_path))?;
        let state = load_state(&log_path, options.embedder.as_deref())?;
        Ok(Self {
            dir: dir.to_owned(),
            store_id: store_id.to_owned(),
            options,
            inner: RwLock::new(Inner { log, state }),
            _lock: lock,
        })
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Number of live items.
    pub fn len(&self) -> usize {
        self.read_inner().state.by_uri.len()
    }

    /// True when the store holds no items.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Throws the index away and rebuilds it from `items.jsonl` (cutting a torn last line).
    pub fn rebuild_index(&self) -> Result<(), MemoryError> {
        let mut inner = self.write_inner();
        inner.state = load_state(&self.dir.join(LOG), self.options.embedder.as_deref())?;
        Ok(())
    }

    /// Rewrites `items.jsonl` with only the live items (grouped by their commits) and rebuilds
    /// the index, reclaiming the space of deleted and replaced items. Crash-safe: the new log
    /// is written beside the old one, synced, then renamed over it.
    pub fn compact(&self) -> Result<(), MemoryError> {
        let mut inner = self.write_inner();
        let mut items: Vec<Arc<MemoryItem>> = inner.state.live_items().cloned().collect();
        items.sort_by(|a, b| a.uri.cmp(&b.uri));
        let mut order: Vec<Option<String>> = Vec::new();
        let mut groups: HashMap<Option<String>, Vec<NewItem>> = HashMap::new();
        for it in items {
            let key = it.commit_id.clone();
            if !groups.contains_key(&key) {
                order.push(key.clone());
            }
            groups.entry(key).or_default().push(NewItem {
                uri: it.uri.clone(),
                text: it.text.clone(),
                agent: it.agent.clone(),
                session_id: it.session_id.clone(),
            });
        }
        let mut buf = Vec::new();
        for key in order {
            let items = groups.remove(&key).unwrap_or_default();
            match key {
                Some(commit_id) => push_line(&mut buf, &Record::Commit { commit_id, items })?,
                None => {
                    for item in items {
                        push_line(&mut buf, &Record::Put(item))?;
                    }
                }
            }
        }
        let log_path = self.dir.join(LOG);
        let tmp = self.dir.join("items.jsonl.compact");
        write_synced(&tmp, &buf)?;
        std::fs::rename(&tmp, &log_path).map_err(MemoryError::io(&log_path))?;
        sync_dir(&self.dir)?;
        inner.log = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&log_path)
            .map_err(MemoryError::io(&log_path))?;
        inner.state = load_state(&log_path, self.options.embedder.as_deref())?;
        Ok(())
    }

    /// Number of index slots held by deleted or replaced items (reclaimed by [`Self::compact`]).
    pub fn dead_slots(&self) -> usize {
        self.read_inner().state.dead_slots()
    }

    fn read_inner(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write_inner(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Option<Vec<f32>>>, MemoryError> {
        match &self.options.embedder {
            None => Ok(vec![None; texts.len()]),
            Some(e) => Ok(embed_checked(e.as_ref(), texts)?
                .into_iter()
                .map(Some)
                .collect()),
        }
    }

    /// Appends one record durably; the index is updated by the caller afterwards.
    fn append(&self, inner: &mut Inner, record: &Record) -> Result<(), MemoryError> {
        let mut buf = Vec::new();
        push_line(&mut buf, record)?;
        let path = self.dir.join(LOG);
        if crash_point("mid_log_write") {
            let half = buf.len() / 2;
            inner
                .log
                .write_all(&buf[..half])
                .and_then(|()| inner.log.sync_data())
                .map_err(MemoryError::io(&path))?;
            die();
        }
        inner.log.write_all(&buf).map_err(MemoryError::io(&path))?;
        if self.options.durability == Durability::Fsync {
            inner.log.sync_data().map_err(MemoryError::io(&path))?;
        }
        if crash_point("after_log_write") {
            die();
        }
        Ok(())
    }

    fn hits_from(
        &self,
        state: &State,
        ranked: Vec<(MemoryUri, f64)>,
        terms: &[String],
    ) -> Vec<Hit> {
        ranked
            .into_iter()
            .filter_map(|(uri, score)| {
                let item = state.get(&uri)?;
                Some(Hit {
                    id: item.id.clone(),
                    uri,
                    score,
                    snippet: snippet(&item.text, terms),
                    text: item.text.clone(),
                    commit_id: item.commit_id.clone(),
                })
            })
            .collect()
    }
}

impl Memory for LocalMemory {
    fn store_id(&self) -> &str {
        &self.store_id
    }

    fn recall(&self, query: &str, scope: Option<Scope>, k: usize) -> Result<Vec<Hit>, MemoryError> {
        let mut terms: Vec<String> = tokenize(query).collect();
        terms.sort_unstable();
        terms.dedup();
        let qvec = match &self.options.embedder {
            Some(e) if k > 0 => embed_checked(e.as_ref(), &[query])?.pop(),
            _ => None,
        };
        let inner = self.read_inner();
        let state = &inner.state;
        let scopes: Vec<Scope> = scope.map_or_else(|| Scope::ALL.to_vec(), |s| vec![s]);
        let wanted = if qvec.is_some() { k.max(5) * 4 } else { k };
        let mut lexical: Vec<(MemoryUri, f64)> = Vec::new();
        let mut vector: Vec<(MemoryUri, f64)> = Vec::new();
        for s in scopes {
            let ix = &state.scopes[s.index()];
            let uri_of = |slot: u32| ix.items.get(slot as usize).and_then(|i| i.as_ref());
            let tie = |a: u32, b: u32| match (uri_of(a), uri_of(b)) {
                (Some(x), Some(y)) => x.uri.cmp(&y.uri),
                _ => a.cmp(&b),
            };
            for (slot, score) in ix.bm25.search(&terms, wanted, tie) {
                if let Some(item) = uri_of(slot) {
                    lexical.push((item.uri.clone(), round6(f64::from(score))));
                }
            }
            if let Some(q) = &qvec {
                for (slot, v) in ix.vectors.iter().enumerate() {
                    if let (Some(v), Some(item)) = (v, uri_of(slot as u32)) {
                        let c = cosine(q, v);
                        if c > 0.0 {
                            vector.push((item.uri.clone(), round6(f64::from(c))));
                        }
                    }
                }
            }
        }
        rank(&mut lexical);
        lexical.truncate(wanted);
        let ranked = if qvec.is_some() {
            rank(&mut vector);
            vector.truncate(wanted);
            let mut fused: HashMap<MemoryUri, f64> = HashMap::new();
            for list in [&lexical, &vector] {
                for (r, (uri, _)) in list.iter().enumerate() {
                    *fused.entry(uri.clone()).or_default() += 1.0 / (RRF_C + r as f64 + 1.0);
                }
            }
            let mut fused: Vec<(MemoryUri, f64)> =
                fused.into_iter().map(|(u, v)| (u, round6(v))).collect();
            rank(&mut fused);
            fused
        } else {
            lexical
        };
        let mut ranked = ranked;
        ranked.truncate(k);
        Ok(self.hits_from(state, ranked, &terms))
    }

    fn commit(&self, commit_id: &str, items: Vec<NewItem>) -> Result<CommitReceipt, MemoryError> {
        let digest = items_digest(&items);
        let texts: Vec<&str> = items.iter().map(|i| i.text.as_str()).collect();
        let vectors = self.embed(&texts)?;
        let record = Record::Commit {
            commit_id: commit_id.to_owned(),
            items,
        };
        let mut inner = self.write_inner();
        if let Some(stored) = inner.state.commits.get(commit_id) {
            let Record::Commit { items, .. } = record else {
                return Err(MemoryError::CommitExists(commit_id.to_owned()));
            };
            // The same commit again (a retry) is a no-op; another one under its id is refused.
            if *stored == digest {
                return Ok(CommitReceipt {
                    commit_id: commit_id.to_owned(),
                    uris: items.into_iter().map(|i| i.uri).collect(),
                });
            }
            return Err(MemoryError::CommitExists(commit_id.to_owned()));
        }
        self.append(&mut inner, &record)?;
        inner.state.commits.insert(commit_id.to_owned(), digest);
        let Record::Commit { items, .. } = record else {
            return Ok(CommitReceipt {
                commit_id: commit_id.to_owned(),
                uris: Vec::new(),
            });
        };
        let uris = items.iter().map(|i| i.uri.clone()).collect();
        for (item, v) in items.into_iter().zip(vectors) {
            inner
                .state
                .put(MemoryItem::from_new(item, Some(commit_id.to_owned())), v);
        }
        Ok(CommitReceipt {
            commit_id: commit_id.to_owned(),
            uris,
        })
    }

    fn read(&self, uri: &MemoryUri) -> Result<MemoryItem, MemoryError> {
        self.read_inner()
            .state
            .get(uri)
            .map(|i| MemoryItem::clone(i))
            .ok_or_else(|| MemoryError::NotFound(uri.to_string()))
    }

    fn write(&self, item: NewItem) -> Result<MemoryItem, MemoryError> {
        let vector = self.embed(&[item.text.as_str()])?.pop().flatten();
        let record = Record::Put(item);
        let mut inner = self.write_inner();
        self.append(&mut inner, &record)?;
        let Record::Put(item) = record else {
            return Err(MemoryError::NotFound(String::new()));
        };
        let stored = MemoryItem::from_new(item, None);
        inner.state.put(stored.clone(), vector);
        Ok(stored)
    }

    fn delete(&self, uri: &MemoryUri) -> Result<bool, MemoryError> {
        let mut inner = self.write_inner();
        if inner.state.get(uri).is_none() {
            return Ok(false);
        }
        self.append(&mut inner, &Record::Delete { uri: uri.clone() })?;
        Ok(inner.state.remove(uri))
    }

    fn list(&self, scope: Option<Scope>) -> Result<Vec<MemoryUri>, MemoryError> {
        let inner = self.read_inner();
        let mut out: Vec<MemoryUri> = inner
            .state
            .by_uri
            .keys()
            .filter(|u| scope.is_none_or(|s| u.scope() == s))
            .cloned()
            .collect();
        out.sort();
        Ok(out)
    }
}

/// Scores are reported to 6 decimals: enough to rank, short enough to read in an event.
fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// Sorts by score (best first), then address.
fn rank(list: &mut [(MemoryUri, f64)]) {
    list.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
}

fn embed_checked(e: &dyn Embedder, texts: &[&str]) -> Result<Vec<Vec<f32>>, MemoryError> {
    let out = e.embed(texts)?;
    let dims = out.first().map_or(0, Vec::len);
    if out.len() != texts.len() || out.iter().any(|v| v.len() != dims) {
        return Err(MemoryError::Embedding {
            embedder: e.id().to_owned(),
            reason: format!(
                "expected {} vectors of one length, got {}",
                texts.len(),
                out.len()
            ),
        });
    }
    Ok(out)
}

fn push_line(buf: &mut Vec<u8>, record: &Record) -> Result<(), MemoryError> {
    serde_json::to_writer(&mut *buf, record).map_err(|e| MemoryError::Io {
        path: PathBuf::from(LOG),
        source: std::io::Error::other(e),
    })?;
    buf.push(b'\n');
    Ok(())
}

/// Replays the log into a fresh state, cutting a torn last line off the file.
fn load_state(log_path: &Path, embedder: Option<&dyn Embedder>) -> Result<State, MemoryError> {
    let file = File::open(log_path).map_err(MemoryError::io(log_path))?;
    let mut reader = BufReader::new(file);
    let mut state = State::default();
    let mut line = Vec::new();
    let mut good_len: u64 = 0;
    let mut lineno = 0usize;
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(MemoryError::io(log_path))?;
        if n == 0 {
            break;
        }
        lineno += 1;
        if line.last() != Some(&b'\n') {
            // A torn tail: the write that produced it was never acknowledged.
            truncate(log_path, good_len)?;
            break;
        }
        let text = &line[..line.len() - 1];
        if text.iter().all(u8::is_ascii_whitespace) {
            good_len += n as u64;
            continue;
        }
        let record: Record = serde_json::from_slice(text).map_err(|e| MemoryError::CorruptLog {
            path: log_path.to_owned(),
            line: lineno,
            reason: e.to_string(),
        })?;
        state.apply(record);
        good_len += n as u64;
    }
    if let Some(e) = embedder {
        embed_all(&mut state, e)?;
    }
    Ok(state)
}

fn embed_all(state: &mut State, e: &dyn Embedder) -> Result<(), MemoryError> {
    for ix in &mut state.scopes {
        let live: Vec<(usize, Arc<MemoryItem>)> = ix
            .items
            .iter()
            .enumerate()
            .filter_map(|(i, it)| it.clone().map(|it| (i, it)))
            .collect();
        for chunk in live.chunks(256) {
            let texts: Vec<&str> = chunk.iter().map(|(_, it)| it.text.as_str()).collect();
            for ((slot, _), v) in chunk.iter().zip(embed_checked(e, &texts)?) {
                ix.vectors[*slot] = Some(v);
            }
        }
    }
    Ok(())
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_ids_are_checked() {
        for bad in ["", ".hidden", "a/b", "a b", &"x".repeat(65)] {
            assert!(check_store_id(bad).is_err(), "{bad}");
        }
        assert!(check_store_id("team-1.notes_v2").is_ok());
    }
}
