//! Path confinement: every path a file payload names is resolved beneath an open handle to
//! the sandbox workspace, never by checking a path string and opening it again.
//!
//! ```
//! use rath_backend::confine_relative;
//!
//! // The lexical rules every backend shares (remote ones stop here).
//! assert_eq!(confine_relative("a/./b/../c").unwrap(), "a/c");
//! assert_eq!(confine_relative("../x").unwrap_err().kind.as_str(), "path_escape");
//! ```
//!
//! A path is first normalized lexically ([`confine_relative`]: no absolute paths, no NUL, no
//! `..` above the root). Then, for `local` and `isolated`, [`Root`] resolves it relative to a
//! directory descriptor of the workspace, opened once when the sandbox opens:
//!
//! - with `openat2(2)` and `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`, so the kernel refuses,
//!   in the same lookup that opens the file, any step that leaves the workspace;
//! - where that is refused (an absolute symlink, which `RESOLVE_BENEATH` never follows) or
//!   unavailable (`ENOSYS` on kernels before 5.6), by a walk one component at a time with
//!   `openat(O_NOFOLLOW)` from the descriptor of the directory before it. A symlink met on the
//!   way is read with `readlinkat` and its target resolved the same way beneath the root
//!   descriptor: a relative target from the directory holding the link, an absolute one only
//!   when it names a path inside the workspace's host path. `..` pops the walk's own stack of
//!   descriptors and is refused at the root.
//!
//! The file operations then work on what was opened: reads `fstat` and read the opened
//! descriptor, writes open the last component with `O_NOFOLLOW` (a final symlink is never
//! written through) relative to the resolved parent descriptor (missing parents are created
//! with `mkdirat` there), listings read the opened directory and `fstatat` its entries, and
//! commands get the opened directory as their working directory (`fchdir`). A regular file
//! with more than one hard link is refused for reading and for writing, because its other
//! name may be outside the workspace. Swapping a directory for a symlink while a payload runs
//! (what a command in the sandbox can do) therefore cannot make the payload reach the host.

use std::collections::VecDeque;
use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::json;

use crate::error::{ToolError, ToolErrorKind};
use crate::payload::{EntryKind, FileEntry};

/// The most symlinks one resolution follows (the kernel's own limit).
const MAX_LINKS: usize = 40;

fn escape(rel: &str, why: &str) -> ToolError {
    ToolError::new(
        ToolErrorKind::PathEscape,
        format!("path {rel:?} is refused: {why}"),
    )
    .with_detail(json!({ "path": rel }))
}

/// Normalizes workspace-relative `rel` lexically (no file system access): `.` parts dropped,
/// `..` applied. Refuses absolute paths, NUL bytes, and `..` that climbs above the root.
/// The empty path and `.` give the empty path (the root). For backends that cannot inspect
/// symlinks (remote ones), this is the whole check.
///
/// ```
/// use rath_backend::confine_relative;
///
/// assert_eq!(confine_relative("a/./b/../c").unwrap(), "a/c");
/// assert_eq!(confine_relative("../x").unwrap_err().kind.as_str(), "path_escape");
/// assert!(confine_relative("/etc/passwd").is_err());
/// ```
pub fn confine_relative(rel: &str) -> Result<String, ToolError> {
    let parts = lexical(rel)?;
    let strs: Vec<String> = parts
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    Ok(strs.join("/"))
}

fn lexical(rel: &str) -> Result<Vec<&OsStr>, ToolError> {
    if rel.contains('\0') {
        return Err(escape(rel, "it contains a NUL byte"));
    }
    let rel_path = Path::new(rel);
    if rel_path.is_absolute() {
        return Err(escape(rel, "absolute paths are outside the workspace"));
    }
    let mut parts: Vec<&OsStr> = Vec::new();
    for c in rel_path.components() {
        match c {
            Component::Normal(p) => parts.push(p),
            Component::CurDir => {}
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return Err(escape(rel, "'..' leaves the workspace"));
                }
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(escape(rel, "absolute paths are outside the workspace"));
            }
        }
    }
    Ok(parts)
}

/// Why a resolution stopped.
enum Fail {
    /// It would leave the workspace.
    Escape(&'static str),
    /// The file system said no.
    Io(io::Error),
}

impl From<io::Error> for Fail {
    fn from(e: io::Error) -> Self {
        Fail::Io(e)
    }
}

/// What the last component is opened as.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Last {
    /// A directory to read (list).
    Dir,
    /// A directory used as a base (parents of writes, working directories): `O_PATH`.
    DirPath,
    /// A file to read: `O_RDONLY | O_NONBLOCK` (a FIFO must not block the host).
    File,
    /// Anything, for existence checks: `O_PATH`.
    Any,
}

impl Last {
    fn flags(self) -> libc::c_int {
        match self {
            Last::Dir => libc::O_RDONLY | libc::O_DIRECTORY,
            Last::DirPath => libc::O_PATH | libc::O_DIRECTORY,
            Last::File => libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
            Last::Any => libc::O_PATH,
        }
    }
}

fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

fn openat(dir: BorrowedFd<'_>, name: &OsStr, flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
    let name = cstr(name)?;
    // SAFETY: `name` is a valid NUL-terminated string and `dir` a live descriptor; openat
    // returns a new descriptor we then own, or -1.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_CLOEXEC,
            mode,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by openat and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Set once `openat2` has answered `ENOSYS`; later resolutions go straight to the walk.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

fn openat2_beneath(dir: BorrowedFd<'_>, path: &OsStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    let path = cstr(path)?;
    // SAFETY: open_how is plain integers; all-zero is its documented "no options" value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: openat2(2) reads `path` (NUL-terminated) and `how` (a valid open_how whose size
    // we pass); it returns a new descriptor we then own, or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = libc::c_int::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: `fd` was just returned by openat2 and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `readlinkat(dir, name)`; an empty `name` reads the link `dir` itself was opened on.
fn readlinkat(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<OsString> {
    let name = cstr(name)?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: `buf` has `buf.len()` writable bytes; readlinkat writes at most that many.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(OsString::from_vec(buf))
}

fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    // SAFETY: an all-zero stat is a valid value for fstat to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out-pointer and `fd` a live descriptor.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

fn fstatat_nofollow(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<libc::stat> {
    let name = cstr(name)?;
    // SAFETY: as in `fstat`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is NUL-terminated, `st` a valid out-pointer, `dir` a live descriptor.
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// The hard link count (`nlink_t` is `u64` on x86_64, `u32` on some other targets).
#[allow(clippy::useless_conversion)]
fn nlink(st: &libc::stat) -> u64 {
    u64::from(st.st_nlink)
}

fn is_kind(st: &libc::stat, kind: libc::mode_t) -> bool {
    st.st_mode & libc::S_IFMT == kind
}

/// The workspace of a `local` or `isolated` sandbox: its canonical host path and a directory
/// descriptor opened on it, beneath which every file payload resolves.
#[derive(Debug)]
pub(crate) struct Root {
    path: PathBuf,
    fd: OwnedFd,
    /// False forces the component walk (tests use it to cover both resolvers).
    use_openat2: bool,
}

/// Where a component walk ([`Root::walk`]) is.
struct Walk {
    /// Descriptors of the directories entered below the root, the last the current one.
    stack: Vec<OwnedFd>,
    /// Names still to resolve, in order.
    queue: VecDeque<OsString>,
    /// Symlinks followed so far.
    links: usize,
    /// Names looked at again so far (swapped meanwhile, or directories just made).
    retries: usize,
}

impl Root {
    /// Opens the workspace directory at canonical `path`.
    pub(crate) fn open(path: &Path) -> io::Result<Root> {
        let fd = std::fs::File::open(path)?;
        let fd = OwnedFd::from(fd);
        let st = fstat(fd.as_fd())?;
        if !is_kind(&st, libc::S_IFDIR) {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        Ok(Root {
            path: path.to_path_buf(),
            fd,
            use_openat2: true,
        })
    }

    /// The canonical host path of the workspace.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    #[cfg(test)]
    fn walk_only(mut self) -> Self {
        self.use_openat2 = false;
        self
    }

    /// Resolves the lexically normalized `parts` and opens the result as `last` says.
    fn resolve(&self, parts: &[&OsStr], last: Last, create_dirs: bool) -> Result<OwnedFd, Fail> {
        if self.use_openat2 && !NO_OPENAT2.load(Ordering::Relaxed) {
            let joined = if parts.is_empty() {
                OsString::from(".")
            } else {
                let mut s = OsString::new();
                for (i, p) in parts.iter().enumerate() {
                    if i > 0 {
                        s.push("/");
                    }
                    s.push(p);
                }
                s
            };
            match openat2_beneath(self.fd.as_fd(), &joined, last.flags()) {
                Ok(fd) => return Ok(fd),
                Err(e) => match errno(&e) {
                    libc::ENOSYS => NO_OPENAT2.store(true, Ordering::Relaxed),
                    // Left the root (or an absolute symlink), too many or magic links, a
                    // rename race, a seccomp refusal: the walk decides.
                    libc::EXDEV | libc::ELOOP | libc::EAGAIN | libc::EPERM => {}
                    libc::ENOENT if create_dirs => {}
                    _ => return Err(Fail::Io(e)),
                },
            }
        }
        self.walk(parts, last, create_dirs)
    }

    /// The component walk: `openat(O_NOFOLLOW)` one name at a time from the descriptor of the
    /// directory before it; symlinks read and re-resolved beneath the root descriptor.
    fn walk(&self, parts: &[&OsStr], last: Last, create_dirs: bool) -> Result<OwnedFd, Fail> {
        let mut w = Walk {
            stack: Vec::new(),
            queue: parts.iter().map(|p| p.to_os_string()).collect(),
            links: 0,
            retries: 0,
        };
        loop {
            let cur = w.stack.last().unwrap_or(&self.fd).as_fd();
            let Some(name) = w.queue.pop_front() else {
                // The path ended on a directory (the root, or after `..` / a link to a dir).
                return match last {
                    Last::File => Err(Fail::Io(io::Error::from_raw_os_error(libc::EISDIR))),
                    _ => Ok(openat(cur, OsStr::new("."), last.flags(), 0)?),
                };
            };
            if name.is_empty() || name == "." {
                continue;
            }
            if name == ".." {
                if w.stack.pop().is_none() {
                    return Err(Fail::Escape("a symlink in it leads above the workspace"));
                }
                continue;
            }
            let is_last = w.queue.is_empty();
            let flags = if is_last {
                last.flags()
            } else {
                Last::DirPath.flags()
            };
            match openat(cur, &name, flags | libc::O_NOFOLLOW, 0) {
                Ok(fd) => {
                    let st = fstat(fd.as_fd())?;
                    if is_kind(&st, libc::S_IFLNK) {
                        // Only O_PATH opens a symlink itself: follow it beneath the root.
                        let target = readlinkat(fd.as_fd(), OsStr::new(""))?;
                        w.links += 1;
                        self.splice(&target, w.links, &mut w.stack, &mut w.queue)?;
                        continue;
                    }
                    if is_last {
                        return Ok(fd);
                    }
                    w.stack.push(fd);
                }
                Err(e) if matches!(errno(&e), libc::ELOOP | libc::ENOTDIR) => {
                    self.follow_refused(&mut w, name, e)?;
                }
                Err(e) if errno(&e) == libc::ENOENT && create_dirs => {
                    self.make_missing(&mut w, name, e)?;
                }
                Err(e) => return Err(Fail::Io(e)),
            }
        }
    }

    /// Goes on after `openat(O_NOFOLLOW)` refused `name` with `ELOOP` or `ENOTDIR` (`e`) in
    /// the directory the walk is in: a symlink is read and its target put in front of the
    /// names still to resolve; a name that is not a symlink is put back to look at again, a
    /// bounded number of times, unless it is a real non-directory (then `e` is the answer).
    fn follow_refused(&self, w: &mut Walk, name: OsString, e: io::Error) -> Result<(), Fail> {
        let cur = w.stack.last().unwrap_or(&self.fd).as_fd();
        match readlinkat(cur, &name) {
            Ok(target) => {
                w.links += 1;
                self.splice(&target, w.links, &mut w.stack, &mut w.queue)?;
            }
            // Not a symlink (any more): a real non-directory, or swapped back
            // between the two calls; look again, a bounded number of times.
            Err(le) if errno(&le) == libc::EINVAL || errno(&le) == libc::ENOENT => {
                w.retries += 1;
                if errno(&e) == libc::ENOTDIR && errno(&le) == libc::EINVAL || w.retries > MAX_LINKS
                {
                    return Err(Fail::Io(e));
                }
                w.queue.push_front(name);
            }
            Err(le) => return Err(Fail::Io(le)),
        }
        Ok(())
    }

    /// Goes on after `openat` found no `name` (`e`, `ENOENT`) in the directory the walk is
    /// in, when missing directories are to be made: makes it there and puts the name back to
    /// look at again, a bounded number of times.
    fn make_missing(&self, w: &mut Walk, name: OsString, e: io::Error) -> Result<(), Fail> {
        let cur = w.stack.last().unwrap_or(&self.fd).as_fd();
        // EEXIST: made meanwhile (by us or the command); look again either way.
        if let Err(me) = mkdirat(cur, &name)
            && errno(&me) != libc::EEXIST
        {
            return Err(Fail::Io(me));
        }
        w.retries += 1;
        if w.retries > MAX_LINKS {
            return Err(Fail::Io(e));
        }
        w.queue.push_front(name);
        Ok(())
    }

    /// Puts a symlink's `target` in front of the names still to resolve. A relative target
    /// continues from the directory holding the link (the top of `stack`); an absolute one
    /// must name a path inside the workspace and restarts from the root descriptor.
    fn splice(
        &self,
        target: &OsStr,
        links: usize,
        stack: &mut Vec<OwnedFd>,
        queue: &mut VecDeque<OsString>,
    ) -> Result<(), Fail> {
        if links > MAX_LINKS {
            return Err(Fail::Io(io::Error::from_raw_os_error(libc::ELOOP)));
        }
        let target = Path::new(target);
        let rest = if target.is_absolute() {
            let Ok(rest) = target.strip_prefix(&self.path) else {
                return Err(Fail::Escape("a symlink in it points outside the workspace"));
            };
            stack.clear();
            rest
        } else {
            target
        };
        let names: Vec<OsString> = rest
            .components()
            .filter_map(|c| match c {
                Component::Normal(p) => Some(p.to_os_string()),
                Component::ParentDir => Some(OsString::from("..")),
                _ => None,
            })
            .collect();
        for n in names.into_iter().rev() {
            queue.push_front(n);
        }
        Ok(())
    }

    fn failure(&self, what: &str, rel: &str, f: Fail) -> ToolError {
        match f {
            Fail::Escape(why) => escape(rel, why),
            Fail::Io(e) => io_failure(what, rel, &e),
        }
    }

    /// Reads the regular file `rel`, at most `limit` bytes.
    pub(crate) fn read_file(&self, rel: &str, limit: u64) -> Result<Vec<u8>, ToolError> {
        let parts = lexical(rel)?;
        let fd = self
            .resolve(&parts, Last::File, false)
            .map_err(|f| self.failure("read", rel, f))?;
        let st = fstat(fd.as_fd()).map_err(|e| io_failure("read", rel, &e))?;
        if is_kind(&st, libc::S_IFDIR) {
            return Err(io_failure(
                "read",
                rel,
                &io::Error::from_raw_os_error(libc::EISDIR),
            ));
        }
        if !is_kind(&st, libc::S_IFREG) {
            return Err(
                ToolError::exception(format!("cannot read {rel:?}: not a regular file"))
                    .with_detail(json!({ "path": rel })),
            );
        }
        if nlink(&st) > 1 {
            return Err(hard_link(rel, nlink(&st)));
        }
        let size = u64::try_from(st.st_size).unwrap_or(0);
        if size > limit {
            return Err(too_big(rel, size, limit));
        }
        let mut file = File::from(fd);
        let mut buf = Vec::with_capacity(size as usize);
        (&mut file)
            .take(limit + 1)
            .read_to_end(&mut buf)
            .map_err(|e| io_failure("read", rel, &e))?;
        if buf.len() as u64 > limit {
            return Err(too_big(rel, buf.len() as u64, limit));
        }
        Ok(buf)
    }

    /// Writes `content` to `rel` (created, or truncated and rewritten), creating missing
    /// parent directories; `mode` sets the permission bits afterwards.
    pub(crate) fn write_file(
        &self,
        rel: &str,
        content: &[u8],
        mode: Option<u32>,
    ) -> Result<u64, ToolError> {
        let parts = lexical(rel)?;
        let Some((name, parents)) = parts.split_last() else {
            return Err(ToolError::exception("cannot write the workspace root"));
        };
        let dir = self
            .resolve(parents, Last::DirPath, true)
            .map_err(|f| self.failure("create the parent of", rel, f))?;
        let fd = match openat(
            dir.as_fd(),
            name,
            libc::O_WRONLY | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
            0o666,
        ) {
            Ok(fd) => fd,
            Err(e) if errno(&e) == libc::ELOOP => {
                return Err(escape(
                    rel,
                    "its last component is a symlink, and writes never follow one",
                ));
            }
            Err(e) => return Err(io_failure("write", rel, &e)),
        };
        let st = fstat(fd.as_fd()).map_err(|e| io_failure("write", rel, &e))?;
        if !is_kind(&st, libc::S_IFREG) {
            return Err(
                ToolError::exception(format!("cannot write {rel:?}: not a regular file"))
                    .with_detail(json!({ "path": rel })),
            );
        }
        if nlink(&st) > 1 {
            return Err(hard_link(rel, nlink(&st)));
        }
        let mut file = File::from(fd);
        file.set_len(0)
            .and_then(|()| file.write_all(content))
            .map_err(|e| io_failure("write", rel, &e))?;
        if let Some(m) = mode {
            // SAFETY: fchmod on a descriptor we own; no memory is touched.
            if unsafe { libc::fchmod(file.as_raw_fd(), m & 0o7777) } < 0 {
                return Err(io_failure(
                    "set the mode of",
                    rel,
                    &io::Error::last_os_error(),
                ));
            }
        }
        Ok(content.len() as u64)
    }

    /// Lists the directory `rel`, sorted by name; entries are not followed (a symlink is
    /// listed as one).
    pub(crate) fn list(&self, rel: &str) -> Result<Vec<FileEntry>, ToolError> {
        let parts = lexical(rel)?;
        let fd = self
            .resolve(&parts, Last::Dir, false)
            .map_err(|f| self.failure("list", rel, f))?;
        let mut entries = Vec::new();
        for name in read_dir_names(fd.as_fd()).map_err(|e| io_failure("list", rel, &e))? {
            let st = match fstatat_nofollow(fd.as_fd(), &name) {
                Ok(st) => st,
                // Removed between reading the directory and looking at the entry.
                Err(e) if errno(&e) == libc::ENOENT => continue,
                Err(e) => return Err(io_failure("list", rel, &e)),
            };
            let kind = if is_kind(&st, libc::S_IFLNK) {
                EntryKind::Symlink
            } else if is_kind(&st, libc::S_IFDIR) {
                EntryKind::Dir
            } else if is_kind(&st, libc::S_IFREG) {
                EntryKind::File
            } else {
                EntryKind::Other
            };
            entries.push(FileEntry {
                name: name.to_string_lossy().into_owned(),
                size: if kind == EntryKind::File {
                    u64::try_from(st.st_size).unwrap_or(0)
                } else {
                    0
                },
                kind,
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    /// Whether `rel` names something (symlinks followed beneath the root). A path that
    /// would leave the workspace is a `path_escape` failure, not `false`.
    pub(crate) fn exists(&self, rel: &str) -> Result<bool, ToolError> {
        let parts = lexical(rel)?;
        match self.resolve(&parts, Last::Any, false) {
            Ok(_) => Ok(true),
            Err(Fail::Escape(why)) => Err(escape(rel, why)),
            Err(Fail::Io(_)) => Ok(false),
        }
    }

    /// Opens the directory `rel` as a working directory for a command; also returns its
    /// lexically normalized host path (for backends that name it inside their own view).
    pub(crate) fn open_dir(&self, rel: &str) -> Result<(OwnedFd, PathBuf), ToolError> {
        let parts = lexical(rel)?;
        let fd = self
            .resolve(&parts, Last::DirPath, false)
            .map_err(|f| self.failure("enter", rel, f))?;
        let mut path = self.path.clone();
        path.extend(parts);
        Ok((fd, path))
    }
}

fn mkdirat(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    let name = cstr(name)?;
    // SAFETY: `name` is NUL-terminated and `dir` a live descriptor.
    if unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o777) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The names in the directory open on `dir` (without `.` and `..`).
fn read_dir_names(dir: BorrowedFd<'_>) -> io::Result<Vec<OsString>> {
    // fdopendir takes ownership of the descriptor it is given, so give it a duplicate.
    let own = dir.try_clone_to_owned()?;
    let raw = std::os::fd::IntoRawFd::into_raw_fd(own);
    // SAFETY: `raw` is a descriptor we own, open on a directory; on success the DIR owns it.
    let d = unsafe { libc::fdopendir(raw) };
    if d.is_null() {
        let e = io::Error::last_os_error();
        // SAFETY: fdopendir failed, so `raw` is still ours to close.
        unsafe { libc::close(raw) };
        return Err(e);
    }
    struct Dir(*mut libc::DIR);
    impl Drop for Dir {
        fn drop(&mut self) {
            // SAFETY: the DIR came from fdopendir and is closed exactly once, here.
            unsafe { libc::closedir(self.0) };
        }
    }
    let d = Dir(d);
    // SAFETY: rewinding a freshly opened DIR is always valid; the duplicate shares its
    // offset with `dir`, which may have been read before.
    unsafe { libc::rewinddir(d.0) };
    let mut names = Vec::new();
    loop {
        // SAFETY: errno is thread-local; clearing it distinguishes end-of-directory from error.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: `d.0` is a live DIR; the returned entry is valid until the next readdir.
        let ent = unsafe { libc::readdir64(d.0) };
        if ent.is_null() {
            let e = io::Error::last_os_error();
            if errno(&e) != 0 {
                return Err(e);
            }
            break;
        }
        // SAFETY: d_name is a NUL-terminated array inside the entry readdir returned.
        let name = unsafe { std::ffi::CStr::from_ptr((*ent).d_name.as_ptr()) };
        let bytes = name.to_bytes();
        if bytes != b"." && bytes != b".." {
            names.push(OsStr::from_bytes(bytes).to_os_string());
        }
    }
    Ok(names)
}

fn hard_link(rel: &str, links: u64) -> ToolError {
    escape(
        rel,
        &format!(
            "it is a file with {links} hard links, and another of its names may be outside \
             the workspace"
        ),
    )
}

fn too_big(rel: &str, size: u64, limit: u64) -> ToolError {
    ToolError::new(
        ToolErrorKind::OutputLimit,
        format!("{rel:?} is {size} bytes; reads return at most {limit}"),
    )
}

/// A typed failure for an I/O error on `path`: `not_found` for ENOENT, else an exception.
pub(crate) fn io_failure(what: &str, path: &str, e: &io::Error) -> ToolError {
    let kind = if e.kind() == io::ErrorKind::NotFound {
        ToolErrorKind::NotFound
    } else {
        ToolErrorKind::ToolExecutionException
    };
    ToolError::new(kind, format!("cannot {what} {path:?}: {e}"))
        .with_detail(json!({ "path": path }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn roots(dir: &Path) -> Vec<Root> {
        vec![
            Root::open(dir).unwrap(),
            Root::open(dir).unwrap().walk_only(),
        ]
    }

    fn kind(r: Result<impl std::fmt::Debug, ToolError>) -> ToolErrorKind {
        r.unwrap_err().kind
    }

    #[test]
    fn lexical_rules() {
        let dir = tempfile::tempdir().unwrap();
        let root_path = std::fs::canonicalize(dir.path()).unwrap();
        for root in roots(&root_path) {
            assert_eq!(root.write_file("a/b/c.txt", b"abc", None).unwrap(), 3);
            assert_eq!(root.read_file("a/b/../b/c.txt", 99).unwrap(), b"abc");
            assert!(root.exists(".").unwrap());
            assert!(root.exists("").unwrap());
            assert!(!root.exists("a/zz").unwrap());
            assert!(!root.exists("a/b/c.txt/x").unwrap());
            for bad in ["../x", "a/../../x", "/etc/passwd", "x\0y"] {
                assert_eq!(
                    kind(root.read_file(bad, 99)),
                    ToolErrorKind::PathEscape,
                    "{bad}"
                );
                assert_eq!(
                    kind(root.write_file(bad, b"x", None)),
                    ToolErrorKind::PathEscape
                );
            }
            assert_eq!(kind(root.read_file("nope", 99)), ToolErrorKind::NotFound);
            assert_eq!(
                kind(root.read_file("a/b/c.txt", 2)),
                ToolErrorKind::OutputLimit
            );
            assert_eq!(
                kind(root.read_file("a", 99)),
                ToolErrorKind::ToolExecutionException
            );
            assert_eq!(
                kind(root.write_file("", b"x", None)),
                ToolErrorKind::ToolExecutionException
            );
            let names: Vec<String> = root
                .list("a")
                .unwrap()
                .into_iter()
                .map(|e| e.name)
                .collect();
            assert_eq!(names, ["b"]);
        }
    }

    #[test]
    fn symlinks_are_followed_only_beneath_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "host").unwrap();
        let r = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(r.join("in/deep")).unwrap();
        std::fs::write(r.join("in/deep/f"), "inside").unwrap();
        symlink(r.join("in"), r.join("abs_ok")).unwrap();
        symlink("in/deep", r.join("rel_ok")).unwrap();
        symlink("rel_ok/../deep/f", r.join("chain")).unwrap();
        symlink(outside.path(), r.join("out")).unwrap();
        symlink(outside.path().join("secret"), r.join("out_file")).unwrap();
        symlink(outside.path().join("nope"), r.join("dangle")).unwrap();
        symlink("../../../../../../..", r.join("up")).unwrap();
        symlink("loop", r.join("loop")).unwrap();
        for root in roots(&r) {
            assert_eq!(root.read_file("abs_ok/deep/f", 99).unwrap(), b"inside");
            assert_eq!(root.read_file("rel_ok/f", 99).unwrap(), b"inside");
            assert_eq!(root.read_file("chain", 99).unwrap(), b"inside");
            assert_eq!(root.list("abs_ok").unwrap()[0].name, "deep");
            for bad in ["out/secret", "out_file", "dangle", "up/etc/passwd"] {
                assert_eq!(
                    kind(root.read_file(bad, 99)),
                    ToolErrorKind::PathEscape,
                    "{bad}"
                );
                assert_eq!(kind(root.exists(bad)), ToolErrorKind::PathEscape, "{bad}");
            }
            assert_eq!(kind(root.list("out")), ToolErrorKind::PathEscape);
            assert_eq!(kind(root.open_dir("out")), ToolErrorKind::PathEscape);
            assert_eq!(
                kind(root.write_file("out/new", b"x", None)),
                ToolErrorKind::PathEscape
            );
            // A final symlink is never written through, even one that stays inside.
            assert_eq!(
                kind(root.write_file("dangle", b"x", None)),
                ToolErrorKind::PathEscape
            );
            assert_eq!(
                kind(root.write_file("rel_ok", b"x", None)),
                ToolErrorKind::PathEscape
            );
            // Parents through an inside symlink are fine.
            root.write_file("rel_ok/g", b"g", None).unwrap();
            assert_eq!(std::fs::read(r.join("in/deep/g")).unwrap(), b"g");
            assert_eq!(
                kind(root.read_file("loop", 99)),
                ToolErrorKind::ToolExecutionException
            );
        }
        assert!(!outside.path().join("new").exists());
        assert!(!outside.path().join("nope").exists());
    }

    #[test]
    fn hard_links_and_special_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let r = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::write(r.join("one"), "1").unwrap();
        std::fs::hard_link(r.join("one"), r.join("two")).unwrap();
        let fifo = CString::new(r.join("fifo").as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        for root in roots(&r) {
            assert_eq!(kind(root.read_file("two", 99)), ToolErrorKind::PathEscape);
            assert_eq!(
                kind(root.write_file("two", b"clobber", None)),
                ToolErrorKind::PathEscape
            );
            assert_eq!(
                kind(root.read_file("fifo", 99)),
                ToolErrorKind::ToolExecutionException
            );
            assert!(root.write_file("fifo", b"x", None).is_err());
        }
        assert_eq!(std::fs::read(r.join("one")).unwrap(), b"1");
    }

    /// The fallback walk (what runs where `openat2` is missing) under the swap race: a
    /// thread swaps `d` between a real directory and absolute and relative links to a
    /// host-only directory while reads, writes, listings and existence checks go through `d`.
    #[test]
    fn the_walk_survives_a_symlink_swap_race() {
        use std::sync::Arc;
        use std::sync::atomic::AtomicBool;
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let host = std::fs::canonicalize(outside.path()).unwrap();
        std::fs::write(host.join("s.txt"), "HOST").unwrap();
        std::fs::write(host.join("host_marker"), "").unwrap();
        let r = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(r.join("real")).unwrap();
        std::fs::write(r.join("real/s.txt"), "inside").unwrap();
        symlink(&host, r.join("abs")).unwrap();
        let rel = format!("../{}", host.file_name().unwrap().to_string_lossy());
        let rel_ok = r.parent() == host.parent();
        if rel_ok {
            symlink(&rel, r.join("rel")).unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (r, stop) = (r.clone(), stop.clone());
            std::thread::spawn(move || {
                let d = r.join("d");
                let mut swaps = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for name in ["real", "abs", "rel"] {
                        let from = r.join(name);
                        if std::fs::rename(&from, &d).is_ok() {
                            std::fs::rename(&d, &from).unwrap_or_else(|e| {
                                panic!("moving {} back to {name}: {e}", d.display())
                            });
                            swaps += 1;
                        } else if d.is_dir() {
                            // A write made `d` meanwhile: move it aside.
                            let _ = std::fs::rename(&d, r.join(format!("aside{swaps}")));
                        }
                    }
                }
                swaps
            })
        };
        let root = Root::open(&r).unwrap().walk_only();
        let started = std::time::Instant::now();
        let mut n = 0u64;
        while started.elapsed() < std::time::Duration::from_secs(2) {
            n += 1;
            if let Ok(c) = root.read_file("d/s.txt", 99) {
                assert_ne!(c, b"HOST", "round {n}: read the host's file through d");
            }
            let _ = root.write_file("d/s.txt", b"w", None);
            let _ = root.write_file(&format!("d/new{}", n % 8), b"w", None);
            if let Ok(entries) = root.list("d") {
                assert!(
                    entries.iter().all(|e| e.name != "host_marker"),
                    "round {n}: listed the host's directory through d"
                );
            }
            assert!(
                !matches!(root.exists("d/host_marker"), Ok(true)),
                "round {n}: saw the host's file through d"
            );
        }
        stop.store(true, Ordering::Relaxed);
        let swaps = swapper
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        assert!(swaps > 100 && n > 100, "{swaps} swaps, {n} rounds");
        let mut left: Vec<String> = std::fs::read_dir(&host)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["host_marker", "s.txt"]);
        assert_eq!(std::fs::read(host.join("s.txt")).unwrap(), b"HOST");
    }

    #[test]
    fn writes_create_parents_and_set_modes() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let r = std::fs::canonicalize(dir.path()).unwrap();
        for (i, root) in roots(&r).into_iter().enumerate() {
            let p = format!("n{i}/x/y/run.sh");
            root.write_file(&p, b"long content", Some(0o755)).unwrap();
            root.write_file(&p, b"short", None).unwrap();
            assert_eq!(std::fs::read(r.join(&p)).unwrap(), b"short");
            let mode = std::fs::metadata(r.join(&p)).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o755);
            let (_fd, path) = root.open_dir(&format!("n{i}/x")).unwrap();
            assert_eq!(path, r.join(format!("n{i}/x")));
            assert_eq!(
                kind(root.open_dir(&p)),
                ToolErrorKind::ToolExecutionException
            );
        }
    }
}
