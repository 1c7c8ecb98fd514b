//! Sealing and verifying a store: `rath verify`'s rate in chunks per second (divan's item
//! counter) and bytes of chunk documents per second, on a JSONL directory and a SQLite file.
//!
//! Run: `cargo bench -p rath-seal --bench verify`.

use std::sync::Arc;

use divan::Bencher;
use divan::counter::{BytesCount, ItemsCount};
use rath_persist::{SessionStore, Store};
use rath_seal::{Sealer, VerifyOptions, verify_store};
use rath_session::{Chunk, Session, Stamper};

fn main() {
    divan::main();
}

/// `sessions` sessions of `per` chunks each (a user turn and an answer of ~200 bytes).
fn sessions(sessions: usize, per: usize) -> Vec<Session> {
    let st = Stamper::counter();
    (0..sessions)
        .map(|s| {
            Session::user_with(format!("question {s}"), st.clone()).extend((1..per).map(|i| {
                Chunk::assistant_text(format!(
                    "answer {i} of session {s}: {}",
                    "lorem ipsum ".repeat(16)
                ))
            }))
        })
        .collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

async fn sealed(store: Arc<dyn SessionStore>, all: &[Session]) -> u64 {
    let mut bytes = 0u64;
    for s in all {
        store.save(s).await.expect("save");
        for c in s.chunks() {
            bytes += rath_persist::doc::encode_chunk(c).expect("encode").len() as u64;
        }
    }
    Sealer::open(store, None, Stamper::counter())
        .await
        .expect("sealer")
        .seal_all()
        .await
        .expect("seal");
    bytes
}

const SESSIONS: usize = 100;
const PER: usize = 1_000;

#[divan::bench(sample_count = 5)]
fn verify_jsonl_100k_chunks(bencher: Bencher) {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn SessionStore> = Arc::new(Store::at(dir.path()));
    let bytes = rt.block_on(sealed(store.clone(), &sessions(SESSIONS, PER)));
    bencher
        .counter(ItemsCount::new(SESSIONS * PER))
        .counter(BytesCount::new(bytes))
        .bench_local(|| {
            let r = rt
                .block_on(verify_store(store.as_ref(), &VerifyOptions::default()))
                .expect("verify");
            assert!(r.is_clean());
        });
}

#[divan::bench(sample_count = 5)]
fn verify_sqlite_100k_chunks(bencher: Bencher) {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("s.db").display());
    let store: Arc<dyn SessionStore> = rt
        .block_on(rath_store_sql::open_store(&url))
        .expect("open")
        .into();
    let bytes = rt.block_on(sealed(store.clone(), &sessions(SESSIONS, PER)));
    bencher
        .counter(ItemsCount::new(SESSIONS * PER))
        .counter(BytesCount::new(bytes))
        .bench_local(|| {
            let r = rt
                .block_on(verify_store(store.as_ref(), &VerifyOptions::default()))
                .expect("verify");
            assert!(r.is_clean());
        });
}

/// Sealing 100 sessions of 1,000 chunks (stored, unsealed) from scratch.
#[divan::bench(sample_count = 5)]
fn seal_jsonl_100k_chunks(bencher: Bencher) {
    let rt = runtime();
    let all = sessions(SESSIONS, PER);
    bencher
        .counter(ItemsCount::new(SESSIONS * PER))
        .with_inputs(|| {
            let dir = tempfile::tempdir().expect("tempdir");
            let store: Arc<dyn SessionStore> = Arc::new(Store::at(dir.path()));
            for s in &all {
                rt.block_on(store.save(s)).expect("save");
            }
            (dir, store)
        })
        .bench_local_values(|(_dir, store)| {
            rt.block_on(async {
                Sealer::open(store, None, Stamper::counter())
                    .await
                    .expect("sealer")
                    .seal_all()
                    .await
                    .expect("seal")
            })
        });
}
