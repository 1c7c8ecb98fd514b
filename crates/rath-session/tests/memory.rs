//! Memory cost of forks at 10⁶ chunks, measured with a counting allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use rath_session::{Chunk, Session, Stamper};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::SeqCst);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::SeqCst);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::SeqCst)
}

#[test]
fn forks_of_a_million_chunk_session_cost_a_small_constant() {
    const N: usize = 1_000_000;
    let before_chunks = live();
    let chunks: Vec<Chunk> = (0..N).map(|i| Chunk::user(format!("row {i}"))).collect();
    let chunk_bytes = live() - before_chunks - (N * std::mem::size_of::<Chunk>()) as isize;

    let before_session = live();
    let session = Session::empty_with(Stamper::counter()).extend(chunks);
    let session_bytes = live() - before_session;
    // The tree holds one pointer per chunk plus its nodes: well under the chunks themselves.
    let per_chunk_overhead = session_bytes as f64 / N as f64;
    eprintln!(
        "chunks: {chunk_bytes} B ({:.1} B/chunk); session structure: {session_bytes} B ({per_chunk_overhead:.2} B/chunk)",
        chunk_bytes as f64 / N as f64
    );
    assert!(
        per_chunk_overhead < 12.0,
        "structure costs {per_chunk_overhead} B/chunk"
    );

    const FORKS: usize = 1000;
    let before_forks = live();
    let forks: Vec<Session> = (0..FORKS).map(|_| session.fork()).collect();
    let per_fork = (live() - before_forks) as f64 / FORKS as f64;
    eprintln!("per fork: {per_fork:.0} B (10^6-chunk session)");
    assert!(per_fork < 512.0, "a fork costs {per_fork} B");
    assert_eq!(forks[FORKS - 1].len(), N);

    // A merge of two forks is also a small constant, not a copy.
    let before_merge = live();
    let merged = forks[0].merge(&forks[1]).expect("unplaced forks merge");
    let merge_bytes = live() - before_merge;
    eprintln!("merge of two 10^6-chunk forks: {merge_bytes} B");
    assert!(merge_bytes < 4096, "a merge costs {merge_bytes} B");
    assert_eq!(merged.len(), 2 * N);
}
