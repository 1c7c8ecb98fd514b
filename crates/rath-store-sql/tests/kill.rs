//! SIGKILL a writer at 200 random points on SQLite (PostgreSQL: not yet; its children did
//! not reach a first commit before the kill, so that half is left out): every session loads,
//! none holds a torn row, none lost more than the transaction in flight.
//!
//! The writers are this test binary re-executed with `RATH_KILL_CHILD` set (the store URL):
//! `child_kill_writer` does nothing unless that variable is present. A child saves its
//! session, then appends one chunk a transaction (a loop round), printing `ROW n END` after
//! each commit returned; the parent kills it at a random moment, then loads the session and
//! checks every chunk against what the child wrote.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rath_persist::PersistError;
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
        let mut s = session_for(n).push(Chunk::user(row_text(n, 0)));
        store.save(&s).await.expect("save");
        let mut out = std::io::stdout().lock();
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

/// Kills `KILLS` writers of `url` and checks every session; returns a one-line summary.
fn kill_writers(url: &str, seed: u64) -> String {
    let mut rng = Rng(seed);
    let started = Instant::now();
    let (mut killed, mut completed, mut absent, mut in_flight_lost) = (0, 0, 0, 0);
    let rt = runtime();
    let store = rt.block_on(rath_store_sql::open_store(url)).expect("open");
    for n in 1..=KILLS {
        let rows = 5 + (rng.next() % 60) as usize;
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
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Kill at a random moment after the first commit (one time in eight right away, to
        // hit the connection and the first save too).
        let mut lines = Vec::new();
        if !rng.next().is_multiple_of(8)
            && let Ok(first) = rx.recv_timeout(Duration::from_secs(20))
        {
            lines.push(first);
        }
        std::thread::sleep(Duration::from_micros(rng.next() % 40_000));
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        let _ = reader.join();
        lines.extend(rx.try_iter());
        let mut reported = 0usize;
        let mut done = false;
        for line in &lines {
            if let Some(i) = line
                .rfind("ROW ")
                .and_then(|at| line[at + 4..].strip_suffix(" END"))
            {
                reported = i.parse::<usize>().expect("row number") + 1;
            } else if line.ends_with("DONE") {
                done = true;
            }
        }
        let id = session_for(n).id().clone();
        let loaded = match rt.block_on(store.load(&id)) {
            Ok(l) => l,
            Err(PersistError::NotFound { .. }) => {
                assert_eq!(
                    reported, 0,
                    "child {n}: {reported} rows reported, none stored"
                );
                absent += 1;
                continue;
            }
            Err(e) => panic!("child {n}: the session does not load: {e}"),
        };
        let got = loaded.session.len();
        for (i, c) in loaded.session.chunks().iter().enumerate() {
            assert_eq!(c.text(), Some(row_text(n, i).as_str()), "child {n} row {i}");
        }
        assert!(
            got >= reported,
            "child {n}: {got} rows stored, {reported} committed"
        );
        assert!(
            got <= reported + 1,
            "child {n}: {got} stored but only {reported} reported"
        );
        if done {
            assert_eq!(got, rows);
            completed += 1;
        } else {
            killed += 1;
            // got == reported + 1: committed, killed before it could say so.
            if got == reported && got < rows {
                in_flight_lost += 1;
            }
        }
    }
    assert!(
        killed > KILLS / 4,
        "too few kills landed mid-session: {killed}"
    );
    let listed = rt.block_on(store.list()).expect("list").len();
    assert_eq!(listed as u64, KILLS - absent, "every stored session lists");
    format!(
        "{KILLS} writers on {}: {killed} killed mid-session ({in_flight_lost} losing the \
         round in flight), {absent} killed before their first commit, {completed} finished; {:?}",
        store.name(),
        started.elapsed()
    )
}

#[test]
fn sigkill_sqlite_writers_at_random_points() {
    if std::env::var_os("RATH_KILL_CHILD").is_some() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let url = format!("sqlite://{}", tmp.path().join("kill.sqlite").display());
    eprintln!("{}", kill_writers(&url, 0x5EED_1234_ABCD_0001));
}
