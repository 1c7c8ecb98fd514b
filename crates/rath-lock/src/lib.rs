//! The exclusive file lock openrath's file stores hold: the local memory store's `LOCK`
//! and each JSONL session file a writer has open.
//!
//! ```
//! use std::time::Duration;
//!
//! let dir = tempfile::tempdir()?;
//! let file = rath_lock::open_lock_file(&dir.path().join("LOCK"))?;
//! rath_lock::lock_exclusive(&file, rath_lock::DEFAULT_WAIT)?;
//!
//! // A second open file description of the same path waits, then reports the holder.
//! let other = rath_lock::open_lock_file(&dir.path().join("LOCK"))?;
//! let err = rath_lock::lock_exclusive(&other, Duration::from_millis(20)).unwrap_err();
//! assert!(err.is_held());
//!
//! drop(file); // closing the descriptor releases the lock
//! rath_lock::lock_exclusive(&other, Duration::ZERO)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Two properties make the lock safe in a process that also starts other programs (a tool, a
//! shell command, a test harness re-executing itself):
//!
//! - **It never outlives `exec`.** Every descriptor this crate opens carries `O_CLOEXEC`, and
//!   so does every descriptor std opens; a child process drops it when it execs.
//! - **Acquisition waits a bounded time.** Between `fork` and `exec` a child shares its
//!   parent's open file descriptions, locks included. A store closed and reopened by the
//!   parent in that window would find its own lock still held, for as long as the child
//!   takes to exec (milliseconds, more on a loaded machine). [`lock_exclusive`] therefore
//!   retries for up to the wait it is given, like SQLite's busy timeout, before it reports
//!   the lock held. A lock really held by another store stays held: the caller gets
//!   [`LockError::Held`] after the wait.
//!
//! The lock is `flock(2)`, the lock Python OpenRath takes on the same files, so the two
//! runtimes exclude each other.

#![warn(missing_docs)]

use std::fs::{File, OpenOptions};
use std::path::Path;
use std::time::{Duration, Instant};

/// How long [`lock_exclusive`] waits by default: long enough for any child between `fork`
/// and `exec` on a loaded machine, short enough that a store really held elsewhere is
/// reported promptly.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(2);

/// The longest pause between two attempts while waiting.
const MAX_PAUSE: Duration = Duration::from_millis(20);

/// Why a lock was not taken.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another open file description (another store, in this process or another) still
    /// held the lock when the wait ended.
    #[error("still held by another open store after waiting {}ms", waited.as_millis())]
    Held {
        /// How long acquisition waited.
        waited: Duration,
    },
    /// `flock` itself failed (a file system without locks, a bad descriptor).
    #[error("flock failed: {0}")]
    Io(#[from] std::io::Error),
}

impl LockError {
    /// True when the lock is held elsewhere (as opposed to `flock` failing).
    pub fn is_held(&self) -> bool {
        matches!(self, LockError::Held { .. })
    }
}

/// Opens (creating it when missing, never truncating) a file to lock, close-on-exec.
pub fn open_lock_file(path: &Path) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.create(true).truncate(false).write(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_CLOEXEC);
    }
    options.open(path)
}

/// Takes an exclusive `flock` on `file`, trying again (with pauses from 1 ms up to 20 ms)
/// until `wait` has passed. `Duration::ZERO` tries once.
pub fn lock_exclusive(file: &File, wait: Duration) -> Result<(), LockError> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        match try_lock(file) {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => return Err(LockError::Io(e)),
        }
        let waited = started.elapsed();
        if waited >= wait {
            return Err(LockError::Held { waited });
        }
        std::thread::sleep(pause.min(wait - waited));
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// One non-blocking attempt: `Ok(false)` when another open file description holds it.
#[cfg(unix)]
fn try_lock(file: &File) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: flock on a descriptor `file` owns for the whole call; no memory is touched.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(true);
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(err),
        }
    }
}

/// Platforms without `flock`: the file is opened, and nothing is locked.
#[cfg(not(unix))]
fn try_lock(_file: &File) -> std::io::Result<bool> {
    Ok(true)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn a_lock_released_during_the_wait_is_taken() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("LOCK");
        let holder = open_lock_file(&path).unwrap();
        lock_exclusive(&holder, Duration::ZERO).unwrap();
        let (locked_tx, locked_rx) = mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let file = open_lock_file(&path).unwrap();
            locked_tx.send(()).unwrap();
            // A wait of minutes only guards against a hang; the release below ends it.
            lock_exclusive(&file, Duration::from_secs(600)).map(|()| file)
        });
        locked_rx.recv().unwrap();
        drop(holder);
        let file = waiter.join().unwrap().expect("taken once released");
        // And it is really held now.
        let again = open_lock_file(&dir.path().join("LOCK")).unwrap();
        assert!(
            lock_exclusive(&again, Duration::ZERO)
                .unwrap_err()
                .is_held()
        );
        drop(file);
    }

    #[test]
    fn a_held_lock_is_reported_after_the_wait() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("LOCK");
        let holder = open_lock_file(&path).unwrap();
        lock_exclusive(&holder, Duration::ZERO).unwrap();
        let other = open_lock_file(&path).unwrap();
        match lock_exclusive(&other, Duration::from_millis(30)) {
            Err(LockError::Held { waited }) => assert!(waited >= Duration::from_millis(30)),
            other => panic!("{other:?}"),
        }
        assert!(
            lock_exclusive(&other, Duration::from_millis(30))
                .unwrap_err()
                .to_string()
                .contains("still held")
        );
    }

    #[test]
    fn the_descriptor_does_not_reach_a_child_program() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("LOCK");
        let file = open_lock_file(&path).unwrap();
        lock_exclusive(&file, Duration::ZERO).unwrap();
        let out = std::process::Command::new("sh")
            .args(["-c", "for f in /proc/self/fd/*; do readlink \"$f\"; done"])
            .output()
            .expect("sh runs");
        let listed = String::from_utf8_lossy(&out.stdout);
        assert!(!listed.is_empty(), "the child listed its descriptors");
        assert!(
            !listed.lines().any(|l| l.ends_with("/LOCK")),
            "the child holds the lock file: {listed}"
        );
    }
}
