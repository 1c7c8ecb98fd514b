//! A thread's history costs memory in proportion to what it returns (issue 47, item 1): after
//! one run whose input was 250,000 empty messages, `history` with `limit: 1` used to build
//! every step's whole message list first (+1.7 GB for one call). Alone in its binary, whose
//! allocator counts the bytes live at once: the peak of the call is measured in heap bytes
//! (the RSS after a large run holds freed memory the call can reuse unseen).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Harness, config};
use rath_server::ServerConfig;
use serde_json::{Value, json};

const MESSAGES: usize = 250_000;

/// The system allocator, counting the bytes live and the most live at once since
/// [`Counting::reset_peak`].
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

impl Counting {
    fn grew(by: usize) {
        let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
        PEAK.fetch_max(now, Ordering::Relaxed);
    }
    fn shrank(by: usize) {
        LIVE.fetch_sub(by, Ordering::Relaxed);
    }
    /// Bytes live now; the peak starts again from here.
    fn reset_peak() -> usize {
        let now = LIVE.load(Ordering::Relaxed);
        PEAK.store(now, Ordering::Relaxed);
        now
    }
    fn peak() -> usize {
        PEAK.load(Ordering::Relaxed)
    }
}

// SAFETY: every call is forwarded to the system allocator unchanged; only sizes are counted.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            Counting::grew(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            Counting::grew(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) };
        Counting::shrank(layout.size());
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            Counting::shrank(layout.size());
            Counting::grew(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_with_limit_one_costs_what_it_returns() {
    let h = Harness::sqlite(ServerConfig {
        body_limit: 4 << 20,
        ..config()
    })
    .await;
    let key = h.a.clone();
    let post = |path: String, body: Value| {
        h.http
            .post(format!("{}{path}", h.base))
            .header("x-api-key", &key)
            .json(&body)
            .send()
    };
    let thread: Value = post("/threads".into(), json!({}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    let input = vec![""; MESSAGES];
    let r = post(
        format!("/threads/{tid}/runs/wait"),
        json!({"assistant_id": "echo", "input": {"messages": input}}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    let _ = r.bytes().await.unwrap();

    // Settle, then measure one history call from the bytes live now.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = Counting::reset_peak();
    let t0 = Instant::now();
    let mut r = post(format!("/threads/{tid}/history"), json!({"limit": 1}))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // The client (this process too) writes the answer to a file as it comes, so the peak
    // is the server's.
    let mut file = tempfile::tempfile().unwrap();
    let mut size = 0usize;
    while let Some(bytes) = r.chunk().await.unwrap() {
        size += bytes.len();
        std::io::Write::write_all(&mut file, &bytes).unwrap();
    }
    let took = t0.elapsed();
    let peak = Counting::peak();
    std::io::Seek::rewind(&mut file).unwrap();
    let states: Value = serde_json::from_reader(std::io::BufReader::new(file)).unwrap();
    let states = states.as_array().unwrap();
    assert_eq!(states.len(), 1);
    let messages = states[0]["values"]["messages"].as_array().unwrap().len();
    assert_eq!(messages, MESSAGES + 1, "the input and the answer");
    let grew = peak.saturating_sub(before) as f64 / 1048576.0;
    println!(
        "history limit 1 over {MESSAGES} messages: answer {:.1} MiB in {took:?}, peak {grew:.1} \
         MiB of heap above what was live before the call",
        size as f64 / 1048576.0
    );
    // Built whole, every step's message list made this call take 1.7 GB (quadratic in the
    // thread's length); built whole once, 490 MiB (the run's sessions loaded, every message
    // converted and held, the answer serialised). Now the answer is written while it is
    // read, a window of chunks at a time.
    assert!(
        grew < 50.0,
        "history with limit 1 took {grew:.0} MiB above what was live before it"
    );
    h.stop().await;
}
