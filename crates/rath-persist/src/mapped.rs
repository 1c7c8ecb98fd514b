//! A shared, writable memory mapping of the `__partial__` file ([`crate::Durability::Mapped`]).
//!
//! Rows are copied into the page cache through the mapping instead of one `write(2)` each:
//! a row is in the OS the moment the copy ends, so it survives the death of the process
//! exactly like a row handed to `write(2)` (neither survives a power cut without fsync).
//! The file is grown in large steps (`fallocate`, so a full disk is an error on growth rather
//! than a `SIGBUS` on a later store) and cut to the exact length written on close or abandon.
//! A killed process leaves the grown length: a tail of NUL bytes the loader skips.
//!
//! Ordering: each line is copied without its `'\n'`, then a release fence, then the `'\n'`.
//! A copy cut short by a kill can leave holes (memcpy may store a row's end before its
//! start), but never a terminated line with holes: a line that ends in `'\n'` is complete.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{Ordering, fence};

use crate::PersistError;

/// The first mapping size; the mapping doubles from there, up to [`MAX_STEP`] at a time.
const FIRST: usize = 64 * 1024;
/// The largest single growth step.
const MAX_STEP: usize = 64 * 1024 * 1024;

/// A writable shared mapping of a file, with its logical length.
pub(crate) struct MappedFile {
    ptr: *mut u8,
    /// Mapped (and allocated) bytes.
    cap: usize,
    /// Bytes written.
    len: usize,
}

// SAFETY: the mapping is owned exclusively by this value (no other alias of `ptr` exists in
// the process) and is only written through `&mut self`.
unsafe impl Send for MappedFile {}
// SAFETY: `&MappedFile` gives no access to the mapped bytes.
unsafe impl Sync for MappedFile {}

impl std::fmt::Debug for MappedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedFile")
            .field("cap", &self.cap)
            .field("len", &self.len)
            .finish()
    }
}

fn os_err(op: &'static str, path: &Path) -> PersistError {
    PersistError::io(op, path, std::io::Error::last_os_error())
}

/// Reserves `[from, to)` of the file: `fallocate` where the filesystem has it (so running out
/// of space is reported here), else `ftruncate`.
fn reserve(file: &File, path: &Path, from: usize, to: usize) -> Result<(), PersistError> {
    let fd = file.as_raw_fd();
    // SAFETY: plain syscalls on an open fd owned by `file`; no memory is passed.
    let rc = unsafe { libc::fallocate(fd, 0, from as libc::off_t, (to - from) as libc::off_t) };
    if rc == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => {
            // SAFETY: as above.
            if unsafe { libc::ftruncate(fd, to as libc::off_t) } == 0 {
                Ok(())
            } else {
                Err(os_err("ftruncate", path))
            }
        }
        _ => Err(PersistError::io("fallocate", path, err)),
    }
}

impl MappedFile {
    /// Maps an empty `file` (just truncated to 0) for writing.
    pub(crate) fn new(file: &File, path: &Path) -> Result<Self, PersistError> {
        reserve(file, path, 0, FIRST)?;
        // SAFETY: a fresh shared mapping of `FIRST` bytes of a file at least that long; the
        // kernel picks the address.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                FIRST,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            let e = os_err("mmap", path);
            // Leave no preallocated tail behind on failure.
            let _ = file.set_len(0);
            return Err(e);
        }
        Ok(MappedFile {
            ptr: ptr.cast(),
            cap: FIRST,
            len: 0,
        })
    }

    fn grow(&mut self, file: &File, path: &Path, need: usize) -> Result<(), PersistError> {
        let mut cap = self.cap;
        while cap < need {
            cap += cap.min(MAX_STEP);
        }
        reserve(file, path, self.cap, cap)?;
        // SAFETY: `ptr`/`cap` describe our live mapping; MREMAP_MAYMOVE may move it, and we
        // replace `ptr` with the result (no other pointer into the old mapping is kept).
        let p = unsafe { libc::mremap(self.ptr.cast(), self.cap, cap, libc::MREMAP_MAYMOVE) };
        if p == libc::MAP_FAILED {
            return Err(os_err("mremap", path));
        }
        self.ptr = p.cast();
        self.cap = cap;
        Ok(())
    }

    /// Appends `bytes` (whole lines) to the file.
    pub(crate) fn append(
        &mut self,
        file: &File,
        path: &Path,
        bytes: &[u8],
    ) -> Result<(), PersistError> {
        if bytes.is_empty() {
            return Ok(());
        }
        let need = self.len + bytes.len();
        if need > self.cap {
            self.grow(file, path, need)?;
        }
        let mut rest = bytes;
        while !rest.is_empty() {
            let end = memchr::memchr(b'\n', rest).map_or(rest.len(), |i| i + 1);
            let (line, tail) = rest.split_at(end);
            self.put_line(line);
            rest = tail;
        }
        Ok(())
    }

    /// Copies one line: everything but its last byte, a fence, then the last byte.
    fn put_line(&mut self, line: &[u8]) {
        let Some((&last, body)) = line.split_last() else {
            return;
        };
        debug_assert!(self.len + line.len() <= self.cap);
        // SAFETY: `len + line.len() <= cap` (checked by `append`), so both writes stay inside
        // our mapping; `line` is ordinary memory that cannot overlap the mapping.
        unsafe {
            let dst = self.ptr.add(self.len);
            std::ptr::copy_nonoverlapping(body.as_ptr(), dst, body.len());
            fence(Ordering::Release);
            std::ptr::write_volatile(dst.add(body.len()), last);
        }
        self.len += line.len();
    }

    /// Unmaps and cuts the file to the bytes written.
    pub(crate) fn finish(mut self, file: &File, path: &Path) -> Result<(), PersistError> {
        self.unmap();
        file.set_len(self.len as u64)
            .map_err(|e| PersistError::io("truncate", path, e))
    }

    fn unmap(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: `ptr`/`cap` describe our live mapping, unmapped once (ptr nulled).
            unsafe { libc::munmap(self.ptr.cast(), self.cap) };
            self.ptr = std::ptr::null_mut();
        }
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        self.unmap();
    }
}
