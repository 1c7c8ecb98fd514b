//! The store logic, written once and instantiated for each database by [`sql_store!`]: the
//! two differ only in a few statements (transaction start, table locks, row locks, byte
//! length), which the store takes from its [`crate::dialect::Dialect`]. Every query is checked at run time (no database at build
//! time).

/// Instantiates the store logic for one sqlx database inside the calling module: free
/// functions taking the pool and the store's name, which the module's store type wraps.
macro_rules! sql_store {
    (
        db: $db:ty,
        rows: $rows:ty,
        dialect: $dialect:expr $(,)?
    ) => {
        use std::path::PathBuf;

        use rath_persist::{
            GcReport, LoadedSession, PersistError, SessionSummary, Write, WriteBatch, WriteReport,
            doc,
        };
        use rath_session::{ChunkList, RunFailure, Session, SessionId, Timestamp};
        use sqlx::Row as _;
        use tracing::Instrument as _;
        use rath_persist::spans;

        use crate::codec::{
            EncodedChunk, EncodedState, SEGMENT_CHUNKS, decode_segment, empty_digest, encode_from,
            encode_one, encode_segment, encode_state, hex, prefix_digests,
        };
        use crate::known::{Known, KnownSessions};
        use crate::schema::SCHEMA_VERSION;

        /// What this database says differently (see [`crate::dialect`]).
        const DIALECT: crate::dialect::Dialect = $dialect;

        type Pool = sqlx::Pool<$db>;
        type Tx<'c> = sqlx::Transaction<'c, $db>;
        type Conn = sqlx::pool::PoolConnection<$db>;

        /// The SQL that turns parameter `p` (16 bytes) into a stored chunk address.
        fn hash_in(p: &str) -> String {
            DIALECT.hash_in.replace("{}", p)
        }

        /// The store's error for a driver error: a lock kept past the busy timeout is
        /// [`PersistError::Busy`], a file that is not a database [`PersistError::NotAStore`],
        /// anything else [`PersistError::Backend`] with the driver's message.
        pub(crate) fn backend(store: &str, op: &'static str, e: sqlx::Error) -> PersistError {
            if let Some(d) = e.as_database_error() {
                // SQLite's result codes (primary code, the low byte of an extended one):
                // 5 SQLITE_BUSY, 6 SQLITE_LOCKED, 26 SQLITE_NOTADB.
                let code = d.code().and_then(|c| c.parse::<i64>().ok()).map(|c| c & 0xff);
                if !DIALECT.pg && matches!(code, Some(5 | 6)) {
                    return PersistError::Busy { store: store.to_owned(), op };
                }
                if !DIALECT.pg && code == Some(26) {
                    return PersistError::NotAStore {
                        store: store.to_owned(),
                        reason: "the file is not an SQLite database".into(),
                    };
                }
            }
            PersistError::Backend {
                store: store.to_owned(),
                op,
                message: e.to_string(),
                source: Some(Box::new(e)),
            }
        }

        fn is_unique_violation(e: &sqlx::Error) -> bool {
            e.as_database_error().is_some_and(|d| d.is_unique_violation())
        }

        async fn begin(pool: &Pool, name: &str, sql: &'static str) -> Result<Tx<'static>, PersistError> {
            pool.begin_with(sql).await.map_err(|e| backend(name, "begin", e))
        }

        /// The group loader of a store (see [`Loads::start`]).
        pub(crate) struct Loads {
            queue: tokio::sync::mpsc::UnboundedSender<LoadJob>,
        }

        type Row = <$db as sqlx::Database>::Row;

        impl std::fmt::Debug for Loads {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct("Loads").finish_non_exhaustive()
            }
        }

        /// A load waiting for the group loader: the session, and who is told its rows
        /// (`None`: the loader could not read them, the caller reads them itself).
        pub(crate) struct LoadJob {
            id: SessionId,
            done: tokio::sync::oneshot::Sender<Option<Vec<Row>>>,
        }

        /// Most loads one query of the group loader takes.
        const LOAD_MAX: usize = 256;

        impl Loads {
            /// Starts the group loader of a store (on the current tokio runtime): the loads
            /// waiting when it is free are read in one query (each session's row and
            /// segments, keyed by the row they started from), the way the group committer
            /// shares a transaction among writes. Many runs starting at once then cost a few
            /// queries, not one each (and not a pool checkout each: sqlx tests a connection
            /// with a round trip when it is handed out and again when it comes back, as much
            /// as a short read costs); a lone load costs what it did. The loader keeps its
            /// connection while loads are waiting and gives it back when none are (so
            /// closing the pool is not held up).
            pub(crate) fn start(pool: Pool, name: String) -> Self {
                let (queue, mut rx) = tokio::sync::mpsc::unbounded_channel::<LoadJob>();
                tokio::spawn(async move {
                    let mut conn: Option<Conn> = None;
                    let mut later: Vec<LoadJob> = Vec::new();
                    loop {
                        let mut jobs = std::mem::take(&mut later);
                        if jobs.is_empty() {
                            match rx.recv().await {
                                Some(j) => jobs.push(j),
                                None => break,
                            }
                        }
                        while jobs.len() < LOAD_MAX {
                            match rx.try_recv() {
                                Ok(j) => jobs.push(j),
                                Err(_) => break,
                            }
                        }
                        // One load per session in a query; another load of it waits for the next.
                        let mut seen = std::collections::HashSet::new();
                        let (now, again): (Vec<LoadJob>, Vec<LoadJob>) =
                            jobs.into_iter().partition(|j| seen.insert(j.id.as_str().to_owned()));
                        later = again;
                        let ids: Vec<&str> = now.iter().map(|j| j.id.as_str()).collect();
                        match read_many(&mut conn, &pool, &name, &ids).await {
                            Ok(mut by_id) => {
                                for j in now {
                                    let rows = by_id.remove(j.id.as_str()).unwrap_or_default();
                                    let _ = j.done.send(Some(rows));
                                }
                            }
                            Err(_) => {
                                conn = None;
                                for j in now {
                                    let _ = j.done.send(None);
                                }
                            }
                        }
                        if later.is_empty() && rx.is_empty() {
                            conn = None;
                        }
                    }
                });
                Loads { queue }
            }

            /// `id`'s load rows from the group loader; `None` when it is gone (its runtime
            /// shut down) or could not read them.
            async fn rows(&self, id: &SessionId) -> Option<Vec<Row>> {
                let (done, answer) = tokio::sync::oneshot::channel();
                self.queue.send(LoadJob { id: id.clone(), done }).ok()?;
                answer.await.ok().flatten()
            }
        }

        /// A write transaction on a group committer's own connection `conn` (taken from the
        /// pool when it has none; the committer drops it after a failed group, so a broken
        /// one is not used twice).
        async fn begin_on<'c>(conn: &'c mut Option<Conn>, pool: &Pool, name: &str, sql: &'static str) -> Result<Tx<'c>, PersistError> {
            if conn.is_none() {
                *conn = Some(pool.acquire().await.map_err(|e| backend(name, "begin", e))?);
            }
            let Some(c) = conn.as_mut() else {
                return Err(PersistError::Backend {
                    store: name.to_owned(),
                    op: "begin",
                    message: "no connection".into(),
                    source: None,
                });
            };
            sqlx::Connection::begin_with(&mut **c, sql).await.map_err(|e| backend(name, "begin", e))
        }

        async fn exec(tx: &mut Tx<'_>, name: &str, op: &'static str, sql: &str) -> Result<(), PersistError> {
            if sql.is_empty() {
                return Ok(());
            }
            sqlx::query(sql)
                .execute(&mut **tx)
                .await
                .map(|_| ())
                .map_err(|e| backend(name, op, e))
        }

        /// Applies the migrations this store lacks, in one transaction; refuses a newer store.
        pub(crate) async fn migrate(pool: &Pool, name: &str) -> Result<i64, PersistError> {
            let mut tx = begin(pool, name, DIALECT.begin_write).await?;
            exec(&mut tx, name, "migrate", DIALECT.migrate_lock).await?;
            exec(
                &mut tx,
                name,
                "migrate",
                "CREATE TABLE IF NOT EXISTS rath_meta (key TEXT PRIMARY KEY, value BIGINT NOT NULL)",
            )
            .await?;
            let found: Option<i64> =
                sqlx::query_scalar("SELECT value FROM rath_meta WHERE key = 'schema_version'")
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(|e| backend(name, "migrate", e))?;
            let found = found.unwrap_or(0);
            if found > SCHEMA_VERSION {
                return Err(PersistError::NewerSchema {
                    store: name.to_owned(),
                    found,
                    supported: SCHEMA_VERSION,
                });
            }
            let migrations: &[&[&str]] = DIALECT.migrations;
            for step in &migrations[found as usize..] {
                for sql in *step {
                    exec(&mut tx, name, "migrate", sql).await?;
                }
            }
            sqlx::query(
                "INSERT INTO rath_meta (key, value) VALUES ('schema_version', $1) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            )
            .bind(SCHEMA_VERSION)
            .execute(&mut *tx)
            .await
            .map_err(|e| backend(name, "migrate", e))?;
            tx.commit().await.map_err(|e| backend(name, "migrate", e))?;
            Ok(SCHEMA_VERSION)
        }

        /// Checks, writing nothing, that the database holds a store of this build's schema
        /// (what opening a store to read does instead of migrating it): no `rath_meta` table
        /// or no version in it is [`PersistError::NotAStore`], an older version
        /// [`PersistError::OlderSchema`], a newer one [`PersistError::NewerSchema`].
        pub(crate) async fn check_schema(pool: &Pool, name: &str) -> Result<(), PersistError> {
            let not_a_store = |reason: &str| PersistError::NotAStore {
                store: name.to_owned(),
                reason: reason.to_owned(),
            };
            let found: Option<i64> = match sqlx::query_scalar(
                "SELECT value FROM rath_meta WHERE key = 'schema_version'",
            )
            .fetch_optional(pool)
            .await
            {
                Ok(v) => v,
                Err(e) => {
                    let missing = e.as_database_error().is_some_and(|d| {
                        d.code().as_deref() == Some("42P01") || d.message().contains("no such table")
                    });
                    if missing {
                        return Err(not_a_store(
                            "it has no rath_meta table (a database of something else)",
                        ));
                    }
                    return Err(backend(name, "open", e));
                }
            };
            match found {
                None => Err(not_a_store("its rath_meta table holds no schema_version")),
                Some(found) if found > SCHEMA_VERSION => Err(PersistError::NewerSchema {
                    store: name.to_owned(),
                    found,
                    supported: SCHEMA_VERSION,
                }),
                Some(found) if found < SCHEMA_VERSION => Err(PersistError::OlderSchema {
                    store: name.to_owned(),
                    found,
                    supported: SCHEMA_VERSION,
                }),
                Some(_) => Ok(()),
            }
        }

        /// What a write needs to know of a stored session.
        struct Stored {
            key: i64,
            len: usize,
            digest: Vec<u8>,
            last_hash: Option<Vec<u8>>,
            content: Vec<u8>,
            created_us: i64,
        }

        async fn stored_row(tx: &mut Tx<'_>, name: &str, id: &str) -> Result<Option<Stored>, PersistError> {
            let sql = format!(
                "SELECT key, len, digest, {} AS last_hash, content, created_us FROM rath_sessions \
                 WHERE id = $1{}",
                DIALECT.hash_out,
                DIALECT.for_update
            );
            let row = sqlx::query(&sql)
                .bind(id)
                .fetch_optional(&mut **tx)
                .await
                .map_err(|e| backend(name, "read", e))?;
            row.map(|r| stored_from(name, &r)).transpose()
        }

        /// A [`Stored`] from a row with its columns (`key`, `len`, `digest`, `last_hash`,
        /// `content`, `created_us`).
        fn stored_from(name: &str, row: &<$db as sqlx::Database>::Row) -> Result<Stored, PersistError> {
            let get = |e: sqlx::Error| backend(name, "read", e);
            Ok(Stored {
                key: row.try_get("key").map_err(get)?,
                len: row.try_get::<i64, _>("len").map_err(get)? as usize,
                digest: row.try_get("digest").map_err(get)?,
                last_hash: row.try_get("last_hash").map_err(get)?,
                content: row.try_get("content").map_err(get)?,
                created_us: row.try_get("created_us").map_err(get)?,
            })
        }

        /// Stores the chunks of `key` at positions `from..` as segment rows (one per
        /// [`SEGMENT_CHUNKS`]); returns how many chunks that is.
        async fn insert_segments(
            tx: &mut Tx<'_>,
            name: &str,
            key: i64,
            from: usize,
            chunks: &[EncodedChunk],
        ) -> Result<usize, PersistError> {
            for (n, part) in chunks.chunks(SEGMENT_CHUNKS).enumerate() {
                sqlx::query(
                    "INSERT INTO rath_segments (session_key, pos, n, docs) VALUES ($1, $2, $3, $4)",
                )
                .bind(key)
                .bind((from + n * SEGMENT_CHUNKS) as i64)
                .bind(part.len() as i32)
                .bind(encode_segment(part))
                .execute(&mut **tx)
                .await
                .map_err(|e| backend(name, "write chunks", e))?;
            }
            Ok(chunks.len())
        }

        /// The stored parents of `s`, in lineage order: `(key, len, digest)` of each (a
        /// parent not in the store is left out), read under the store's share lock in one
        /// query; with `same` (`(digest, len)`), the same query also looks for a stored
        /// session holding exactly those chunks (see [`same_chunks`]) and returns its key.
        async fn stored_parents(
            tx: &mut Tx<'_>,
            name: &str,
            s: &Session,
            same: Option<(&[u8], usize)>,
        ) -> Result<(Parents, Option<i64>), PersistError> {
            let ids: Vec<&str> = s.lineage().parents.iter().map(|p| p.as_str()).collect();
            if ids.is_empty() && same.is_none() {
                return Ok((Vec::new(), None));
            }
            let parents = format!(
                "SELECT key, len, digest, id, 0 AS same FROM (SELECT key, len, digest, id FROM \
                 rath_sessions WHERE id IN ({}){}) p",
                DIALECT.json_ids, DIALECT.for_share
            );
            let sql = if same.is_some() {
                format!(
                    "{parents} UNION ALL SELECT key, len, digest, id, 1 FROM ({}) q",
                    same_chunks_sql("$2", "$3")
                )
            } else {
                parents
            };
            let mut q = sqlx::query(&sql).bind(json_list(name, &ids)?);
            if let Some((digest, len)) = same {
                q = q.bind(digest).bind(len as i64);
            }
            let rows = q
                .fetch_all(&mut **tx)
                .await
                .map_err(|e| backend(name, "read", e))?;
            let get = |e: sqlx::Error| backend(name, "read", e);
            let mut found: std::collections::HashMap<String, (i64, usize, Vec<u8>)> =
                std::collections::HashMap::with_capacity(rows.len());
            let mut same_key = None;
            for row in &rows {
                let key: i64 = row.try_get("key").map_err(get)?;
                if row.try_get::<i32, _>("same").map_err(get)? == 1 {
                    same_key = Some(key);
                    continue;
                }
                let len = row.try_get::<i64, _>("len").map_err(get)? as usize;
                let digest: Vec<u8> = row.try_get("digest").map_err(get)?;
                found.insert(row.try_get("id").map_err(get)?, (key, len, digest));
            }
            let out = ids.iter().filter_map(|id| found.get(*id).cloned()).collect();
            Ok((out, same_key))
        }

        /// `(key, len, digest)` of each stored parent of a session, in lineage order.
        type Parents = Vec<(i64, usize, Vec<u8>)>;

        /// The stored parents of `s` (see [`stored_parents`]), read the first time a write
        /// asks for them and kept in `cache` for the rest of it.
        async fn parents_once<'a>(
            tx: &mut Tx<'_>,
            name: &str,
            s: &Session,
            cache: &'a mut Option<Parents>,
        ) -> Result<&'a Parents, PersistError> {
            if cache.is_none() {
                *cache = Some(stored_parents(tx, name, s, None).await?.0);
            }
            Ok(cache.get_or_insert_with(Vec::new))
        }

        /// A parent of `s` other than its base whose whole chunk list is exactly `own`
        /// (what a merge's second half is): `(key, len)`; the session then points at it
        /// instead of storing those chunks again.
        async fn graft_of(
            tx: &mut Tx<'_>,
            name: &str,
            s: &Session,
            parents: &mut Option<Parents>,
            base: Option<i64>,
            own: &[EncodedChunk],
        ) -> Result<Option<(i64, usize)>, PersistError> {
            if own.is_empty() || s.lineage().parents.len() < 2 {
                return Ok(None);
            }
            Ok(pick_graft(parents_once(tx, name, s, parents).await?, base, own))
        }

        /// The first of `parents` other than `base` whose whole chunk list is `own` (see
        /// [`graft_of`]).
        fn pick_graft(parents: &Parents, base: Option<i64>, own: &[EncodedChunk]) -> Option<(i64, usize)> {
            let mut want: Option<Vec<u8>> = None;
            for &(key, len, ref digest) in parents {
                if Some(key) == base || len != own.len() {
                    continue;
                }
                let want = want.get_or_insert_with(|| {
                    prefix_digests(empty_digest(), own).pop().unwrap_or_else(empty_digest)
                });
                if want == digest {
                    return Some((key, len));
                }
            }
            None
        }

        /// The longest stored parent of `s` whose chunks are exactly `s`'s first ones:
        /// `(key, len)`, or `None` (the session then stores all its refs).
        async fn shared_base(
            tx: &mut Tx<'_>,
            name: &str,
            s: &Session,
            parents: &mut Option<Parents>,
            digests: &[Vec<u8>],
        ) -> Result<Option<(i64, usize)>, PersistError> {
            // The parents and a session with exactly these chunks (what a detach, which
            // names no parent, starts as), in one query.
            let n = digests.len() - 1;
            let (stored, same) =
                stored_parents(tx, name, s, (n > 0).then(|| (digests[n].as_slice(), n))).await?;
            let best = pick_base(&stored, digests, same);
            *parents = Some(stored);
            Ok(best)
        }

        /// What [`shared_base`] picks from what it read: the longest of the `stored` parents
        /// whose chunks are the session's first ones (`digests[k]`: the digest of its first
        /// `k`), unless `same` (a stored session with exactly its chunks) shares more.
        fn pick_base(stored: &Parents, digests: &[Vec<u8>], same: Option<i64>) -> Option<(i64, usize)> {
            let n = digests.len() - 1;
            let mut best: Option<(i64, usize)> = None;
            for &(key, len, ref digest) in stored {
                if len > 0
                    && len < digests.len()
                    && digests[len] == *digest
                    && best.is_none_or(|(_, l)| len > l)
                {
                    best = Some((key, len));
                }
            }
            if n > 0 && best.is_none_or(|(_, l)| l < n) {
                if let Some(key) = same {
                    best = Some((key, n));
                }
            }
            best
        }

        /// The stored parent of `s` sharing the longest run of first chunks with it when
        /// no parent's whole chunk list is a prefix of `s` (a parent that grew after `s`
        /// forked from it, a route that replaces the last chunk, a merge of forks that
        /// share a prefix): `(key, shared)`, found by reading the parents' chunks.
        async fn partly_shared_base(
            tx: &mut Tx<'_>,
            name: &str,
            s: &Session,
            chunks: &[EncodedChunk],
        ) -> Result<Option<(i64, usize)>, PersistError> {
            let sql = format!("SELECT key FROM rath_sessions WHERE id = $1{}", DIALECT.for_share);
            let mut best: Option<(i64, usize)> = None;
            for parent in s.lineage().parents.iter() {
                let key: Option<i64> = sqlx::query_scalar(&sql)
                    .bind(parent.as_str())
                    .fetch_optional(&mut **tx)
                    .await
                    .map_err(|e| backend(name, "read", e))?;
                let Some(key) = key else { continue };
                let (docs, _) = chain_docs(tx, name, parent, key).await?;
                let shared = docs
                    .split(|b| *b == b'\n')
                    .zip(chunks)
                    .take_while(|(d, c)| crate::codec::chunk_hash(d) == c.hash)
                    .count();
                if shared > 0 && best.is_none_or(|(_, l)| shared > l) {
                    best = Some((key, shared));
                }
            }
            Ok(best)
        }

        /// A stored session holding exactly `len` chunks of chain digest `digest`, found by
        /// the digest it was saved with (indexed; an append does not change it).
        async fn same_chunks(
            tx: &mut Tx<'_>,
            name: &str,
            digest: &[u8],
            len: usize,
        ) -> Result<Option<i64>, PersistError> {
            sqlx::query_scalar(&same_chunks_sql("$1", "$2"))
                .bind(digest)
                .bind(len as i64)
                .fetch_optional(&mut **tx)
                .await
                .map_err(|e| backend(name, "read", e))
        }

        /// The query of [`same_chunks`] (`key` first, then `len`, `digest`, `id`), its
        /// digest and length the parameters `digest` and `len`; [`stored_parents`] runs it
        /// inside its own query.
        fn same_chunks_sql(digest: &str, len: &str) -> String {
            format!(
                "SELECT key, len, digest, id FROM rath_sessions WHERE saved_digest = {digest} \
                 AND digest = {digest} AND len = {len} ORDER BY key LIMIT 1{}",
                DIALECT.for_share
            )
        }

        enum Times {
            Now,
            Given(Timestamp, Option<Timestamp>),
        }

        fn exists(name: &str, id: &SessionId) -> PersistError {
            PersistError::Exists {
                path: PathBuf::from(format!("{name}#{id}")),
            }
        }

        /// Sessions a write learned, remembered once it commits.
        type Learned = Vec<(String, Known)>;

        /// The base a remembered session offers `s`, when its row still has the remembered
        /// length and digest: `(key, len, digest)`.
        async fn remembered_base(
            tx: &mut Tx<'_>,
            name: &str,
            known: &KnownSessions,
            s: &Session,
        ) -> Result<Option<(i64, usize, Vec<u8>)>, PersistError> {
            let Some(k) = known.base_of(s) else {
                return Ok(None);
            };
            let sql = format!(
                "SELECT len, digest FROM rath_sessions WHERE key = $1{}",
                DIALECT.for_share
            );
            let row = sqlx::query(&sql)
                .bind(k.key)
                .fetch_optional(&mut **tx)
                .await
                .map_err(|e| backend(name, "read", e))?;
            let Some(row) = row else { return Ok(None) };
            let get = |e: sqlx::Error| backend(name, "read", e);
            let len = row.try_get::<i64, _>("len").map_err(get)? as usize;
            let digest: Vec<u8> = row.try_get("digest").map_err(get)?;
            Ok((len == k.chunks.len() && digest == k.digest).then_some((k.key, len, digest)))
        }

        /// The content address of a new row's last chunk: its own last one, else (all of
        /// them shared) the session's last one, encoded.
        fn last_hash_of(s: &Session, own: &[EncodedChunk]) -> Result<Option<Vec<u8>>, PersistError> {
            match own.last() {
                Some(c) => Ok(Some(c.hash.clone())),
                None => s.chunks().last().map(|c| encode_one(c).map(|e| e.hash)).transpose(),
            }
        }

        /// A session not stored yet (or, when stored, the very same one: a no-op). The
        /// chunks it shares with a remembered session are neither encoded nor hashed.
        async fn save_new(
            tx: &mut Tx<'_>,
            name: &str,
            known: &KnownSessions,
            learned: &mut Learned,
            s: &Session,
            times: Times,
            absent: bool,
        ) -> Result<WriteReport, PersistError> {
            let id = s.id();
            let mut parents: Option<Parents> = None;
            let (base, own, digest) = match remembered_base(tx, name, known, s).await? {
                Some((key, len, start)) => {
                    let own = encode_from(s, len)?;
                    let mut digests = prefix_digests(start, &own);
                    let digest = digests.pop().unwrap_or_else(empty_digest);
                    // A stored session with exactly these chunks shares them all, as on the
                    // path without a remembered base.
                    let same = if own.is_empty() {
                        None
                    } else {
                        same_chunks(tx, name, &digest, s.len()).await?
                    };
                    match same {
                        Some(same) => (Some((same, s.len())), Vec::new(), digest),
                        None => (Some((key, len)), own, digest),
                    }
                }
                None => {
                    let mut chunks = encode_from(s, 0)?;
                    let digests = prefix_digests(empty_digest(), &chunks);
                    let base = match shared_base(tx, name, s, &mut parents, &digests).await? {
                        Some(b) => Some(b),
                        None => partly_shared_base(tx, name, s, &chunks).await?,
                    };
                    let own = chunks.split_off(base.map_or(0, |(_, l)| l));
                    let digest = digests.last().cloned().unwrap_or_else(empty_digest);
                    (base, own, digest)
                }
            };
            let digest = &digest;
            let graft = graft_of(tx, name, s, &mut parents, base.map(|(k, _)| k), &own).await?;
            let own = if graft.is_some() { Vec::new() } else { own };
            // `absent`: the write read the row already, in this transaction, and found none
            // (a concurrent insert then fails the insert below as a unique violation).
            let row = if absent {
                None
            } else {
                stored_row(tx, name, id.as_str()).await?
            };
            if let Some(row) = row {
                let epoch = Timestamp::from_unix_micros(0);
                let content = encode_state(s, epoch, None, digest)?.content;
                if row.content == content {
                    learned.push((
                        id.to_string(),
                        Known {
                            key: row.key,
                            digest: row.digest,
                            chunks: s.chunks().clone(),
                        },
                    ));
                    return Ok(report(s, 0, true));
                }
                return Err(exists(name, id));
            }
            let (created, closed) = match times {
                Times::Now => {
                    let created = s.stamper().now();
                    (created, Some(s.stamper().now()))
                }
                Times::Given(c, closed) => (c, closed),
            };
            let base_len = base.map_or(0, |(_, l)| l);
            let state = encode_state(s, created, closed, digest)?;
            let last_hash = last_hash_of(s, &own)?;
            let sql = format!(
                "INSERT INTO rath_sessions (id, base_key, base_len, len, digest, saved_digest, \
                 last_hash, content, created_us, header, trailer, failure, conversation, \
                 evidence, graft_key, graft_len) VALUES ($1, $2, $3, $4, $5, $5, {}, $7, $8, \
                 $9, $10, $11, $12, $13, $14, $15) RETURNING key",
                hash_in("$6")
            );
            let insert = sqlx::query_scalar::<_, i64>(&sql)
            .bind(id.as_str())
            .bind(base.map(|(k, _)| k))
            .bind(base_len as i64)
            .bind(s.len() as i64)
            .bind(digest)
            .bind(last_hash)
            .bind(&state.content)
            .bind(created.unix_micros())
            .bind(&state.header)
            .bind(&state.trailer)
            .bind(&state.failure)
            .bind(state.conversation)
            .bind(state.evidence)
            .bind(graft.map(|(k, _)| k))
            .bind(graft.map_or(0, |(_, l)| l as i64))
            .fetch_one(&mut **tx)
            .await;
            let key = match insert {
                Ok(k) => k,
                Err(e) if is_unique_violation(&e) => return Err(exists(name, id)),
                Err(e) => return Err(backend(name, "write session", e)),
            };
            let graft_len = graft.map_or(0, |(_, l)| l);
            let written = insert_segments(tx, name, key, base_len + graft_len, &own).await?;
            learned.push((
                id.to_string(),
                Known {
                    key,
                    digest: digest.clone(),
                    chunks: s.chunks().clone(),
                },
            ));
            Ok(report(s, written, false))
        }

        fn report(s: &Session, written: usize, unchanged: bool) -> WriteReport {
            let mut r = WriteReport::new(s.id().clone(), s.len());
            r.chunks_written = written;
            r.unchanged = unchanged;
            r
        }

        async fn append(
            tx: &mut Tx<'_>,
            name: &str,
            known: &KnownSessions,
            learned: &mut Learned,
            s: &Session,
            expected: usize,
        ) -> Result<WriteReport, PersistError> {
            let conflict = |found: Option<usize>| PersistError::Conflict {
                store: name.to_owned(),
                id: s.id().to_string(),
                expected,
                found,
            };
            let Some(row) = stored_row(tx, name, s.id().as_str()).await? else {
                if expected != 0 {
                    return Err(conflict(None));
                }
                return match save_new(tx, name, known, learned, s, Times::Now, true).await {
                    Err(PersistError::Exists { .. }) => Err(conflict(Some(0))),
                    other => other,
                };
            };
            continues_row(name, s, expected, &row)?;
            let new = encode_from(s, expected)?;
            let digests = prefix_digests(row.digest.clone(), &new);
            let digest = &digests[new.len()];
            let written = insert_segments(tx, name, row.key, expected, &new).await?;
            let created = Timestamp::from_unix_micros(row.created_us);
            let state = encode_state(s, created, Some(s.stamper().now()), digest)?;
            let last_hash = new.last().map(|c| c.hash.clone()).or(row.last_hash);
            let sql = format!(
                "UPDATE rath_sessions SET len = $1, digest = $2, last_hash = {}, content = $4, \
                 header = $5, trailer = $6, failure = $7, conversation = $8, evidence = $9 \
                 WHERE key = $10",
                hash_in("$3")
            );
            sqlx::query(&sql)
            .bind(s.len() as i64)
            .bind(digest)
            .bind(last_hash)
            .bind(&state.content)
            .bind(&state.header)
            .bind(&state.trailer)
            .bind(&state.failure)
            .bind(state.conversation)
            .bind(state.evidence)
            .bind(row.key)
            .execute(&mut **tx)
            .await
            .map_err(|e| backend(name, "write session", e))?;
            learned.push((
                s.id().to_string(),
                Known {
                    key: row.key,
                    digest: digest.clone(),
                    chunks: s.chunks().clone(),
                },
            ));
            Ok(report(s, written, false))
        }

        /// Refuses an append of `s` expecting `expected` stored chunks to `row`: a `Conflict`
        /// when the row holds another count, `NotAContinuation` when `s` does not start with
        /// the stored chunks (its chunk at `expected - 1` is not the row's last).
        fn continues_row(name: &str, s: &Session, expected: usize, row: &Stored) -> Result<(), PersistError> {
            if row.len != expected {
                return Err(PersistError::Conflict {
                    store: name.to_owned(),
                    id: s.id().to_string(),
                    expected,
                    found: Some(row.len),
                });
            }
            let continues = s.len() >= expected
                && (expected == 0
                    || s.chunks()
                        .get(expected - 1)
                        .map(encode_one)
                        .transpose()?
                        .map(|c| c.hash)
                        == row.last_hash);
            if !continues {
                return Err(PersistError::NotAContinuation {
                    path: PathBuf::from(format!("{name}#{}", s.id())),
                    message: format!(
                        "session {} does not continue the {expected} chunks stored",
                        s.id()
                    ),
                });
            }
            Ok(())
        }

        /// Checks `fences` (of distinct keys) in one statement: each key's newest token
        /// becomes the larger of the stored one and the fence's, and a fence below the
        /// stored one is refused (the first such one's error).
        async fn check_fences(tx: &mut Tx<'_>, name: &str, fences: &[&rath_persist::Fence]) -> Result<(), PersistError> {
            let fenced = |f: &rath_persist::Fence, current: u64| PersistError::Fenced {
                store: name.to_owned(),
                key: f.key.clone(),
                token: f.token,
                current,
            };
            let keys: Vec<String> = fences.iter().map(|f| format!("fence:{}", f.key)).collect();
            // Upserted in key order: two committers' groups (PostgreSQL has two) checking the
            // same fences lock those rows in one order, so one waits for the other instead of
            // deadlocking. (A deadlock PostgreSQL breaks fails a group, which is then done
            // batch by batch: slower, never wrong.)
            let mut order: Vec<usize> = (0..fences.len()).collect();
            order.sort_by(|a, b| keys[*a].cmp(&keys[*b]));
            let mut rows = Vec::with_capacity(fences.len());
            for (f, k) in order.iter().map(|&i| (fences[i], &keys[i])) {
                let token = i64::try_from(f.token).map_err(|_| fenced(f, i64::MAX as u64))?;
                rows.push(serde_json::json!({"k": k, "t": token}));
            }
            let sql = format!(
                "INSERT INTO rath_meta (key, value) {} ON CONFLICT (key) DO UPDATE \
                 SET value = CASE WHEN rath_meta.value < excluded.value THEN excluded.value \
                 ELSE rath_meta.value END RETURNING key, value",
                DIALECT.fence_rows
            );
            let current: std::collections::HashMap<String, i64> = sqlx::query_as::<_, (String, i64)>(&sql)
                .bind(serde_json::Value::Array(rows).to_string())
                .fetch_all(&mut **tx)
                .await
                .map_err(|e| backend(name, "fence", e))?
                .into_iter()
                .collect();
            for (f, k) in fences.iter().zip(&keys) {
                let now = current.get(k).copied().unwrap_or(i64::MAX);
                if now as u64 > f.token {
                    return Err(fenced(f, now as u64));
                }
            }
            Ok(())
        }

        /// The writes of a batch inside an open write transaction (the fence checked
        /// first); what they taught goes to `learned`, to remember once committed.
        async fn batch_in(
            tx: &mut Tx<'_>,
            name: &str,
            known: &KnownSessions,
            learned: &mut Learned,
            batch: &WriteBatch<'_>,
            fence_checked: bool,
        ) -> Result<Vec<WriteReport>, PersistError> {
            if let Some(fence) = &batch.fence
                && !fence_checked
            {
                check_fences(tx, name, &[fence]).await?;
            }
            let mut reports = Vec::with_capacity(batch.writes.len());
            for w in &batch.writes {
                let r = match *w {
                    Write::Save(s) => save_new(tx, name, known, learned, s, Times::Now, false).await?,
                    Write::Restore(l) => {
                        let closed = l
                            .closed
                            .then(|| l.closed_at.unwrap_or_else(|| l.session.stamper().now()));
                        let times = Times::Given(l.created_at, closed);
                        save_new(tx, name, known, learned, &l.session, times, false).await?
                    }
                    Write::Append {
                        session,
                        expected_len,
                    } => append(tx, name, known, learned, session, expected_len).await?,
                    _ => {
                        return Err(PersistError::Unsupported {
                            store: name.to_owned(),
                            what: "this kind of write",
                        });
                    }
                };
                reports.push(r);
            }
            Ok(reports)
        }

        /// Performs a batch in one transaction.
        async fn write_in(
            pool: &Pool,
            name: &str,
            known: &KnownSessions,
            batch: WriteBatch<'_>,
        ) -> Result<Vec<WriteReport>, PersistError> {
            let mut learned = Learned::new();
            let mut tx = begin(pool, name, DIALECT.begin_locked).await?;
            let reports = batch_in(&mut tx, name, known, &mut learned, &batch, false).await?;
            tx.commit().await.map_err(|e| backend(name, "commit", e))?;
            for (id, k) in learned {
                known.remember(&id, k);
            }
            Ok(reports)
        }

        /// A write of a batch handed to the group committer: the session cloned (a clone
        /// shares its chunks).
        enum OwnedWrite {
            Save(Session),
            Append(Session, usize),
        }

        /// A batch waiting for the group committer, and who is told how it went.
        pub(crate) struct Pending {
            writes: Vec<OwnedWrite>,
            fence: Option<rath_persist::Fence>,
            done: tokio::sync::oneshot::Sender<Result<Vec<WriteReport>, PersistError>>,
        }

        impl Pending {
            fn batch(&self) -> WriteBatch<'_> {
                let mut b = WriteBatch::new();
                for w in &self.writes {
                    b = b.with(match w {
                        OwnedWrite::Save(s) => Write::Save(s),
                        OwnedWrite::Append(s, n) => Write::Append {
                            session: s,
                            expected_len: *n,
                        },
                    });
                }
                if let Some(f) = &self.fence {
                    b = b.fenced(f.clone());
                }
                b
            }
        }

        /// How long a group committer keeps its connection without a write to do: taking
        /// one from the pool again tests it with a round trip, which on a loaded server
        /// waits its turn for a CPU like any other.
        const KEEP_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

        /// Batches one group transaction takes at most.
        const GROUP_MAX: usize = 128;

        /// The queues of a store's group committers (a batch goes to the one its first
        /// session's id picks, so writes of one session keep their order).
        pub(crate) type Group = std::sync::Arc<[tokio::sync::mpsc::UnboundedSender<Pending>]>;

        /// Starts the group committers of a store (on the current tokio runtime), each a
        /// lane of `rath_group_commit` running a [`Committer`]: it takes every batch
        /// waiting and does them in one transaction; should one fail (a conflict, a
        /// fence), each is done again in a transaction of its own, so the failing batch
        /// fails alone and the others commit. Each batch is atomic and sees the batches
        /// before it, as if done one after another; each waiter is told once the
        /// transaction committed. `lanes` committers run side by side (PostgreSQL: each
        /// waits on its own round trips; SQLite has one writer at a time, so one).
        pub(crate) fn group(pool: Pool, name: String, known: std::sync::Arc<KnownSessions>, lanes: usize) -> Group {
            let options = rath_group_commit::LaneOptions::default().max(GROUP_MAX).keep_idle(KEEP_IDLE);
            (0..lanes.max(1))
                .map(|_| {
                    let committer = Committer::new(pool.clone(), name.clone(), known.clone(), true);
                    rath_group_commit::Lane::spawn(committer, options)
                })
                .collect()
        }

        /// A store's side of its group-commit lane.
        struct Committer {
            pool: Pool,
            name: String,
            known: std::sync::Arc<KnownSessions>,
            /// The committer's own connection (see `begin_on`): one checkout for a burst of
            /// groups, not one each (sqlx tests a connection with a round trip when it is
            /// handed out and again when it comes back).
            conn: Option<Conn>,
            /// Whether a group takes the set path (false: every batch one after another in
            /// the group's transaction, what the set path must come out the same as).
            set_path: bool,
        }

        impl Committer {
            fn new(pool: Pool, name: String, known: std::sync::Arc<KnownSessions>, set_path: bool) -> Self {
                Committer { pool, name, known, conn: None, set_path }
            }
        }

        /// A group is one transaction ([`group_all`]); a batch after a failed group is done
        /// alone ([`write_in`]), so the failing one fails by itself and the others commit,
        /// as if each had been done after the one before.
        impl rath_group_commit::Group for Committer {
            type Job = Pending;
            type Answer = (Vec<WriteReport>, Learned);
            type Error = PersistError;

            async fn together(&mut self, jobs: &[Pending]) -> Result<Vec<Result<(Vec<WriteReport>, Learned), PersistError>>, PersistError> {
                let done = group_all(&mut self.conn, &self.pool, &self.name, jobs, &self.known, self.set_path).await?;
                Ok(done.into_iter().map(Ok).collect())
            }

            async fn alone(&mut self, job: &Pending) -> Result<(Vec<WriteReport>, Learned), PersistError> {
                let reports = write_in(&self.pool, &self.name, &self.known, job.batch()).await?;
                Ok((reports, Learned::new()))
            }

            fn answer(&mut self, job: Pending, answer: Result<(Vec<WriteReport>, Learned), PersistError>) {
                let answer = answer.map(|(reports, learned)| {
                    for (id, k) in learned {
                        self.known.remember(&id, k);
                    }
                    reports
                });
                let _ = job.done.send(answer);
            }

            fn holds_connection(&self) -> bool {
                self.conn.is_some()
            }

            fn release(&mut self) {
                self.conn = None;
            }

            /// A pool's close waits for every connection: the kept one goes back at once.
            fn closing(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
                self.pool.close_event()
            }
        }

        /// The batches of `jobs` in one transaction, committed only if every one of them
        /// succeeded (dropping the transaction rolls it back).
        async fn group_all(
            conn: &mut Option<Conn>,
            pool: &Pool,
            name: &str,
            jobs: &[Pending],
            known: &KnownSessions,
            set_path: bool,
        ) -> Result<Vec<(Vec<WriteReport>, Learned)>, PersistError> {
            let mut tx = begin_on(conn, pool, name, DIALECT.begin_locked).await?;
            // The fences of batches guarding different keys are checked in one statement
            // (each key's check is independent of the other batches' writes).
            let fences: Vec<&rath_persist::Fence> = jobs.iter().filter_map(|j| j.fence.as_ref()).collect();
            let mut keys = std::collections::HashSet::with_capacity(fences.len());
            let checked = fences.len() > 1 && fences.iter().all(|f| keys.insert(f.key.as_str()));
            if checked {
                check_fences(&mut tx, name, &fences).await?;
            }
            let mut results = Vec::with_capacity(jobs.len());
            let mut i = 0;
            while i < jobs.len() {
                // The one-write batches (a save or an append) of distinct sessions from here
                // go the set path, as many as it can do; a batch it leaves is done on its own.
                let mut end = i;
                let mut seen = std::collections::HashSet::new();
                while end < jobs.len()
                    && set_write(&jobs[end]).is_some_and(|(s, _)| seen.insert(s.id().as_str()))
                {
                    end += 1;
                }
                // One batch too: the set path makes fewer round trips than `batch_in`.
                if set_path && end > i {
                    let done = group_set(&mut tx, name, known, &jobs[i..end], checked).await?;
                    if !done.is_empty() {
                        i += done.len();
                        results.extend(done);
                        continue;
                    }
                }
                let mut learned = Learned::new();
                let reports = batch_in(&mut tx, name, known, &mut learned, &jobs[i].batch(), checked).await?;
                results.push((reports, learned));
                i += 1;
            }
            tx.commit().await.map_err(|e| backend(name, "commit", e))?;
            Ok(results)
        }

        /// The one write of a batch the set path of a group can do: a save (`None`) or an
        /// append (the length the session's row must have; 0: the row must not exist yet).
        fn set_write(j: &Pending) -> Option<(&Session, Option<usize>)> {
            match j.writes.as_slice() {
                [OwnedWrite::Append(s, n)] => Some((s, Some(*n))),
                [OwnedWrite::Save(s)] => Some((s, None)),
                _ => None,
            }
        }

        fn json_list<T: serde::Serialize>(name: &str, v: &T) -> Result<String, PersistError> {
            serde_json::to_string(v).map_err(|e| PersistError::Backend {
                store: name.to_owned(),
                op: "encode",
                message: e.to_string(),
                source: None,
            })
        }

        /// A new session's row, as the set path plans it.
        struct NewRow {
            job: usize,
            base: Option<(i64, usize)>,
            graft: Option<(i64, usize)>,
            digest: Vec<u8>,
            last_hash: Option<Vec<u8>>,
            state: EncodedState,
            created_us: i64,
            own: Vec<EncodedChunk>,
        }

        /// An append to a stored row, as the set path plans it.
        struct AppendRow {
            job: usize,
            key: i64,
            digest: Vec<u8>,
            last_hash: Option<Vec<u8>>,
            state: EncodedState,
            own: Vec<EncodedChunk>,
        }

        /// What planning a new session needs before it reads the store: the session it
        /// remembers as a base, the chunks to encode (after that base, or all), their
        /// prefix digests and the session's digest.
        struct Fresh {
            remembered: Option<(String, Known)>,
            chunks: Vec<EncodedChunk>,
            digests: Vec<Vec<u8>>,
            digest: Vec<u8>,
        }

        /// The set path of a group: from the start of `jobs` (each one save or append, see
        /// [`set_write`], of sessions all distinct), as many jobs as come out exactly as
        /// they would one after another ([`save_new`], [`append`]), done with a few
        /// statements for all of them: one read (their rows, their parents' and remembered
        /// bases' rows, and the sessions that may already hold their chunks), one insert of
        /// the new rows and every segment (one statement on PostgreSQL, two on SQLite), one
        /// update of the appended rows. A lone save or append goes this way too: its fewer
        /// round trips than [`batch_in`]'s are what counts on a loaded server.
        /// A job stops the prefix when it reads what an earlier one of it writes (its
        /// parent, its remembered base, a session with its very chunks) or needs a read
        /// this path does not make (a parent's chunks, several sessions with its chunks, a
        /// remembered base whose row changed); the caller does it one by one. Returns the
        /// prefix's results (none: the first job stops it). An error is a job's that would
        /// fail one by one too (a conflict, a fence, a row inserted meanwhile): the
        /// caller's group then fails and is done again batch by batch.
        async fn group_set(
            tx: &mut Tx<'_>,
            name: &str,
            known: &KnownSessions,
            jobs: &[Pending],
            fences_checked: bool,
        ) -> Result<Vec<(Vec<WriteReport>, Learned)>, PersistError> {
            let writes: Vec<(&Session, Option<usize>)> = jobs.iter().filter_map(set_write).collect();
            if writes.len() != jobs.len() {
                return Ok(Vec::new());
            }
            let get = |e: sqlx::Error| backend(name, "read", e);
            // The chunks of every session that may be new (a save, an append to a session
            // that must not be stored yet), and what their planning reads: before the
            // store is read, so one statement reads it all (the rows may say a session is
            // stored after all: its chunks were encoded for nothing and its parents read for
            // nothing, which is rare).
            let mut fresh: Vec<Option<Fresh>> = Vec::with_capacity(writes.len());
            let mut look: Vec<String> = Vec::new();
            let mut digests_wanted: Vec<serde_json::Value> = Vec::new();
            for (s, n) in &writes {
                if n.is_some_and(|n| n != 0) {
                    fresh.push(None);
                    continue;
                }
                let remembered = known.named_base_of(s);
                let (chunks, digests) = match &remembered {
                    Some((_, k)) => {
                        let own = encode_from(s, k.chunks.len())?;
                        let d = prefix_digests(k.digest.clone(), &own);
                        (own, d)
                    }
                    None => {
                        let all = encode_from(s, 0)?;
                        let d = prefix_digests(empty_digest(), &all);
                        (all, d)
                    }
                };
                let digest = digests.last().cloned().unwrap_or_else(empty_digest);
                look.extend(s.lineage().parents.iter().map(|p| p.to_string()));
                if let Some((id, _)) = &remembered {
                    look.push(id.clone());
                }
                if !chunks.is_empty() {
                    digests_wanted.push(serde_json::json!({"d": hex(&digest), "n": s.len()}));
                }
                fresh.push(Some(Fresh {
                    remembered,
                    chunks,
                    digests,
                    digest,
                }));
            }
            // One statement, one round trip: the sessions' own rows, locked in key order;
            // the rows of the parents and remembered bases; and for each wanted
            // `(digest, len)` the stored session [`same_chunks`] would find (the lowest key
            // holding exactly those chunks), one row per pair however many sessions hold
            // the same chunks. Each row says which of the three it is.
            let ids: Vec<&str> = writes.iter().map(|(s, _)| s.id().as_str()).collect();
            let (wanted, null_text, null_bytes, null_int) = if DIALECT.pg {
                (
                    "SELECT decode(w->>'d', 'hex') AS d, (w->>'n')::bigint AS n \
                     FROM json_array_elements($3::json) w",
                    "NULL::text",
                    "NULL::bytea",
                    "NULL::bigint",
                )
            } else {
                (
                    "SELECT unhex(json_extract(value, '$.d')) AS d, json_extract(value, '$.n') AS n \
                     FROM json_each($3)",
                    "NULL",
                    "NULL",
                    "NULL",
                )
            };
            let sql = format!(
                "WITH mine AS (SELECT id, key, len, digest, {hash_out} AS last_hash, content, created_us \
                 FROM rath_sessions WHERE id IN ({mine_ids}) ORDER BY key{update}), \
                 parents AS (SELECT id, key, len, digest FROM rath_sessions WHERE id IN ({parent_ids}){share}), \
                 holders AS (SELECT key, len, digest, saved_digest FROM rath_sessions WHERE key IN \
                 (SELECT (SELECT s.key FROM rath_sessions s WHERE s.saved_digest = w.d \
                 AND s.digest = w.d AND s.len = w.n ORDER BY s.key LIMIT 1) FROM ({wanted}) w){share}) \
                 SELECT 0 AS what, id, key, len, digest, last_hash, content, created_us, {null_bytes} AS saved_digest FROM mine \
                 UNION ALL SELECT 1, id, key, len, digest, {null_bytes}, {null_bytes}, {null_int}, {null_bytes} FROM parents \
                 UNION ALL SELECT 2, {null_text}, key, len, digest, {null_bytes}, {null_bytes}, {null_int}, saved_digest FROM holders",
                hash_out = DIALECT.hash_out,
                mine_ids = DIALECT.json_ids,
                parent_ids = DIALECT.json_ids.replace("$1", "$2"),
                update = DIALECT.for_update,
                share = DIALECT.for_share,
            );
            let mut rows: std::collections::HashMap<String, Stored> = std::collections::HashMap::new();
            let mut found: std::collections::HashMap<String, (i64, usize, Vec<u8>)> =
                std::collections::HashMap::new();
            // `(key, len, digest, saved)` of each holder.
            let mut holders: Vec<(i64, usize, Vec<u8>, Vec<u8>)> = Vec::new();
            for row in sqlx::query(&sql)
                .bind(json_list(name, &ids)?)
                .bind(json_list(name, &look)?)
                .bind(json_list(name, &digests_wanted)?)
                .fetch_all(&mut **tx)
                .await
                .map_err(get)?
            {
                match row.try_get::<i32, _>("what").map_err(get)? {
                    0 => {
                        rows.insert(row.try_get("id").map_err(get)?, stored_from(name, &row)?);
                    }
                    1 => {
                        found.insert(
                            row.try_get("id").map_err(get)?,
                            (
                                row.try_get("key").map_err(get)?,
                                row.try_get::<i64, _>("len").map_err(get)? as usize,
                                row.try_get("digest").map_err(get)?,
                            ),
                        );
                    }
                    _ => holders.push((
                        row.try_get("key").map_err(get)?,
                        row.try_get::<i64, _>("len").map_err(get)? as usize,
                        row.try_get("digest").map_err(get)?,
                        row.try_get("saved_digest").map_err(get)?,
                    )),
                }
            }
            // An append to a session that must not be stored yet, found stored: not new
            // (the plan below says it conflicts).
            for ((s, n), f) in writes.iter().zip(fresh.iter_mut()) {
                if *n == Some(0) && rows.contains_key(s.id().as_str()) {
                    *f = None;
                }
            }
            // Plan each job in order, as `append` and `save_new` would.
            let mut written: std::collections::HashSet<&str> = std::collections::HashSet::new();
            // (digest, len) of every row a planned job writes, before and after.
            let mut made: Vec<(Vec<u8>, usize)> = Vec::new();
            let mut news: Vec<NewRow> = Vec::new();
            let mut appends: Vec<AppendRow> = Vec::new();
            // Saves of sessions stored already, the very same: (job, key, digest).
            let mut same_again: Vec<(usize, i64, Vec<u8>)> = Vec::new();
            let mut done = 0;
            for (i, ((s, expected), f)) in writes.iter().zip(fresh).enumerate() {
                let id = s.id().as_str();
                if let (Some(row), None, Some(f)) = (rows.get(id), expected, &f) {
                    // As `save_new` finds a stored row: the same session is a no-op.
                    let epoch = Timestamp::from_unix_micros(0);
                    if encode_state(s, epoch, None, &f.digest)?.content != row.content {
                        return Err(exists(name, s.id()));
                    }
                    same_again.push((i, row.key, row.digest.clone()));
                    done = i + 1;
                    continue;
                }
                if let (Some(row), Some(expected)) = (rows.get(id), expected) {
                    continues_row(name, s, *expected, row)?;
                    let own = encode_from(s, *expected)?;
                    let digest = prefix_digests(row.digest.clone(), &own).pop().unwrap_or_else(empty_digest);
                    let created = Timestamp::from_unix_micros(row.created_us);
                    let state = encode_state(s, created, Some(s.stamper().now()), &digest)?;
                    let last_hash = own.last().map(|c| c.hash.clone()).or_else(|| row.last_hash.clone());
                    made.push((row.digest.clone(), row.len));
                    made.push((digest.clone(), s.len()));
                    appends.push(AppendRow {
                        job: i,
                        key: row.key,
                        digest,
                        last_hash,
                        state,
                        own,
                    });
                } else {
                    let Some(f) = f else {
                        return Err(PersistError::Conflict {
                            store: name.to_owned(),
                            id: id.to_owned(),
                            expected: expected.unwrap_or(0),
                            found: None,
                        });
                    };
                    let parents = &s.lineage().parents;
                    if parents.iter().any(|p| written.contains(p.as_str()))
                        || f.remembered.as_ref().is_some_and(|(r, _)| written.contains(r.as_str()))
                        || made.iter().any(|(d, l)| *l == s.len() && *d == f.digest)
                    {
                        break;
                    }
                    // The stored session holding exactly these chunks that `same_chunks`
                    // would find (the lowest key), if any.
                    let same = if f.chunks.is_empty() {
                        None
                    } else {
                        let mut m = holders.iter().filter(|(_, len, d, saved)| {
                            *len == s.len() && *d == f.digest && *saved == f.digest
                        });
                        let first = m.next().map(|h| h.0);
                        if m.next().is_some() {
                            break;
                        }
                        first
                    };
                    let stored_parents: Vec<(i64, usize, Vec<u8>)> =
                        parents.iter().filter_map(|p| found.get(p.as_str()).cloned()).collect();
                    let (base, own) = match &f.remembered {
                        Some((r, k)) => {
                            let unchanged = found.get(r).is_some_and(|(key, len, d)| {
                                *key == k.key && *len == k.chunks.len() && *d == k.digest
                            });
                            if !unchanged {
                                break;
                            }
                            match same {
                                Some(key) => (Some((key, s.len())), Vec::new()),
                                None => (Some((k.key, k.chunks.len())), f.chunks),
                            }
                        }
                        None => {
                            let best = pick_base(&stored_parents, &f.digests, same);
                            if best.is_none() && !stored_parents.is_empty() {
                                // A parent's chunks would be read (a partly shared base).
                                break;
                            }
                            let mut chunks = f.chunks;
                            let own = chunks.split_off(best.map_or(0, |(_, l)| l));
                            (best, own)
                        }
                    };
                    let graft = if own.is_empty() || parents.len() < 2 {
                        None
                    } else {
                        pick_graft(&stored_parents, base.map(|(k, _)| k), &own)
                    };
                    let own = if graft.is_some() { Vec::new() } else { own };
                    let created = s.stamper().now();
                    let closed = Some(s.stamper().now());
                    let state = encode_state(s, created, closed, &f.digest)?;
                    let last_hash = last_hash_of(s, &own)?;
                    made.push((f.digest.clone(), s.len()));
                    news.push(NewRow {
                        job: i,
                        base,
                        graft,
                        digest: f.digest,
                        last_hash,
                        state,
                        created_us: created.unix_micros(),
                        own,
                    });
                }
                written.insert(id);
                done = i + 1;
            }
            if done == 0 {
                return Ok(Vec::new());
            }
            #[cfg(test)]
            SET_DONE.fetch_add(done, std::sync::atomic::Ordering::Relaxed);
            if !fences_checked {
                for j in &jobs[..done] {
                    if let Some(fence) = &j.fence {
                        check_fences(tx, name, &[fence]).await?;
                    }
                }
            }
            let put = |e: sqlx::Error| backend(name, "write session", e);
            // Every segment of the new rows (named by session, their keys are made by the
            // insert) and of the appended rows (by key).
            fn add<'a>(
                segments: &mut Vec<crate::rows::NewSegment<'a>>,
                id: Option<&'a str>,
                key: Option<i64>,
                from: usize,
                own: &[EncodedChunk],
            ) {
                for (n, part) in own.chunks(SEGMENT_CHUNKS).enumerate() {
                    segments.push(crate::rows::NewSegment {
                        id,
                        key,
                        pos: (from + n * SEGMENT_CHUNKS) as i64,
                        n: part.len() as i32,
                        docs: encode_segment(part),
                    });
                }
            }
            let mut segments: Vec<crate::rows::NewSegment<'_>> = Vec::new();
            for r in &news {
                let from = r.base.map_or(0, |(_, l)| l) + r.graft.map_or(0, |(_, l)| l);
                add(&mut segments, Some(writes[r.job].0.id().as_str()), None, from, &r.own);
            }
            for a in &appends {
                add(&mut segments, None, Some(a.key), writes[a.job].1.unwrap_or(0), &a.own);
            }
            // The new rows, in job order (so their keys are the ones one by one gives), and
            // the segments: one statement on PostgreSQL, two on SQLite.
            let mut keys: Vec<i64> = Vec::with_capacity(news.len());
            if !news.is_empty() || !segments.is_empty() {
                let rows: Vec<crate::rows::NewSessionRow<'_>> = news
                    .iter()
                    .map(|r| {
                        let s = writes[r.job].0;
                        crate::rows::NewSessionRow {
                            id: s.id().as_str(),
                            base_key: r.base.map(|(k, _)| k),
                            base_len: r.base.map_or(0, |(_, l)| l as i64),
                            len: s.len() as i64,
                            digest: &r.digest,
                            last_hash: r.last_hash.as_deref(),
                            content: &r.state.content,
                            created_us: r.created_us,
                            header: &r.state.header,
                            trailer: r.state.trailer.as_deref(),
                            failure: r.state.failure.as_deref(),
                            conversation: r.state.conversation,
                            evidence: r.state.evidence,
                            graft_key: r.graft.map(|(k, _)| k),
                            graft_len: r.graft.map_or(0, |(_, l)| l as i64),
                        }
                    })
                    .collect();
                let by_id: std::collections::HashMap<String, i64> =
                    <$rows>::insert_rows(&mut **tx, &rows, &segments).await.map_err(put)?.into_iter().collect();
                for r in &news {
                    let id = writes[r.job].0.id().as_str();
                    keys.push(*by_id.get(id).ok_or_else(|| PersistError::Backend {
                        store: name.to_owned(),
                        op: "write session",
                        message: format!("the insert of session {id} returned no row"),
                        source: None,
                    })?);
                }
            }
            if !appends.is_empty() {
                let rows: Vec<crate::rows::AppendedRow<'_>> = appends
                    .iter()
                    .map(|a| crate::rows::AppendedRow {
                        key: a.key,
                        len: writes[a.job].0.len() as i64,
                        digest: &a.digest,
                        last_hash: a.last_hash.as_deref(),
                        content: &a.state.content,
                        header: &a.state.header,
                        trailer: a.state.trailer.as_deref(),
                        failure: a.state.failure.as_deref(),
                        conversation: a.state.conversation,
                        evidence: a.state.evidence,
                    })
                    .collect();
                <$rows>::update_appended(&mut **tx, &rows).await.map_err(put)?;
            }
            // Each job's report and what it taught, in job order.
            let mut out: Vec<Option<(Vec<WriteReport>, Learned)>> = (0..done).map(|_| None).collect();
            for (r, key) in news.iter().zip(&keys) {
                let s = writes[r.job].0;
                let known = Known { key: *key, digest: r.digest.clone(), chunks: s.chunks().clone() };
                out[r.job] = Some((vec![report(s, r.own.len(), false)], vec![(s.id().to_string(), known)]));
            }
            for a in &appends {
                let s = writes[a.job].0;
                let known = Known { key: a.key, digest: a.digest.clone(), chunks: s.chunks().clone() };
                out[a.job] = Some((vec![report(s, a.own.len(), false)], vec![(s.id().to_string(), known)]));
            }
            for (job, key, digest) in same_again {
                let s = writes[job].0;
                let known = Known { key, digest, chunks: s.chunks().clone() };
                out[job] = Some((vec![report(s, 0, true)], vec![(s.id().to_string(), known)]));
            }
            Ok(out.into_iter().flatten().collect())
        }

        /// Batches the set path did (for the tests that check it ran).
        #[cfg(test)]
        pub(crate) static SET_DONE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

        /// Does `batches` as one group, in order, with or without the set path: what the
        /// group committer does with the batches it finds waiting.
        #[cfg(test)]
        pub(crate) async fn group_now(
            pool: &Pool,
            name: &str,
            known: &std::sync::Arc<KnownSessions>,
            batches: &[WriteBatch<'_>],
            set_path: bool,
        ) -> Vec<Result<Vec<WriteReport>, PersistError>> {
            let mut jobs = Vec::new();
            let mut answers = Vec::new();
            for b in batches {
                let mut writes = Vec::new();
                for w in &b.writes {
                    match *w {
                        Write::Save(s) => writes.push(OwnedWrite::Save(s.clone())),
                        Write::Append { session, expected_len } => {
                            writes.push(OwnedWrite::Append(session.clone(), expected_len));
                        }
                        _ => {}
                    }
                }
                let (done, answer) = tokio::sync::oneshot::channel();
                jobs.push(Pending { writes, fence: b.fence.clone(), done });
                answers.push(answer);
            }
            let mut committer = Committer::new(pool.clone(), name.to_owned(), known.clone(), set_path);
            rath_group_commit::commit(&mut committer, &mut jobs).await;
            let mut out = Vec::new();
            for a in answers {
                out.push(a.await.unwrap_or_else(|_| {
                    Err(PersistError::Unsupported { store: name.to_owned(), what: "an unanswered batch" })
                }));
            }
            out
        }

        /// Every row of the store's tables, as text (keys included), in key order.
        #[cfg(test)]
        pub(crate) async fn dump(pool: &Pool) -> Vec<String> {
            let mut out = Vec::new();
            let sql = format!(
                "SELECT key, id, base_key, base_len, len, digest, saved_digest, {} AS last_hash, content, \
                 created_us, header, trailer, failure, conversation, evidence, graft_key, graft_len \
                 FROM rath_sessions ORDER BY key",
                DIALECT.hash_out
            );
            for r in sqlx::query(&sql).fetch_all(pool).await.unwrap_or_default() {
                out.push(format!(
                    "session {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?}",
                    r.try_get::<i64, _>(0).ok(),
                    r.try_get::<Option<String>, _>(1).ok(),
                    r.try_get::<Option<i64>, _>(2).ok(),
                    r.try_get::<i64, _>(3).ok(),
                    r.try_get::<i64, _>(4).ok(),
                    r.try_get::<Vec<u8>, _>(5).ok(),
                    r.try_get::<Option<Vec<u8>>, _>(6).ok(),
                    r.try_get::<Option<Vec<u8>>, _>(7).ok(),
                    r.try_get::<Vec<u8>, _>(8).ok(),
                    r.try_get::<i64, _>(9).ok(),
                    r.try_get::<String, _>(10).ok(),
                    r.try_get::<Option<String>, _>(11).ok(),
                    r.try_get::<Option<String>, _>(12).ok(),
                    r.try_get::<i64, _>(13).ok(),
                    r.try_get::<i64, _>(14).ok(),
                    r.try_get::<Option<i64>, _>(15).ok(),
                    r.try_get::<i64, _>(16).ok(),
                ));
            }
            let sql = "SELECT session_key, pos, CAST(n AS BIGINT), docs FROM rath_segments ORDER BY session_key, pos";
            for r in sqlx::query(sql).fetch_all(pool).await.unwrap_or_default() {
                out.push(format!(
                    "segment {:?} {:?} {:?} {:?}",
                    r.try_get::<i64, _>(0).ok(),
                    r.try_get::<i64, _>(1).ok(),
                    r.try_get::<i64, _>(2).ok(),
                    r.try_get::<Vec<u8>, _>(3).ok(),
                ));
            }
            for r in sqlx::query("SELECT key, value FROM rath_meta ORDER BY key").fetch_all(pool).await.unwrap_or_default() {
                out.push(format!("meta {:?} {:?}", r.try_get::<String, _>(0).ok(), r.try_get::<i64, _>(1).ok()));
            }
            out
        }

        /// A batch of saves and appends goes to the group committer (when it runs); any
        /// other write is done on its own.
        async fn write_via(
            group: &Group,
            pool: &Pool,
            name: &str,
            known: &KnownSessions,
            batch: WriteBatch<'_>,
        ) -> Result<Vec<WriteReport>, PersistError> {
            let mut writes = Vec::with_capacity(batch.writes.len());
            for w in &batch.writes {
                match *w {
                    Write::Save(s) => writes.push(OwnedWrite::Save(s.clone())),
                    Write::Append {
                        session,
                        expected_len,
                    } => writes.push(OwnedWrite::Append(session.clone(), expected_len)),
                    _ => return write_in(pool, name, known, batch).await,
                }
            }
            let (done, answer) = tokio::sync::oneshot::channel();
            let job = Pending {
                writes,
                fence: batch.fence.clone(),
                done,
            };
            // FNV-1a of the first session's id.
            let h = batch.writes.first().map_or(0, |w| {
                w.session().id().as_str().bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                    (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
                })
            });
            let lane = &group[(h % group.len() as u64) as usize];
            if lane.send(job).is_ok()
                && let Ok(r) = answer.await
            {
                return r;
            }
            write_in(pool, name, known, batch).await
        }

        fn corrupt(name: &str, id: &SessionId, message: String) -> PersistError {
            PersistError::CorruptStore {
                store: name.to_owned(),
                id: id.to_string(),
                message,
            }
        }

        /// The recursive part of the query that reads a row's chunks, for the row `start`
        /// picks (a condition on `rath_sessions`). A chain node is "the first `hi` chunks of
        /// row `key`, placed from `off`": its base's first chunks (at most `base_len`), its
        /// graft's (at most `graft_len`, from `off + base_len`), then its own segments below
        /// `hi`.
        fn chain_cte(start: &str) -> String {
            chain_cte_rooted(start, false)
        }

        /// [`chain_cte`]; `rooted`: each chain row also carries `root`, the key of the row
        /// it started from (the chains of several rows in one query).
        fn chain_cte_rooted(start: &str, rooted: bool) -> String {
            let (col, first, next) = if rooted { ("root, ", "key, ", "c.root, ") } else { ("", "", "") };
            format!(
                "chain ({col}key, hi, off, own, base_key, base_len, graft_key, graft_len) AS ( \
                 SELECT {first}key, len, CAST(0 AS BIGINT), base_len + graft_len, base_key, base_len, \
                 graft_key, graft_len FROM rath_sessions WHERE {start} \
                 UNION ALL \
                 SELECT {next}s.key, \
                 CASE WHEN w.which = 0 THEN \
                   CASE WHEN c.hi < c.base_len THEN c.hi ELSE c.base_len END \
                 ELSE \
                   CASE WHEN c.hi - c.base_len < c.graft_len THEN c.hi - c.base_len \
                   ELSE c.graft_len END \
                 END, \
                 CASE WHEN w.which = 0 THEN c.off ELSE c.off + c.base_len END, \
                 s.base_len + s.graft_len, s.base_key, s.base_len, s.graft_key, s.graft_len \
                 FROM chain c \
                 JOIN (SELECT 0 AS which UNION ALL SELECT 1) w \
                   ON (w.which = 0 AND c.base_len > 0) \
                   OR (w.which = 1 AND c.graft_len > 0 AND c.hi > c.base_len) \
                 JOIN rath_sessions s \
                   ON s.key = CASE WHEN w.which = 0 THEN c.base_key ELSE c.graft_key END \
                 )"
            )
        }

        /// The segment rows of the chain, in position order: `at`, `n`, `docs`, `room`.
        const CHAIN_SEGMENTS: &str = "SELECT c.off + g.pos AS at, g.n AS n, g.docs AS docs, \
            c.hi - g.pos AS room FROM chain c \
            JOIN rath_segments g ON g.session_key = c.key AND g.pos >= c.own AND g.pos < c.hi";

        /// The chunk documents of row `key` in order, joined by line breaks, and how many
        /// (one recursive query; see [`chain_cte`]).
        async fn chain_docs(
            tx: &mut Tx<'_>,
            name: &str,
            id: &SessionId,
            key: i64,
        ) -> Result<(Vec<u8>, usize), PersistError> {
            let sql = format!(
                "WITH RECURSIVE {} {CHAIN_SEGMENTS} ORDER BY at",
                chain_cte("key = $1")
            );
            let rows = sqlx::query(&sql)
                .bind(key)
                .fetch_all(&mut **tx)
                .await
                .map_err(|e| backend(name, "load", e))?;
            docs_of(name, id, &rows)
        }

        /// Joins the chunk documents of segment rows (`at`, `n`, `docs`, `room`, in
        /// position order; one per segment). A cut inside a segment (a session that shares
        /// only part of what its parent had) keeps that segment's first chunks.
        fn docs_of(
            name: &str,
            id: &SessionId,
            rows: &[<$db as sqlx::Database>::Row],
        ) -> Result<(Vec<u8>, usize), PersistError> {
            let get = |e: sqlx::Error| backend(name, "load", e);
            let mut docs = Vec::new();
            let mut found = 0usize;
            let mut one = Vec::new();
            for row in rows {
                let at: i64 = row.try_get("at").map_err(get)?;
                let n: i32 = row.try_get("n").map_err(get)?;
                let room: i64 = row.try_get("room").map_err(get)?;
                let stored: &[u8] = row.try_get("docs").map_err(get)?;
                if at != found as i64 || n <= 0 || room <= 0 {
                    return Err(corrupt(
                        name,
                        id,
                        format!("a segment of {n} chunks at {at} where chunk {found} belongs"),
                    ));
                }
                if found > 0 {
                    docs.push(b'\n');
                }
                let take = i64::from(n).min(room) as usize;
                if take == n as usize {
                    decode_segment(stored, &mut docs).map_err(|m| corrupt(name, id, m))?;
                } else {
                    one.clear();
                    decode_segment(stored, &mut one).map_err(|m| corrupt(name, id, m))?;
                    let end = one
                        .iter()
                        .enumerate()
                        .filter(|(_, b)| **b == b'\n')
                        .nth(take - 1)
                        .map(|(i, _)| i)
                        .ok_or_else(|| {
                            corrupt(name, id, format!("a segment holds fewer than {n} chunks"))
                        })?;
                    docs.extend_from_slice(&one[..end]);
                }
                found += take;
            }
            Ok((docs, found))
        }

        /// The load rows of the sessions `ids` in one statement (see [`load_in`]), by session
        /// id, each with its row first; a session not stored has none. On the connection
        /// `conn` keeps (one from the pool when it has none, kept there after); a read that
        /// failed on a kept connection is tried once more on a fresh one.
        /// The group loader's statement (see [`read_many`]): the rows and segments of every
        /// session whose id is in the JSON list bound as `$1`.
        fn read_many_sql() -> String {
            format!(
                "WITH RECURSIVE me AS (SELECT id, key, len, digest, header, trailer FROM rath_sessions \
                 WHERE id IN ({json_ids})), {} \
                 SELECT key AS root, CAST(-1 AS BIGINT) AS at, CAST(0 AS INTEGER) AS n, CAST(NULL AS {blob}) AS docs, \
                 CAST(0 AS BIGINT) AS room, id, key, len, digest, header, trailer FROM me \
                 UNION ALL \
                 SELECT s.root, s.at, s.n, s.docs, s.room, NULL, NULL, NULL, NULL, NULL, NULL FROM \
                 (SELECT c.root AS root, c.off + g.pos AS at, g.n AS n, g.docs AS docs, c.hi - g.pos AS room \
                 FROM chain c JOIN rath_segments g ON g.session_key = c.key AND g.pos >= c.own AND g.pos < c.hi) s \
                 ORDER BY root, at",
                chain_cte_rooted("key IN (SELECT key FROM me)", true),
                json_ids = DIALECT.json_ids,
                blob = DIALECT.blob,
            )
        }

        /// Prepares the group loader's statement on `c` (an empty list: nothing is read), so
        /// a connection's first grouped load does not wait for the server to plan it (the
        /// PostgreSQL store's connect does it on the connections it warms).
        #[allow(dead_code)]
        pub(crate) async fn warm_loads(c: &mut Conn) -> Result<(), sqlx::Error> {
            sqlx::query(&read_many_sql()).bind("[]").fetch_all(&mut **c).await.map(|_| ())
        }

        async fn read_many(
            conn: &mut Option<Conn>,
            pool: &Pool,
            name: &str,
            ids: &[&str],
        ) -> Result<std::collections::HashMap<String, Vec<Row>>, PersistError> {
            let ids = json_list(name, &ids)?;
            let sql = read_many_sql();
            let kept = conn.take();
            let retry = kept.is_some();
            let mut c = match kept {
                Some(c) => c,
                None => pool.acquire().await.map_err(|e| backend(name, "load", e))?,
            };
            let mut read = sqlx::query(&sql).bind(&ids).fetch_all(&mut *c).await;
            if read.is_err() && retry {
                drop(c);
                c = pool.acquire().await.map_err(|e| backend(name, "load", e))?;
                read = sqlx::query(&sql).bind(&ids).fetch_all(&mut *c).await;
            }
            let rows = read.map_err(|e| backend(name, "load", e))?;
            *conn = Some(c);
            let get = |e: sqlx::Error| backend(name, "load", e);
            let mut by_id: std::collections::HashMap<String, Vec<Row>> = std::collections::HashMap::new();
            let mut of_root: std::collections::HashMap<i64, String> = std::collections::HashMap::new();
            for r in rows {
                let root: i64 = r.try_get("root").map_err(get)?;
                let at: i64 = r.try_get("at").map_err(get)?;
                let id = if at < 0 {
                    let id: String = r.try_get("id").map_err(get)?;
                    of_root.insert(root, id.clone());
                    id
                } else {
                    match of_root.get(&root) {
                        Some(id) => id.clone(),
                        None => continue,
                    }
                };
                by_id.entry(id).or_default().push(r);
            }
            Ok(by_id)
        }

        /// Loads a session in one statement (one snapshot, no transaction): its row first
        /// (`at` -1), then its chunks' segments along its base and graft links
        /// ([`chain_cte`]), decoded in one pass.
        async fn load_in(
            pool: &Pool,
            loads: &Loads,
            name: &str,
            known: &KnownSessions,
            id: &SessionId,
        ) -> Result<LoadedSession, PersistError> {
            let rows = match loads.rows(id).await {
                Some(rows) => rows,
                None => read_many(&mut None, pool, name, &[id.as_str()])
                    .await?
                    .remove(id.as_str())
                    .unwrap_or_default(),
            };
            assemble_loaded(name, known, id, &rows)
        }

        /// A loaded session from its rows: its row first (`at` -1), then its segments in
        /// position order (none: the session is not stored).
        fn assemble_loaded(name: &str, known: &KnownSessions, id: &SessionId, rows: &[Row]) -> Result<LoadedSession, PersistError> {
            let Some(row) = rows.first() else {
                return Err(PersistError::NotFound {
                    id: id.to_string(),
                    dir: PathBuf::from(name),
                });
            };
            let get = |e: sqlx::Error| backend(name, "load", e);
            let key: i64 = row.try_get("key").map_err(get)?;
            let len = row.try_get::<i64, _>("len").map_err(get)? as usize;
            let digest: Vec<u8> = row.try_get("digest").map_err(get)?;
            let header: String = row.try_get("header").map_err(get)?;
            let trailer: Option<String> = row.try_get("trailer").map_err(get)?;
            let (docs, found) = docs_of(name, id, &rows[1..])?;
            if found != len {
                return Err(corrupt(
                    name,
                    id,
                    format!("{found} of its {len} chunks are stored"),
                ));
            }
            let chunks: ChunkList = doc::decode_chunks(&docs)
                .map_err(|e| corrupt(name, id, e.to_string()))?
                .into_iter()
                .collect();
            if chunks.len() != len {
                return Err(corrupt(
                    name,
                    id,
                    format!("{} of its {len} chunks decode", chunks.len()),
                ));
            }
            let path = PathBuf::from(format!("{name}#{id}"));
            let loaded = doc::assemble(
                &path,
                header.as_bytes(),
                trailer.as_deref().map(str::as_bytes),
                chunks,
            )
            .map_err(|e| corrupt(name, id, e.to_string()))?;
            known.remember(
                id.as_str(),
                Known {
                    key,
                    digest,
                    chunks: loaded.session.chunks().clone(),
                },
            );
            Ok(loaded)
        }

        /// True when the chain of `id`'s row (its base links, from position 0) holds the
        /// first `len` chunks of `prefix`'s row for at least its whole current length.
        async fn known_to_extend_in(
            pool: &Pool,
            name: &str,
            id: &SessionId,
            prefix: &SessionId,
        ) -> Result<bool, PersistError> {
            if id == prefix {
                return Ok(true);
            }
            let sql = format!(
                "WITH RECURSIVE {} SELECT CAST(count(*) AS BIGINT) FROM chain c \
                 JOIN rath_sessions p ON p.key = c.key \
                 WHERE p.id = $2 AND c.off = 0 AND c.hi >= p.len",
                chain_cte("id = $1")
            );
            let found: i64 = sqlx::query_scalar(&sql)
                .bind(id.as_str())
                .bind(prefix.as_str())
                .fetch_one(pool)
                .await
                .map_err(|e| backend(name, "read", e))?;
            Ok(found > 0)
        }

        /// Chunks `range` of session `id` (cut to its length): its row's key and length,
        /// then only the segments of its chain that the window covers, in one read
        /// transaction (one snapshot); each such segment is inflated once and only the
        /// documents inside the window are decoded.
        async fn read_chunks_in(
            pool: &Pool,
            name: &str,
            id: &SessionId,
            range: std::ops::Range<usize>,
        ) -> Result<Vec<rath_session::Chunk>, PersistError> {
            let mut chunks = Vec::with_capacity(range.len().min(1 << 16));
            read_docs_in(pool, name, id, range, |doc| {
                let doc = doc.map_err(|m| corrupt(name, id, m))?;
                let chunk = doc::decode_chunk(doc).map_err(|e| corrupt(name, id, e.to_string()))?;
                chunks.push(chunk);
                Ok(())
            })
            .await?;
            Ok(chunks)
        }

        async fn stored_len_in(pool: &Pool, name: &str, id: &SessionId) -> Result<Option<usize>, PersistError> {
            let len: Option<i64> = sqlx::query_scalar("SELECT len FROM rath_sessions WHERE id = $1")
                .bind(id.as_str())
                .fetch_optional(pool)
                .await
                .map_err(|e| backend(name, "read", e))?;
            Ok(len.map(|n| n as usize))
        }

        /// The session row's identity and state: its key (a new save under a deleted
        /// id is a new row), length, chain digest, content hash (header and trailer
        /// without times) and trailer (the close time), hashed: everything `load` reads
        /// that can change, in one indexed read of one row.
        async fn revision_in(pool: &Pool, name: &str, id: &SessionId) -> Result<Option<Vec<u8>>, PersistError> {
            let row = sqlx::query(
                "SELECT key, len, digest, content, trailer FROM rath_sessions WHERE id = $1",
            )
            .bind(id.as_str())
            .fetch_optional(pool)
            .await
            .map_err(|e| backend(name, "read", e))?;
            let Some(row) = row else { return Ok(None) };
            let get = |e: sqlx::Error| backend(name, "read", e);
            use sha2::Digest as _;
            let mut h = sha2::Sha256::new();
            h.update(row.try_get::<i64, _>("key").map_err(get)?.to_le_bytes());
            h.update(row.try_get::<i64, _>("len").map_err(get)?.to_le_bytes());
            for col in ["digest", "content"] {
                let b: Vec<u8> = row.try_get(col).map_err(get)?;
                h.update((b.len() as u64).to_le_bytes());
                h.update(b);
            }
            match row.try_get::<Option<String>, _>("trailer").map_err(get)? {
                Some(t) => {
                    h.update([1]);
                    h.update(t.as_bytes());
                }
                None => h.update([0]),
            }
            Ok(Some(h.finalize().to_vec()))
        }

        async fn list_in(pool: &Pool, name: &str) -> Result<Vec<SessionSummary>, PersistError> {
            let rows = sqlx::query(
                "SELECT id, header, trailer, conversation, evidence, failure FROM rath_sessions \
                 WHERE id IS NOT NULL",
            )
            .fetch_all(pool)
            .await
            .map_err(|e| backend(name, "list", e))?;
            let mut out = Vec::with_capacity(rows.len());
            for row in rows {
                let get = |e: sqlx::Error| backend(name, "list", e);
                let id: String = row.try_get("id").map_err(get)?;
                let header: String = row.try_get("header").map_err(get)?;
                let trailer: Option<String> = row.try_get("trailer").map_err(get)?;
                let conversation: i64 = row.try_get("conversation").map_err(get)?;
                let evidence: i64 = row.try_get("evidence").map_err(get)?;
                let failure: Option<String> = row.try_get("failure").map_err(get)?;
                let sid = SessionId::from(id.as_str());
                let failure: Option<RunFailure> = match failure {
                    Some(f) => Some(
                        serde_json::from_str(&f)
                            .map_err(|e| corrupt(name, &sid, format!("stored failure: {e}")))?,
                    ),
                    None => None,
                };
                let path = PathBuf::from(format!("{name}#{id}"));
                let summary = doc::summarize(
                    &path,
                    header.as_bytes(),
                    trailer.as_deref().map(str::as_bytes),
                    conversation as u64,
                    evidence as u64,
                    failure,
                )
                .map_err(|e| corrupt(name, &sid, e.to_string()))?;
                out.push(summary);
            }
            out.sort_by(|a, b| (a.created_at, a.id.as_str()).cmp(&(b.created_at, b.id.as_str())));
            Ok(out)
        }

        /// Deletes a session: its id goes (the row and its segments stay, unnamed, until
        /// `gc` finds nothing sharing them, so `gc` reports everything a delete frees).
        async fn delete_in(
            pool: &Pool,
            name: &str,
            known: &KnownSessions,
            id: &SessionId,
        ) -> Result<bool, PersistError> {
            known.forget(id.as_str());
            let mut tx = begin(pool, name, DIALECT.begin_locked).await?;
            let Some(row) = stored_row(&mut tx, name, id.as_str()).await? else {
                return Ok(false);
            };
            let get = |e: sqlx::Error| backend(name, "delete", e);
            sqlx::query("UPDATE rath_sessions SET id = NULL WHERE key = $1")
                .bind(row.key)
                .execute(&mut *tx)
                .await
                .map_err(get)?;
            tx.commit().await.map_err(get)?;
            Ok(true)
        }

        /// Removes a session row and its segments: `(chunks, bytes)` freed.
        async fn remove_row(tx: &mut Tx<'_>, name: &str, key: i64) -> Result<(u64, u64), PersistError> {
            let get = |e: sqlx::Error| backend(name, "gc", e);
            let sql = format!(
                "DELETE FROM rath_segments WHERE session_key = $1 RETURNING n, {}",
                DIALECT.octets
            );
            let freed: Vec<(i32, i64)> = sqlx::query_as(&sql)
                .bind(key)
                .fetch_all(&mut **tx)
                .await
                .map_err(get)?;
            sqlx::query("DELETE FROM rath_sessions WHERE key = $1")
                .bind(key)
                .execute(&mut **tx)
                .await
                .map_err(get)?;
            Ok(freed
                .iter()
                .fold((0, 0), |(c, b), (n, len)| (c + *n as u64, b + *len as u64)))
        }

        /// Removes deleted sessions nothing shares any more (no base or graft link points at
        /// them), with their segments, until none is left.
        async fn gc_in(pool: &Pool, name: &str) -> Result<GcReport, PersistError> {
            let mut tx = begin(pool, name, DIALECT.begin_write).await?;
            exec(&mut tx, name, "lock", DIALECT.gc_lock).await?;
            let get = |e: sqlx::Error| backend(name, "gc", e);
            let mut report = GcReport::default();
            loop {
                let keys: Vec<i64> = sqlx::query_scalar(
                    "SELECT s.key FROM rath_sessions s WHERE s.id IS NULL AND NOT EXISTS \
                     (SELECT 1 FROM rath_sessions c WHERE c.base_key = s.key \
                     OR c.graft_key = s.key)",
                )
                .fetch_all(&mut *tx)
                .await
                .map_err(get)?;
                if keys.is_empty() {
                    break;
                }
                for key in keys {
                    let (chunks, bytes) = remove_row(&mut tx, name, key).await?;
                    report.sessions += 1;
                    report.chunks += chunks;
                    report.bytes += bytes;
                }
            }
            tx.commit().await.map_err(get)?;
            Ok(report)
        }

        /// Performs a batch in one transaction (shared with the batches other tasks wrote
        /// meanwhile, see [`group`]), in a `write rath_sessions` span.
        pub(crate) async fn write(
            group: &Group,
            pool: &Pool,
            name: &str,
            known: &KnownSessions,
            batch: WriteBatch<'_>,
        ) -> Result<Vec<WriteReport>, PersistError> {
            let span = spans::write_op(DIALECT.kind, &batch);
            let result = write_via(group, pool, name, known, batch).instrument(span.clone()).await;
            spans::record_written(&span, &result);
            result
        }

        /// Loads a session, in a `load rath_sessions` span.
        pub(crate) async fn load(
            pool: &Pool,
            loads: &Loads,
            name: &str,
            known: &KnownSessions,
            id: &SessionId,
        ) -> Result<LoadedSession, PersistError> {
            let span = spans::session_op(DIALECT.kind, "load", id.as_str());
            let result = load_in(pool, loads, name, known, id).instrument(span.clone()).await;
            spans::record_loaded(&span, result.as_ref().ok().map(|l| l.session.len()));
            spans::record_outcome(&span, &result);
            result
        }

        /// The stored length of a session, in a `stored_len rath_sessions` span.
        pub(crate) async fn stored_len(pool: &Pool, name: &str, id: &SessionId) -> Result<Option<usize>, PersistError> {
            let span = spans::session_op(DIALECT.kind, "stored_len", id.as_str());
            let result = stored_len_in(pool, name, id).instrument(span.clone()).await;
            spans::record_outcome(&span, &result);
            result
        }

        /// See `SessionStore::known_to_extend`; no span: one indexed read.
        pub(crate) async fn known_to_extend(
            pool: &Pool,
            name: &str,
            id: &SessionId,
            prefix: &SessionId,
        ) -> Result<bool, PersistError> {
            known_to_extend_in(pool, name, id, prefix).await
        }

        /// A window of a session's chunks (see `SessionStore::read_chunks`), in a
        /// `read_chunks rath_sessions` span.
        pub(crate) async fn read_chunks(
            pool: &Pool,
            name: &str,
            id: &SessionId,
            range: std::ops::Range<usize>,
        ) -> Result<Vec<rath_session::Chunk>, PersistError> {
            let span = spans::session_op(DIALECT.kind, "read_chunks", id.as_str());
            let result = read_chunks_in(pool, name, id, range).instrument(span.clone()).await;
            spans::record_loaded(&span, result.as_ref().ok().map(Vec::len));
            spans::record_outcome(&span, &result);
            result
        }

        /// A session's revision (see `SessionStore::revision`); no span: it is the
        /// cheap read a cache makes before every answer.
        pub(crate) async fn revision(pool: &Pool, name: &str, id: &SessionId) -> Result<Option<Vec<u8>>, PersistError> {
            revision_in(pool, name, id).await
        }

        /// Lists the named sessions, in a `list rath_sessions` span.
        pub(crate) async fn list(pool: &Pool, name: &str) -> Result<Vec<SessionSummary>, PersistError> {
            let span = spans::store_op(DIALECT.kind, "list");
            let result = list_in(pool, name).instrument(span.clone()).await;
            spans::record_outcome(&span, &result);
            result
        }

        /// Deletes a session, in a `delete rath_sessions` span.
        pub(crate) async fn delete(
            pool: &Pool,
            name: &str,
            known: &KnownSessions,
            id: &SessionId,
        ) -> Result<bool, PersistError> {
            let span = spans::session_op(DIALECT.kind, "delete", id.as_str());
            let result = delete_in(pool, name, known, id).instrument(span.clone()).await;
            spans::record_outcome(&span, &result);
            result
        }

        /// Collects what nothing reaches, in a `gc rath_sessions` span.
        pub(crate) async fn gc(pool: &Pool, name: &str) -> Result<GcReport, PersistError> {
            let span = spans::store_op(DIALECT.kind, "gc");
            let result = gc_in(pool, name).instrument(span.clone()).await;
            spans::record_outcome(&span, &result);
            result
        }

        /// Rows and bytes per table (bytes: the stored values' lengths on SQLite, the
        /// relation size with indexes and TOAST on PostgreSQL).
        pub(crate) async fn table_stats(
            pool: &Pool,
            name: &str,
            size_sql: &[(&'static str, &'static str)],
        ) -> Result<Vec<crate::TableStats>, PersistError> {
            let mut out = Vec::new();
            for (table, bytes_sql) in size_sql {
                let get = |e: sqlx::Error| backend(name, "stats", e);
                let rows: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
                    .fetch_one(pool)
                    .await
                    .map_err(get)?;
                let bytes: Option<i64> = sqlx::query_scalar(bytes_sql)
                    .fetch_one(pool)
                    .await
                    .map_err(get)?;
                let chunks: i64 = if *table == "rath_segments" {
                    sqlx::query_scalar("SELECT CAST(coalesce(sum(n), 0) AS BIGINT) FROM rath_segments")
                        .fetch_one(pool)
                        .await
                        .map_err(get)?
                } else {
                    0
                };
                out.push(crate::TableStats {
                    table,
                    rows: rows as u64,
                    bytes: bytes.unwrap_or(0) as u64,
                    chunks: chunks as u64,
                });
            }
            Ok(out)
        }

        crate::raw::sql_raw!();
    };
}

pub(crate) use sql_store;

/// The test hooks of a store type `$ty` whose module instantiated [`sql_store!`] as `imp`
/// (fields `pool`, `name`, `known`): a group done now, with or without its set path, the
/// store's rows as text, and how many batches the set path did.
#[cfg(test)]
macro_rules! group_test_hooks {
    ($ty:ty) => {
        impl $ty {
            /// `batches` as one group of the group committer, with or without its set path.
            pub(crate) async fn group_now(
                &self,
                batches: &[rath_persist::WriteBatch<'_>],
                set_path: bool,
            ) -> Vec<Result<Vec<rath_persist::WriteReport>, rath_persist::PersistError>> {
                imp::group_now(&self.pool, &self.name, &self.known, batches, set_path).await
            }

            /// Every row of the store, as text.
            pub(crate) async fn dump(&self) -> Vec<String> {
                imp::dump(&self.pool).await
            }

            /// Batches the set path did so far.
            pub(crate) fn set_done() -> usize {
                imp::SET_DONE.load(std::sync::atomic::Ordering::Relaxed)
            }
        }
    };
}
#[cfg(test)]
pub(crate) use group_test_hooks;
