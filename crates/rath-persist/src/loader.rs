//! Reading session files back.
//!
//! ```
//! use rath_persist::load_bytes;
//!
//! let text = concat!(
//!     r#"{"record_type": "header", "schema_version": 1, "id": "s1", "created_at": "2026-01-01T00:00:00+00:00", "parent_session_ids": [], "lineage_operator": "implicit", "lineage_kind": "unknown", "lineage_extras": [], "sandbox_backend": null, "sandbox_spec": null, "sandbox_handle_id": null}"#, "\n",
//!     r#"{"record_type": "chunk", "index": 0, "kind": "user", "payload": {"content": "hi"}}"#, "\n",
//!     r#"{"record_type": "chunk", "index": 1, "kind": "ass"#, // torn by a crash
//! );
//! let loaded = load_bytes("s1.jsonl.__partial__".as_ref(), text.as_bytes())?;
//! assert!(!loaded.closed);
//! assert_eq!(loaded.session.len(), 1);
//! assert!(loaded.torn_line_skipped);
//! # Ok::<(), rath_persist::PersistError>(())
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rath_session::{
    Chunk, Lineage, LineageKind, PendingCall, Placement, Session, SessionId, SessionParts, Stamper,
    Timestamp, Usage,
};

use crate::PersistError;
use crate::record::{
    EvidenceIn, ExtIn, PayloadIn, RawLine, SCHEMA_VERSION, body_from_raw, extras_from_value,
    schema_version_of,
};

/// A session read from a file.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct LoadedSession {
    /// The session (its stamper is [`Stamper::system`]; use `with_stamper` to change it).
    pub session: Session,
    /// True when the file has a trailer (the writer closed it).
    pub closed: bool,
    /// The file read.
    pub path: PathBuf,
    /// The header's `created_at` (when the writer opened the file).
    pub created_at: Timestamp,
    /// The trailer's `closed_at`, when closed.
    pub closed_at: Option<Timestamp>,
    /// The trailer's `final_chunk_count`, when closed.
    pub final_chunk_count: Option<u64>,
    /// True when an unterminated last line (a write cut short by a crash) was skipped.
    pub torn_line_skipped: bool,
}

/// Reads one session file.
pub fn load_file(path: &Path) -> Result<LoadedSession, PersistError> {
    let bytes = std::fs::read(path).map_err(|e| PersistError::io("read", path, e))?;
    load_bytes(path, &bytes)
}

/// Parses the bytes of a session file; `path` is only used in errors and the result.
/// Never panics, whatever the bytes.
pub fn load_bytes(path: &Path, bytes: &[u8]) -> Result<LoadedSession, PersistError> {
    let bytes = trim_nul_tail(bytes);
    // One vectorised UTF-8 check for the whole file lets every line be parsed as text, so
    // the JSON reader does not re-check each string. A file that fails it (a torn multi-byte
    // character, a damaged row) is read line by line from bytes, with the same errors.
    let src = Source {
        bytes,
        text: std::str::from_utf8(bytes).ok(),
    };
    let mut st = LoadState::default();
    let mut torn = false;
    let split = parallel_split(bytes);
    let (first, second) = bytes.split_at(split);
    if second.is_empty() {
        // One record per line: size the chunk list once (a vectorised count).
        st.conv.reserve(memchr::memchr_iter(b'\n', bytes).count());
        for (lineno, line) in lines(first) {
            match line {
                Some(line) => st.apply(path, lineno, src.prepare(path, lineno, line))?,
                None => torn = true,
            }
        }
        return st.finish(path, torn);
    }
    // A large file: a second thread parses the second half of the lines, and turns its chunk
    // records into chunks, while this one does the same for the first half and applies it;
    // the second half's records are then applied in order, so errors surface exactly as in a
    // sequential read.
    let first_lines = memchr::memchr_iter(b'\n', first).count();
    let second_lines = memchr::memchr_iter(b'\n', second).count() + 1;
    st.conv.reserve(first_lines + second_lines);
    std::thread::scope(|scope| {
        let worker = scope.spawn(|| {
            let mut out = Vec::with_capacity(second_lines);
            for (n, line) in lines(second) {
                let lineno = first_lines + n;
                out.push((lineno, line.map(|l| src.prepare(path, lineno, l))));
            }
            out
        });
        for (lineno, line) in lines(first) {
            // `first` ends at a line break: every line in it is complete.
            if let Some(line) = line {
                st.apply(path, lineno, src.prepare(path, lineno, line))?;
            }
        }
        let prepared = worker.join().map_err(|_| PersistError::Corrupt {
            path: path.to_path_buf(),
            line: first_lines + 1,
            message: "the parsing thread panicked".to_owned(),
        })?;
        for (lineno, item) in prepared {
            match item {
                Some(item) => st.apply(path, lineno, item)?,
                None => torn = true,
            }
        }
        Ok(())
    })?;
    st.finish(path, torn)
}

/// The file being read: its bytes and, when the whole file is valid UTF-8, the same bytes
/// as text.
pub(crate) struct Source<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) text: Option<&'a str>,
}

/// One line, parsed, and for a chunk record already turned into a chunk: the work either
/// thread can do without knowing what came before.
pub(crate) enum Item<'a> {
    Blank,
    Chunk(Result<(Chunk, Option<Box<ExtIn>>), PersistError>),
    Record(Box<RawLine<'a>>),
    Invalid(serde_json::Error),
}

impl<'a> Source<'a> {
    /// The line as text, when the file is text (`line` is a subslice of `self.bytes`).
    fn text_of(&self, line: &'a [u8]) -> Option<&'a str> {
        let start = (line.as_ptr() as usize).wrapping_sub(self.bytes.as_ptr() as usize);
        self.text?.get(start..start.checked_add(line.len())?)
    }

    pub(crate) fn prepare(&self, path: &Path, lineno: usize, line: &'a [u8]) -> Item<'a> {
        if is_blank(line) {
            return Item::Blank;
        }
        let text = self.text_of(line);
        // Canonical conversation rows (nearly every line) are read directly; everything
        // else, and any row the direct reader is unsure of, goes through serde_json.
        if let Some(body) = text.and_then(crate::fast::conversation_chunk) {
            return Item::Chunk(Ok((Chunk::new(body), None)));
        }
        let parsed = match text {
            Some(text) => serde_json::from_str::<RawLine<'a>>(text),
            None => serde_json::from_slice::<RawLine<'a>>(line),
        };
        match parsed {
            Ok(raw) if raw.record_type.as_deref() == Some("chunk") => {
                Item::Chunk(chunk_of(path, lineno, raw))
            }
            Ok(raw) => Item::Record(Box::new(raw)),
            Err(e) => Item::Invalid(e),
        }
    }
}

/// A chunk record's chunk and extension object.
fn chunk_of(
    path: &Path,
    lineno: usize,
    raw: RawLine<'_>,
) -> Result<(Chunk, Option<Box<ExtIn>>), PersistError> {
    let body = match raw.payload {
        Some(PayloadIn::Typed(body)) => body,
        Some(PayloadIn::Raw(value)) => {
            let kind = raw
                .kind
                .as_deref()
                .ok_or_else(|| corrupt(path, lineno, "chunk has no kind"))?;
            if !value.is_object() {
                return Err(corrupt(path, lineno, "chunk payload must be a JSON object"));
            }
            body_from_raw(kind, value).map_err(|m| structure(path, lineno, m))?
        }
        None => return Err(corrupt(path, lineno, "chunk has no payload")),
    };
    let chunk = match raw.rath_ext.as_ref().and_then(|e| e.branch.as_deref()) {
        Some(b) => Chunk::new(body).with_branch(b),
        None => Chunk::new(body),
    };
    Ok((chunk, raw.rath_ext))
}

/// Files at least this large are parsed on two threads.
const PARALLEL_MIN_BYTES: usize = 256 * 1024;

/// Where to split `bytes` for a two-thread parse: just after the first line break past the
/// middle, or `bytes.len()` (no split) for small files or a single core.
pub(crate) fn parallel_split(bytes: &[u8]) -> usize {
    // The size first: asking for the cores reads the cgroup's files (several system
    // calls), which a store decoding many small sessions paid on every one of them.
    if bytes.len() < PARALLEL_MIN_BYTES || cores() < 2 {
        return bytes.len();
    }
    let mid = bytes.len() / 2;
    memchr::memchr(b'\n', &bytes[mid..]).map_or(bytes.len(), |i| mid + i + 1)
}

/// The cores this process may use, asked once.
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Splits into `(line number, Some(complete line) | None for an unterminated last line)`.
/// A tail of NUL bytes is unwritten space of a preallocated file whose writer was killed
/// ([`crate::Durability::Mapped`]): it is not a line (no JSON line can hold a raw NUL).
pub(crate) fn lines(bytes: &[u8]) -> impl Iterator<Item = (usize, Option<&[u8]>)> {
    let mut rest = trim_nul_tail(bytes);
    let mut n = 0usize;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        n += 1;
        match memchr_nl(rest) {
            Some(i) => {
                let line = &rest[..i];
                rest = &rest[i + 1..];
                Some((n, Some(line)))
            }
            None => {
                rest = &[];
                Some((n, None))
            }
        }
    })
}

/// `bytes` without its trailing NUL bytes.
pub(crate) fn trim_nul_tail(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    &bytes[..end]
}

fn memchr_nl(b: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', b)
}

pub(crate) fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

pub(crate) struct Header {
    pub(crate) id: SessionId,
    pub(crate) created_at: Timestamp,
    pub(crate) lineage: Lineage,
    pub(crate) placement: Placement,
}

#[derive(Default)]
pub(crate) struct LoadState {
    pub(crate) header: Option<Header>,
    pub(crate) conv: Vec<Chunk>,
    pub(crate) evidence: Vec<(u64, Chunk)>,
    pub(crate) closed_at: Option<Timestamp>,
    pub(crate) final_chunk_count: Option<u64>,
    pub(crate) closed: bool,
    pub(crate) usage: Option<Usage>,
    pub(crate) agent_usage: BTreeMap<String, Usage>,
    pub(crate) pending: Vec<PendingCall>,
}

fn corrupt(path: &Path, line: usize, message: impl Into<String>) -> PersistError {
    PersistError::Corrupt {
        path: path.to_path_buf(),
        line,
        message: message.into(),
    }
}

fn structure(path: &Path, line: usize, message: impl Into<String>) -> PersistError {
    PersistError::Structure {
        path: path.to_path_buf(),
        line,
        message: message.into(),
    }
}

impl LoadState {
    pub(crate) fn apply(
        &mut self,
        path: &Path,
        lineno: usize,
        item: Item<'_>,
    ) -> Result<(), PersistError> {
        match item {
            Item::Blank => Ok(()),
            Item::Chunk(chunk) => {
                if self.header.is_none() {
                    return Err(structure(path, lineno, "chunk record before header"));
                }
                let (chunk, ext) = chunk?;
                self.conv.push(chunk);
                self.apply_ext(path, lineno, ext.map(|e| *e))
            }
            Item::Record(raw) => self.dispatch(path, lineno, *raw),
            Item::Invalid(e) => Err(corrupt(path, lineno, format!("invalid record: {e}"))),
        }
    }

    fn dispatch(
        &mut self,
        path: &Path,
        lineno: usize,
        raw: RawLine<'_>,
    ) -> Result<(), PersistError> {
        match raw.record_type.as_deref() {
            Some("header") => self.header(path, lineno, raw),
            Some("chunk") => self.chunk(path, lineno, raw),
            Some("trailer") => self.trailer(path, lineno, raw),
            other => Err(structure(
                path,
                lineno,
                format!("unknown record_type {other:?}"),
            )),
        }
    }

    fn header(&mut self, path: &Path, lineno: usize, raw: RawLine<'_>) -> Result<(), PersistError> {
        if self.header.is_some() {
            return Err(structure(path, lineno, "duplicate header record"));
        }
        let ext = raw.rath_ext.map(|e| *e);
        let raw = raw.rare.map(|r| *r).unwrap_or_default();
        let version = schema_version_of(raw.schema_version.as_ref())
            .ok_or_else(|| corrupt(path, lineno, "schema_version is not an integer"))?;
        if version != SCHEMA_VERSION {
            return Err(PersistError::UnsupportedSchema {
                path: path.to_path_buf(),
                line: lineno,
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        let id = raw
            .id
            .ok_or_else(|| corrupt(path, lineno, "header has no id"))?;
        let created_text = raw
            .created_at
            .ok_or_else(|| corrupt(path, lineno, "header has no created_at"))?;
        let created_at = Timestamp::parse(&created_text).ok_or_else(|| {
            corrupt(
                path,
                lineno,
                format!("created_at {created_text:?} is not ISO-8601"),
            )
        })?;
        let extras = extras_from_value(raw.lineage_extras).map_err(|m| corrupt(path, lineno, m))?;
        let lineage = Lineage {
            parents: raw
                .parent_session_ids
                .unwrap_or_default()
                .into_iter()
                .map(SessionId::from)
                .collect(),
            operator: raw
                .lineage_operator
                .map_or(std::borrow::Cow::Borrowed("implicit"), Into::into),
            kind: raw
                .lineage_kind
                .as_deref()
                .map(LineageKind::parse)
                .unwrap_or(LineageKind::Unknown),
            extras,
        };
        let placement =
            Placement::restored(raw.sandbox_backend, raw.sandbox_spec, raw.sandbox_handle_id);
        self.header = Some(Header {
            id: SessionId::from(id),
            created_at,
            lineage,
            placement,
        });
        self.apply_ext(path, lineno, ext)
    }

    fn chunk(&mut self, path: &Path, lineno: usize, raw: RawLine<'_>) -> Result<(), PersistError> {
        self.apply(path, lineno, Item::Chunk(chunk_of(path, lineno, raw)))
    }

    fn trailer(
        &mut self,
        path: &Path,
        lineno: usize,
        raw: RawLine<'_>,
    ) -> Result<(), PersistError> {
        // Like Python: the last trailer wins, and records after it are still read.
        let ext = raw.rath_ext.map(|e| *e);
        let raw = raw.rare.map(|r| *r).unwrap_or_default();
        self.closed = true;
        self.closed_at = match raw.closed_at {
            Some(t) => Some(Timestamp::parse(&t).ok_or_else(|| {
                corrupt(path, lineno, format!("closed_at {t:?} is not ISO-8601"))
            })?),
            None => None,
        };
        self.final_chunk_count = raw
            .final_chunk_count
            .as_ref()
            .and_then(serde_json::Value::as_u64);
        self.usage = raw.cumulative_usage.map(Usage::from);
        self.apply_ext(path, lineno, ext)
    }

    fn apply_ext(
        &mut self,
        path: &Path,
        lineno: usize,
        ext: Option<ExtIn>,
    ) -> Result<(), PersistError> {
        let Some(ext) = ext else { return Ok(()) };
        for EvidenceIn {
            at,
            kind,
            payload,
            branch,
        } in ext.evidence
        {
            let body = body_from_raw(&kind, payload).map_err(|m| structure(path, lineno, m))?;
            if body.kind().is_conversation() {
                return Err(structure(
                    path,
                    lineno,
                    format!("evidence entry of conversation kind {kind:?}"),
                ));
            }
            let chunk = match branch {
                Some(b) => Chunk::new(body).with_branch(b),
                None => Chunk::new(body),
            };
            self.evidence.push((at, chunk));
        }
        if let Some(a) = ext.agent_usage {
            self.agent_usage = a;
        }
        if let Some(p) = ext.pending {
            self.pending = p;
        }
        Ok(())
    }

    fn finish(mut self, path: &Path, torn: bool) -> Result<LoadedSession, PersistError> {
        let conv = std::mem::take(&mut self.conv);
        let evidence = std::mem::take(&mut self.evidence);
        let mut loaded = self.finish_with(path, interleave(conv, evidence))?;
        loaded.torn_line_skipped = torn;
        Ok(loaded)
    }

    /// The session of the header and trailer applied so far, with `chunks` as its chunks
    /// (for stores that keep chunks apart from the header and trailer lines).
    pub(crate) fn finish_with(
        self,
        path: &Path,
        chunks: rath_session::ChunkList,
    ) -> Result<LoadedSession, PersistError> {
        let header = self.header.ok_or_else(|| PersistError::MissingHeader {
            path: path.to_path_buf(),
        })?;
        let parts = SessionParts {
            id: header.id,
            created_at: header.created_at,
            lineage: header.lineage,
            chunks,
            usage: self.usage,
            agent_usage: self.agent_usage,
            placement: header.placement,
            pending: self.pending,
        };
        Ok(LoadedSession {
            session: Session::from_parts(parts, Stamper::system()),
            closed: self.closed,
            path: path.to_path_buf(),
            created_at: header.created_at,
            closed_at: self.closed_at,
            final_chunk_count: self.final_chunk_count,
            torn_line_skipped: false,
        })
    }
}

/// Puts evidence back at its recorded positions among the conversation chunks. Positions that
/// do not fit (a hand-edited file) fall back to the end, in order; nothing is dropped.
fn interleave(conv: Vec<Chunk>, mut evidence: Vec<(u64, Chunk)>) -> rath_session::ChunkList {
    if evidence.is_empty() {
        return conv.into_iter().collect();
    }
    evidence.sort_by_key(|(at, _)| *at);
    let total = conv.len() + evidence.len();
    let mut out = rath_session::ChunkList::new();
    let mut conv = conv.into_iter().peekable();
    let mut ev = evidence.into_iter().peekable();
    for pos in 0..total as u64 {
        match ev.peek() {
            Some((at, _)) if *at <= pos => {
                if let Some((_, c)) = ev.next() {
                    out.push_back(c);
                }
            }
            _ => match conv.next() {
                Some(c) => out.push_back(c),
                None => {
                    if let Some((_, c)) = ev.next() {
                        out.push_back(c);
                    }
                }
            },
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = r#"{"record_type": "header", "schema_version": 1, "id": "s1", "created_at": "2026-01-01T00:00:00+00:00", "parent_session_ids": [], "lineage_operator": "implicit", "lineage_kind": "unknown", "lineage_extras": [], "sandbox_backend": null, "sandbox_spec": null, "sandbox_handle_id": null}"#;
    const ROW: &str =
        r#"{"record_type": "chunk", "index": 0, "kind": "user", "payload": {"content": "hi"}}"#;

    #[test]
    fn a_nul_tail_is_unwritten_space() {
        let p = Path::new("s1.jsonl.__partial__");
        let mut bytes = format!("{HEADER}\n{ROW}\n").into_bytes();
        bytes.resize(bytes.len() + 5000, 0);
        let l = load_bytes(p, &bytes).expect("loads");
        assert_eq!(l.session.len(), 1);
        assert!(!l.torn_line_skipped);

        // A row cut short with holes (memcpy may store a row's end first), then NULs.
        let mut bytes = format!("{HEADER}\n{ROW}\n").into_bytes();
        bytes.extend_from_slice(&[0; 40]);
        bytes.extend_from_slice(br#"load": {"content": "x"}}"#);
        bytes.resize(bytes.len() + 100, 0);
        let l = load_bytes(p, &bytes).expect("loads");
        assert_eq!(l.session.len(), 1);
        assert!(l.torn_line_skipped);

        // All NULs: no header.
        assert!(matches!(
            load_bytes(p, &[0; 64]),
            Err(PersistError::MissingHeader { .. })
        ));
    }
}
