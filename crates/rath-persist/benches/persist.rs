//! Persistence benchmarks, same shapes as Python OpenRath's `openrath_bench.py` (c) and (e):
//! a 10k-chunk session (user / assistant tool call / tool_result / assistant text) written
//! with a flush per row and loaded back, and the lineage export of a 10k-session fork tree;
//! plus the scaling points 10³–10⁶ that `cargo xtask bench` plots.

use std::path::PathBuf;

use rath_persist::{Durability, Store, WriterOptions, export_sessions_to_file, load_file};
use rath_session::{Chunk, Lineage, Session, Stamper, ToolCall};

fn main() {
    divan::main();
}

fn rows(n: usize) -> Vec<Chunk> {
    (0..n)
        .map(|i| match i % 4 {
            0 => Chunk::user(format!("user message number {i}: please do the thing")),
            1 => Chunk::assistant(
                None,
                Some(vec![ToolCall::function(
                    format!("call_{i}"),
                    "echo",
                    format!("{{\"text\": \"payload {i}\"}}"),
                )]),
            ),
            2 => Chunk::tool_result(
                format!("call_{}", i - 1),
                "echo",
                format!("{{\"echo\": \"payload {i}\"}}"),
            ),
            _ => Chunk::assistant_text(format!("assistant reply {i}, all done")),
        })
        .collect()
}

struct Tmp(tempfile::TempDir);

impl Tmp {
    fn new() -> Self {
        Tmp(tempfile::tempdir().expect("tempdir"))
    }
    fn path(&self) -> PathBuf {
        self.0.path().to_path_buf()
    }
}

/// The scaling points (chunks per session, sessions per export).
const SIZES: [usize; 4] = [1_000, 10_000, 100_000, 1_000_000];

fn session_of(n: usize) -> Session {
    Session::from_chunks(rows(n), Lineage::implicit(), Stamper::system())
}

/// Writes `s` whole; every iteration writes over the previous one's file (`replace`, as the
/// Python script unlinks the file before each write).
fn write_all(store: &Store, s: &Session, opts: &WriterOptions) -> PathBuf {
    let mut w = store.writer(s, opts.clone().replace(true)).expect("open");
    for c in s.chunks() {
        w.append(c).expect("append");
    }
    w.close().expect("close")
}

/// Python: `SessionWriter` + `write_chunk` per row (flush per row): 82 ms at 10⁴. Default
/// durability ([`Durability::Mapped`]: each row reaches the OS before the next).
#[divan::bench(args = SIZES, max_time = 5)]
fn persist_write(bencher: divan::Bencher, n: usize) {
    let s = session_of(n);
    let tmp = Tmp::new();
    let store = Store::at(tmp.path());
    let opts = WriterOptions::default();
    bencher.bench_local(|| write_all(&store, &s, &opts));
}

/// The same write with [`Durability::Flush`]: one `write(2)` per row, like Python.
#[divan::bench(args = [10_000], max_time = 5)]
fn persist_write_syscall_per_row(bencher: divan::Bencher, n: usize) {
    let s = session_of(n);
    let tmp = Tmp::new();
    let store = Store::at(tmp.path());
    let opts = WriterOptions::default().durability(Durability::Flush);
    bencher.bench_local(|| write_all(&store, &s, &opts));
}

/// The same write with `Durability::Batched { rows: 256 }` (one write(2) per 256 rows).
#[divan::bench(args = [10_000], max_time = 5)]
fn persist_write_batched(bencher: divan::Bencher, n: usize) {
    let s = session_of(n);
    let tmp = Tmp::new();
    let store = Store::at(tmp.path());
    let opts = WriterOptions::default().durability(Durability::Batched { rows: 256 });
    bencher.bench_local(|| write_all(&store, &s, &opts));
}

/// Python: `load_session` of the same file: 63 ms at 10⁴.
#[divan::bench(args = SIZES, max_time = 5)]
fn persist_load(bencher: divan::Bencher, n: usize) {
    let s = session_of(n);
    let tmp = Tmp::new();
    let path = Store::at(tmp.path()).save(&s).expect("save");
    bencher.bench_local(|| {
        let l = load_file(&path).expect("load");
        assert!(l.closed && l.session.len() == n);
        l
    });
}

/// Python's fork/detach tree of `n` sessions: each forks (or, every third, detaches) an
/// earlier one.
fn fork_tree(n: usize) -> Vec<Session> {
    let root = Session::user_with("root", Stamper::system());
    let mut sessions = vec![root];
    for i in 1..n {
        let parent = &sessions[(i * 7919) % sessions.len()];
        let next = if i % 3 != 0 {
            parent.fork()
        } else {
            parent.detach()
        };
        sessions.push(next);
    }
    sessions
}

/// Python: `export_jsonl` of a 10⁴-session fork/detach tree: 80 ms.
#[divan::bench(args = SIZES, max_time = 5)]
fn lineage_export(bencher: divan::Bencher, n: usize) {
    let sessions = fork_tree(n);
    let tmp = Tmp::new();
    let path = tmp.path().join("lineage.jsonl");
    bencher.bench_local(|| export_sessions_to_file(&sessions, &path).expect("export"));
}
