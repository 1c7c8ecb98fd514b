//! Persistence benchmarks, same shapes as Python OpenRath's `openrath_bench.py` (c) and (e):
//! a 10k-chunk session (user / assistant tool call / tool_result / assistant text) written
//! with a flush per row and loaded back, and the lineage export of a 10k-session fork tree.

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

fn session_10k() -> Session {
    Session::from_chunks(rows(10_000), Lineage::implicit(), Stamper::system())
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

/// Python: `SessionWriter` + `write_chunk` per row (flush per row): 82 ms.
#[divan::bench(sample_count = 30)]
fn persist_10k_chunks_write(bencher: divan::Bencher) {
    let s = session_10k();
    let tmp = Tmp::new();
    let store = Store::at(tmp.path());
    bencher.bench_local(|| {
        let mut w = store.writer(&s, WriterOptions::default()).expect("open");
        for c in s.chunks() {
            w.append(c).expect("append");
        }
        w.close().expect("close")
    });
}

/// The same write with `Durability::Batched { rows: 256 }` (one write(2) per 256 rows).
#[divan::bench(sample_count = 30)]
fn persist_10k_chunks_write_batched(bencher: divan::Bencher) {
    let s = session_10k();
    let tmp = Tmp::new();
    let store = Store::at(tmp.path());
    let opts = WriterOptions::default().durability(Durability::Batched { rows: 256 });
    bencher.bench_local(|| {
        let mut w = store.writer(&s, opts.clone()).expect("open");
        for c in s.chunks() {
            w.append(c).expect("append");
        }
        w.close().expect("close")
    });
}

/// Python: `load_session` of the same file: 63 ms.
#[divan::bench(sample_count = 30)]
fn persist_10k_chunks_load(bencher: divan::Bencher) {
    let s = session_10k();
    let tmp = Tmp::new();
    let path = Store::at(tmp.path()).save(&s).expect("save");
    bencher.bench_local(|| {
        let l = load_file(&path).expect("load");
        assert!(l.closed && l.session.len() == 10_000);
        l
    });
}

/// Python: `export_jsonl` of a 10k-session fork/detach tree: 80 ms.
#[divan::bench(sample_count = 30)]
fn lineage_export_10k_sessions(bencher: divan::Bencher) {
    let root = Session::user_with("root", Stamper::system());
    let mut sessions = vec![root];
    for i in 1..10_000usize {
        let parent = &sessions[(i * 7919) % sessions.len()];
        let next = if i % 3 != 0 {
            parent.fork()
        } else {
            parent.detach()
        };
        sessions.push(next);
    }
    let tmp = Tmp::new();
    let path = tmp.path().join("lineage.jsonl");
    bencher.bench_local(|| export_sessions_to_file(&sessions, &path).expect("export"));
}
