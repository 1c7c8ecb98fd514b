//! Session algebra benchmarks: fork, merge and push at 10⁴ and 10⁶ chunks (issue 2, criterion
//! 4) plus the scaling points 10³–10⁶ used by `docs/benchmarks.md`.
//!
//! Run: `cargo bench -p rath-session --bench session_ops`.

use divan::{Bencher, black_box};
use rath_session::{Chunk, Session, Stamper};

fn main() {
    divan::main();
}

fn session_of(n: usize) -> Session {
    let s = Session::user_with("root", Stamper::counter());
    s.extend((1..n).map(|i| {
        if i % 2 == 0 {
            Chunk::user(format!("row {i}"))
        } else {
            Chunk::assistant_text(format!("reply {i}"))
        }
    }))
}

/// Fork of an n-chunk session (Python OpenRath 2.0: 5.7 µs at 10⁴).
#[divan::bench(args = [1_000, 10_000, 100_000, 1_000_000])]
fn fork(bencher: Bencher, n: usize) {
    let s = session_of(n);
    bencher.bench_local(|| black_box(&s).fork());
}

/// Merge of two n/2-chunk sessions (Python OpenRath 2.0: 42 µs at 5k+5k).
#[divan::bench(args = [1_000, 10_000, 100_000, 1_000_000])]
fn merge_halves(bencher: Bencher, n: usize) {
    let a = session_of(n / 2);
    let b = session_of(n / 2);
    bencher.bench_local(|| black_box(&a).merge(black_box(&b)));
}

/// Push 10⁶ chunks one by one into a growing session (total time; divide by 10⁶ per push).
#[divan::bench(sample_count = 5)]
fn push_1m(bencher: Bencher) {
    let chunk = Chunk::user("x");
    bencher.bench_local(|| {
        let mut s = Session::empty_with(Stamper::counter());
        for _ in 0..1_000_000 {
            s.push_mut(chunk.clone());
        }
        s
    });
}

/// Push onto a forked session (the persistent-structure copy-on-write path).
#[divan::bench(args = [10_000, 1_000_000])]
fn push_after_fork(bencher: Bencher, n: usize) {
    let s = session_of(n);
    bencher.bench_local(|| black_box(&s).fork().push(Chunk::user("next")));
}

/// Merkle root of n chunks never hashed before (every chunk digest computed: the hashing
/// rate; the counter is the bytes of canonical JSON hashed).
#[divan::bench(args = [10_000, 100_000], sample_count = 10)]
fn merkle_root_cold(bencher: Bencher, n: usize) {
    let bytes: usize = session_of(n)
        .chunks()
        .iter()
        .map(|c| serde_json::to_vec(c).map_or(0, |v| v.len()))
        .sum();
    bencher
        .counter(divan::counter::BytesCount::new(bytes))
        .with_inputs(|| session_of(n))
        .bench_local_values(|s| s.chunks().merkle_root());
}

/// A fork's session root once its parent's chunks have their roots cached: O(1) hashing
/// whatever n (the fork shares the cached peaks).
#[divan::bench(args = [10_000, 1_000_000])]
fn fork_root_warm(bencher: Bencher, n: usize) {
    let s = session_of(n);
    let parent = s.root(&[]);
    bencher.bench_local(|| black_box(&s).fork().root(&[parent]));
}

/// Push one new chunk onto a session whose roots are cached, then its root: one chunk
/// digest and O(log n) node hashes.
#[divan::bench(args = [10_000, 1_000_000])]
fn push_then_root_warm(bencher: Bencher, n: usize) {
    let s = session_of(n);
    let _ = s.root(&[]);
    bencher.bench_local(|| black_box(&s).push(Chunk::user("next")).root(&[]));
}
