//! The allocator `rath` ships with: mimalloc's v2 line, built without transparent huge
//! pages, that keeps freed memory for a second before returning it to the system, and gives
//! it back when a runtime thread goes idle ([`on_park`]). `xtask` includes this file too, so
//! its benches measure ours as it ships.

/// mimalloc: a worker or server allocates and frees many small buffers from several threads
/// (chunk documents, statements, JSON), where glibc malloc cost about a fifth of a durable
/// worker's CPU (`docs/bench-runtime.md`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay`'s index in mimalloc v2's `mi_option_e` (libmimalloc-sys names no
/// constant for it); a test checks that the option there has the purge delay's default.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long freed memory is kept before it goes back to the system, ms. mimalloc's default
/// is 10 ms: a durable worker between two bursts of runs (a bench drain, 0.1 s apart) gave
/// its pages back and faulted them in again, zeroed, at the next burst (about 7% of its CPU
/// in page faults; with a second, a third fewer faults per drain and our CPU per drain 1-6%
/// lower in four interleaved A/Bs on PostgreSQL, 2026-12-06). A second is still short enough
/// for an idle worker or server to shrink back soon after load.
const PURGE_DELAY_MS: std::os::raw::c_long = 1000;

/// Gives back what a runtime thread freed, when it has nothing left to do: the async
/// runtimes' `on_thread_park` hook. mimalloc returns a thread's freed pages to the system
/// only when that thread allocates, frees or collects again, and only once they have been
/// free for [`PURGE_DELAY_MS`]: a server thread that goes idle after a large answer kept
/// that memory until its next request (issue 47: 4.5 GB held for 30 s; measured here after
/// a 250,000-message run and its histories, about 200 MiB above the idle server stayed for
/// good, against under 60 MiB with this hook). Parking is frequent under load, so a thread
/// collects at most once per purge delay, and then fully (the pages freed since its last
/// collect included: a collect that honours the delay finds most of them too young, and the
/// thread may not wake again for a long time).
pub(crate) fn on_park() {
    use std::cell::Cell;
    use std::time::{Duration, Instant};
    thread_local!(static LAST: Cell<Option<Instant>> = const { Cell::new(None) });
    let delay = Duration::from_millis(PURGE_DELAY_MS.unsigned_abs());
    LAST.with(|last| {
        let now = Instant::now();
        if last.get().is_some_and(|t| now.duration_since(t) < delay) {
            return;
        }
        last.set(Some(now));
        // SAFETY: mi_collect frees the calling thread's free pages and purges what is free;
        // it takes no pointer.
        unsafe { libmimalloc_sys::mi_collect(true) }
    });
}

/// Sets the allocator's options: first thing in `main`, before threads start.
pub(crate) fn tune() {
    // SAFETY: mi_option_set stores one process-wide option value; it takes no pointer.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) }
}

#[cfg(test)]
mod tests {
    /// The index is the purge delay's: its default (10 ms) there, and the option after it
    /// (`use_numa_nodes`, 0). The test binary does not call `tune`.
    #[test]
    fn the_purge_delay_option_is_where_it_is_set() {
        // SAFETY: mi_option_get reads one option value.
        let get = |o| unsafe { libmimalloc_sys::mi_option_get(o) };
        assert_eq!(
            get(super::MI_OPTION_PURGE_DELAY),
            10,
            "not mimalloc's default purge delay (or MIMALLOC_PURGE_DELAY is set)"
        );
        assert_eq!(get(super::MI_OPTION_PURGE_DELAY + 1), 0);
    }
}
