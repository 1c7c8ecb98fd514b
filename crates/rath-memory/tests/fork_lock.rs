//! A store reopened while a forked child still shares its lock. Alone in its test binary:
//! the forked child holds every descriptor of the process, so beside other tests it would
//! hold their stores' locks too.

#![cfg(unix)]

use std::path::Path;

use rath_memory::{LocalMemory, LocalOptions, Memory, MemoryUri, NewItem, Scope};

fn seed(dir: &Path) {
    let mem = LocalMemory::open_at(dir, "crash", LocalOptions::default()).unwrap();
    mem.commit(
        "commit_seed",
        vec![NewItem::new(
            MemoryUri::new(Scope::Agent, "kettle").unwrap(),
            "descale the kettle monthly",
        )],
    )
    .unwrap();
}

/// A child between `fork` and `exec` shares its parent's open file descriptions, the store's
/// lock among them. A store closed and reopened in that window must wait for the child, not
/// report itself locked by another process (a flaky CI failure, and a production one for any
/// process that starts a tool while its memory store is open).
#[test]
fn a_reopen_waits_for_a_forked_child_that_shares_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path());
    let mem = LocalMemory::open_at(dir.path(), "crash", LocalOptions::default()).unwrap();
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the two descriptors it is given. Close-on-exec, so no program
    // another thread starts keeps the write end open (the child would then never go).
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    let (read_end, write_end) = (fds[0], fds[1]);
    // SAFETY: the child calls only async-signal-safe functions (close, read, _exit) before
    // it ends, as a child between fork and exec may.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        unsafe {
            libc::close(write_end);
            let mut byte = 0u8;
            // Holds every descriptor the parent had, the lock included, until told to go.
            libc::read(read_end, (&mut byte as *mut u8).cast(), 1);
            libc::_exit(0);
        }
    }
    // SAFETY: closing our copy of the read end, which we do not use.
    unsafe { libc::close(read_end) };
    drop(mem); // the parent's descriptor is closed; the child's copy still holds the lock
    let release = std::thread::spawn(move || {
        // Let the reopen below find the lock held, then let the child go (it exits, which
        // releases the lock). The reopen waits for that event, not for this pause.
        std::thread::sleep(std::time::Duration::from_millis(100));
        // SAFETY: the write end is ours; closing it gives the child end-of-file.
        unsafe { libc::close(write_end) };
    });
    // A wait of minutes only guards against a hang; the child's exit ends it.
    let long = LocalOptions::default().lock_wait(std::time::Duration::from_secs(600));
    let reopened = LocalMemory::open_at(dir.path(), "crash", long);
    release.join().unwrap();
    let mut status = 0;
    // SAFETY: reaping our own child.
    unsafe { libc::waitpid(child, &mut status, 0) };
    let mem = reopened.expect("the reopen waits for the child's copy of the lock");
    assert_eq!(mem.len(), 1);
}
