//! The append-only session writer.
//!
//! ```
//! use rath_persist::{Store, WriterOptions};
//! use rath_session::{Chunk, Session, Stamper};
//!
//! let dir = tempfile::tempdir()?;
//! let store = Store::at(dir.path());
//! let s = Session::user_with("hi", Stamper::counter());
//! let mut w = store.writer(&s, WriterOptions::default())?; // header written now
//! let s = s.push(Chunk::assistant_text("hello"));
//! w.sync_to(&s)?; // appends both chunks
//! let path = w.close()?; // trailer + rename
//! assert!(path.ends_with(format!("{}.jsonl", s.id())));
//! assert_eq!(store.load(s.id())?.session.len(), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The file lives at `<id>.jsonl.__partial__` while open, holds an exclusive advisory lock
//! (`flock`, the same lock Python OpenRath takes, so the two exclude each other), has mode
//! 0600, and is renamed to `<id>.jsonl` after the trailer on [`SessionWriter::close`].
//! [`SessionWriter::abandon`] (or dropping the writer) leaves the `__partial__` file without
//! a trailer: the crash signal.
//!
//! Writers cannot clobber. Creating a writer for an id whose closed `<id>.jsonl` exists is
//! [`PersistError::Exists`] unless [`WriterOptions::replace`] was asked. The `__partial__`
//! file is opened without truncation; after taking the lock the writer checks that its
//! descriptor is still the file the path names (device and inode of `fstat` against `stat`
//! of the path; another writer may have renamed it to the closed name meanwhile) and retries
//! from the start if not, and only then truncates it. So when N processes race on one id,
//! exactly one writes and the others get [`PersistError::Locked`] or
//! [`PersistError::Exists`], and no closed file is ever truncated.
//!
//! ```
//! use rath_persist::{PersistError, Store, WriterOptions};
//! use rath_session::{Session, Stamper};
//!
//! let dir = tempfile::tempdir()?;
//! let store = Store::at(dir.path());
//! let s = Session::user_with("hi", Stamper::counter());
//! store.save(&s)?;
//! let again = store.writer(&s, WriterOptions::default());
//! assert!(matches!(again, Err(PersistError::Exists { .. })));
//! store.writer(&s, WriterOptions::default().replace(true))?.close_with(&s)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rath_session::{Chunk, Session, SessionId, Stamper};

use crate::PersistError;
use crate::json::write_line;
use crate::mapped::MappedFile;
use crate::record::{ChunkOut, EvidenceOut, ExtOut, HeaderOut, PayloadRef, TrailerOut, state_ext};

/// When rows reach the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// Each row reaches the OS before the next is written, as with Python OpenRath's flush
    /// per row, but without a syscall per row: rows are copied into a shared writable
    /// mapping of the `__partial__` file (the page cache), which is grown in large steps and
    /// cut to the exact length on close or abandon. A killed process loses at most the row
    /// in flight and leaves a tail of NUL bytes that the loader skips; a power cut may lose
    /// what the OS had not written back. Closed files are byte-identical to [`Durability::Flush`].
    /// Where the file cannot be mapped, the writer falls back to one `write(2)` per row.
    #[default]
    Mapped,
    /// One `write(2)` per row, no fsync (exactly what Python OpenRath does). Same guarantee
    /// as [`Durability::Mapped`]; a killed process leaves no NUL tail.
    Flush,
    /// `write(2)` and `fdatasync(2)` per row, and before the closing rename.
    Fsync,
    /// Rows are buffered and written every `rows` rows, on [`SessionWriter::flush`], and on
    /// close. A killed process loses the unwritten batch.
    Batched {
        /// Rows per write.
        rows: usize,
    },
}

/// How a [`SessionWriter`] behaves.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct WriterOptions {
    /// When rows reach the disk.
    pub durability: Durability,
    /// Where `created_at` / `closed_at` come from; defaults to the session's own stamper.
    pub clock: Option<Stamper>,
    /// Replace a closed `<id>.jsonl` that already exists (the new file is renamed over it on
    /// close). Off by default: an existing closed file is [`PersistError::Exists`].
    pub replace: bool,
    /// How long opening waits for the file's lock before it reports
    /// [`PersistError::Locked`]; [`rath_lock::DEFAULT_WAIT`] by default. A child process
    /// between `fork` and `exec` briefly shares its parent's locks, so a file closed and
    /// reopened meanwhile finds its lock held for a moment.
    pub lock_wait: Duration,
}

impl Default for WriterOptions {
    fn default() -> Self {
        Self {
            durability: Durability::default(),
            clock: None,
            replace: false,
            lock_wait: rath_lock::DEFAULT_WAIT,
        }
    }
}

impl WriterOptions {
    /// Sets the durability.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Takes header/trailer timestamps from `clock` instead of the session's stamper.
    pub fn clock(mut self, clock: Stamper) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Sets [`WriterOptions::replace`]: when true, an existing closed file for the id is
    /// replaced instead of refused.
    pub fn replace(mut self, on: bool) -> Self {
        self.replace = on;
        self
    }

    /// Sets [`WriterOptions::lock_wait`] (`Duration::ZERO`: try once).
    pub fn lock_wait(mut self, wait: Duration) -> Self {
        self.lock_wait = wait;
        self
    }
}

/// How many times [`SessionWriter::create`] starts over when the `__partial__` file it locked
/// was renamed or replaced before the lock was taken.
const LOCK_ATTEMPTS: usize = 16;

/// An open, locked session file that chunks are appended to as they are made.
///
/// Conversation chunks become `chunk` records (what Python reads). Evidence chunks ride in the
/// `rath_ext.evidence` list of the next conversation record written, or of the trailer;
/// within one [`SessionWriter::sync_to`] batch, evidence that follows a conversation chunk
/// rides on that chunk's record. See `docs/formats.md`.
#[derive(Debug)]
pub struct SessionWriter {
    file: Option<File>,
    /// The mapping rows go through with [`Durability::Mapped`].
    map: Option<MappedFile>,
    partial: PathBuf,
    final_path: PathBuf,
    id: SessionId,
    buf: Vec<u8>,
    buffered_rows: usize,
    durability: Durability,
    clock: Stamper,
    /// Chunk positions consumed (conversation and evidence).
    consumed: usize,
    /// `chunk` records written (conversation chunks).
    rows: u64,
    /// Evidence waiting for a record to ride on: (position, chunk).
    waiting: Vec<(u64, Chunk)>,
    /// The latest session state seen, for the trailer.
    last: Session,
    /// Whether closing may replace an existing closed file.
    replace: bool,
}

impl SessionWriter {
    /// Opens `<path>.__partial__` for `session`, takes the lock, and writes the header.
    /// `path` is the final file name (`.../<id>.jsonl`).
    ///
    /// Refused with [`PersistError::Exists`] when `path` (the closed file) exists, unless
    /// [`WriterOptions::replace`]; with [`PersistError::Locked`] when another writer holds the
    /// `__partial__` file. An unlocked leftover `__partial__` file (a crashed writer's) is
    /// truncated once the lock is held and verified (the session value is the source of
    /// truth).
    pub fn create(
        path: impl Into<PathBuf>,
        session: &Session,
        options: WriterOptions,
    ) -> Result<Self, PersistError> {
        let final_path: PathBuf = path.into();
        let mut name = final_path
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_default();
        name.push(".__partial__");
        let partial = final_path.with_file_name(name);
        if let Some(parent) = partial.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| PersistError::io("mkdir", parent, e))?;
        }
        let mapped = options.durability == Durability::Mapped;
        let file = open_verified(&partial, &final_path, mapped, &options)?;
        // Only now, holding the lock on the file the path names, is it safe to cut it.
        file.set_len(0)
            .map_err(|e| PersistError::io("truncate", &partial, e))?;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| PersistError::io("chmod", &partial, e))?;
        // Where the file cannot be mapped (a filesystem without shared writable mappings),
        // rows go out with one `write(2)` each instead: the same guarantee, just slower.
        let map = if mapped {
            MappedFile::new(&file, &partial).ok()
        } else {
            None
        };
        let clock = options.clock.unwrap_or_else(|| session.stamper().clone());
        let mut w = SessionWriter {
            file: Some(file),
            map,
            partial,
            final_path,
            id: session.id().clone(),
            buf: Vec::with_capacity(4096),
            buffered_rows: 0,
            durability: options.durability,
            clock,
            consumed: 0,
            rows: 0,
            waiting: Vec::new(),
            last: session.clone(),
            replace: options.replace,
        };
        let header = HeaderOut::new(session, w.clock.now());
        w.encode(&header)?;
        w.write_out(true)?;
        Ok(w)
    }

    /// The final path (`<id>.jsonl`), valid after [`SessionWriter::close`].
    pub fn path(&self) -> &Path {
        &self.final_path
    }

    /// The in-flight path (`<id>.jsonl.__partial__`).
    pub fn partial_path(&self) -> &Path {
        &self.partial
    }

    /// The session id this writer writes.
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// Chunks consumed so far (conversation and evidence, including evidence still waiting
    /// for a record to ride on).
    pub fn chunks_written(&self) -> usize {
        self.consumed
    }

    /// `chunk` records written so far (conversation chunks; Python's `chunks_written`).
    pub fn rows_written(&self) -> u64 {
        self.rows
    }

    /// Appends one chunk as the next chunk of the session.
    pub fn append(&mut self, chunk: &Chunk) -> Result<(), PersistError> {
        self.append_batch(std::slice::from_ref(chunk).iter())
    }

    /// Appends every chunk `session` has beyond those already written, and remembers its
    /// usage, per-agent usage and pending calls for the trailer. Returns how many chunks were
    /// appended. `session` must be this writer's session (same id) grown by appends.
    pub fn sync_to(&mut self, session: &Session) -> Result<usize, PersistError> {
        if session.id() != &self.id {
            return Err(PersistError::NotAContinuation {
                path: self.final_path.clone(),
                message: format!("session {} is not {}", session.id(), self.id),
            });
        }
        if session.len() < self.consumed {
            return Err(PersistError::NotAContinuation {
                path: self.final_path.clone(),
                message: format!(
                    "session has {} chunks but {} were already written",
                    session.len(),
                    self.consumed
                ),
            });
        }
        let n = session.len() - self.consumed;
        if n > 0 {
            // O(log n) split, so syncing a long session never re-walks what was written.
            let tail = session.chunks().clone().slice(self.consumed..);
            self.append_batch(tail.iter())?;
        }
        self.last = session.clone();
        Ok(n)
    }

    fn append_batch<'c>(
        &mut self,
        chunks: impl Iterator<Item = &'c Chunk>,
    ) -> Result<(), PersistError> {
        self.ensure_open()?;
        // Group: each conversation chunk takes the evidence waiting before it and the evidence
        // that follows it in this batch (look-ahead of one group).
        let mut current: Option<&Chunk> = None;
        let mut after: Vec<(u64, Chunk)> = Vec::new();
        for chunk in chunks {
            let pos = self.consumed as u64;
            self.consumed += 1;
            if chunk.is_conversation() {
                if let Some(c) = current.take() {
                    self.emit(c, std::mem::take(&mut after))?;
                }
                current = Some(chunk);
            } else if current.is_some() {
                after.push((pos, chunk.clone()));
            } else {
                self.waiting.push((pos, chunk.clone()));
            }
        }
        if let Some(c) = current {
            self.emit(c, after)?;
        }
        Ok(())
    }

    fn emit(&mut self, chunk: &Chunk, after: Vec<(u64, Chunk)>) -> Result<(), PersistError> {
        let mut riding = std::mem::take(&mut self.waiting);
        riding.extend(after);
        let path = &self.final_path;
        write_chunk_record(&mut self.buf, self.rows, chunk, &riding).map_err(|source| {
            PersistError::Serialize {
                path: path.clone(),
                source,
            }
        })?;
        self.rows += 1;
        self.write_out(false)
    }

    /// Writes any batched rows now (a no-op for [`Durability::Mapped`], [`Durability::Flush`] and [`Durability::Fsync`]).
    pub fn flush(&mut self) -> Result<(), PersistError> {
        self.ensure_open()?;
        self.write_out(true)
    }

    /// Appends whatever `session` has beyond what was written, then closes.
    pub fn close_with(mut self, session: &Session) -> Result<PathBuf, PersistError> {
        self.sync_to(session)?;
        self.close()
    }

    /// Writes the trailer (with any evidence still waiting), renames `__partial__` to the
    /// final name and releases the lock. Returns the final path.
    pub fn close(mut self) -> Result<PathBuf, PersistError> {
        self.ensure_open()?;
        let waiting = std::mem::take(&mut self.waiting);
        let evidence: Vec<EvidenceOut<'_>> =
            waiting.iter().map(|(at, c)| evidence_out(*at, c)).collect();
        let last = self.last.clone();
        let ext = state_ext(&last, &evidence);
        let trailer = TrailerOut {
            record_type: "trailer",
            closed_at: self.clock.now(),
            final_chunk_count: self.rows,
            cumulative_usage: last.usage(),
            rath_ext: (!ext.is_empty()).then_some(ext),
        };
        self.encode(&trailer)?;
        self.write_out(true)?;
        self.unmap()?;
        if let Some(file) = &self.file
            && self.durability == Durability::Fsync
        {
            file.sync_all()
                .map_err(|e| PersistError::io("fsync", &self.partial, e))?;
        }
        // Rename while still holding the lock, so no other writer can slip in between; and,
        // unless replacing, never over a closed file that appeared meanwhile.
        rename_into_place(&self.partial, &self.final_path, self.replace)?;
        if self.durability == Durability::Fsync
            && let Some(dir) = self.final_path.parent()
            && let Ok(d) = File::open(dir)
        {
            // Make the rename itself durable.
            let _ = d.sync_all();
        }
        self.file = None; // closing the fd releases the flock
        Ok(self.final_path.clone())
    }

    /// Releases the file without a trailer or rename, leaving `<id>.jsonl.__partial__` as the
    /// visible sign of an interrupted session. Batched rows are written first; evidence still
    /// waiting for a record is lost. Returns the partial path.
    pub fn abandon(mut self) -> Result<PathBuf, PersistError> {
        self.ensure_open()?;
        let r = self.write_out(true);
        let u = self.unmap();
        self.file = None;
        r.and(u).map(|()| self.partial.clone())
    }

    /// Ends the mapping (if any), cutting the file to the bytes written.
    fn unmap(&mut self) -> Result<(), PersistError> {
        match (self.map.take(), &self.file) {
            (Some(map), Some(file)) => map.finish(file, &self.partial),
            _ => Ok(()),
        }
    }

    fn ensure_open(&self) -> Result<(), PersistError> {
        if self.file.is_none() {
            return Err(PersistError::WriterClosed {
                path: self.final_path.clone(),
            });
        }
        Ok(())
    }

    fn encode<T: serde::Serialize>(&mut self, record: &T) -> Result<(), PersistError> {
        let path = &self.final_path;
        write_line(&mut self.buf, record).map_err(|source| PersistError::Serialize {
            path: path.clone(),
            source,
        })
    }

    /// Writes the buffer according to the durability (or unconditionally when `force`).
    fn write_out(&mut self, force: bool) -> Result<(), PersistError> {
        self.buffered_rows += 1;
        if let Durability::Batched { rows } = self.durability
            && !force
            && self.buffered_rows < rows.max(1)
        {
            return Ok(());
        }
        let Some(file) = self.file.as_mut() else {
            return Err(PersistError::WriterClosed {
                path: self.final_path.clone(),
            });
        };
        if let Some(map) = self.map.as_mut() {
            map.append(file, &self.partial, &self.buf)?;
        } else if !self.buf.is_empty() {
            file.write_all(&self.buf)
                .map_err(|e| PersistError::io("write", &self.partial, e))?;
            if self.durability == Durability::Fsync {
                file.sync_data()
                    .map_err(|e| PersistError::io("fsync", &self.partial, e))?;
            }
        }
        self.buf.clear();
        self.buffered_rows = 0;
        Ok(())
    }
}

impl Drop for SessionWriter {
    fn drop(&mut self) {
        // Dropping an open writer is an abandon: write what is buffered, keep `__partial__`.
        if self.file.is_some() && !self.buf.is_empty() {
            let _ = self.write_out(true);
        }
        let _ = self.unmap();
    }
}

/// Writes conversation record `index` (`chunk`, with the evidence `riding` on it) to `out`
/// as one line: what the writer writes, and what a verifier re-encodes a stored line to
/// ([`crate::raw`]), so the two cannot drift apart.
pub(crate) fn write_chunk_record(
    out: &mut Vec<u8>,
    index: u64,
    chunk: &Chunk,
    riding: &[(u64, Chunk)],
) -> Result<(), serde_json::Error> {
    // A plain conversation chunk (the bulk of any file) is written directly.
    if riding.is_empty()
        && chunk.branch().is_none()
        && crate::fast::write_conversation_chunk(out, index, chunk.body())
    {
        return Ok(());
    }
    let evidence: Vec<EvidenceOut<'_>> =
        riding.iter().map(|(at, c)| evidence_out(*at, c)).collect();
    let ext = ExtOut {
        branch: chunk.branch(),
        evidence: &evidence,
        ..ExtOut::default()
    };
    let record = ChunkOut {
        record_type: "chunk",
        index,
        kind: chunk.kind().as_str(),
        payload: PayloadRef(chunk.body()),
        rath_ext: (!ext.is_empty()).then_some(ext),
    };
    write_line(out, &record)
}

/// A chunk riding at position `at`, as an evidence entry.
pub(crate) fn evidence_out(at: u64, chunk: &Chunk) -> EvidenceOut<'_> {
    EvidenceOut {
        at,
        kind: chunk.kind().as_str(),
        payload: PayloadRef(chunk.body()),
        branch: chunk.branch(),
    }
}

/// Renames `from` to `to`; without `replace`, atomically refuses (as [`PersistError::Exists`])
/// when `to` exists, where the filesystem supports `RENAME_NOREPLACE`.
fn rename_into_place(from: &Path, to: &Path, replace: bool) -> Result<(), PersistError> {
    if !replace {
        use std::os::unix::ffi::OsStrExt;
        let (Ok(f), Ok(t)) = (
            std::ffi::CString::new(from.as_os_str().as_bytes()),
            std::ffi::CString::new(to.as_os_str().as_bytes()),
        ) else {
            return Err(PersistError::io(
                "rename",
                from,
                std::io::Error::from(std::io::ErrorKind::InvalidInput),
            ));
        };
        // SAFETY: both pointers are valid NUL-terminated strings that outlive the call;
        // AT_FDCWD makes them relative to the working directory like rename(2).
        let rc = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                f.as_ptr(),
                libc::AT_FDCWD,
                t.as_ptr(),
                libc::RENAME_NOREPLACE,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EEXIST) => {
                return Err(PersistError::Exists {
                    path: to.to_path_buf(),
                });
            }
            // The filesystem (or kernel) has no RENAME_NOREPLACE: fall back to rename(2),
            // still under the lock.
            Some(libc::EINVAL | libc::ENOSYS) => {}
            _ => return Err(PersistError::io("rename", from, err)),
        }
    }
    std::fs::rename(from, to).map_err(|e| PersistError::io("rename", from, e))
}

/// True when `path` exists (as anything: a dangling symlink counts, so it is never followed
/// over).
fn exists(path: &Path, at: &Path) -> Result<bool, PersistError> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(PersistError::io("stat", at, e)),
    }
}

/// Opens (creating if needed, never truncating) and locks `partial`, and makes sure the
/// locked descriptor is the file `partial` names and that no closed `final_path` exists
/// (unless `replace`). Starts over when the locked file was renamed or replaced meanwhile.
fn open_verified(
    partial: &Path,
    final_path: &Path,
    mapped: bool,
    options: &WriterOptions,
) -> Result<File, PersistError> {
    let refuse_existing = || -> Result<(), PersistError> {
        if !options.replace && exists(final_path, final_path)? {
            return Err(PersistError::Exists {
                path: final_path.to_path_buf(),
            });
        }
        Ok(())
    };
    for _ in 0..LOCK_ATTEMPTS {
        refuse_existing()?;
        let file = OpenOptions::new()
            .create(true)
            .read(true)
            .write(mapped)
            .append(!mapped)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(partial)
            .map_err(|e| PersistError::io("open", partial, e))?;
        lock_exclusive(&file, partial, options.lock_wait)?;
        let held = file
            .metadata()
            .map_err(|e| PersistError::io("fstat", partial, e))?;
        let named = match std::fs::symlink_metadata(partial) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(PersistError::io("stat", partial, e)),
        };
        if !named.is_some_and(|m| m.dev() == held.dev() && m.ino() == held.ino()) {
            // The file we locked is no longer at the path: its writer closed it (renamed it
            // to the final name) or it was deleted and recreated. Start over; the next round
            // sees the closed file, or locks the new partial.
            continue;
        }
        if let Err(e) = refuse_existing() {
            // A writer closed this id between our first check and our open, and the partial
            // we hold is a fresh one. Remove it when it is empty (nobody else's data), so the
            // store is left as it was.
            if held.len() == 0 {
                let _ = std::fs::remove_file(partial);
            }
            return Err(e);
        }
        return Ok(file);
    }
    Err(PersistError::Locked {
        path: partial.to_path_buf(),
    })
}

fn lock_exclusive(file: &File, path: &Path, wait: Duration) -> Result<(), PersistError> {
    match rath_lock::lock_exclusive(file, wait) {
        Ok(()) => Ok(()),
        Err(rath_lock::LockError::Held { .. }) => Err(PersistError::Locked {
            path: path.to_path_buf(),
        }),
        Err(rath_lock::LockError::Io(e)) => Err(PersistError::io("lock", path, e)),
        Err(e) => Err(PersistError::io("lock", path, std::io::Error::other(e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rath_session::Stamper;

    #[test]
    fn batched_rows_reach_the_file_on_flush() {
        let tmp = tempfile::tempdir().expect("tmp");
        let s = Session::user_with("a", Stamper::counter())
            .extend((0..4).map(|i| Chunk::user(format!("{i}"))));
        let opts = WriterOptions::default().durability(Durability::Batched { rows: 100 });
        let mut w = SessionWriter::create(tmp.path().join("x.jsonl"), &s, opts).expect("open");
        w.sync_to(&s).expect("sync");
        let lines = |p: &Path| std::fs::read_to_string(p).expect("read").lines().count();
        assert_eq!(lines(w.partial_path()), 1, "only the header so far");
        w.flush().expect("flush");
        assert_eq!(lines(w.partial_path()), 6);
        let p = w.close().expect("close");
        assert_eq!(lines(&p), 7);
    }

    #[test]
    fn fsync_mode_writes_the_same_bytes() {
        let tmp = tempfile::tempdir().expect("tmp");
        let write = |d: Durability, name: &str| {
            let s = Session::user_with("a", Stamper::counter()).push(Chunk::assistant_text("b"));
            let opts = WriterOptions::default().durability(d);
            let w = SessionWriter::create(tmp.path().join(name), &s, opts).expect("open");
            std::fs::read(w.close_with(&s).expect("close")).expect("read")
        };
        assert_eq!(
            write(Durability::Fsync, "a.jsonl"),
            write(Durability::Flush, "b.jsonl")
        );
    }
}
