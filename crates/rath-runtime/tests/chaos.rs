//! The chaos test: worker processes killed and stopped at random while they run 200 runs of
//! a multi-agent workflow, on PostgreSQL (4 workers) and on SQLite (2 workers) at once.
//!
//! The workflow is the bundled `team` (`rath_runtime::bundled`): a planner with the
//! idempotent `lookup` tool, then a writer whose non-idempotent `record` tool appends its
//! idempotency key to a file outside every store. Each worker is this test binary run again
//! in child mode (`--exact child`), calling `rath_runtime::serve_worker` with the bundled
//! registry: what `rath worker` runs. Runs are submitted at a steady pace for
//! [`SUBMIT_FOR`]; meanwhile a killer SIGKILLs a random worker every 300–700 ms and restarts
//! it, and once per minute of the test (first at [`FIRST_STOP`]) it SIGSTOPs a worker that
//! holds a run for twice the lease, then SIGCONTs it.
//!
//! At the end every run is `succeeded`, or `needs_review` with exactly one ambiguous call
//! (counted and listed); the file holds no key twice, and the key of every `record` call of a
//! succeeded run exactly once; every succeeded run's output session, serialized, is
//! byte-identical to the same run done in-process without faults (the resumption is
//! recorded in the run's events and attempts, not in the session); the runs the stopped
//! worker held have no journal or ledger row written under its token after their lease
//! passed on, and no row anywhere carries a token above its run's lease.
//!
//! Bounded: the submissions take [`SUBMIT_FOR`], the drain is capped at [`DRAIN_AT_MOST`];
//! about 65 s in all. A missing PostgreSQL skips that half (and fails under `RATH_CI=1`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rath_persist::SessionStore;
use rath_runtime::bundled::{self, BundledOptions};
use rath_runtime::{
    EffectState, RunId, RunOptions, RunStatus, Runtime, Worker, WorkerOptions, serve_worker,
};
use rath_session::{Session, Stamper};

const RUNS: usize = 200;
const LEASE: Duration = Duration::from_millis(1500);
const THINK: Duration = Duration::from_millis(60);
const CONCURRENCY: usize = 2;
const SUBMIT_FOR: Duration = Duration::from_secs(58);
const FIRST_STOP: Duration = Duration::from_secs(30);
const STOP_EVERY: Duration = Duration::from_secs(60);
const DRAIN_AT_MOST: Duration = Duration::from_secs(40);

/// The child process entry point: a worker (run by the test below, never on its own).
#[test]
fn child() {
    let Ok(name) = std::env::var("RATH_CHAOS_WORKER") else {
        return;
    };
    let var = |k: &str| std::env::var(k).expect(k);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let runtime = connect(
            &var("RATH_CHAOS_RUNS"),
            &var("RATH_CHAOS_SESSIONS"),
            Some(var("RATH_CHAOS_EFFECTS").into()),
            THINK,
        )
        .await;
        let opts = WorkerOptions::named(name)
            .concurrency(CONCURRENCY)
            .lease(LEASE)
            .poll(Duration::from_millis(25))
            .grace(Duration::ZERO);
        serve_worker(runtime, opts).await.unwrap();
    });
}

async fn connect(runs: &str, sessions: &str, effects: Option<PathBuf>, think: Duration) -> Runtime {
    let store: Arc<dyn SessionStore> =
        Arc::from(rath_store_sql::open_store(sessions).await.unwrap());
    let registry = bundled::registry(&BundledOptions { effects, think });
    Runtime::connect(runs, store, registry).await.unwrap()
}

/// One store under test: its URLs, the effects file, the workers.
struct Rig {
    label: &'static str,
    dir: tempfile::TempDir,
    runs: String,
    sessions: String,
    workers: Vec<Option<Child>>,
    names: Vec<String>,
    spawned: usize,
}

impl Rig {
    fn effects(&self) -> PathBuf {
        self.dir.path().join("effects.txt")
    }

    fn spawn(&mut self, slot: usize) {
        self.spawned += 1;
        let name = format!("{}-w{slot}-g{}", self.label, self.spawned);
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child", "--nocapture", "--test-threads=1"])
            .env("RATH_CHAOS_WORKER", &name)
            .env("RATH_CHAOS_RUNS", &self.runs)
            .env("RATH_CHAOS_SESSIONS", &self.sessions)
            .env("RATH_CHAOS_EFFECTS", self.effects())
            .env_remove("RATH_RUNTIME_CRASH")
            .env_remove("RATH_RUNTIME_STOP")
            .env_remove("RATH_RUNTIME_PAUSE")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.workers[slot] = Some(child);
        self.names[slot] = name;
    }

    fn signal(&self, slot: usize, sig: i32) {
        if let Some(c) = &self.workers[slot] {
            // SAFETY: kill(2) on a child we spawned and have not reaped; no memory effects.
            unsafe {
                libc::kill(c.id() as i32, sig);
            }
        }
    }

    fn kill(&mut self, slot: usize) {
        self.signal(slot, libc::SIGKILL);
        if let Some(mut c) = self.workers[slot].take() {
            let _ = c.wait();
        }
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        for slot in 0..self.workers.len() {
            self.signal(slot, libc::SIGCONT);
            self.kill(slot);
        }
    }
}

/// A small xorshift generator (the killer's choices; its seed is printed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Runs 0..RUNS: the same input sessions and run ids in every store.
fn input(i: usize) -> Session {
    Session::user_with(
        format!("Task {i}: look two texts up and record them."),
        Stamper::seeded(10_000 + i as u64),
    )
}

fn submitter() -> Stamper {
    Stamper::seeded(77)
}

/// What the fenced (stopped) worker held: run, its token, its rows when the lease moved on.
struct Fenced {
    run: RunId,
    token: i64,
    rows: i64,
}

#[derive(Default, Debug)]
struct Counts {
    kills: usize,
    stops: usize,
    fenced_runs: usize,
    elapsed: Duration,
}

async fn chaos(mut rig: Rig, n_workers: usize, seed: u64) -> (Rig, Counts, Vec<Fenced>, Vec<RunId>) {
    let rt = connect(&rig.runs, &rig.sessions, Some(rig.effects()), THINK).await;
    rig.workers = (0..n_workers).map(|_| None).collect();
    rig.names = vec![String::new(); n_workers];
    for slot in 0..n_workers {
        rig.spawn(slot);
    }
    let mut rng = Rng(seed | 1);
    let mut counts = Counts::default();
    let mut fenced = Vec::new();
    let mut ids = Vec::new();
    let stamper = submitter();
    let start = Instant::now();
    let pace = SUBMIT_FOR / RUNS as u32;
    let mut next_kill = start + Duration::from_millis(300 + rng.below(401));
    let mut next_stop = start + FIRST_STOP;
    let mut stopped: Option<Stopped> = None;
    loop {
        let now = Instant::now();
        let mut due = (start + pace * ids.len() as u32).min(next_kill);
        due = match &stopped {
            Some(st) => due.min(st.until),
            None => due.min(next_stop),
        };
        if due > now {
            tokio::time::sleep(due - now).await;
        }
        let now = Instant::now();
        if ids.len() < RUNS && now >= start + pace * ids.len() as u32 {
            let id = rt
                .submit(&stamper, "team", &input(ids.len()), RunOptions::default())
                .await
                .unwrap();
            ids.push(id);
        }
        if now >= next_kill {
            // Any worker but a stopped one (it is let go on when its stop ends).
            let slot = rng.below(n_workers as u64) as usize;
            if stopped.as_ref().is_none_or(|st| st.slot != slot) {
                rig.kill(slot);
                rig.spawn(slot);
                counts.kills += 1;
            }
            next_kill = Instant::now() + Duration::from_millis(300 + rng.below(401));
        }
        if stopped.as_ref().is_some_and(|st| now >= st.until) {
            let st = stopped.take().unwrap();
            fenced.extend(st.release(&rig, &rt).await);
        } else if stopped.is_none() && now >= next_stop {
            match stop_one(&rig, &rt, n_workers, &mut rng).await {
                Some(st) => {
                    counts.stops += 1;
                    stopped = Some(st);
                    next_stop += STOP_EVERY;
                }
                // No worker holds a run this instant: try again shortly.
                None => next_stop = now + Duration::from_millis(50),
            }
        }
        if ids.len() == RUNS && stopped.is_none() && settled(&rt).await {
            break;
        }
        assert!(
            start.elapsed() < SUBMIT_FOR + DRAIN_AT_MOST,
            "{}: runs not settled after {:?}: {:?}",
            rig.label,
            start.elapsed(),
            status_counts(&rt).await
        );
    }
    counts.fenced_runs = fenced.len();
    counts.elapsed = start.elapsed();
    for slot in 0..n_workers {
        rig.kill(slot);
    }
    (rig, counts, fenced, ids)
}

async fn settled(rt: &Runtime) -> bool {
    rt.runs()
        .list(None)
        .await
        .unwrap()
        .iter()
        .all(|r| r.status.is_final() || r.status == RunStatus::NeedsReview)
}

async fn status_counts(rt: &Runtime) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for r in rt.runs().list(None).await.unwrap() {
        *m.entry(r.status.to_string()).or_default() += 1;
    }
    m
}

/// A worker stopped (SIGSTOP) with the runs it held and their tokens, until `until`.
struct Stopped {
    slot: usize,
    until: Instant,
    held: Vec<(RunId, i64)>,
}

/// SIGSTOPs a random worker that holds a run, for twice the lease; `None` when none does.
async fn stop_one(rig: &Rig, rt: &Runtime, n: usize, rng: &mut Rng) -> Option<Stopped> {
    let slot = rng.below(n as u64) as usize;
    let mut held = Vec::new();
    for r in rt.runs().list(Some(RunStatus::Running)).await.unwrap() {
        let lease = rt.runs().lease(&r.id).await.unwrap();
        if lease.worker == rig.names[slot] {
            held.push((r.id, lease.token));
        }
    }
    if held.is_empty() {
        return None;
    }
    rig.signal(slot, libc::SIGSTOP);
    Some(Stopped {
        slot,
        until: Instant::now() + LEASE * 2,
        held,
    })
}

impl Stopped {
    /// The runs whose lease passed to another worker during the stop, with the rows the
    /// stopped worker had written for them by then; then SIGCONT.
    async fn release(self, rig: &Rig, rt: &Runtime) -> Vec<Fenced> {
        let mut out = Vec::new();
        for (run, token) in self.held {
            if rt.runs().lease(&run).await.unwrap().token > token {
                let rows = rt.runs().rows_with_token(&run, token).await.unwrap();
                out.push(Fenced { run, token, rows });
            }
        }
        rig.signal(self.slot, libc::SIGCONT);
        out
    }
}
