//! File-level helpers of the local store: the format marker, the directory lock, synced
//! writes, and the crash points the crash-safety tests arm.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::MemoryError;
use crate::local::CRASH_POINT_ENV;

const FORMAT: &str = "rath-memory-local";
const VERSION: u64 = 1;

#[derive(Serialize, Deserialize)]
struct StoreMeta {
    format: String,
    version: u64,
    store_id: String,
}

pub(crate) fn truncate(path: &Path, len: u64) -> Result<(), MemoryError> {
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(MemoryError::io(path))?;
    f.set_len(len)
        .and_then(|()| f.sync_all())
        .map_err(MemoryError::io(path))?;
    let mut f = f;
    f.seek(SeekFrom::End(0)).map_err(MemoryError::io(path))?;
    Ok(())
}

pub(crate) fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), MemoryError> {
    let mut f = File::create(path).map_err(MemoryError::io(path))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(MemoryError::io(path))
}

pub(crate) fn sync_dir(dir: &Path) -> Result<(), MemoryError> {
    #[cfg(unix)]
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(MemoryError::io(dir))?;
    let _ = dir;
    Ok(())
}

pub(crate) fn check_or_write_meta(dir: &Path, store_id: &str) -> Result<(), MemoryError> {
    let path = dir.join("store.json");
    match std::fs::read(&path) {
        Ok(bytes) => {
            let meta: StoreMeta =
                serde_json::from_slice(&bytes).map_err(|e| MemoryError::NotAStore {
                    path: dir.to_owned(),
                    reason: format!("store.json: {e}"),
                })?;
            if meta.format != FORMAT || meta.version != VERSION {
                return Err(MemoryError::NotAStore {
                    path: dir.to_owned(),
                    reason: format!("format {} version {}", meta.format, meta.version),
                });
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let meta = StoreMeta {
                format: FORMAT.to_owned(),
                version: VERSION,
                store_id: store_id.to_owned(),
            };
            let mut bytes = serde_json::to_vec_pretty(&meta).map_err(|e| MemoryError::Io {
                path: path.clone(),
                source: std::io::Error::other(e),
            })?;
            bytes.push(b'\n');
            let tmp = dir.join("store.json.tmp");
            write_synced(&tmp, &bytes)?;
            std::fs::rename(&tmp, &path).map_err(MemoryError::io(&path))?;
            sync_dir(dir)
        }
        Err(e) => Err(MemoryError::Io { path, source: e }),
    }
}

pub(crate) fn lock_dir(dir: &Path, wait: Duration) -> Result<File, MemoryError> {
    let path = dir.join("LOCK");
    let file = rath_lock::open_lock_file(&path).map_err(MemoryError::io(&path))?;
    match rath_lock::lock_exclusive(&file, wait) {
        Ok(()) => Ok(file),
        Err(rath_lock::LockError::Held { waited }) => Err(MemoryError::Locked {
            path: dir.to_owned(),
            waited_ms: u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
        }),
        Err(e) => Err(MemoryError::Io {
            path,
            source: std::io::Error::other(e),
        }),
    }
}

/// True when [`CRASH_POINT_ENV`] names `name`: the crash tests' hook, compiled in only with
/// the `failpoints` feature (false otherwise, and the variable is never read).
pub(crate) fn crash_point(name: &str) -> bool {
    cfg!(feature = "failpoints") && std::env::var_os(CRASH_POINT_ENV).is_some_and(|v| v == name)
}

/// Ends the process the way a power cut or `kill -9` would: no destructors, no flushing.
pub(crate) fn die() -> ! {
    #[cfg(unix)]
    // SAFETY: sending a signal to ourselves; SIGKILL cannot be caught.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    std::process::abort()
}
