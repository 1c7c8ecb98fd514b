//! Lineage rows, the lineage journal, and exports (JSONL, Graphviz DOT, Mermaid).
//!
//! ```
//! use rath_persist::{LineageJournal, export_jsonl_string};
//! use rath_session::{Session, Stamper};
//!
//! let journal = LineageJournal::new();
//! let root = Session::user_with("q", Stamper::counter());
//! journal.record(&root);
//! let fork = root.fork();
//! journal.record(&fork);
//! let text = export_jsonl_string(&journal.rows());
//! assert_eq!(text.lines().count(), 2);
//! assert!(text.starts_with(r#"{"id": "00000000-0000-4000-8000-000000000001", "parent_session_ids": []"#));
//! ```
//!
//! A journal keeps every session recorded into it, strongly, in first-record ("stamp")
//! order; a session recorded again (same id, grown) replaces its entry in place. Unlike
//! Python's weak registry nothing is dropped. There is no process-global journal: a journal
//! is a value, and the flow layer's context holds one that sees every session a workflow
//! creates or returns.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use rath_session::{LineageKind, Session, SessionId, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::PersistError;
use crate::fast::put_str;
use crate::json::{PyFormatter, write_line};
use serde_json::ser::Formatter as _;

/// One exported session: exactly Python OpenRath's `session_to_jsonl_row` fields, in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LineageRow {
    /// Session id.
    pub id: SessionId,
    /// Parent ids.
    pub parent_session_ids: Vec<SessionId>,
    /// Operator name.
    pub lineage_operator: String,
    /// Lineage kind.
    pub lineage_kind: LineageKind,
    /// Extras as `[[key, value], ...]`.
    pub lineage_extras: Vec<(String, Value)>,
    /// Conversation chunks (what Python counts; evidence is not counted).
    pub chunk_count: u64,
    /// Cumulative usage, `null` when none was counted.
    pub cumulative_usage: Option<Usage>,
}

impl LineageRow {
    /// The row for `session`.
    pub fn from_session(session: &Session) -> Self {
        let l = session.lineage();
        LineageRow {
            id: session.id().clone(),
            parent_session_ids: l.parents.to_vec(),
            lineage_operator: l.operator.to_string(),
            lineage_kind: l.kind.clone(),
            lineage_extras: l.extras.clone(),
            chunk_count: session.conversation_len() as u64,
            cumulative_usage: session.usage(),
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    sessions: Vec<Session>,
    index: HashMap<SessionId, usize>,
}

/// Every session given to it, the latest version of each id, in first-record ("stamp")
/// order; its rows are the lineage export. Cloning shares the journal, so a workflow's
/// context can hold one while the caller keeps another (`rath_flow::FlowContext::journal`).
#[derive(Clone, Debug, Default)]
pub struct LineageJournal {
    inner: Arc<Mutex<Inner>>,
}

impl LineageJournal {
    /// An empty journal.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere while the lock was held leaves the journal whole: keep it, since
        // a failed run must keep what it got.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records `session`: a new entry, or the newer version of an earlier one (same id).
    /// Returns false when this very version was already the latest one recorded.
    pub fn record(&self, session: &Session) -> bool {
        let mut g = self.lock();
        match g.index.get(session.id()) {
            Some(&i) if same_version(&g.sessions[i], session) => false,
            Some(&i) => {
                g.sessions[i] = session.clone();
                true
            }
            None => {
                let i = g.sessions.len();
                g.index.insert(session.id().clone(), i);
                g.sessions.push(session.clone());
                true
            }
        }
    }

    /// The latest version of every recorded session, in stamp order.
    pub fn sessions(&self) -> Vec<Session> {
        self.lock().sessions.clone()
    }

    /// The latest recorded version of session `id`.
    pub fn get(&self, id: &SessionId) -> Option<Session> {
        let g = self.lock();
        g.index.get(id).map(|&i| g.sessions[i].clone())
    }

    /// Rows in stamp order.
    pub fn rows(&self) -> Vec<LineageRow> {
        self.lock()
            .sessions
            .iter()
            .map(LineageRow::from_session)
            .collect()
    }

    /// Ids in stamp order.
    pub fn visit_order(&self) -> Vec<SessionId> {
        self.lock()
            .sessions
            .iter()
            .map(|s| s.id().clone())
            .collect()
    }

    /// Number of sessions recorded.
    pub fn len(&self) -> usize {
        self.lock().sessions.len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The JSONL export of the journal.
    pub fn to_jsonl(&self) -> String {
        export_jsonl_string(&self.rows())
    }
}

/// True when `b` is the version of `a` already recorded: the same chunks (by identity, as
/// clones share them), lineage, usage, pending work and placement.
fn same_version(a: &Session, b: &Session) -> bool {
    a.id() == b.id()
        && a.len() == b.len()
        && a.chunks().ptr_eq(b.chunks())
        && a.usage() == b.usage()
        && a.agent_usage() == b.agent_usage()
        && a.pending() == b.pending()
        && a.lineage() == b.lineage()
        && a.placement().backend() == b.placement().backend()
        && a.placement().handle_id() == b.placement().handle_id()
}

// ------------------------------------------------------------------------------- exports

/// Rows as JSONL text, one Python-formatted line per row (`"\n"`-terminated).
pub fn export_jsonl_string(rows: &[LineageRow]) -> String {
    let mut out = Vec::with_capacity(rows.len() * 256);
    for r in rows {
        // LineageRow holds only strings, numbers and JSON values: serialising cannot fail.
        let _ = write_line(&mut out, r);
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// [`LineageRow`] borrowed from a session, so exporting copies nothing.
#[derive(Serialize)]
struct RowRef<'a> {
    id: &'a SessionId,
    parent_session_ids: &'a [SessionId],
    lineage_operator: &'a str,
    lineage_kind: &'a LineageKind,
    lineage_extras: &'a [(String, Value)],
    chunk_count: u64,
    cumulative_usage: Option<Usage>,
}

impl<'a> RowRef<'a> {
    fn of(s: &'a Session) -> Self {
        let l = s.lineage();
        RowRef {
            id: s.id(),
            parent_session_ids: &l.parents,
            lineage_operator: &l.operator,
            lineage_kind: &l.kind,
            lineage_extras: &l.extras,
            chunk_count: s.conversation_len() as u64,
            cumulative_usage: s.usage(),
        }
    }
}

impl RowRef<'_> {
    /// Appends this row as one Python-formatted JSON line: the seven fields written by hand
    /// (the same bytes as the serde path, tested), strings through serde_json's escaper.
    fn write_line(&self, out: &mut Vec<u8>) -> std::io::Result<()> {
        let mut f = PyFormatter;
        out.reserve(160 + 40 * self.parent_session_ids.len());
        out.extend_from_slice(b"{\"id\": ");
        put_str(out, self.id.as_str());
        out.extend_from_slice(b", \"parent_session_ids\": [");
        for (i, p) in self.parent_session_ids.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(b", ");
            }
            put_str(out, p.as_str());
        }
        out.extend_from_slice(b"], \"lineage_operator\": ");
        put_str(out, self.lineage_operator);
        out.extend_from_slice(b", \"lineage_kind\": ");
        match self.lineage_kind {
            LineageKind::Other(name) => put_str(out, name),
            // Built-in kind names are plain snake_case: nothing to escape.
            kind => {
                out.push(b'"');
                out.extend_from_slice(kind.as_str().as_bytes());
                out.push(b'"');
            }
        }
        out.extend_from_slice(b", \"lineage_extras\": ");
        if self.lineage_extras.is_empty() {
            out.extend_from_slice(b"[]");
        } else {
            let mut ser = serde_json::Serializer::with_formatter(&mut *out, PyFormatter);
            self.lineage_extras
                .serialize(&mut ser)
                .map_err(std::io::Error::other)?;
        }
        out.extend_from_slice(b", \"chunk_count\": ");
        f.write_u64(out, self.chunk_count)?;
        out.extend_from_slice(b", \"cumulative_usage\": ");
        match self.cumulative_usage {
            None => out.extend_from_slice(b"null"),
            Some(u) => {
                out.extend_from_slice(b"{\"prompt_tokens\": ");
                f.write_u64(out, u.prompt_tokens)?;
                out.extend_from_slice(b", \"completion_tokens\": ");
                f.write_u64(out, u.completion_tokens)?;
                out.extend_from_slice(b", \"total_tokens\": ");
                f.write_u64(out, u.total_tokens)?;
                out.push(b'}');
            }
        }
        out.extend_from_slice(b"}\n");
        Ok(())
    }
}

/// Writes rows of `sessions`, in the given order, as JSONL to `w`.
pub fn export_sessions<'a, W: Write>(
    sessions: impl IntoIterator<Item = &'a Session>,
    mut w: W,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(64 * 1024);
    for s in sessions {
        RowRef::of(s).write_line(&mut buf)?;
        if buf.len() >= 60 * 1024 {
            w.write_all(&buf)?;
            buf.clear();
        }
    }
    w.write_all(&buf)?;
    w.flush()
}

/// Writes the JSONL export of `sessions` to `path` (creating parent directories).
///
/// A regular file already at `path` is replaced by a new file rather than truncated and
/// rewritten: on ext4 (and XFS) closing a file that was truncated to zero starts writeback
/// of all of it at once (the "replace by truncate" heuristic), which cost more than writing
/// the rows did. Other names for the old file (hard links) keep its content; a symbolic link
/// at `path` is followed and its target rewritten in place, as before.
pub fn export_sessions_to_file<'a>(
    sessions: impl IntoIterator<Item = &'a Session>,
    path: &Path,
) -> Result<(), PersistError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| PersistError::io("mkdir", parent, e))?;
    }
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file()) {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(PersistError::io("replace", path, e)),
        }
    }
    let file = std::fs::File::create(path).map_err(|e| PersistError::io("create", path, e))?;
    export_sessions(sessions, file).map_err(|e| PersistError::io("write", path, e))
}

/// Parses a lineage JSONL export back into rows (blank lines skipped).
pub fn parse_lineage_jsonl(path: &Path, text: &str) -> Result<Vec<LineageRow>, PersistError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| PersistError::Corrupt {
                path: path.to_path_buf(),
                line: i + 1,
                message: format!("invalid lineage row: {e}"),
            })
        })
        .collect()
}

fn short(id: &SessionId) -> &str {
    let s = id.as_str();
    // Counter and UUID ids differ at the end (UUIDv7s start with the time, end in random bits).
    let n = s.chars().count();
    if n <= 12 {
        s
    } else {
        s.char_indices().nth(n - 8).map_or(s, |(i, _)| &s[i..])
    }
}

fn dot_escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A Graphviz DOT rendering: one box per row (short id, operator, kind, chunk count), an edge
/// per parent link; parents outside `rows` are drawn dashed.
pub fn to_dot(rows: &[LineageRow]) -> String {
    let known: std::collections::HashSet<&SessionId> = rows.iter().map(|r| &r.id).collect();
    let mut out = String::from(
        "digraph lineage {\n  rankdir=LR;\n  node [shape=box, fontname=\"monospace\"];\n",
    );
    let mut outside = Vec::new();
    for r in rows {
        let _ = writeln!(
            out,
            "  \"{}\" [label=\"{}\\n{}\\n{} · {} chunks\"];",
            dot_escape(r.id.as_str()),
            dot_escape(short(&r.id)),
            dot_escape(&r.lineage_operator),
            dot_escape(r.lineage_kind.as_str()),
            r.chunk_count
        );
        for p in &r.parent_session_ids {
            if !known.contains(p) && !outside.contains(&p) {
                outside.push(p);
            }
        }
    }
    for p in outside {
        let _ = writeln!(
            out,
            "  \"{}\" [label=\"{}\", style=dashed];",
            dot_escape(p.as_str()),
            dot_escape(short(p))
        );
    }
    for r in rows {
        for p in &r.parent_session_ids {
            let _ = writeln!(
                out,
                "  \"{}\" -> \"{}\";",
                dot_escape(p.as_str()),
                dot_escape(r.id.as_str())
            );
        }
    }
    out.push_str("}\n");
    out
}

fn mermaid_escape(s: &str) -> String {
    s.replace('"', "#quot;")
        .replace('<', "#lt;")
        .replace('>', "#gt;")
}

/// A Mermaid `flowchart` rendering of the same graph as [`to_dot`] (node names `s0`, `s1`, ...
/// in row order; outside parents `x0`, `x1`, ... drawn dashed).
pub fn to_mermaid(rows: &[LineageRow]) -> String {
    let mut names: HashMap<&SessionId, String> = HashMap::new();
    let mut out = String::from("flowchart LR\n");
    for (i, r) in rows.iter().enumerate() {
        names.entry(&r.id).or_insert_with(|| format!("s{i}"));
    }
    for r in rows {
        let _ = writeln!(
            out,
            "  {}[\"{}<br/>{}<br/>{} · {} chunks\"]",
            names[&r.id],
            mermaid_escape(short(&r.id)),
            mermaid_escape(&r.lineage_operator),
            mermaid_escape(r.lineage_kind.as_str()),
            r.chunk_count
        );
    }
    let mut extra = 0usize;
    let mut dashed = Vec::new();
    for r in rows {
        for p in &r.parent_session_ids {
            if !names.contains_key(p) {
                let name = format!("x{extra}");
                extra += 1;
                let _ = writeln!(out, "  {name}[\"{}\"]", mermaid_escape(short(p)));
                dashed.push(name.clone());
                names.insert(p, name);
            }
        }
    }
    for r in rows {
        for p in &r.parent_session_ids {
            let _ = writeln!(out, "  {} --> {}", names[p], names[&r.id]);
        }
    }
    for d in dashed {
        let _ = writeln!(out, "  style {d} stroke-dasharray: 5 5");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rath_session::Stamper;

    #[test]
    fn an_export_replaces_the_file_at_its_path_and_follows_a_symlink() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("lineage.jsonl");
        let linked = dir.path().join("other-name.jsonl");
        let big: Vec<Session> = (0..50)
            .map(|i| Session::user_with(format!("s{i}"), Stamper::counter()))
            .collect();
        let small = [Session::user_with("only", Stamper::counter())];
        export_sessions_to_file(&big, &path).expect("first export");
        std::fs::hard_link(&path, &linked).expect("hard link");
        export_sessions_to_file(&small, &path).expect("second export");
        let text = std::fs::read_to_string(&path).expect("read");
        let mut want = Vec::new();
        export_sessions(&small, &mut want).expect("in memory");
        assert_eq!(text.as_bytes(), want.as_slice());
        assert_eq!(
            std::fs::read_to_string(&linked)
                .expect("read link")
                .lines()
                .count(),
            50,
            "another name of the old file keeps the old export"
        );
        #[cfg(unix)]
        {
            let target = dir.path().join("target.jsonl");
            let via = dir.path().join("via-symlink.jsonl");
            std::fs::write(&target, "old\n").expect("write");
            std::os::unix::fs::symlink(&target, &via).expect("symlink");
            export_sessions_to_file(&small, &via).expect("export through the link");
            assert!(
                std::fs::symlink_metadata(&via)
                    .expect("meta")
                    .file_type()
                    .is_symlink()
            );
            assert_eq!(std::fs::read_to_string(&target).expect("read"), text);
        }
    }

    #[test]
    fn hand_written_export_rows_match_the_serde_path() {
        use rath_session::{Chunk, Lineage};
        let lineage = Lineage {
            parents: vec![SessionId::from("p\"1\u{2028}"), SessionId::from("p2")].into(),
            operator: "op\\é\n\u{1}".into(),
            kind: LineageKind::parse("merge"),
            extras: vec![
                (
                    "k".to_owned(),
                    serde_json::json!({"f": 1.5, "a": [1, null]}),
                ),
                ("\u{85}".to_owned(), Value::Null),
            ],
        };
        let a = Session::from_chunks(
            [Chunk::user("x"), Chunk::assistant_text("y")],
            lineage,
            Stamper::counter(),
        )
        .with_usage(Some("m"), Usage::new(10, 2));
        let b = Session::user_with("plain", Stamper::counter());
        for s in [&a, &b, &a.fork(), &b.detach()] {
            let mut hand = Vec::new();
            RowRef::of(s).write_line(&mut hand).expect("hand");
            let mut serde = Vec::new();
            write_line(&mut serde, &RowRef::of(s)).expect("serde");
            assert_eq!(
                String::from_utf8_lossy(&hand),
                String::from_utf8_lossy(&serde)
            );
        }
    }

    #[test]
    fn journal_keeps_every_session_in_stamp_order_and_updates_in_place() {
        let j = LineageJournal::new();
        let root = Session::user_with("q", Stamper::counter());
        assert!(j.record(&root));
        let f = root.fork();
        assert!(j.record(&f));
        assert!(!j.record(&f.clone()), "the same version again is not new");
        let grown = root.push(rath_session::Chunk::assistant_text("a"));
        assert!(j.record(&grown), "a newer version of root");
        let rows = j.rows();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].chunk_count, 2);
        assert_eq!(j.visit_order(), vec![root.id().clone(), f.id().clone()]);
        assert_eq!(j.get(root.id()).map(|s| s.len()), Some(2));
        assert_eq!(j.to_jsonl(), export_jsonl_string(&rows));
        let shared = j.clone();
        shared.record(&f.fork());
        assert_eq!(j.len(), 3, "clones share the journal");
    }

    #[test]
    fn graphs_name_every_node_and_edge() {
        let root = Session::user_with("q", Stamper::counter());
        let a = root.fork();
        let b = root.fork();
        let m = a.merge(&b).expect("merge");
        let rows: Vec<LineageRow> = [&a, &b, &m]
            .iter()
            .map(|s| LineageRow::from_session(s))
            .collect();
        let dot = to_dot(&rows);
        assert_eq!(dot.matches(" -> ").count(), 4);
        assert!(
            dot.contains("style=dashed"),
            "root is outside the rows: {dot}"
        );
        let mer = to_mermaid(&rows);
        assert!(mer.starts_with("flowchart LR\n"));
        assert_eq!(mer.matches(" --> ").count(), 4);
        assert!(mer.contains("x0[\""), "{mer}");
    }
}
