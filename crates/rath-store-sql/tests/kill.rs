//! SIGKILL a writer at 200 random points on SQLite and on PostgreSQL: every session loads,
//! none holds a torn row, none lost more than the transaction in flight.
//!
//! The writers are this test binary re-executed with `RATH_KILL_CHILD` set (the store URL):
//! `child_kill_writer` does nothing unless that variable is present. A child opens the store
//! and prints `READY` (so a kill never lands before the connection is up: on PostgreSQL the
//! connection and the migration check take longer than the kill delays), saves its session,
//! then appends one chunk a transaction (a loop round), printing `ROW n END` after each
//! commit returned; the parent kills it right after `READY` (one time in eight) or at a
//! random moment after its first commit, waits until nothing of it runs on the server, loads the
//! session and checks every chunk against what the child wrote. Both stores run through the
//! same [`kill_writers`]; only the URL and the delay range differ.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use rath_persist::{PersistError, SessionStore};
use rath_session::{Chunk, Lineage, Session, SessionId, SessionParts, Stamper};

const KILLS: u64 = 200;

fn session_for(n: u64) -> Session {
    let s = Session::from_chunks([], Lineage::implicit(), Stamper::counter());
    let parts = SessionParts {
        id: SessionId::from(format!("00000000-0000-4000-8000-{n:012}")),
        ..s.to_parts()
    };
    Session::from_parts(parts, Stamper::counter())
}

fn row_text(n: u64, i: usize) -> String {
    // Rows of ~1 KB with the child and row in them: a torn or misplaced row cannot pass.
    format!("child {n} row {i} {}", "x".repeat(1000))
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn child_kill_writer() {
    let Ok(url) = std::env::var("RATH_KILL_CHILD") else {
        return;
    };
    let n: u64 = std::env::var("RATH_KILL_CHILD_ID")
        .expect("id")
        .parse()
        .expect("id");
    let rows: usize = std::env::var("RATH_KILL_CHILD_ROWS")
        .expect("rows")
        .parse()
        .expect("rows");
    runtime().block_on(async {
        let store = rath_store_sql::open_store(&url).await.expect("open");
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "READY");
        let _ = out.flush();
        let mut s = session_for(n).push(Chunk::user(row_text(n, 0)));
        store.save(&s).await.expect("save");
        let _ = writeln!(out, "ROW 0 END");
        let _ = out.flush();
        for i in 1..rows {
            let stored = s.len();
            s = s.push(Chunk::user(row_text(n, i)));
            store.append(&s, stored).await.expect("append");
            // Printed only once the transaction committed: it must survive the kill.
            let _ = writeln!(out, "ROW {i} END");
            let _ = out.flush();
        }
        let _ = writeln!(out, "DONE");
    });
}

/// What one killed child reported on stdout before it died.
#[derive(Default)]
struct Reported {
    /// Rows whose commit returned (`ROW n END` printed).
    rows: usize,
    /// The child wrote every row.
    done: bool,
}

/// Spawns writer `n` of `url` (`rows` rows), waits for its `READY` (the store is open) and,
/// when `after_first_commit`, for its first `ROW 0 END`, sleeps `delay`, SIGKILLs it and
/// returns what it reported. A child that dies before `READY` fails
/// the test with its stderr: that is a broken setup (no URL, no server), not a kill point.
fn kill_one(url: &str, n: u64, rows: usize, after_first_commit: bool, delay: Duration) -> Reported {
    let mut child = Command::new(std::env::current_exe().expect("exe"))
        .args([
            "child_kill_writer",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RATH_KILL_CHILD", url)
        .env("RATH_KILL_CHILD_ID", n.to_string())
        .env("RATH_KILL_CHILD_ROWS", rows.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let wanted = if after_first_commit {
        "ROW 0 END"
    } else {
        "READY"
    };
    loop {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) if line.ends_with(wanted) => {
                lines.push(line);
                break;
            }
            Ok(line) => lines.push(line),
            Err(e) => {
                let _ = child.kill();
                let status = child.wait().expect("wait");
                panic!(
                    "child {n} never printed {wanted} for {url} ({e:?}, {status}):\n{}",
                    errors.join().unwrap_or_default()
                );
            }
        }
    }
    std::thread::sleep(delay);
    let _ = child.kill(); // SIGKILL
    let _ = child.wait();
    let _ = reader.join();
    let _ = errors.join();
    lines.extend(rx.try_iter());
    let mut reported = Reported::default();
    for line in &lines {
        if let Some(i) = line
            .rfind("ROW ")
            .and_then(|at| line[at + 4..].strip_suffix(" END"))
        {
            reported.rows = i.parse::<usize>().expect("row number") + 1;
        } else if line.ends_with("DONE") {
            reported.done = true;
        }
    }
    reported
}

/// How the kills went, over all lanes.
#[derive(Default)]
struct Tally {
    killed: u64,
    completed: u64,
    absent: u64,
    in_flight_lost: u64,
}

/// Where the writers write and how hard to kill them.
struct Target<'a> {
    /// The store URL the parent reads.
    url: &'a str,
    /// PostgreSQL: a connection to the server, to wait until a killed child's backend is
    /// gone (a COMMIT the child sent before it died still completes on the server), and the
    /// driver's URL parameter that names each child's backend.
    postgres: Option<sqlx::PgPool>,
    /// Kill delays after the first commit fall below this.
    max_delay: Duration,
    /// Children alive at once (each on its own session).
    lanes: u64,
}

impl Target<'_> {
    /// The URL child `n` opens.
    fn child_url(&self, n: u64) -> String {
        match self.postgres {
            Some(_) => format!("{}&application_name=rath_kill_{n}", self.url),
            None => self.url.to_owned(),
        }
    }

    /// Returns once nothing child `n` started is still running on the server.
    fn settle(&self, rt: &tokio::runtime::Runtime, n: u64) {
        let Some(pool) = &self.postgres else {
            return;
        };
        let name = format!("rath_kill_{n}");
        for _ in 0..500 {
            let alive: i64 = rt
                .block_on(
                    sqlx::query_scalar(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                    )
                    .bind(&name)
                    .fetch_one(pool),
                )
                .expect("pg_stat_activity");
            if alive == 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        panic!("child {n}'s backend outlived it by a second");
    }
}

/// Kills writer `n` at a random point and checks its session against what it reported.
fn kill_and_check(
    target: &Target<'_>,
    rt: &tokio::runtime::Runtime,
    store: &dyn SessionStore,
    rng: &mut Rng,
    n: u64,
    tally: &mut Tally,
) {
    let rows = 5 + (rng.next() % 60) as usize;
    // One time in eight right after the store opened (the first save in flight), else at a
    // random moment after the first commit, however long the machine took to get there.
    let (after_first_commit, delay) = if rng.next().is_multiple_of(8) {
        (false, Duration::ZERO)
    } else {
        let us = rng.next() % target.max_delay.as_micros() as u64;
        (true, Duration::from_micros(us))
    };
    let reported = kill_one(&target.child_url(n), n, rows, after_first_commit, delay);
    target.settle(rt, n);
    let id = session_for(n).id().clone();
    let loaded = match rt.block_on(store.load(&id)) {
        Ok(l) => l,
        Err(PersistError::NotFound { .. }) => {
            assert_eq!(
                reported.rows, 0,
                "child {n}: {} rows reported, none stored",
                reported.rows
            );
            tally.absent += 1;
            return;
        }
        Err(e) => panic!("child {n}: the session does not load: {e}"),
    };
    let got = loaded.session.len();
    for (i, c) in loaded.session.chunks().iter().enumerate() {
        assert_eq!(c.text(), Some(row_text(n, i).as_str()), "child {n} row {i}");
    }
    let committed = reported.rows;
    assert!(
        got >= committed,
        "child {n}: {got} rows stored, {committed} committed"
    );
    assert!(
        got <= committed + 1,
        "child {n}: {got} stored but only {committed} reported"
    );
    if reported.done {
        assert_eq!(got, rows);
        tally.completed += 1;
    } else {
        tally.killed += 1;
        // got == committed + 1: committed, killed before it could say so.
        if got == committed && got < rows {
            tally.in_flight_lost += 1;
        }
    }
}

/// Kills `KILLS` writers of the target, each at a random delay after it opened the store,
/// `lanes` at a time, and checks every session; returns a one-line summary.
fn kill_writers(target: &Target<'_>, seed: u64) -> String {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let store = rt
        .block_on(rath_store_sql::open_store(target.url))
        .expect("open");
    let tally = std::sync::Mutex::new(Tally::default());
    std::thread::scope(|scope| {
        for lane in 0..target.lanes {
            let (rt, store, tally) = (&rt, store.as_ref(), &tally);
            scope.spawn(move || {
                let mut rng = Rng(seed ^ (lane + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                let mut mine = Tally::default();
                let mut n = lane + 1;
                while n <= KILLS {
                    kill_and_check(target, rt, store, &mut rng, n, &mut mine);
                    n += target.lanes;
                }
                let mut t = tally.lock().unwrap_or_else(|p| p.into_inner());
                t.killed += mine.killed;
                t.completed += mine.completed;
                t.absent += mine.absent;
                t.in_flight_lost += mine.in_flight_lost;
            });
        }
    });
    let t = tally.into_inner().unwrap_or_else(|p| p.into_inner());
    assert!(
        t.killed > KILLS / 4,
        "too few kills landed mid-session: {}",
        t.killed
    );
    let listed = rt.block_on(store.list()).expect("list").len();
    assert_eq!(
        listed as u64,
        KILLS - t.absent,
        "every stored session lists"
    );
    format!(
        "{KILLS} writers on {} ({} at a time): {} killed mid-session ({} losing the round in \
         flight), {} killed before their first commit, {} finished",
        store.name(),
        target.lanes,
        t.killed,
        t.in_flight_lost,
        t.absent,
        t.completed,
    )
}

#[test]
fn sigkill_sqlite_writers_at_random_points() {
    if std::env::var_os("RATH_KILL_CHILD").is_some() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let url = format!("sqlite://{}", tmp.path().join("kill.sqlite").display());
    let target = Target {
        url: &url,
        postgres: None,
        max_delay: Duration::from_millis(40),
        lanes: 1,
    };
    eprintln!("{}", kill_writers(&target, 0x5EED_1234_ABCD_0001));
}

#[test]
fn sigkill_postgres_writers_at_random_points() {
    if std::env::var_os("RATH_KILL_CHILD").is_some() {
        return;
    }
    let Some(base) = common::postgres_url() else {
        return;
    };
    let schema = common::fresh_schema("kill");
    let url = common::with_params(&base, &format!("schema={schema}"));
    // Lazy: its connection opens on the runtime that first uses it (`kill_writers`' own), not
    // on a runtime dropped right away, whose sockets then fail ("A Tokio 1.x context was
    // found, but it is being shutdown"), now and then, when `settle` reuses one.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_lifetime(None)
        .idle_timeout(None)
        .connect_lazy(&base)
        .expect("pool");
    // A round takes ~6 ms on PostgreSQL (well under 1 ms on SQLite): the delays span the
    // whole write; eight children at a time keep the test short.
    let target = Target {
        url: &url,
        postgres: Some(pool),
        max_delay: Duration::from_millis(150),
        lanes: 8,
    };
    let summary = kill_writers(&target, 0x5EED_1234_ABCD_0002);
    eprintln!("{summary}");
    runtime().block_on(
        common::Schema {
            url: base,
            name: schema,
        }
        .drop_now(),
    );
}
