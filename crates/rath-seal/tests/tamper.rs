//! The acceptance of tamper evidence, on each store kind (JSONL, SQLite, PostgreSQL when
//! `RATH_TEST_POSTGRES_URL` is set): a sealed store verifies clean; 200 random byte changes
//! in stored chunks are each detected and name the session and chunk; removing, reordering
//! and re-parenting chunks, deleting a session, re-signing with another key and forging a
//! root are each detected; erasure verifies with the erasure reported and leaves the erased
//! text nowhere in the store; the same sessions get the same roots in every store.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ed25519_dalek::SigningKey;
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use rath_persist::{SessionStore, Store};
use rath_seal::erase::{ChunkRef, erase};
use rath_seal::record::Entry;
use rath_seal::{FailureKind, LEDGER_ID, Report, Sealer, VerifyOptions, read_ledger, verify_store};
use rath_session::{Chunk, Session, SessionId, Stamper};

const SECRET: &str = "card 4111-1111-1111-1111 of Ada Lovelace";

fn key(n: u8) -> SigningKey {
    SigningKey::from_bytes(&[n; 32])
}

/// The sessions every store gets: a root, two forks, a merge, a fork of a fork, a detach,
/// with conversation and evidence chunks and text that is not ASCII.
fn sessions() -> Vec<Session> {
    let st = Stamper::counter();
    let mut root = Session::system_with("You plan trips. Answer in one line.", st.clone());
    root = root.push(Chunk::user("Three days in Zürich — what first?"));
    let a = root
        .fork()
        .push(Chunk::assistant_text("Old town, then the lake ⛵"))
        .push(Chunk::note("router", "picked the planner"))
        .push(Chunk::user(SECRET));
    let b = root
        .fork()
        .push(Chunk::tool_result("call-1", "weather", "{\"temp\": 4.5}"))
        .push(Chunk::assistant_text("Bring a coat."));
    let m = a.merge(&b).expect("merge");
    let c = a
        .fork()
        .extend((0..12).map(|i| Chunk::assistant_text(format!("step {i}: \"quoted\" \\ ok"))));
    let d = c.detach().push(Chunk::user("and after that?"));
    vec![root, a, b, m, c, d]
}

async fn populate(store: &Arc<dyn SessionStore>) {
    for s in sessions() {
        store.save(&s).await.expect("save");
    }
    let sealer = Sealer::open(store.clone(), Some(key(7)), Stamper::counter())
        .await
        .expect("open the sealer");
    assert_eq!(sealer.seal_all().await.expect("seal"), 6);
}

async fn verify(store: &dyn SessionStore) -> Report {
    verify_store(store, &VerifyOptions::default())
        .await
        .expect("verify")
}

fn named(report: &Report, session: &str, chunk: Option<u64>, kind: FailureKind) -> bool {
    report
        .failures
        .iter()
        .any(|f| f.session == session && f.kind == kind && (chunk.is_none() || f.chunk == chunk))
}

/// Where a store keeps its bytes, so a test can change them behind its back.
enum Raw {
    Jsonl(PathBuf),
    Sqlite(sqlx::SqlitePool, PathBuf),
    Postgres(sqlx::PgPool, String),
}

fn inflate(stored: &[u8]) -> Vec<u8> {
    if stored.first() == Some(&b'{') {
        return stored.to_vec();
    }
    let mut out = Vec::new();
    flate2::read::ZlibDecoder::new(stored)
        .read_to_end(&mut out)
        .expect("a deflated segment");
    out
}

/// Flips one random byte (XOR with a random non-zero byte) of a random stored chunk of a
/// random session; returns the session, the chunk and how to put the byte back.
async fn flip(raw: &Raw, rng: &mut StdRng, ids: &[String]) -> (String, u64, Vec<u8>, Vec<u8>) {
    match raw {
        Raw::Jsonl(dir) => loop {
            let id = &ids[rng.random_range(0..ids.len())];
            let path = dir.join(format!("{id}.jsonl"));
            let bytes = std::fs::read(&path).expect("read");
            let lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
            // header, chunks, trailer, "" after the last line break
            let n = lines.len() - 3;
            if n == 0 {
                continue;
            }
            let k = rng.random_range(0..n);
            let start: usize = lines[..k + 1].iter().map(|l| l.len() + 1).sum();
            let at = start + rng.random_range(0..lines[k + 1].len());
            let mut changed = bytes.clone();
            changed[at] ^= rng.random_range(1..=255u8);
            std::fs::write(&path, &changed).expect("write");
            // Line k holds the k-th conversation chunk (evidence rides in records).
            let session = sessions()
                .into_iter()
                .find(|s| s.id().as_str() == id)
                .expect("known");
            let position = session
                .chunks()
                .iter()
                .enumerate()
                .filter(|(_, c)| c.is_conversation())
                .nth(k)
                .map(|(i, _)| i)
                .expect("a conversation chunk per record");
            return (
                id.clone(),
                position as u64,
                path.into_os_string().into_encoded_bytes(),
                bytes,
            );
        },
        Raw::Sqlite(pool, _) => {
            let rows: Vec<(i64, i64, Vec<u8>, String)> = sqlx::query_as(
                "SELECT g.session_key, g.pos, g.docs, s.id FROM rath_segments g \
                 JOIN rath_sessions s ON s.key = g.session_key WHERE s.id <> 'rath-seals'",
            )
            .fetch_all(pool)
            .await
            .expect("segments");
            let (key, pos, stored, id) = rows[rng.random_range(0..rows.len())].clone();
            let (plain, j) = flip_segment(&stored, rng);
            sqlx::query("UPDATE rath_segments SET docs = $1 WHERE session_key = $2 AND pos = $3")
                .bind(&plain)
                .bind(key)
                .bind(pos)
                .execute(pool)
                .await
                .expect("update");
            let at = format!("{key}:{pos}").into_bytes();
            (id, (pos as u64) + j, at, stored)
        }
        Raw::Postgres(pool, _) => {
            let rows: Vec<(i64, i64, Vec<u8>, String)> = sqlx::query_as(
                "SELECT g.session_key, g.pos, g.docs, s.id FROM rath_segments g \
                 JOIN rath_sessions s ON s.key = g.session_key WHERE s.id <> 'rath-seals'",
            )
            .fetch_all(pool)
            .await
            .expect("segments");
            let (key, pos, stored, id) = rows[rng.random_range(0..rows.len())].clone();
            let (plain, j) = flip_segment(&stored, rng);
            sqlx::query("UPDATE rath_segments SET docs = $1 WHERE session_key = $2 AND pos = $3")
                .bind(&plain)
                .bind(key)
                .bind(pos)
                .execute(pool)
                .await
                .expect("update");
            let at = format!("{key}:{pos}").into_bytes();
            (id, (pos as u64) + j, at, stored)
        }
    }
}

/// A segment's documents with one byte of one document flipped (stored as plain text), and
/// that document's index in the segment.
fn flip_segment(stored: &[u8], rng: &mut StdRng) -> (Vec<u8>, u64) {
    let mut plain = inflate(stored);
    let docs: Vec<usize> = plain.split(|b| *b == b'\n').map(<[u8]>::len).collect();
    let j = rng.random_range(0..docs.len());
    let start: usize = docs[..j].iter().map(|l| l + 1).sum();
    let at = start + rng.random_range(0..docs[j]);
    plain[at] ^= rng.random_range(1..=255u8);
    (plain, j as u64)
}

async fn restore(raw: &Raw, at: &[u8], original: Vec<u8>) {
    match raw {
        Raw::Jsonl(_) => {
            let path = PathBuf::from(String::from_utf8(at.to_vec()).expect("path"));
            std::fs::write(path, original).expect("restore");
        }
        Raw::Sqlite(..) | Raw::Postgres(..) => {
            let at = String::from_utf8(at.to_vec()).expect("key:pos");
            let (key, pos) = at.split_once(':').expect("key:pos");
            let (key, pos): (i64, i64) = (key.parse().expect("key"), pos.parse().expect("pos"));
            let sql = "UPDATE rath_segments SET docs = $1 WHERE session_key = $2 AND pos = $3";
            if let Raw::Sqlite(pool, _) = raw {
                let q = sqlx::query(sql).bind(original.clone()).bind(key).bind(pos);
                q.execute(pool).await.expect("restore");
            }
            if let Raw::Postgres(pool, _) = raw {
                let q = sqlx::query(sql).bind(original).bind(key).bind(pos);
                q.execute(pool).await.expect("restore");
            }
        }
    }
}

/// Every file and dump where a store keeps bytes, as one buffer.
async fn all_bytes(raw: &Raw) -> Vec<u8> {
    let mut out = Vec::new();
    match raw {
        Raw::Jsonl(dir) => {
            for e in std::fs::read_dir(dir).expect("dir") {
                out.extend(std::fs::read(e.expect("entry").path()).expect("read"));
            }
        }
        Raw::Sqlite(pool, file) => {
            for suffix in ["", "-wal", "-shm", "-journal"] {
                let mut p = file.clone().into_os_string();
                p.push(suffix);
                if let Ok(b) = std::fs::read(Path::new(&p)) {
                    out.extend(b);
                }
            }
            // Segments may be deflated: their text too.
            let docs: Vec<Vec<u8>> = sqlx::query_scalar("SELECT docs FROM rath_segments")
                .fetch_all(pool)
                .await
                .expect("segments");
            docs.iter().for_each(|d| out.extend(inflate(d)));
        }
        Raw::Postgres(pool, url) => {
            let docs: Vec<Vec<u8>> = sqlx::query_scalar("SELECT docs FROM rath_segments")
                .fetch_all(pool)
                .await
                .expect("segments");
            docs.iter().for_each(|d| out.extend(inflate(d)));
            let dump = std::process::Command::new("pg_dump").arg(url).output();
            match dump {
                Ok(o) if o.status.success() => out.extend(o.stdout),
                _ => {
                    rath_testkit::skip("pg_dump is not on PATH or failed: the dump is not grepped")
                }
            }
        }
    }
    out
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

async fn rewrite(store: &dyn SessionStore, s: &Session) {
    store.delete(s.id()).await.expect("delete");
    store.save(s).await.expect("save the rewritten session");
}

/// Rewrites the ledger with `edit` applied to its entries (an attacker with write access).
async fn edit_ledger(store: &dyn SessionStore, edit: impl Fn(&mut Vec<Entry>)) {
    let (ledger, entries) = read_ledger(store).await.expect("ledger").expect("sealed");
    let mut entries: Vec<Entry> = entries
        .into_iter()
        .map(|(_, e)| e.expect("entry"))
        .collect();
    edit(&mut entries);
    let chunks = entries
        .iter()
        .map(|e| Chunk::note(rath_seal::LEDGER_AUTHOR, e.to_text()));
    let forged = ledger.with_chunks(chunks.collect());
    rewrite(store, &forged).await;
}

async fn suite(store: Arc<dyn SessionStore>, raw: Raw) {
    let name = store.name();
    populate(&store).await;
    let clean = verify(store.as_ref()).await;
    assert!(clean.is_clean(), "{name}: {}", clean.render());
    assert_eq!((clean.sessions, clean.unsealed.len()), (6, 0), "{name}");
    assert_eq!(
        clean.keys,
        vec![rath_seal::keys::public_hex(&key(7))],
        "{name}"
    );
    let ids: Vec<String> = sessions().iter().map(|s| s.id().to_string()).collect();

    // 200 random byte changes, each detected and named.
    let mut rng = StdRng::seed_from_u64(54);
    for trial in 0..200 {
        let (id, chunk, at, original) = flip(&raw, &mut rng, &ids).await;
        let r = verify(store.as_ref()).await;
        assert!(
            named(&r, &id, Some(chunk), FailureKind::ContentChanged),
            "{name}: trial {trial}: a byte of {id} chunk {chunk} changed and verify said:\n{}",
            r.render()
        );
        restore(&raw, &at, original).await;
    }
    assert!(verify(store.as_ref()).await.is_clean(), "{name}: restored");

    let all = sessions();
    let (a, c) = (&all[1], &all[4]);
    // A chunk removed.
    let removed: Vec<Chunk> = c
        .chunks()
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 5)
        .map(|(_, c)| c.clone())
        .collect();
    rewrite(store.as_ref(), &c.with_chunks(removed.into())).await;
    let r = verify(store.as_ref()).await;
    assert!(
        named(&r, c.id().as_str(), Some(5), FailureKind::ChunkRemoved),
        "{name}: {}",
        r.render()
    );
    rewrite(store.as_ref(), c).await;
    // Two chunks swapped.
    let mut swapped: Vec<Chunk> = c.chunks().iter().cloned().collect();
    swapped.swap(6, 9);
    rewrite(store.as_ref(), &c.with_chunks(swapped.into())).await;
    let r = verify(store.as_ref()).await;
    assert!(
        named(&r, c.id().as_str(), Some(6), FailureKind::ChunksReordered),
        "{name}: {}",
        r.render()
    );
    rewrite(store.as_ref(), c).await;
    // Re-parented: the fork of `a` claims to be a fork of the merge.
    let mut lineage = c.lineage().clone();
    lineage.parents = vec![all[3].id().clone()].into();
    rewrite(store.as_ref(), &c.with_lineage(lineage)).await;
    let r = verify(store.as_ref()).await;
    assert!(
        named(&r, c.id().as_str(), None, FailureKind::ParentChanged),
        "{name}: {}",
        r.render()
    );
    rewrite(store.as_ref(), c).await;
    // The operator changed.
    let mut lineage = c.lineage().clone();
    lineage.operator = "Session.detach".into();
    rewrite(store.as_ref(), &c.with_lineage(lineage)).await;
    let r = verify(store.as_ref()).await;
    assert!(
        named(&r, c.id().as_str(), None, FailureKind::LineageChanged),
        "{name}: {}",
        r.render()
    );
    rewrite(store.as_ref(), c).await;
    // A sealed session deleted.
    store.delete(a.id()).await.expect("delete");
    let r = verify(store.as_ref()).await;
    assert!(
        named(&r, a.id().as_str(), None, FailureKind::SessionMissing),
        "{name}: {}",
        r.render()
    );
    store.save(a).await.expect("put it back");
    assert!(
        verify(store.as_ref()).await.is_clean(),
        "{name}: every change undone"
    );

    // Re-signed with another key: an unknown key.
    edit_ledger(store.as_ref(), |e| {
        let last = e.pop().expect("an entry");
        e.push(last.signed(&key(8)));
    })
    .await;
    let r = verify(store.as_ref()).await;
    assert!(
        r.failures.iter().any(|f| f.kind == FailureKind::UnknownKey),
        "{name}: {}",
        r.render()
    );
    // A changed root under the old signature: invalid (and no key can fix it but key 7).
    edit_ledger(store.as_ref(), |e| {
        let mut last = e.pop().expect("an entry").signed(&key(7));
        last.seal.as_mut().expect("a seal").root = "00".repeat(32);
        e.push(last);
    })
    .await;
    let r = verify(store.as_ref()).await;
    assert!(
        r.failures
            .iter()
            .any(|f| f.kind == FailureKind::SignatureInvalid),
        "{name}: {}",
        r.render()
    );
    // Sealed anew from scratch, the store verifies clean again.
    assert!(
        store
            .delete(&SessionId::new(LEDGER_ID))
            .await
            .expect("delete the ledger")
    );
    let sealer = Sealer::open(store.clone(), Some(key(7)), Stamper::counter())
        .await
        .expect("sealer");
    sealer.seal_all().await.expect("seal again");
    let r = verify(store.as_ref()).await;
    assert!(r.is_clean(), "{name}: {}", r.render());

    // Erasure: the secret is in `a` (chunk 4) and in the merge and the forks that share it.
    let before = all_bytes(&raw).await;
    assert!(
        contains(&before, SECRET.as_bytes()),
        "{name}: the secret is stored"
    );
    let done = erase(
        &sealer,
        &ChunkRef {
            session: a.id().to_string(),
            index: 4,
        },
        "dpo@example.org",
        "erasure request #1",
        "2026-01-01T00:00:00+00:00",
    )
    .await
    .expect("erase");
    assert!(done.replaced >= 1, "{name}");
    let r = verify(store.as_ref()).await;
    assert!(r.is_clean(), "{name}: {}", r.render());
    assert!(r.erased >= 1, "{name}: {}", r.render());
    assert!(r.render().contains("chunk(s) erased"), "{name}");
    let after = all_bytes(&raw).await;
    assert!(
        !contains(&after, SECRET.as_bytes()),
        "{name}: the erased text is gone"
    );
    let loaded = store.load(a.id()).await.expect("load");
    let tomb = &loaded.session.chunks()[4];
    assert_eq!(
        tomb.kind().as_str(),
        "user",
        "{name}: the conversation keeps its shape"
    );
    assert!(
        tomb.text()
            .is_some_and(|t| t.starts_with("[erased sha256:")),
        "{name}"
    );
}

/// The ledger's entries as stored: identical bytes for identical sessions in any store.
async fn ledger_texts(store: &dyn SessionStore) -> Vec<String> {
    let (_, entries) = read_ledger(store).await.expect("ledger").expect("sealed");
    entries
        .into_iter()
        .map(|(_, e)| e.expect("entry").to_text())
        .collect()
}

#[tokio::test]
async fn jsonl_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn SessionStore> = Arc::new(Store::at(dir.path()));
    suite(store, Raw::Jsonl(dir.path().to_path_buf())).await;
}

#[tokio::test]
async fn sqlite_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("store.db");
    let url = format!("sqlite://{}", file.display());
    let store: Arc<dyn SessionStore> = rath_store_sql::open_store(&url).await.expect("open").into();
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", file.display()))
        .await
        .expect("raw connection");
    suite(store, Raw::Sqlite(pool, file)).await;
}

#[tokio::test]
async fn postgres_store() {
    let Some(url) = rath_testkit::fresh_postgres_database("rath_seal_", "rath_seal_tamper").await
    else {
        return;
    };
    let store: Arc<dyn SessionStore> = rath_store_sql::open_store(&url).await.expect("open").into();
    let pool = sqlx::PgPool::connect(&url).await.expect("raw connection");
    suite(store, Raw::Postgres(pool, url)).await;
}

/// The same sessions sealed in JSONL, SQLite and (when available) PostgreSQL: the ledgers
/// are the same bytes, so every root and digest is the same.
#[tokio::test]
async fn identical_roots_in_every_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let jsonl: Arc<dyn SessionStore> = Arc::new(Store::at(dir.path().join("sessions")));
    populate(&jsonl).await;
    let url = format!("sqlite://{}", dir.path().join("s.db").display());
    let sqlite: Arc<dyn SessionStore> =
        rath_store_sql::open_store(&url).await.expect("open").into();
    populate(&sqlite).await;
    let expected = ledger_texts(jsonl.as_ref()).await;
    assert_eq!(ledger_texts(sqlite.as_ref()).await, expected);
    if let Some(url) = rath_testkit::fresh_postgres_database("rath_seal_", "rath_seal_roots").await
    {
        let pg: Arc<dyn SessionStore> =
            rath_store_sql::open_store(&url).await.expect("open").into();
        populate(&pg).await;
        assert_eq!(ledger_texts(pg.as_ref()).await, expected);
    }
    // A fork's seal records only what it adds: the rest is its parent's (`base`).
    let c = &sessions()[4];
    let seal_c = expected
        .iter()
        .filter_map(|t| Entry::parse(t).ok()?.seal)
        .find(|s| s.session == c.id().as_str())
        .expect("c is sealed");
    let base = seal_c.base.expect("c's seal names its base");
    assert_eq!(
        (base.id.as_str(), base.len),
        (sessions()[1].id().as_str(), 5)
    );
    assert_eq!((seal_c.from, seal_c.leaves.len()), (5, 12 * 64));
    // And the roots are the value's own.
    let all = sessions();
    let first: Entry = Entry::parse(&expected[1]).expect("the first seal");
    let seal = first.seal.expect("a seal");
    assert_eq!(seal.session, all[0].id().as_str());
    assert_eq!(seal.root, rath_session::merkle::hex(&all[0].root(&[])));
}
