//! What a request would otherwise ask a database again and again, kept in memory, bounded,
//! and never answered across tenants (the tenant is part of every key).
//!
//! - [`KeyCache`]: a key's check, for at most its time to live. Each [`crate::ServerDb`]
//!   has its own (no state is process-wide: two servers in one process share nothing), so a
//!   revocation through it forgets the key at once; one anywhere else (`rath keys revoke`,
//!   another server of a fleet) is seen when the entry expires.
//! - [`OwnerCache`]: "this tenant owns this session / run". Ownership rows are only ever
//!   added (nothing deletes from `sv_sessions`, `sv_runs` or `rt_runs`), so a yes stays
//!   true; a no is never remembered.
//! - [`RenderCache`]: a rendered answer (its JSON bytes) with the session store's revision
//!   of the session it shows ([`rath_persist::SessionStore::revision`]); it is served
//!   only while one read of the store says the revision is still the same.
//! - [`RevisionReads`]: those reads of one session, coalesced. Requests that arrive while a
//!   read of the same session runs wait for the next read, which starts after they did and
//!   answers all of them; so a request never sees a revision older than its own arrival,
//!   and 64 clients polling one session cost a handful of store reads, not 64.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use rath_persist::{PersistError, SessionStore};
use rath_session::SessionId;
use tokio::sync::oneshot;

use crate::db::Principal;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Keys remembered at most per server database.
const KEY_ENTRIES: usize = 10_000;
/// Ownership facts remembered at most.
const OWNER_ENTRIES: usize = 200_000;

/// A checked key: (database, key hash).
type KeyId = (Arc<str>, String);

/// Checked keys: (database, key hash) → the principal and when it was read.
#[derive(Debug, Default)]
pub(crate) struct KeyCache {
    entries: Mutex<HashMap<KeyId, (Principal, Instant)>>,
}

impl KeyCache {
    /// The principal of `hash` in database `db` when it was read less than `ttl` ago.
    pub(crate) fn get(&self, db: &Arc<str>, hash: &str, ttl: Duration) -> Option<Principal> {
        let e = lock(&self.entries);
        let (p, at) = e.get(&(db.clone(), hash.to_owned()))?;
        (at.elapsed() < ttl).then(|| p.clone())
    }

    /// Remembers that `hash` is `p`'s key in database `db`.
    pub(crate) fn put(&self, db: &Arc<str>, hash: String, p: Principal, ttl: Duration) {
        let mut e = lock(&self.entries);
        if e.len() >= KEY_ENTRIES {
            e.retain(|_, (_, at)| at.elapsed() < ttl);
            if e.len() >= KEY_ENTRIES {
                e.clear();
            }
        }
        e.insert((db.clone(), hash), (p, Instant::now()));
    }

    /// Forgets key `key_id` everywhere (it was revoked).
    pub(crate) fn forget(&self, key_id: &str) {
        lock(&self.entries).retain(|_, (p, _)| p.key_id != key_id);
    }
}

/// An ownership fact: (database, table, tenant, id).
type Owned = (Arc<str>, &'static str, String, String);

/// Ownership known to be true: (database, table, tenant, id).
#[derive(Debug, Default)]
pub(crate) struct OwnerCache {
    entries: Mutex<HashSet<Owned>>,
}

impl OwnerCache {
    /// True when `tenant` is known to own `id` of `what` in database `db`.
    pub(crate) fn owns(&self, db: &Arc<str>, what: &'static str, tenant: &str, id: &str) -> bool {
        lock(&self.entries).contains(&(db.clone(), what, tenant.to_owned(), id.to_owned()))
    }

    /// Remembers that `tenant` owns `id` of `what` in database `db`.
    pub(crate) fn learn(&self, db: &Arc<str>, what: &'static str, tenant: &str, id: &str) {
        let mut e = lock(&self.entries);
        if e.len() >= OWNER_ENTRIES {
            e.clear();
        }
        e.insert((db.clone(), what, tenant.to_owned(), id.to_owned()));
    }
}

/// What a rendered answer is of: the route, the tenant, the session and the page.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct RenderKey {
    /// Which answer (`session`, `chunks`).
    pub(crate) route: &'static str,
    /// The tenant that asked.
    pub(crate) tenant: String,
    /// The session.
    pub(crate) id: String,
    /// First chunk of the page.
    pub(crate) from: usize,
    /// Chunks in the page at most.
    pub(crate) limit: usize,
}

#[derive(Debug, Default)]
struct Rendered {
    map: HashMap<RenderKey, (Vec<u8>, Bytes)>,
    order: VecDeque<RenderKey>,
    bytes: usize,
}

/// Rendered answers, oldest evicted first, bounded in entries and bytes.
#[derive(Debug)]
pub(crate) struct RenderCache {
    inner: Mutex<Rendered>,
    max_entries: usize,
    max_bytes: usize,
}

impl RenderCache {
    /// A cache of at most `max_entries` answers and `max_bytes` of them (0: off).
    pub(crate) fn new(max_entries: usize, max_bytes: usize) -> Self {
        Self {
            inner: Mutex::new(Rendered::default()),
            max_entries,
            max_bytes,
        }
    }

    /// The answer for `key` when it was rendered at `revision`.
    pub(crate) fn get(&self, key: &RenderKey, revision: &[u8]) -> Option<Bytes> {
        let r = lock(&self.inner);
        match r.map.get(key) {
            Some((rev, body)) if rev.as_slice() == revision => Some(body.clone()),
            _ => None,
        }
    }

    /// Keeps `body`, the answer for `key` rendered at `revision`.
    pub(crate) fn put(&self, key: RenderKey, revision: Vec<u8>, body: Bytes) {
        if self.max_entries == 0 || body.len() > self.max_bytes {
            return;
        }
        let mut r = lock(&self.inner);
        let size = body.len();
        if let Some((_, old)) = r.map.insert(key.clone(), (revision, body)) {
            r.bytes -= old.len();
        } else {
            r.order.push_back(key);
        }
        r.bytes += size;
        while r.map.len() > self.max_entries || r.bytes > self.max_bytes {
            let Some(k) = r.order.pop_front() else { break };
            if let Some((_, old)) = r.map.remove(&k) {
                r.bytes -= old.len();
            }
        }
    }

    /// Answers kept and their bytes.
    #[cfg(test)]
    pub(crate) fn size(&self) -> (usize, usize) {
        let r = lock(&self.inner);
        (r.map.len(), r.bytes)
    }
}

/// What one coalesced read answers: the revision, or `Err(())` when the read failed (each
/// waiter then reads again by itself, so it gets the store's own typed error).
type Answer = Result<Option<Vec<u8>>, ()>;

/// Reads of [`SessionStore::revision`], coalesced per session (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct RevisionReads {
    /// Per session: the requests waiting for the next read. An entry exists while a read
    /// of that session runs.
    waiting: Mutex<HashMap<SessionId, Vec<oneshot::Sender<Answer>>>>,
    /// The store said `Unsupported` once: it never will know, so nothing is coalesced.
    unsupported: AtomicBool,
}

impl RevisionReads {
    /// The revision of session `id` in `store`, read after this call began.
    pub(crate) async fn read(
        self: &Arc<Self>,
        store: &Arc<dyn SessionStore>,
        id: &SessionId,
    ) -> Result<Option<Vec<u8>>, PersistError> {
        let store = Arc::clone(store);
        let sid = id.clone();
        self.read_with(id, move || {
            let store = Arc::clone(&store);
            let sid = sid.clone();
            async move { store.revision(&sid).await }
        })
        .await
    }

    /// [`Self::read`] with the store read given as `read`.
    async fn read_with<R, F>(
        self: &Arc<Self>,
        id: &SessionId,
        read: R,
    ) -> Result<Option<Vec<u8>>, PersistError>
    where
        R: Fn() -> F + Clone + Send + 'static,
        F: Future<Output = Result<Option<Vec<u8>>, PersistError>> + Send,
    {
        if self.unsupported.load(Ordering::Relaxed) {
            return read().await;
        }
        let (tx, rx) = oneshot::channel();
        let lead = {
            let mut w = lock(&self.waiting);
            match w.get_mut(id) {
                Some(next) => {
                    next.push(tx);
                    false
                }
                None => {
                    w.insert(id.clone(), vec![tx]);
                    true
                }
            }
        };
        if lead {
            // The reads run in a task of their own, so a request that goes away (its client
            // hung up) never strands the others waiting on its read.
            let this = Arc::clone(self);
            let id = id.clone();
            let read = read.clone();
            tokio::spawn(async move { this.serve(&id, read).await });
        }
        match rx.await {
            Ok(Ok(rev)) => Ok(rev),
            // The read failed, or its task ended without an answer (the runtime is going
            // down): read directly, for the store's own answer or error.
            Ok(Err(())) | Err(_) => read().await,
        }
    }

    /// Reads for batch after batch of waiters, until none is waiting.
    async fn serve<R, F>(&self, id: &SessionId, read: R)
    where
        R: Fn() -> F,
        F: Future<Output = Result<Option<Vec<u8>>, PersistError>>,
    {
        loop {
            let batch = {
                let mut w = lock(&self.waiting);
                match w.get_mut(id) {
                    Some(next) if !next.is_empty() => std::mem::take(next),
                    _ => {
                        w.remove(id);
                        return;
                    }
                }
            };
            let answer = match read().await {
                Ok(rev) => Ok(rev),
                Err(PersistError::Unsupported { .. }) => {
                    self.unsupported.store(true, Ordering::Relaxed);
                    Err(())
                }
                Err(_) => Err(()),
            };
            for tx in batch {
                let _ = tx.send(answer.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tenant: &str, id: &str) -> RenderKey {
        RenderKey {
            route: "session",
            tenant: tenant.into(),
            id: id.into(),
            from: 0,
            limit: 50,
        }
    }

    #[test]
    fn an_answer_is_served_only_at_its_revision_and_only_to_its_tenant() {
        let c = RenderCache::new(10, 1 << 20);
        c.put(key("a", "s1"), b"r1".to_vec(), Bytes::from_static(b"{}"));
        assert_eq!(c.get(&key("a", "s1"), b"r1").as_deref(), Some(&b"{}"[..]));
        assert!(
            c.get(&key("a", "s1"), b"r2").is_none(),
            "a new revision misses"
        );
        assert!(
            c.get(&key("b", "s1"), b"r1").is_none(),
            "another tenant misses"
        );
    }

    #[test]
    fn the_cache_stays_within_its_bounds() {
        let c = RenderCache::new(3, 10);
        for i in 0..5 {
            c.put(
                key("a", &format!("s{i}")),
                vec![],
                Bytes::from(vec![0u8; 3]),
            );
        }
        assert_eq!(c.size(), (3, 9));
        assert!(
            c.get(&key("a", "s0"), b"").is_none(),
            "the oldest went first"
        );
        assert!(c.get(&key("a", "s4"), b"").is_some());
        c.put(key("a", "big"), vec![], Bytes::from(vec![0u8; 11]));
        assert!(
            c.get(&key("a", "big"), b"").is_none(),
            "over the byte bound: not kept"
        );
        // Replacing an entry keeps the byte count right.
        c.put(key("a", "s4"), b"r".to_vec(), Bytes::from(vec![0u8; 1]));
        assert_eq!(c.size(), (3, 7));
    }

    /// What a test's revision read returns.
    type Reading =
        std::pin::Pin<Box<dyn Future<Output = Result<Option<Vec<u8>>, PersistError>> + Send>>;

    /// A read that counts itself, answers the count it started at, and takes 30 ms.
    fn counting(
        n: &Arc<std::sync::atomic::AtomicUsize>,
    ) -> impl Fn() -> Reading + Clone + Send + 'static {
        let n = Arc::clone(n);
        move || {
            let at = n.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(30)).await;
                Ok(Some(vec![at as u8]))
            })
        }
    }

    #[tokio::test]
    async fn concurrent_revision_reads_of_one_session_share_a_store_read() {
        let reads = Arc::new(RevisionReads::default());
        let n = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let id = SessionId::new("s1");
        let mut tasks = Vec::new();
        for _ in 0..64 {
            let (reads, id, read) = (Arc::clone(&reads), id.clone(), counting(&n));
            tasks.push(tokio::spawn(
                async move { reads.read_with(&id, read).await },
            ));
        }
        for t in tasks {
            assert!(t.await.unwrap().unwrap().is_some());
        }
        let store_reads = n.load(Ordering::SeqCst);
        assert!(
            (1..=2).contains(&store_reads),
            "64 requests cost {store_reads} store reads"
        );
        assert!(lock(&reads.waiting).is_empty(), "nothing left waiting");
    }

    #[tokio::test]
    async fn a_request_never_gets_a_read_that_began_before_it() {
        let reads = Arc::new(RevisionReads::default());
        let n = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let id = SessionId::new("s1");
        let first = {
            let (reads, id, read) = (Arc::clone(&reads), id.clone(), counting(&n));
            tokio::spawn(async move { reads.read_with(&id, read).await })
        };
        // The first read is under way (it takes 30 ms); a request now must wait for the next.
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(n.load(Ordering::SeqCst), 1);
        let second = reads.read_with(&id, counting(&n)).await.unwrap();
        assert_eq!(first.await.unwrap().unwrap(), Some(vec![0]));
        assert_eq!(
            second,
            Some(vec![1]),
            "served by the read that began after it"
        );
        // Another session is never held up by this one's reads.
        let other = reads
            .read_with(&SessionId::new("s2"), counting(&n))
            .await
            .unwrap();
        assert_eq!(other, Some(vec![2]));
    }

    #[tokio::test]
    async fn a_failed_read_gives_every_waiter_the_stores_own_error() {
        let reads = Arc::new(RevisionReads::default());
        let id = SessionId::new("s1");
        let failing = || async {
            Err::<Option<Vec<u8>>, _>(PersistError::Unsupported {
                store: "test".into(),
                what: "revision",
            })
        };
        let (a, b) = tokio::join!(reads.read_with(&id, failing), reads.read_with(&id, failing));
        for r in [a, b] {
            assert!(matches!(r, Err(PersistError::Unsupported { .. })), "{r:?}");
        }
        assert!(reads.unsupported.load(Ordering::Relaxed));
    }

    #[test]
    fn a_forgotten_key_is_checked_again() {
        let db: Arc<str> = Arc::from("test-db-forget");
        let p = Principal {
            key_id: "key_x".into(),
            tenant: "t".into(),
            admin: false,
        };
        let ttl = Duration::from_secs(60);
        let keys = KeyCache::default();
        keys.put(&db, "h".into(), p.clone(), ttl);
        assert_eq!(keys.get(&db, "h", ttl), Some(p));
        assert!(keys.get(&db, "h", Duration::ZERO).is_none(), "expired");
        keys.forget("key_x");
        assert!(keys.get(&db, "h", ttl).is_none());
    }
}
