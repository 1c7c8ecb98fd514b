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
    EffectState, RunClock, RunId, RunOptions, RunStatus, Runtime, Worker, WorkerOptions,
    serve_worker,
};
use rath_session::{Session, Stamper};

const RUNS: usize = 200;
const LEASE: Duration = Duration::from_millis(1500);
const THINK: Duration = Duration::from_millis(60);
const CONCURRENCY: usize = 2;
const SUBMIT_FOR: Duration = Duration::from_secs(62);
const FIRST_STOP: Duration = Duration::from_secs(30);
const STOP_EVERY: Duration = Duration::from_secs(60);
/// Generous: under the whole workspace's tests at once on 2 cores a drain of 40 s once fell short.
const DRAIN_AT_MOST: Duration = Duration::from_secs(120);

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
            .grace(Duration::ZERO)
            .session_clock(RunClock::manual(SESSION_MS));
        serve_worker(runtime, opts).await.unwrap();
    });
}

/// When every run here starts (`WorkerOptions::session_clock`), in the worker processes and
/// the reference alike: the same run makes the same session bytes in both
/// (2026-12-01T00:00:00Z).
const SESSION_MS: i64 = 1_795_996_800_000;

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
}

async fn chaos(
    mut rig: Rig,
    n_workers: usize,
    seed: u64,
) -> (Rig, Counts, Vec<Fenced>, Vec<RunId>) {
    let rt = connect(&rig.runs, &rig.sessions, Some(rig.effects()), THINK).await;
    rig.workers = (0..n_workers).map(|_| None).collect();
    rig.names = vec![String::new(); n_workers];
    for slot in 0..n_workers {
        rig.spawn(slot);
    }
    let mut rng = Rng(seed | 1);
    let mut counts = Counts::default();
    let mut fenced = Vec::new();
    let start = Instant::now();
    // The submitter, the killer and each stop's end are separate tasks: a stopped worker may
    // hold SQLite's write lock, and only the stop's end lets it go on.
    let submissions = tokio::spawn(submit_all(rt.clone(), start));
    let mut next_kill = start + Duration::from_millis(300 + rng.below(401));
    let mut next_stop = start + FIRST_STOP;
    let mut stopped: Option<(usize, tokio::task::JoinHandle<Vec<Fenced>>)> = None;
    loop {
        let now = Instant::now();
        let due = next_kill
            .min(next_stop)
            .min(now + Duration::from_millis(100));
        if due > now {
            tokio::time::sleep(due - now).await;
        }
        let now = Instant::now();
        if now >= next_kill {
            // Any worker but a stopped one (it is let go on when its stop ends).
            let slot = rng.below(n_workers as u64) as usize;
            if stopped.as_ref().is_none_or(|(st, _)| *st != slot) {
                rig.kill(slot);
                rig.spawn(slot);
                counts.kills += 1;
            }
            next_kill = Instant::now() + Duration::from_millis(300 + rng.below(401));
        }
        if stopped.as_ref().is_some_and(|(_, end)| end.is_finished()) {
            let (_, end) = stopped.take().unwrap();
            fenced.extend(end.await.unwrap());
        } else if stopped.is_none() && now >= next_stop {
            match stop_one(&rig, &rt, n_workers, &mut rng).await {
                Some((slot, st)) => {
                    counts.stops += 1;
                    stopped = Some((slot, tokio::spawn(st.release(rt.clone()))));
                    next_stop += STOP_EVERY;
                }
                // No worker holds a run this instant: try again shortly.
                None => next_stop = now + Duration::from_millis(50),
            }
        }
        if submissions.is_finished() && stopped.is_none() && settled(&rt).await {
            break;
        }
        // A guard against a drain that never settles (DRAIN_AT_MOST is minutes), not a
        // measurement.
        assert!(
            start.elapsed() < SUBMIT_FOR + DRAIN_AT_MOST,
            "{}: runs not settled after {:?}: {:?}",
            rig.label,
            start.elapsed(),
            status_counts(&rt).await
        );
    }
    let ids = submissions.await.unwrap();
    counts.fenced_runs = fenced.len();
    for slot in 0..n_workers {
        rig.kill(slot);
    }
    (rig, counts, fenced, ids)
}

/// Submits the runs at a steady pace over [`SUBMIT_FOR`] from `start`.
async fn submit_all(rt: Runtime, start: Instant) -> Vec<RunId> {
    let stamper = submitter();
    let pace = SUBMIT_FOR / RUNS as u32;
    let mut ids = Vec::new();
    for i in 0..RUNS {
        tokio::time::sleep_until((start + pace * i as u32).into()).await;
        let id = rt
            .submit(&stamper, "team", &input(i), RunOptions::default())
            .await
            .unwrap();
        ids.push(id);
    }
    ids
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
    pid: i32,
    until: Instant,
    held: Vec<(RunId, i64)>,
}

/// SIGSTOPs a random worker that holds a run, for twice the lease; `None` when none does.
async fn stop_one(rig: &Rig, rt: &Runtime, n: usize, rng: &mut Rng) -> Option<(usize, Stopped)> {
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
    let pid = rig.workers[slot].as_ref()?.id() as i32;
    rig.signal(slot, libc::SIGSTOP);
    Some((
        slot,
        Stopped {
            pid,
            until: Instant::now() + LEASE * 2,
            held,
        },
    ))
}

impl Stopped {
    /// The runs whose lease passed to another worker during the stop, with the rows the
    /// stopped worker had written for them by then; then SIGCONT.
    async fn release(self, rt: Runtime) -> Vec<Fenced> {
        tokio::time::sleep_until(self.until.into()).await;
        let mut out = Vec::new();
        for (run, token) in self.held {
            if rt.runs().lease(&run).await.unwrap().token > token {
                let rows = rt.runs().rows_with_token(&run, token).await.unwrap();
                out.push(Fenced { run, token, rows });
            }
        }
        // SAFETY: kill(2) on our stopped child (the killer leaves it alone until this ends).
        unsafe {
            libc::kill(self.pid, libc::SIGCONT);
        }
        out
    }
}

/// The same 200 runs done in-process without faults: each output session, serialized.
async fn reference() -> HashMap<RunId, Vec<u8>> {
    let dir = tempfile::tempdir().unwrap();
    let runs = format!("sqlite:{}", dir.path().join("runs.db").display());
    let sessions = format!("sqlite://{}", dir.path().join("sessions.db").display());
    let rt = connect(&runs, &sessions, None, Duration::ZERO).await;
    let stamper = submitter();
    let mut ids = Vec::new();
    for i in 0..RUNS {
        ids.push(
            rt.submit(&stamper, "team", &input(i), RunOptions::default())
                .await
                .unwrap(),
        );
    }
    let shutdown = rath_flow::CancellationToken::new();
    let pool = tokio::spawn({
        let opts = WorkerOptions::named("reference")
            .concurrency(4)
            .session_clock(RunClock::manual(SESSION_MS));
        let w = Worker::new(rt.clone(), opts);
        let shutdown = shutdown.clone();
        async move { w.run(shutdown).await }
    });
    while !settled(&rt).await {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    shutdown.cancel();
    pool.await.unwrap().unwrap();
    let mut out = HashMap::new();
    for id in ids {
        let run = rt.runs().get(&id).await.unwrap();
        assert_eq!(run.status, RunStatus::Succeeded, "reference run {id}");
        assert_eq!(run.attempts, 1);
        let s = rt.output(&id).await.unwrap().unwrap();
        out.insert(id, serde_json::to_vec(&s).unwrap());
    }
    out
}

/// Where two serialized sessions part, with some context from each side.
fn first_difference(want: &[u8], got: &[u8]) -> String {
    let at = want
        .iter()
        .zip(got)
        .position(|(a, b)| a != b)
        .unwrap_or(want.len().min(got.len()));
    let from = at.saturating_sub(160);
    let show = |b: &[u8]| {
        String::from_utf8_lossy(&b[from.min(b.len())..(at + 240).min(b.len())]).into_owned()
    };
    format!(
        "{} vs {} bytes, first difference at byte {at}\n  uninterrupted: …{}…\n  this run:      …{}…",
        want.len(),
        got.len(),
        show(want),
        show(got)
    )
}

/// What one store ended with, checked against the acceptance.
async fn verify(
    rig: &Rig,
    counts: &Counts,
    fenced: &[Fenced],
    ids: &[RunId],
    reference: &HashMap<RunId, Vec<u8>>,
) {
    let label = rig.label;
    let rt = connect(&rig.runs, &rig.sessions, None, Duration::ZERO).await;
    let runs = rt.runs().list(None).await.unwrap();
    assert_eq!(runs.len(), RUNS, "{label}: runs stored");
    assert_eq!(
        runs.iter().map(|r| &r.id).collect::<HashSet<_>>(),
        ids.iter().collect::<HashSet<_>>()
    );
    let lines = std::fs::read_to_string(rig.effects()).unwrap_or_default();
    let mut in_file: HashMap<&str, usize> = HashMap::new();
    for l in lines.lines() {
        *in_file.entry(l).or_default() += 1;
    }
    let dups: Vec<_> = in_file.iter().filter(|(_, n)| **n > 1).collect();
    assert!(dups.is_empty(), "{label}: keys recorded twice: {dups:?}");

    let mut review = Vec::new();
    let mut known_keys = HashSet::new();
    let (mut succeeded, mut resumed, mut ambiguous) = (0, 0, 0);
    for run in &runs {
        let effects = rt.runs().effects(&run.id).await.unwrap();
        let amb: Vec<_> = effects
            .iter()
            .filter(|e| e.state == EffectState::Ambiguous)
            .collect();
        ambiguous += amb.len();
        for e in effects.iter().filter(|e| e.tool == "record") {
            known_keys.insert(e.idempotency_key.clone());
        }
        match run.status {
            RunStatus::Succeeded => {
                succeeded += 1;
                if run.attempts > 1 {
                    resumed += 1;
                }
                assert!(amb.is_empty(), "{label}: {} succeeded with {amb:?}", run.id);
                for e in effects.iter().filter(|e| e.tool == "record") {
                    assert_eq!(e.state, EffectState::Succeeded, "{label}: {e:?}");
                    let n = in_file.get(e.idempotency_key.as_str()).copied();
                    assert_eq!(n, Some(1), "{label}: effect of {} {}", run.id, e.call_id);
                }
                let out = rt.output(&run.id).await.unwrap().unwrap();
                let bytes = serde_json::to_vec(&out).unwrap();
                let want = reference
                    .get(&run.id)
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                assert!(
                    want == bytes.as_slice(),
                    "{label}: {} (attempts {}) differs from its uninterrupted run: {}",
                    run.id,
                    run.attempts,
                    first_difference(want, &bytes)
                );
            }
            RunStatus::NeedsReview => {
                assert_eq!(amb.len(), 1, "{label}: {} in review: {effects:?}", run.id);
                let call = amb[0];
                let detail = run.detail.clone().unwrap_or_default();
                assert!(detail.contains(&call.call_id), "{label}: detail {detail}");
                let happened = in_file.contains_key(call.idempotency_key.as_str());
                review.push(format!(
                    "{} {} {} (attempts {}, effect {})",
                    run.id,
                    call.tool,
                    call.call_id,
                    run.attempts,
                    if happened {
                        "happened"
                    } else {
                        "did not happen"
                    }
                ));
            }
            other => panic!("{label}: run {} ended {other}: {:?}", run.id, run.detail),
        }
    }
    let strangers: Vec<_> = in_file
        .keys()
        .filter(|k| !known_keys.contains(**k))
        .collect();
    assert!(
        strangers.is_empty(),
        "{label}: keys no ledger knows: {strangers:?}"
    );
    assert_eq!(
        ambiguous,
        review.len(),
        "{label}: ambiguous calls outside review"
    );
    assert_eq!(rt.runs().rows_above_lease().await.unwrap(), 0, "{label}");
    for f in fenced {
        let now = rt.runs().rows_with_token(&f.run, f.token).await.unwrap();
        assert_eq!(
            now, f.rows,
            "{label}: the stopped worker wrote for {} after its lease passed on",
            f.run
        );
    }
    eprintln!(
        "chaos {label}: {RUNS} runs: {succeeded} succeeded ({resumed} resumed on another \
         worker), {} needs_review, {ambiguous} ambiguous calls; {} SIGKILLs, {} SIGSTOPs \
         ({} runs fenced from the stopped worker)",
        review.len(),
        counts.kills,
        counts.stops,
        counts.fenced_runs
    );
    for r in &review {
        eprintln!("chaos {label}: needs_review {r}");
    }
}

fn sqlite_rig() -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let runs = format!("sqlite:{}", dir.path().join("runs.db").display());
    let sessions = format!("sqlite://{}", dir.path().join("sessions.db").display());
    Rig {
        label: "sqlite",
        dir,
        runs,
        sessions,
        workers: Vec::new(),
        names: Vec::new(),
        spawned: 0,
    }
}

/// A fresh PostgreSQL database holding both stores, or `None` (skipped; fails under RATH_CI).
async fn postgres_rig() -> Option<Rig> {
    let url = rath_testkit::fresh_postgres_database("rt_", "rt_chaos").await?;
    Some(Rig {
        label: "postgres",
        dir: tempfile::tempdir().unwrap(),
        runs: url.clone(),
        sessions: url,
        workers: Vec::new(),
        names: Vec::new(),
        spawned: 0,
    })
}

fn seed() -> u64 {
    std::env::var("RATH_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rath_runtime::now_ms() as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos_on_postgres_with_4_workers_and_sqlite_with_2() {
    let seed = seed();
    eprintln!("chaos: seed {seed} (RATH_CHAOS_SEED={seed} repeats the killer's choices)");
    let pg = postgres_rig().await;
    let reference = tokio::spawn(reference());
    let pg_half = async {
        match pg {
            Some(rig) => Some(chaos(rig, 4, seed).await),
            None => None,
        }
    };
    let sqlite_half = chaos(sqlite_rig(), 2, seed.rotate_left(17));
    let (pg_out, sqlite_out) = tokio::join!(pg_half, sqlite_half);
    let reference = reference.await.unwrap();
    for (rig, counts, fenced, ids) in pg_out.iter().chain(std::iter::once(&sqlite_out)) {
        verify(rig, counts, fenced, ids, &reference).await;
    }
}
