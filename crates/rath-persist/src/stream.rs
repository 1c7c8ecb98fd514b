//! Reading a session file one record at a time, in memory bounded by the longest line.
//!
//! [`load_file`](crate::load_file) builds the whole [`Session`](rath_session::Session); a
//! 200 MB file needs the file and the session in memory at once. A [`SessionStream`] reads
//! the header when opened, then hands out chunks one by one, in the order `load_file` puts
//! them (evidence back at its recorded positions), with the same errors; the trailer's facts
//! are known once the last chunk has been read.
//!
//! ```
//! use rath_persist::{Store, stream::SessionStream};
//! use rath_session::{Chunk, Session, Stamper};
//!
//! let dir = tempfile::tempdir()?;
//! let s = Session::user_with("q", Stamper::counter()).push(Chunk::assistant_text("a"));
//! let path = Store::at(dir.path()).save(&s)?;
//!
//! let mut stream = SessionStream::open(&path)?;
//! assert_eq!(stream.id(), s.id());
//! let mut texts = Vec::new();
//! while let Some((index, chunk)) = stream.next_chunk()? {
//!     texts.push((index, chunk.text().map(str::to_owned)));
//! }
//! assert_eq!(texts, [(0, Some("q".to_owned())), (1, Some("a".to_owned()))]);
//! assert!(stream.closed() && stream.in_order());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Order: this crate's writer puts each evidence chunk on the record of the conversation
//! chunk next to it (or on the trailer), so a reader that keeps a few pending evidence chunks
//! can emit every chunk at its final position as it goes. A hand-edited file may carry an
//! evidence chunk whose position has already been passed; then [`SessionStream::in_order`]
//! turns false (the chunk is still handed out, at the current position) and a caller that
//! needs `load_file`'s exact order loads the file whole.

use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use rath_session::{Chunk, Lineage, PendingCall, Placement, SessionId, Timestamp, Usage};

use crate::PersistError;
use crate::loader::{Item, LoadState, Source};

/// Read buffer size.
const BUF_BYTES: usize = 64 * 1024;

/// An open session file read record by record. See the [module docs](self).
pub struct SessionStream {
    reader: BufReader<File>,
    path: PathBuf,
    line: Vec<u8>,
    lineno: usize,
    state: LoadState,
    merge: Merge<Chunk>,
    eof: bool,
    torn: bool,
    conversation: u64,
    evidence: u64,
}

impl std::fmt::Debug for SessionStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionStream")
            .field("path", &self.path)
            .field("line", &self.lineno)
            .field("eof", &self.eof)
            .finish_non_exhaustive()
    }
}

impl SessionStream {
    /// Opens `path` and reads up to and including its header record (blank lines and
    /// anything else the loader accepts before it are read too). Errors are
    /// [`load_file`](crate::load_file)'s: [`PersistError::MissingHeader`] for a file without
    /// a header, `Corrupt`/`Structure`/`UnsupportedSchema` at the offending line.
    pub fn open(path: &Path) -> Result<Self, PersistError> {
        let file = File::open(path).map_err(|e| PersistError::io("read", path, e))?;
        let mut s = SessionStream {
            reader: BufReader::with_capacity(BUF_BYTES, file),
            path: path.to_path_buf(),
            line: Vec::new(),
            lineno: 0,
            state: LoadState::default(),
            merge: Merge::default(),
            eof: false,
            torn: false,
            conversation: 0,
            evidence: 0,
        };
        while s.state.header.is_none() {
            if !s.read_record()? {
                return Err(PersistError::MissingHeader {
                    path: path.to_path_buf(),
                });
            }
        }
        Ok(s)
    }

    /// The file read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn header(&self) -> &crate::loader::Header {
        // `open` returns only once the header is read, and nothing removes it.
        match &self.state.header {
            Some(h) => h,
            None => unreachable!("SessionStream::open reads the header first"),
        }
    }

    /// The header's session id.
    pub fn id(&self) -> &SessionId {
        &self.header().id
    }

    /// The header's `created_at`.
    pub fn created_at(&self) -> Timestamp {
        self.header().created_at
    }

    /// The header's lineage.
    pub fn lineage(&self) -> &Lineage {
        &self.header().lineage
    }

    /// The header's sandbox placement.
    pub fn placement(&self) -> &Placement {
        &self.header().placement
    }

    /// The next chunk and its position in the session, or `None` at the end of the file.
    /// An error stops the stream (like `load_file`, which would refuse the whole file).
    pub fn next_chunk(&mut self) -> Result<Option<(usize, Chunk)>, PersistError> {
        loop {
            if let Some((i, c)) = self.merge.pop(self.eof) {
                return Ok(Some((i as usize, c)));
            }
            if self.eof {
                return Ok(None);
            }
            self.read_record()?;
        }
    }

    /// Reads the rest of the file without keeping any chunk; returns how many chunks were
    /// skipped. Afterwards the trailer facts below are final.
    pub fn skip_to_end(&mut self) -> Result<usize, PersistError> {
        let mut n = 0;
        while self.next_chunk()?.is_some() {
            n += 1;
        }
        Ok(n)
    }

    /// True once the end of the file was reached (the facts below are then final).
    pub fn at_end(&self) -> bool {
        self.eof
    }

    /// True when the file has a trailer (so far).
    pub fn closed(&self) -> bool {
        self.state.closed
    }

    /// The last trailer's `closed_at` (so far).
    pub fn closed_at(&self) -> Option<Timestamp> {
        self.state.closed_at
    }

    /// The last trailer's `final_chunk_count` (so far).
    pub fn final_chunk_count(&self) -> Option<u64> {
        self.state.final_chunk_count
    }

    /// The last trailer's cumulative usage (so far).
    pub fn usage(&self) -> Option<Usage> {
        self.state.usage
    }

    /// Usage per agent, from the latest extension that carried it (so far).
    pub fn agent_usage(&self) -> &BTreeMap<String, Usage> {
        &self.state.agent_usage
    }

    /// Pending tool calls, from the latest extension that carried them (so far).
    pub fn pending(&self) -> &[PendingCall] {
        &self.state.pending
    }

    /// True when an unterminated last line (a write cut short) was skipped.
    pub fn torn_line_skipped(&self) -> bool {
        self.torn
    }

    /// Conversation chunks (`chunk` records) read so far.
    pub fn conversation_count(&self) -> u64 {
        self.conversation
    }

    /// Evidence chunks read so far.
    pub fn evidence_count(&self) -> u64 {
        self.evidence
    }

    /// False when an evidence chunk arrived after its recorded position had been passed (a
    /// hand-edited file): chunks were then handed out in an order `load_file` would not use.
    pub fn in_order(&self) -> bool {
        !self.merge.late
    }

    /// Reads one line and applies it. Returns false at the end of the file.
    fn read_record(&mut self) -> Result<bool, PersistError> {
        let complete = match self.read_line()? {
            None => {
                self.eof = true;
                return Ok(false);
            }
            Some(c) => c,
        };
        if !complete {
            // An unterminated last line: skipped, like the loader does.
            self.torn = true;
            self.eof = true;
            return Ok(false);
        }
        let src = Source {
            bytes: &self.line,
            text: std::str::from_utf8(&self.line).ok(),
        };
        let item = src.prepare(&self.path, self.lineno, &self.line);
        if matches!(item, Item::Blank) {
            return Ok(true);
        }
        self.state.apply(&self.path, self.lineno, item)?;
        self.conversation += self.state.conv.len() as u64;
        self.evidence += self.state.evidence.len() as u64;
        self.merge
            .push(self.state.conv.drain(..), self.state.evidence.drain(..));
        Ok(true)
    }

    /// Reads the next line into `self.line` (without its line break). `Some(true)` for a
    /// complete line, `Some(false)` for an unterminated last line, `None` at the end. A run
    /// of NUL bytes at the end of the file (unwritten space of a preallocated file) is not a
    /// line and is never held in memory.
    fn read_line(&mut self) -> Result<Option<bool>, PersistError> {
        self.line.clear();
        let mut nuls = 0usize; // NULs read but not yet copied into `line`
        loop {
            let buf = match self.reader.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(PersistError::io("read", &self.path, e)),
            };
            if buf.is_empty() {
                // End of file: a trailing NUL run is dropped.
                if self.line.is_empty() {
                    return Ok(None);
                }
                self.lineno += 1;
                return Ok(Some(false));
            }
            let (take, done) = match memchr::memchr(b'\n', buf) {
                Some(i) => (i, true),
                None => (buf.len(), false),
            };
            let part = &buf[..take];
            // Hold back NULs until something else follows them on this line.
            match part.iter().rposition(|&b| b != 0) {
                None => nuls += part.len(),
                Some(last) => {
                    self.line.resize(self.line.len() + nuls, 0);
                    self.line.extend_from_slice(&part[..=last]);
                    nuls = part.len() - last - 1;
                }
            }
            self.reader.consume(if done { take + 1 } else { take });
            if done {
                self.line.resize(self.line.len() + nuls, 0);
                self.lineno += 1;
                return Ok(Some(true));
            }
        }
    }
}

/// Puts evidence back among the conversation chunks as records arrive: the same order as
/// the loader's `interleave`, as long as no evidence arrives after its position was passed.
struct Merge<T> {
    /// Evidence waiting for its position, by (position, arrival).
    pending: BTreeMap<(u64, u64), T>,
    conv: VecDeque<T>,
    pos: u64,
    seq: u64,
    late: bool,
}

impl<T> Default for Merge<T> {
    fn default() -> Self {
        Merge {
            pending: BTreeMap::new(),
            conv: VecDeque::new(),
            pos: 0,
            seq: 0,
            late: false,
        }
    }
}

impl<T> Merge<T> {
    fn push(
        &mut self,
        conv: impl IntoIterator<Item = T>,
        evidence: impl IntoIterator<Item = (u64, T)>,
    ) {
        self.conv.extend(conv);
        for (at, c) in evidence {
            if at < self.pos {
                self.late = true;
            }
            self.pending.insert((at, self.seq), c);
            self.seq += 1;
        }
    }

    /// The next chunk when it can be decided now; `eof` says no more records will come.
    fn pop(&mut self, eof: bool) -> Option<(u64, T)> {
        let due = self
            .pending
            .first_key_value()
            .is_some_and(|((at, _), _)| *at <= self.pos);
        let next = if due {
            self.pending.pop_first().map(|(_, c)| c)
        } else if let Some(c) = self.conv.pop_front() {
            Some(c)
        } else if eof {
            self.pending.pop_first().map(|(_, c)| c)
        } else {
            None
        };
        next.map(|c| {
            let i = self.pos;
            self.pos += 1;
            (i, c)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Store, WriterOptions, load_bytes, load_file};
    use rath_session::{Chunk, Session, Stamper};

    fn drain(path: &Path) -> (Vec<(usize, Chunk)>, SessionStream) {
        let mut s = SessionStream::open(path).expect("open");
        let mut out = Vec::new();
        while let Some(c) = s.next_chunk().expect("chunk") {
            out.push(c);
        }
        (out, s)
    }

    fn note(text: &str) -> Chunk {
        Chunk::note("test", text)
    }

    #[test]
    fn streams_in_load_file_order_with_evidence_anywhere() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::at(dir.path());
        // Evidence before the first conversation chunk, between, after the last, in batches
        // of several sizes.
        let mut s = Session::system_with("sys", Stamper::counter());
        let mut w = store.writer(&s, WriterOptions::default()).expect("writer");
        for round in 0..40 {
            if round % 3 == 0 {
                s = s.push(note(&format!("before {round}")));
            }
            s = s.push(Chunk::user(format!("u{round}")));
            for k in 0..(round % 4) {
                s = s.push(note(&format!("after {round}.{k}")));
            }
            if round % 5 == 0 {
                w.sync_to(&s).expect("sync");
            }
        }
        s = s.push(note("tail"));
        let path = w.close_with(&s).expect("close");
        let loaded = load_file(&path).expect("load");
        let (streamed, st) = drain(&path);
        assert!(st.in_order() && st.closed() && !st.torn_line_skipped());
        assert_eq!(streamed.len(), loaded.session.len());
        for (i, (at, c)) in streamed.iter().enumerate() {
            assert_eq!(*at, i);
            assert_eq!(Some(c), loaded.session.get(i), "chunk {i}");
        }
        assert_eq!(
            st.conversation_count() as usize,
            loaded.session.conversation_len()
        );
        assert_eq!(
            st.evidence_count() as usize,
            loaded.session.len() - loaded.session.conversation_len()
        );
        assert_eq!(st.usage(), loaded.session.usage());
        assert_eq!(st.closed_at(), loaded.closed_at);
    }

    const HEADER: &str = r#"{"record_type": "header", "schema_version": 1, "id": "s1", "created_at": "2026-01-01T00:00:00+00:00", "parent_session_ids": [], "lineage_operator": "implicit", "lineage_kind": "unknown", "lineage_extras": [], "sandbox_backend": null, "sandbox_spec": null, "sandbox_handle_id": null}"#;

    fn row(i: usize) -> String {
        format!(
            r#"{{"record_type": "chunk", "index": {i}, "kind": "user", "payload": {{"content": "m{i}"}}}}"#
        )
    }

    #[test]
    fn torn_tails_nul_tails_and_errors_match_the_loader() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cases: Vec<Vec<u8>> = vec![
            format!("{HEADER}\n{}\n{}\n", row(0), row(1)).into_bytes(),
            format!("{HEADER}\n{}\n{{\"record_type\": \"chu", row(0)).into_bytes(),
            [format!("{HEADER}\n{}\n", row(0)).as_bytes(), &[0u8; 70_000]].concat(),
            [
                format!("{HEADER}\n{}\n", row(0)).as_bytes(),
                &[0u8; 40],
                br#"ad": {"content": "x"}}"#,
                &[0u8; 100],
            ]
            .concat(),
            format!("\n\n{HEADER}\n\n{}\n", row(0)).into_bytes(),
            format!("{}\n{HEADER}\n", row(0)).into_bytes(),
            format!("{HEADER}\n{}\nnot json\n{}\n", row(0), row(2)).into_bytes(),
            vec![0u8; 64],
            Vec::new(),
            [HEADER.as_bytes(), b"\n", &[0xff, 0xfe], b"\n"].concat(),
        ];
        for (n, bytes) in cases.iter().enumerate() {
            let path = dir.path().join(format!("c{n}.jsonl"));
            std::fs::write(&path, bytes).expect("write");
            let want = load_bytes(&path, bytes);
            let got = SessionStream::open(&path).and_then(|mut s| {
                let mut chunks = Vec::new();
                while let Some((_, c)) = s.next_chunk()? {
                    chunks.push(c);
                }
                Ok((chunks, s.torn_line_skipped(), s.closed()))
            });
            match (want, got) {
                (Ok(l), Ok((chunks, torn, closed))) => {
                    assert_eq!(
                        chunks,
                        l.session.chunks().iter().cloned().collect::<Vec<_>>()
                    );
                    assert_eq!((torn, closed), (l.torn_line_skipped, l.closed), "case {n}");
                }
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "case {n}"),
                (a, b) => panic!(
                    "case {n}: loader {:?}, stream {:?}",
                    a.map(|_| ()),
                    b.map(|_| ())
                ),
            }
        }
    }

    #[test]
    fn evidence_behind_its_position_is_flagged() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s1.jsonl");
        let trailer = r#"{"record_type": "trailer", "closed_at": "2026-01-01T00:00:01+00:00", "final_chunk_count": 2, "cumulative_usage": null, "rath_ext": {"evidence": [{"at": 0, "kind": "note", "payload": {"author": "a", "text": "late"}}]}}"#;
        std::fs::write(
            &path,
            format!("{HEADER}\n{}\n{}\n{trailer}\n", row(0), row(1)),
        )
        .expect("write");
        let (chunks, st) = drain(&path);
        assert_eq!(chunks.len(), 3);
        assert!(!st.in_order());
        let loaded = load_file(&path).expect("load");
        assert_eq!(
            loaded.session.get(0).map(|c| c.kind().as_str()),
            Some("note")
        );
    }
}
