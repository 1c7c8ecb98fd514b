//! Copying every session of one store into another, losslessly: what `rath store copy`
//! does.
//!
//! ```
//! use rath_persist::{SessionStore, Store, copy_store};
//! use rath_session::{Chunk, Session, Stamper};
//!
//! # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
//! let (a, b) = (tempfile::tempdir()?, tempfile::tempdir()?);
//! let from = Store::at(a.path());
//! let s = Session::user_with("hi", Stamper::counter()).push(Chunk::assistant_text("hello"));
//! from.save(&s)?;
//! from.save(&s.fork())?;
//! let to = Store::at(b.path());
//! let report = copy_store(&from, &to).await?;
//! assert_eq!((report.sessions, report.copied, report.chunks), (2, 2, 4));
//! // The copy has the same bytes.
//! assert_eq!(std::fs::read(from.path_of(s.id()))?, std::fs::read(to.path_of(s.id()))?);
//! // Copying again writes nothing.
//! assert_eq!(copy_store(&from, &to).await?.unchanged, 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Each session is read whole ([`SessionStore::load`]) and written as it was
//! ([`SessionStore::restore`]: its `created_at`, `closed_at`, and whether its writer closed
//! it), so a store copied into any other and back holds the same sessions, and a JSONL
//! directory the same bytes. Sessions are copied in [`SessionStore::list`] order (oldest
//! first, so parents before their forks). A session already in the destination with the
//! same content is left alone and counted as unchanged; a different session under the same
//! id stops the copy with the destination's error, having written the sessions before it.

use serde::Serialize;

use crate::PersistError;
use crate::contract::SessionStore;

/// What [`copy_store`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct CopyReport {
    /// The source store's name.
    pub from: String,
    /// The destination store's name.
    pub to: String,
    /// Sessions in the source.
    pub sessions: usize,
    /// Sessions written to the destination.
    pub copied: usize,
    /// Sessions the destination already held as they are (nothing written).
    pub unchanged: usize,
    /// Chunks of the sessions read (conversation and evidence).
    pub chunks: usize,
    /// Chunk documents (or JSONL rows) the destination wrote: fewer than `chunks` when it
    /// shares structure.
    pub chunks_written: usize,
    /// Sessions of the source left out because they cannot be read (with
    /// [`CopyOptions::skip_unreadable`]; without it such a session stops the copy): each
    /// the error naming its file and what is wrong.
    pub skipped: Vec<String>,
}

/// How [`copy_store_with`] copies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CopyOptions {
    /// Leave out the source's sessions that cannot be read (torn or unreadable files) and
    /// list them in [`CopyReport::skipped`], instead of failing.
    pub skip_unreadable: bool,
}

impl CopyOptions {
    /// Sets [`CopyOptions::skip_unreadable`].
    pub fn skip_unreadable(mut self, skip: bool) -> Self {
        self.skip_unreadable = skip;
        self
    }
}

impl CopyReport {
    /// One line: `copied N of M sessions from A to B (K unchanged; C chunks, W written)`,
    /// ending `; S unreadable left out)` when sessions were skipped (they are named in
    /// [`CopyReport::skipped`]).
    pub fn render(&self) -> String {
        let skipped = if self.skipped.is_empty() {
            String::new()
        } else {
            format!("; {} unreadable left out", self.skipped.len())
        };
        format!(
            "copied {} of {} sessions from {} to {} ({} unchanged; {} chunks, {} written{skipped})\n",
            self.copied,
            self.sessions,
            self.from,
            self.to,
            self.unchanged,
            self.chunks,
            self.chunks_written
        )
    }
}

/// Copies every session of `from` into `to`, oldest first, each restored as it was stored.
/// A session of `from` that cannot be read stops the copy: [`PersistError::Unreadable`]
/// naming every such file when the listing finds them (before anything is written), the
/// loader's error when a load does.
pub async fn copy_store(
    from: &dyn SessionStore,
    to: &dyn SessionStore,
) -> Result<CopyReport, PersistError> {
    copy_store_with(from, to, CopyOptions::default()).await
}

/// [`copy_store`], as `options` say.
pub async fn copy_store_with(
    from: &dyn SessionStore,
    to: &dyn SessionStore,
    options: CopyOptions,
) -> Result<CopyReport, PersistError> {
    let mut report = CopyReport {
        from: from.name(),
        to: to.name(),
        ..CopyReport::default()
    };
    let (summaries, unreadable) = from.list_with_unreadable().await?;
    let unreadable: Vec<String> = unreadable.iter().map(ToString::to_string).collect();
    if !unreadable.is_empty() && !options.skip_unreadable {
        return Err(PersistError::Unreadable {
            store: from.name(),
            files: unreadable,
        });
    }
    report.skipped = unreadable;
    for summary in summaries {
        let loaded = match from.load(&summary.id).await {
            Ok(l) => l,
            Err(e) if options.skip_unreadable && unreadable_session(&e) => {
                report.skipped.push(e.to_string());
                continue;
            }
            Err(e) => return Err(e),
        };
        report.sessions += 1;
        report.chunks += loaded.session.len();
        let w = to.restore(&loaded).await?;
        if w.unchanged {
            report.unchanged += 1;
        } else {
            report.copied += 1;
            report.chunks_written += w.chunks_written;
        }
    }
    Ok(report)
}

/// True for a load error that is about the stored session itself (its file or rows), not
/// the store as a whole: what `skip_unreadable` leaves out.
fn unreadable_session(e: &PersistError) -> bool {
    matches!(
        e,
        PersistError::Io { .. }
            | PersistError::Corrupt { .. }
            | PersistError::Structure { .. }
            | PersistError::UnsupportedSchema { .. }
            | PersistError::MissingHeader { .. }
            | PersistError::CorruptStore { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Store;
    use rath_session::{Session, Stamper};

    #[test]
    fn an_unreadable_file_stops_the_copy_unless_it_is_skipped() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let from = Store::at(a.path());
        let s = Session::user_with("hi", Stamper::counter());
        from.save(&s).unwrap();
        from.save(&s.fork()).unwrap();
        // A file cut short inside its header: listed by nobody, held by the store.
        std::fs::write(a.path().join("torn.jsonl"), r#"{"record_type": "hea"#).unwrap();
        let to = Store::at(b.path());
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        match rt.block_on(copy_store(&from, &to)) {
            Err(PersistError::Unreadable { files, .. }) => {
                assert_eq!(files.len(), 1);
                assert!(files[0].contains("torn.jsonl"), "{files:?}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(Store::list(&to).unwrap().len(), 0, "nothing is copied");
        let options = CopyOptions::default().skip_unreadable(true);
        let report = rt.block_on(copy_store_with(&from, &to, options)).unwrap();
        assert_eq!((report.sessions, report.copied), (2, 2));
        assert_eq!(report.skipped.len(), 1);
        assert!(report.render().contains("1 unreadable left out"));
    }
}
