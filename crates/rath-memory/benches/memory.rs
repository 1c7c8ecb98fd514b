//! Commit 100k short items and recall against them.
//!
//! `cargo bench -p rath-memory --bench memory`. Before divan's table, prints recall p50/p99
//! over 1000 varied queries at 100k items (divan reports medians, not tails).

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

use rath_memory::{Durability, LocalMemory, LocalOptions, Memory, MemoryUri, NewItem, Scope};

const N: usize = 100_000;
const BATCH: usize = 1_000;
const VOCAB: usize = 5_000;

fn words() -> &'static [String] {
    static W: OnceLock<Vec<String>> = OnceLock::new();
    W.get_or_init(|| (0..VOCAB).map(|i| format!("w{i}")).collect())
}

/// Short items of 8 terms each, skewed towards frequent terms (a Zipf-like mix).
fn corpus() -> Vec<NewItem> {
    let w = words();
    let mut s: u64 = 7;
    let mut rnd = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    (0..N)
        .map(|i| {
            let mut text = String::new();
            for _ in 0..8 {
                let r = (rnd() % VOCAB as u64) as usize;
                text.push_str(&w[r * r / VOCAB]);
                text.push(' ');
            }
            let uri = MemoryUri::new(Scope::Resources, format!("bench/{i}")).expect("valid uri");
            NewItem::new(uri, text)
        })
        .collect()
}

fn query(q: usize) -> String {
    let w = words();
    format!(
        "{} {} {}",
        w[(q * 7) % VOCAB],
        w[(q * 13) % 300],
        w[(q * 3) % 50]
    )
}

fn fresh_dir() -> PathBuf {
    let d = tempfile::tempdir().expect("tempdir");
    d.keep()
}

fn commit_all(mem: &LocalMemory, items: &[NewItem]) {
    for (b, batch) in items.chunks(BATCH).enumerate() {
        mem.commit(&format!("commit_{b:06}"), batch.to_vec())
            .expect("commit");
    }
}

/// A 100k-item store built once and shared by the recall benches.
fn store() -> &'static LocalMemory {
    static S: OnceLock<LocalMemory> = OnceLock::new();
    S.get_or_init(|| {
        let opts = LocalOptions::default().durability(Durability::Buffered);
        let mem = LocalMemory::open_at(&fresh_dir(), "bench", opts).expect("open");
        commit_all(&mem, &corpus());
        mem
    })
}

fn main() {
    let items = corpus();
    let opts = LocalOptions::default().durability(Durability::Fsync);
    let dir = fresh_dir();
    let mem = LocalMemory::open_at(&dir, "bench", opts).expect("open");
    let t = Instant::now();
    commit_all(&mem, &items);
    let secs = t.elapsed().as_secs_f64();
    println!(
        "commit {N} items in batches of {BATCH} (fsync per commit): {secs:.2} s = {:.0} items/s",
        N as f64 / secs
    );
    drop(mem);
    let t = Instant::now();
    let mem = LocalMemory::open_at(&dir, "bench", LocalOptions::default()).expect("reopen");
    println!(
        "reopen + index rebuild at {N} items: {:.0} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let mut lat: Vec<f64> = (0..1000)
        .map(|q| {
            let text = query(q);
            let t = Instant::now();
            let hits = mem.recall(&text, None, 5).expect("recall");
            let us = t.elapsed().as_secs_f64() * 1e6;
            std::hint::black_box(hits);
            us
        })
        .collect();
    lat.sort_by(f64::total_cmp);
    println!(
        "recall k=5 at {N} items over 1000 queries: p50 {:.0} µs, p99 {:.0} µs",
        lat[500], lat[990]
    );
    drop(mem);
    let _ = std::fs::remove_dir_all(&dir);
    divan::main();
}

#[divan::bench(sample_count = 3, sample_size = 1)]
fn commit_100k_batched_buffered(b: divan::Bencher) {
    let items = corpus();
    b.with_inputs(|| {
        let opts = LocalOptions::default().durability(Durability::Buffered);
        LocalMemory::open_at(&fresh_dir(), "bench", opts).expect("open")
    })
    .bench_local_values(|mem| {
        commit_all(&mem, &items);
        let _ = std::fs::remove_dir_all(mem.dir());
    });
}

#[divan::bench(sample_count = 3, sample_size = 1)]
fn commit_200_single_items_fsync(b: divan::Bencher) {
    let items: Vec<NewItem> = corpus().into_iter().take(200).collect();
    b.with_inputs(|| {
        LocalMemory::open_at(&fresh_dir(), "bench", LocalOptions::default()).expect("open")
    })
    .bench_local_values(|mem| {
        for (i, item) in items.iter().enumerate() {
            mem.commit(&format!("c{i}"), vec![item.clone()])
                .expect("commit");
        }
        let _ = std::fs::remove_dir_all(mem.dir());
    });
}

#[divan::bench(args = [1, 5, 20])]
fn recall_100k(b: divan::Bencher, k: usize) {
    let mem = store();
    let mut q = 0usize;
    b.bench_local(|| {
        q += 1;
        mem.recall(&query(q), None, k).expect("recall")
    });
}

#[divan::bench]
fn recall_100k_rare_term(b: divan::Bencher) {
    let mem = store();
    b.bench_local(|| {
        mem.recall("w4999", Some(Scope::Resources), 5)
            .expect("recall")
    });
}
