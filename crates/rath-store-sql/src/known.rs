//! What a store remembers of the sessions this process wrote or loaded through it: each one's
//! row, stored length, chain digest and chunk list (an O(1) clone of a persistent list). A
//! fork of a remembered session starts with the very chunks it remembers, so saving it needs
//! no encoding or hashing of the shared prefix: the store checks the row still has that
//! length and digest (in the write's transaction) and encodes only the fork's own chunks.
//! Without a hit (another process's session, an evicted entry) the store hashes every chunk,
//! as it must. The cache only saves work: every fact it offers is checked against the row.

use std::collections::VecDeque;
use std::sync::Mutex;

use rath_session::{ChunkList, Session};

/// Sessions remembered per store; the oldest goes first (the lists it holds share structure
/// with live sessions, but an evicted session's chunks are freed with it).
const CAPACITY: usize = 32;

/// Most chunks remembered per store, counted per session (shared ones as often as they are
/// shared), about 36 MiB of small chunks: the sessions a process has finished with must not
/// keep their memory. A session longer than this is not remembered; saving a fork of it
/// hashes its prefix, as for a session loaded by another process.
const MAX_CHUNKS: usize = 1 << 17;

/// One remembered session.
#[derive(Clone)]
pub(crate) struct Known {
    /// Its row.
    pub(crate) key: i64,
    /// Its chain digest when remembered (the row must still have it).
    pub(crate) digest: Vec<u8>,
    /// Its chunks when remembered (their count is the stored length the row must have).
    pub(crate) chunks: ChunkList,
}

/// The remembered sessions of one store.
#[derive(Default)]
pub(crate) struct KnownSessions {
    entries: Mutex<VecDeque<(String, Known)>>,
}

impl std::fmt::Debug for KnownSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.entries.lock().map_or(0, |e| e.len());
        f.debug_struct("KnownSessions")
            .field("sessions", &n)
            .finish()
    }
}

/// True when `chunks` starts with all of `prefix`: one shared root (a fork not grown yet) in
/// O(1), else chunk by chunk, by identity first (a fork's shared chunks are the same
/// allocations), never by encoding.
fn starts_with(chunks: &ChunkList, prefix: &ChunkList) -> bool {
    if prefix.len() > chunks.len() {
        return false;
    }
    if chunks.ptr_eq(prefix) {
        return true;
    }
    chunks
        .iter()
        .zip(prefix.iter())
        .all(|(a, b)| a.ptr_eq(b) || a == b)
}

impl KnownSessions {
    /// Remembers `id` as stored in row `key` with `digest` and `chunks`.
    pub(crate) fn remember(&self, id: &str, known: Known) {
        let Ok(mut e) = self.entries.lock() else {
            return;
        };
        e.retain(|(k, _)| k != id);
        let n = known.chunks.len();
        if n > MAX_CHUNKS {
            return;
        }
        let mut held: usize = e.iter().map(|(_, k)| k.chunks.len()).sum();
        while e.len() >= CAPACITY || held + n > MAX_CHUNKS {
            match e.pop_front() {
                Some((_, old)) => held -= old.chunks.len(),
                None => break,
            }
        }
        e.push_back((id.to_owned(), known));
    }

    /// Forgets `id` (deleted, or its row changed in a way not remembered).
    pub(crate) fn forget(&self, id: &str) {
        if let Ok(mut e) = self.entries.lock() {
            e.retain(|(k, _)| k != id);
        }
    }

    /// The longest remembered session `s` starts with: one of its parents, else (a detach,
    /// a session saved again) one holding exactly its chunks. Empty sessions are never a
    /// base.
    pub(crate) fn base_of(&self, s: &Session) -> Option<Known> {
        self.named_base_of(s).map(|(_, k)| k)
    }

    /// [`KnownSessions::base_of`], with the remembered session's id.
    pub(crate) fn named_base_of(&self, s: &Session) -> Option<(String, Known)> {
        let e = self.entries.lock().ok()?;
        let parents = &s.lineage().parents;
        let mut best: Option<(&String, &Known)> = None;
        for (id, k) in e.iter() {
            let n = k.chunks.len();
            if n == 0 || best.is_some_and(|(_, b)| b.chunks.len() >= n) {
                continue;
            }
            let named = parents.iter().any(|p| p.as_str() == id);
            let same = n == s.len() && s.chunks().ptr_eq(&k.chunks);
            if (named || same) && starts_with(s.chunks(), &k.chunks) {
                best = Some((id, k));
            }
        }
        best.map(|(id, k)| (id.clone(), k.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rath_session::Chunk;

    fn known(n: usize) -> Known {
        Known {
            key: 1,
            digest: Vec::new(),
            chunks: (0..n).map(|i| Chunk::user(i.to_string())).collect(),
        }
    }

    fn held(k: &KnownSessions) -> (Vec<String>, usize) {
        let e = k.entries.lock().unwrap();
        (
            e.iter().map(|(id, _)| id.clone()).collect(),
            e.iter().map(|(_, k)| k.chunks.len()).sum(),
        )
    }

    /// Finished sessions do not keep their memory: the chunks remembered stay under the
    /// bound, the oldest going first, and a session longer than it is not remembered.
    #[test]
    fn what_is_remembered_stays_bounded_in_chunks() {
        let k = KnownSessions::default();
        k.remember("a", known(MAX_CHUNKS / 2));
        k.remember("b", known(MAX_CHUNKS / 4));
        assert_eq!(held(&k).0, ["a", "b"]);
        k.remember("c", known(MAX_CHUNKS / 2));
        let (ids, n) = held(&k);
        assert_eq!(ids, ["b", "c"], "the oldest went to make room");
        assert!(n <= MAX_CHUNKS);
        k.remember("huge", known(MAX_CHUNKS + 1));
        assert_eq!(held(&k).0, ["b", "c"], "too long to remember");
        // Remembering an id again with a list too long forgets what it had.
        k.remember("b", known(MAX_CHUNKS + 1));
        assert_eq!(held(&k).0, ["c"]);
        for i in 0..2 * CAPACITY {
            k.remember(&i.to_string(), known(1));
        }
        assert_eq!(held(&k).0.len(), CAPACITY);
    }
}
