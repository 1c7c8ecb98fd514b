//! Finding sessions in a store by the id in their header, and saying which files were left
//! out and why.
//!
//! A file's name is only a hint: a session is the id its header names. Every command finds
//! sessions through [`StoreView::index`] (headers only, cheap) or [`StoreView::facts`] (every
//! file read through in bounded memory), so `sessions`, `show`, `lineage`, `view` and
//! `verify` agree on what is in the store. No path is ever built from an id: ids like `../x`
//! are looked up among the files the directory listing returned.
//!
//! When two files hold one id, the one whose name is `<id>.jsonl` is used, else
//! `<id>.jsonl.__partial__`, else the first by name; the others are reported as
//! [`WarningKind::DuplicateId`]. A file that cannot be read is reported as
//! [`WarningKind::Unreadable`]. Both kinds go through [`FileWarning`], one per file.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use rath_persist::stream::SessionStream;
use rath_persist::{PARTIAL_SUFFIX, PersistError, SESSION_SUFFIX};
use rath_session::{
    ChunkBody, Lineage, PendingCall, Placement, RunFailure, SessionId, Timestamp, Usage,
};
use serde::Serialize;

use super::{InspectError, StoreView, relative_message};

/// Why a file was left out of a command's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum WarningKind {
    /// The file does not load (see the message; `rath verify` says more).
    Unreadable,
    /// Another file holds a session with the same header id and is used instead.
    DuplicateId,
}

/// One file a command left out, and why. Printed as one `warning:` line per file and listed
/// under `warnings` in JSON output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct FileWarning {
    /// File name in the store.
    pub file: String,
    /// What is wrong.
    pub kind: WarningKind,
    /// The session id concerned, when the file's header was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionId>,
    /// The details.
    pub message: String,
}

impl FileWarning {
    pub(crate) fn unreadable(file: String, e: &PersistError, dir: &Path) -> Self {
        FileWarning {
            file,
            kind: WarningKind::Unreadable,
            session: None,
            message: relative_message(e, dir),
        }
    }

    /// An unreadable file, with a message already in text.
    pub(crate) fn unreadable_text(file: String, message: String) -> Self {
        FileWarning {
            file,
            kind: WarningKind::Unreadable,
            session: None,
            message,
        }
    }

    fn duplicate(file: String, id: &SessionId, used: &str) -> Self {
        FileWarning {
            file,
            kind: WarningKind::DuplicateId,
            session: Some(id.clone()),
            message: format!("holds session {id}, which {used} also holds; {used} is used"),
        }
    }

    /// The warning as one line of text, e.g.
    /// `warning: unreadable file x.jsonl left out: x.jsonl:1: ... (run 'rath verify')`.
    pub fn line(&self) -> String {
        let what = match self.kind {
            WarningKind::Unreadable => "unreadable file",
            WarningKind::DuplicateId => "duplicate id in",
        };
        format!(
            "warning: {what} {} left out: {} (run `rath verify`)",
            self.file,
            one_line(&self.message)
        )
    }
}

fn one_line(s: &str) -> String {
    s.lines().map(str::trim).collect::<Vec<_>>().join("; ")
}

/// A session file found in the store, with the id from its header.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoredFile {
    /// The header's session id.
    pub id: SessionId,
    /// File name in the store.
    pub file: String,
    /// Full path (from the directory listing, never from the id).
    pub path: PathBuf,
}

/// Every session file of a store by header id: one file per id (see the module docs for the
/// choice), and the files left out.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct StoreIndex {
    /// One file per id, in file-name order.
    pub files: Vec<StoredFile>,
    /// Files whose header could not be read, and duplicates.
    pub warnings: Vec<FileWarning>,
}

impl StoreIndex {
    /// The file used for `id`.
    pub fn get(&self, id: &SessionId) -> Option<&StoredFile> {
        self.files.iter().find(|f| &f.id == id)
    }

    /// Files whose header could not be read.
    pub fn unreadable(&self) -> usize {
        self.warnings
            .iter()
            .filter(|w| w.kind == WarningKind::Unreadable)
            .count()
    }

    /// Warnings about the files that hold `id` besides the one used.
    pub fn duplicates_of(&self, id: &SessionId) -> Vec<FileWarning> {
        self.warnings
            .iter()
            .filter(|w| w.kind == WarningKind::DuplicateId && w.session.as_ref() == Some(id))
            .cloned()
            .collect()
    }
}

/// Everything about one file that a listing, a transcript header or a check needs, gathered
/// by reading it through once in bounded memory.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct FileFacts {
    /// The header's id.
    pub id: SessionId,
    /// File name in the store.
    pub file: String,
    /// Full path.
    pub path: PathBuf,
    /// Header `created_at`.
    pub created_at: Timestamp,
    /// Header lineage.
    pub lineage: Lineage,
    /// Header placement.
    pub placement: Placement,
    /// Conversation chunks (`chunk` records).
    pub conversation: u64,
    /// Evidence chunks.
    pub evidence: u64,
    /// True when the file has a trailer.
    pub closed: bool,
    /// Trailer `closed_at`.
    pub closed_at: Option<Timestamp>,
    /// Trailer `final_chunk_count`.
    pub final_chunk_count: Option<u64>,
    /// Trailer cumulative usage.
    pub usage: Option<Usage>,
    /// Usage per agent.
    pub agent_usage: BTreeMap<String, Usage>,
    /// Pending tool calls.
    pub pending: Vec<PendingCall>,
    /// True when a torn last line was skipped.
    pub torn_line_skipped: bool,
    /// False for a hand-edited file whose evidence cannot be placed while streaming (it is
    /// then shown from a whole load).
    pub in_order: bool,
    /// The failure that stopped the run: the session's last chunk, when that is a
    /// `run_failure` (see [`rath_session::Session::failure`]).
    pub failure: Option<RunFailure>,
}

impl FileFacts {
    /// Conversation plus evidence chunks (see [`crate::ChunkCounts`]).
    pub fn chunks(&self) -> usize {
        usize::try_from(self.counts().total).unwrap_or(usize::MAX)
    }

    /// The file's chunk counts, as every command shows them.
    pub fn counts(&self) -> crate::ChunkCounts {
        crate::ChunkCounts::new(self.conversation, self.evidence)
    }

    /// True for a `__partial__` file without a trailer.
    pub fn crashed(&self) -> bool {
        !self.closed && self.file.ends_with(PARTIAL_SUFFIX)
    }

    /// True when the file name is `<id>.jsonl` or `<id>.jsonl.__partial__`.
    pub fn name_matches(&self) -> bool {
        name_rank(&self.file, &self.id) < 2
    }
}

/// Reads `path` through (no chunk is kept) and returns its facts.
pub fn file_facts(path: &Path) -> Result<FileFacts, PersistError> {
    let mut s = SessionStream::open(path)?;
    let mut failure = None;
    while let Some((_, c)) = s.next_chunk()? {
        failure = match c.body() {
            ChunkBody::RunFailure(f) => Some(f.clone()),
            _ => None,
        };
    }
    Ok(FileFacts {
        id: s.id().clone(),
        file: super::file_name(path),
        path: path.to_path_buf(),
        created_at: s.created_at(),
        lineage: s.lineage().clone(),
        placement: s.placement().clone(),
        conversation: s.conversation_count(),
        evidence: s.evidence_count(),
        closed: s.closed(),
        closed_at: s.closed_at(),
        final_chunk_count: s.final_chunk_count(),
        usage: s.usage(),
        agent_usage: s.agent_usage().clone(),
        pending: s.pending().to_vec(),
        torn_line_skipped: s.torn_line_skipped(),
        in_order: s.in_order(),
        failure,
    })
}

/// 0 for `<id>.jsonl`, 1 for `<id>.jsonl.__partial__`, 2 for any other name.
fn name_rank(file: &str, id: &SessionId) -> u8 {
    match file.strip_prefix(id.as_str()) {
        Some(SESSION_SUFFIX) => 0,
        Some(PARTIAL_SUFFIX) => 1,
        _ => 2,
    }
}

/// Session file names in `dir` (`*.jsonl`, `*.jsonl.__partial__`, regular files), sorted.
pub(crate) fn session_files(dir: &Path) -> Result<Vec<(String, PathBuf)>, InspectError> {
    let entries = std::fs::read_dir(dir).map_err(|e| InspectError::Io {
        path: dir.to_path_buf(),
        source: e,
    })?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| InspectError::Io {
            path: dir.to_path_buf(),
            source: e,
        })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if (name.ends_with(SESSION_SUFFIX) || name.ends_with(PARTIAL_SUFFIX)) && path.is_file() {
            out.push((name, path));
        }
    }
    out.sort();
    Ok(out)
}

/// Keeps one item per id (the best-named, then the first), warning about the rest.
pub(crate) fn dedup_by_id<T>(
    items: Vec<T>,
    key: impl Fn(&T) -> (&SessionId, &str),
    warnings: &mut Vec<FileWarning>,
) -> Vec<T> {
    let mut best: HashMap<SessionId, usize> = HashMap::new();
    for (i, it) in items.iter().enumerate() {
        let (id, file) = key(it);
        match best.get(id) {
            Some(&j) if name_rank(key(&items[j]).1, id) <= name_rank(file, id) => {}
            _ => {
                best.insert(id.clone(), i);
            }
        }
    }
    let used: HashMap<SessionId, String> = best
        .iter()
        .map(|(id, &i)| (id.clone(), key(&items[i]).1.to_owned()))
        .collect();
    let keep: HashSet<usize> = best.into_values().collect();
    let mut kept = Vec::with_capacity(keep.len());
    for (i, it) in items.into_iter().enumerate() {
        if keep.contains(&i) {
            kept.push(it);
        } else {
            let (id, file) = key(&it);
            let used = used.get(id).map_or("another file", String::as_str);
            warnings.push(FileWarning::duplicate(file.to_owned(), id, used));
        }
    }
    kept
}

impl StoreView {
    /// Reads the header of every session file: one file per id, and what was left out.
    pub fn index(&self) -> Result<StoreIndex, InspectError> {
        if let Some(db) = &self.db {
            return db.index();
        }
        let mut warnings = Vec::new();
        let mut files = Vec::new();
        for (file, path) in session_files(self.dir())? {
            match SessionStream::open(&path) {
                Ok(s) => files.push(StoredFile {
                    id: s.id().clone(),
                    file,
                    path,
                }),
                Err(e) => warnings.push(FileWarning::unreadable(file, &e, self.dir())),
            }
        }
        let files = dedup_by_id(files, |f| (&f.id, f.file.as_str()), &mut warnings);
        warnings.sort_by(|a, b| a.file.cmp(&b.file));
        Ok(StoreIndex { files, warnings })
    }

    /// Reads every session file through (bounded memory): one [`FileFacts`] per id, oldest
    /// `created_at` first (ties by file name), and what was left out.
    pub fn facts(&self) -> Result<(Vec<FileFacts>, Vec<FileWarning>), InspectError> {
        if let Some(db) = &self.db {
            return db.facts();
        }
        let mut warnings = Vec::new();
        let mut all = Vec::new();
        for (file, path) in session_files(self.dir())? {
            match file_facts(&path) {
                Ok(f) => all.push(f),
                Err(e) => warnings.push(FileWarning::unreadable(file, &e, self.dir())),
            }
        }
        let mut kept = dedup_by_id(all, |f| (&f.id, f.file.as_str()), &mut warnings);
        kept.sort_by_key(|f| f.created_at);
        warnings.sort_by(|a, b| a.file.cmp(&b.file));
        Ok((kept, warnings))
    }

    /// The file that holds `id` (by header), with warnings about other files holding it.
    pub fn locate(&self, id: &SessionId) -> Result<(StoredFile, Vec<FileWarning>), InspectError> {
        let index = self.index()?;
        match index.get(id) {
            Some(f) => Ok((f.clone(), index.duplicates_of(id))),
            None => Err(InspectError::UnknownSession {
                id: id.to_string(),
                dir: self.dir().to_path_buf(),
                unreadable: index.unreadable(),
            }),
        }
    }
}
