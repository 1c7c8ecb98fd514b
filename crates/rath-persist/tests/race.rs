//! Writers that cannot clobber: 8 processes race to write one session id, 50 rounds. Exactly
//! one writes; the others get a typed `Locked` or `Exists`; the closed file always loads and
//! holds the winner's content; nothing is left behind; a closed file that was already there
//! is never touched.
//!
//! The racers are this test binary re-executed with `RATH_RACE_DIR` set (flock is per open
//! file description, so only real processes race the way two runs do); the `child_racer` test
//! does nothing unless that variable is present.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use rath_persist::{PersistError, Store, WriterOptions, load_file};
use rath_session::{Chunk, Lineage, Session, SessionId, SessionParts, Stamper};

const RACERS: usize = 8;
const ROUNDS: usize = 50;

/// The session racer `k` writes under `id`: its rows name it, so the winner is visible in the
/// file.
fn session_of(id: &str, k: usize) -> Session {
    let s = Session::from_chunks([], Lineage::implicit(), Stamper::counter());
    let parts = SessionParts {
        id: SessionId::from(id.to_owned()),
        ..s.to_parts()
    };
    Session::from_parts(parts, Stamper::counter())
        .extend((0..40).map(|i| Chunk::user(format!("racer {k} row {i} {}", "x".repeat(200)))))
}

fn child_env() -> Option<(PathBuf, String, usize)> {
    let dir = PathBuf::from(std::env::var_os("RATH_RACE_DIR")?);
    let id = std::env::var("RATH_RACE_ID").ok()?;
    let k = std::env::var("RATH_RACE_K").ok()?.parse().ok()?;
    Some((dir, id, k))
}

/// A racer: waits for "go" on stdin, then tries to write its session and prints the outcome.
#[test]
fn child_racer() {
    let Some((dir, id, k)) = child_env() else {
        return;
    };
    let s = session_of(&id, k);
    let store = Store::at(&dir);
    let mut go = String::new();
    let _ = std::io::stdin().lock().read_line(&mut go);
    let outcome = match store.writer(&s, WriterOptions::default()) {
        Ok(mut w) => {
            // Write row by row, so the lock is held for a while and others hit it.
            let mut res = Ok(());
            for c in s.chunks() {
                res = w.append(c);
                if res.is_err() {
                    break;
                }
            }
            match res.and_then(|()| w.close_with(&s)) {
                Ok(_) => "WON".to_owned(),
                Err(e) => format!("ERR {e}"),
            }
        }
        Err(PersistError::Locked { .. }) => "LOCKED".to_owned(),
        Err(PersistError::Exists { .. }) => "EXISTS".to_owned(),
        Err(e) => format!("ERR {e}"),
    };
    println!("OUTCOME {outcome}");
    let _ = std::io::stdout().flush();
}

fn spawn(dir: &Path, id: &str, k: usize) -> Child {
    Command::new(std::env::current_exe().expect("exe"))
        .args(["child_racer", "--exact", "--nocapture", "--test-threads=1"])
        .env("RATH_RACE_DIR", dir)
        .env("RATH_RACE_ID", id)
        .env("RATH_RACE_K", k.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn racer")
}

fn outcome(child: Child) -> String {
    let out = child.wait_with_output().expect("racer");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "racer failed: {text}");
    BufReader::new(text.as_bytes())
        .lines()
        .map_while(Result::ok)
        // libtest prints `test child_racer ... ` before the racer's own line.
        .find_map(|l| l.split_once("OUTCOME ").map(|(_, o)| o.trim().to_owned()))
        .unwrap_or_else(|| {
            panic!(
                "racer printed no outcome ({}): {text}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

#[test]
fn eight_processes_racing_on_one_id_leave_exactly_one_intact_file() {
    if child_env().is_some() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let store = Store::at(tmp.path());
    let (mut locked, mut exists) = (0usize, 0usize);
    for round in 0..ROUNDS {
        let id = Stamper::system().next_id().to_string();
        // One round in five starts with the id already stored closed: nobody may touch it.
        let before = (round % 5 == 4).then(|| {
            let path = store.save(&session_of(&id, 99)).expect("pre-save");
            std::fs::read(path).expect("read")
        });
        let mut children: Vec<Child> = (0..RACERS).map(|k| spawn(tmp.path(), &id, k)).collect();
        for c in &mut children {
            let mut stdin = c.stdin.take().expect("stdin");
            stdin.write_all(b"go\n").expect("go");
        }
        let outcomes: Vec<String> = children.into_iter().map(outcome).collect();
        let winners: Vec<usize> = (0..RACERS).filter(|&k| outcomes[k] == "WON").collect();
        for o in &outcomes {
            assert!(
                matches!(o.as_str(), "WON" | "LOCKED" | "EXISTS"),
                "round {round}: untyped outcome {o:?} in {outcomes:?}"
            );
        }
        locked += outcomes.iter().filter(|o| *o == "LOCKED").count();
        exists += outcomes.iter().filter(|o| *o == "EXISTS").count();

        let path = store.path_of(&SessionId::from(id.clone()));
        let loaded = load_file(&path).expect("the closed file loads");
        assert!(loaded.closed, "round {round}: file not closed");
        let bytes = std::fs::read(&path).expect("read");
        match &before {
            Some(old) => {
                assert!(winners.is_empty(), "round {round}: {outcomes:?}");
                assert!(outcomes.iter().all(|o| o == "EXISTS"), "{outcomes:?}");
                assert_eq!(&bytes, old, "round {round}: the stored file changed");
            }
            None => {
                assert_eq!(winners.len(), 1, "round {round}: {outcomes:?}");
                let want = session_of(&id, winners[0]);
                assert_eq!(
                    loaded.session.chunks(),
                    want.chunks(),
                    "round {round}: the file is not the winner's whole session"
                );
            }
        }
        assert!(
            !store.partial_path_of(&SessionId::from(id.clone())).exists(),
            "round {round}: a __partial__ file was left behind ({outcomes:?})"
        );
    }
    let (summaries, bad) = store.scan().expect("scan");
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(summaries.len(), ROUNDS);
    println!(
        "{ROUNDS} rounds x {RACERS} processes: one winner each; losers: {locked} locked, {exists} exists"
    );
}

/// In one process: a closed file blocks a second writer unless replace is asked; identical
/// content re-saved is a no-op; a leftover partial is taken over only after lock + verify.
#[test]
fn existing_closed_files_are_refused_unless_replaced() {
    if child_env().is_some() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let store = Store::at(tmp.path());
    let a = session_of("00000000-0000-4000-8000-000000000001", 1);
    let path = store.save(&a).expect("save");
    let before = std::fs::read(&path).expect("read");
    let err = store
        .writer(&a, WriterOptions::default())
        .expect_err("closed file exists");
    assert!(matches!(err, PersistError::Exists { .. }), "{err}");
    assert!(!store.partial_path_of(a.id()).exists(), "nothing created");
    // Same content: a no-op success that leaves the bytes alone.
    assert_eq!(store.save(&a).expect("same again"), path);
    assert_eq!(std::fs::read(&path).expect("read"), before);
    // Other content under the id: refused, file unchanged.
    let b = session_of(a.id().as_str(), 2);
    assert!(matches!(store.save(&b), Err(PersistError::Exists { .. })));
    assert_eq!(std::fs::read(&path).expect("read"), before);
    // Asked to replace: replaced.
    store
        .save_with(&b, WriterOptions::default().replace(true))
        .expect("replace");
    assert_eq!(
        store.load(a.id()).expect("load").session.chunks(),
        b.chunks()
    );
    // A crashed writer's partial (no closed file) is taken over and rewritten whole.
    let c = session_of("00000000-0000-4000-8000-000000000002", 3);
    let partial = store.partial_path_of(c.id());
    std::fs::write(&partial, b"{\"record_type\": \"header\", torn").expect("leftover");
    store.save(&c).expect("take over the leftover partial");
    assert!(!partial.exists());
    assert_eq!(
        store.load(c.id()).expect("load").session.chunks(),
        c.chunks()
    );
    // A symlink planted at the partial path is never followed.
    let d = session_of("00000000-0000-4000-8000-000000000003", 4);
    let victim = tmp.path().join("victim.txt");
    std::fs::write(&victim, b"keep me").expect("victim");
    std::os::unix::fs::symlink(&victim, store.partial_path_of(d.id())).expect("symlink");
    assert!(store.save(&d).is_err());
    assert_eq!(std::fs::read(&victim).expect("victim"), b"keep me");
}
