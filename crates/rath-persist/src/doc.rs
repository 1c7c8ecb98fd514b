//! A session as documents, for stores that are not a directory of files.
//!
//! A database store keeps a session the way it lives in memory: each chunk once, as a small
//! JSON document, and the session's own state (lineage, placement, usage, per-agent usage,
//! pending calls and the two timestamps) as the header and trailer lines its JSONL file would
//! have. These functions are the codec, so every store encodes exactly what the JSONL store
//! writes and reads it back through the same parser: a session loaded from any store and
//! saved to the JSONL directory gives the bytes the JSONL store would have written.
//!
//! ```
//! use rath_persist::doc;
//! use rath_session::{Chunk, Session, Stamper};
//!
//! let s = Session::user_with("hi", Stamper::counter()).push(Chunk::assistant_text("hello"));
//! let docs: Vec<Vec<u8>> = s.chunks().iter().map(doc::encode_chunk).collect::<Result<_, _>>()?;
//! assert_eq!(docs[0], br#"{"kind": "user", "payload": {"content": "hi"}}"#);
//! let created = s.stamper().now();
//! let header = doc::encode_header(&s, created)?;
//! let trailer = doc::encode_trailer(&s, s.stamper().now())?;
//! let chunks = docs.iter().map(|d| doc::decode_chunk(d)).collect::<Result<_, _>>()?;
//! let loaded = doc::assemble("db#s".as_ref(), &header, Some(&trailer), chunks)?;
//! assert_eq!(loaded.session.chunks(), s.chunks());
//! assert_eq!(loaded.created_at, created);
//! assert!(loaded.closed);
//! # Ok::<(), rath_persist::PersistError>(())
//! ```

use std::path::Path;

use rath_session::{Chunk, ChunkList, RunFailure, Session, Timestamp};

use crate::PersistError;
use crate::json::write_line;
use crate::loader::{Item, LoadState, LoadedSession, Source};
use crate::record::{ChunkOut, ExtOut, HeaderOut, PayloadRef, TrailerOut, state_ext};
use crate::store::SessionSummary;

/// What a chunk record starts with in a file; a chunk document is the record without it.
const RECORD_PREFIX: &[u8] = b"{\"record_type\": \"chunk\", \"index\": 0, ";

/// Where the codec's errors point: documents have no file.
const DOC_PATH: &str = "<chunk document>";

/// The document of one chunk: `{"kind": ..., "payload": ...}` (and `"rath_ext": {"branch":
/// ...}` for a tagged chunk), in Python's `json.dumps` layout, the same bytes whatever
/// session or position the chunk has (so equal chunks have equal documents). Conversation
/// and evidence chunks alike.
pub fn encode_chunk(chunk: &Chunk) -> Result<Vec<u8>, PersistError> {
    let mut out = Vec::with_capacity(64);
    if chunk.branch().is_none() && crate::fast::write_conversation_chunk(&mut out, 0, chunk.body())
    {
        // The direct writer wrote the whole record line.
    } else {
        out.clear();
        let ext = ExtOut {
            branch: chunk.branch(),
            ..ExtOut::default()
        };
        let record = ChunkOut {
            record_type: "chunk",
            index: 0,
            kind: chunk.kind().as_str(),
            payload: PayloadRef(chunk.body()),
            rath_ext: (!ext.is_empty()).then_some(ext),
        };
        write_line(&mut out, &record).map_err(|source| PersistError::Serialize {
            path: DOC_PATH.into(),
            source,
        })?;
    }
    if out.last() == Some(&b'\n') {
        out.pop();
    }
    debug_assert!(out.starts_with(RECORD_PREFIX));
    let mut doc = Vec::with_capacity(out.len() - RECORD_PREFIX.len() + 1);
    doc.push(b'{');
    doc.extend_from_slice(&out[RECORD_PREFIX.len()..]);
    Ok(doc)
}

/// Reads a chunk document written by [`encode_chunk`]. A damaged document is
/// [`PersistError::Corrupt`] (path `<chunk document>`, line 1), never a panic.
pub fn decode_chunk(doc: &[u8]) -> Result<Chunk, PersistError> {
    let corrupt = |message: &str| PersistError::Corrupt {
        path: DOC_PATH.into(),
        line: 1,
        message: message.to_owned(),
    };
    if doc.first() != Some(&b'{') || doc.contains(&b'\n') {
        return Err(corrupt("not a chunk document"));
    }
    let mut line = Vec::with_capacity(RECORD_PREFIX.len() + doc.len());
    line.extend_from_slice(RECORD_PREFIX);
    line.extend_from_slice(&doc[1..]);
    let src = Source {
        bytes: &line,
        text: std::str::from_utf8(&line).ok(),
    };
    match src.prepare(Path::new(DOC_PATH), 1, &line) {
        Item::Chunk(Ok((chunk, _))) => Ok(chunk),
        Item::Chunk(Err(e)) => Err(e),
        Item::Invalid(e) => Err(corrupt(&format!("invalid chunk document: {e}"))),
        Item::Blank | Item::Record(_) => Err(corrupt("not a chunk document")),
    }
}

/// The header line of `session`'s JSONL file (without the line break), with `created_at`.
pub fn encode_header(session: &Session, created_at: Timestamp) -> Result<Vec<u8>, PersistError> {
    line_of(&HeaderOut::new(session, created_at))
}

/// The trailer line of `session`'s JSONL file (without the line break), with `closed_at`:
/// `final_chunk_count`, cumulative usage, per-agent usage and pending calls. Evidence chunks
/// are not in it (a store keeps every chunk as a document).
pub fn encode_trailer(session: &Session, closed_at: Timestamp) -> Result<Vec<u8>, PersistError> {
    let ext = state_ext(session, &[]);
    let trailer = TrailerOut {
        record_type: "trailer",
        closed_at,
        final_chunk_count: session.conversation_len() as u64,
        cumulative_usage: session.usage(),
        rath_ext: (!ext.is_empty()).then_some(ext),
    };
    line_of(&trailer)
}

fn line_of<T: serde::Serialize>(record: &T) -> Result<Vec<u8>, PersistError> {
    let mut out = Vec::with_capacity(256);
    write_line(&mut out, record).map_err(|source| PersistError::Serialize {
        path: DOC_PATH.into(),
        source,
    })?;
    if out.last() == Some(&b'\n') {
        out.pop();
    }
    Ok(out)
}

/// Rebuilds a stored session from its header line, its trailer line (`None`: never closed,
/// like a crashed writer's `__partial__` file) and its chunks in order, with the JSONL
/// loader's checks and errors. `path` names the session in the result and in errors.
pub fn assemble(
    path: &Path,
    header: &[u8],
    trailer: Option<&[u8]>,
    chunks: ChunkList,
) -> Result<LoadedSession, PersistError> {
    let st = meta_state(path, header, trailer)?;
    st.finish_with(path, chunks)
}

/// The listing row of a stored session from its header and trailer lines and the counts a
/// store keeps beside them (`conversation` chunks, `evidence` chunks, and the run failure
/// that ends it, if any), without reading a chunk.
pub fn summarize(
    path: &Path,
    header: &[u8],
    trailer: Option<&[u8]>,
    conversation: u64,
    evidence: u64,
    failure: Option<RunFailure>,
) -> Result<SessionSummary, PersistError> {
    let loaded = assemble(path, header, trailer, ChunkList::new())?;
    let s = &loaded.session;
    Ok(SessionSummary {
        id: s.id().clone(),
        path: path.to_path_buf(),
        created_at: loaded.created_at,
        parents: s.lineage().parents.to_vec(),
        operator: s.lineage().operator.to_string(),
        kind: s.lineage().kind.clone(),
        extras: s.lineage().extras.clone(),
        chunk_count: conversation,
        evidence_count: evidence,
        closed: loaded.closed,
        crashed: !loaded.closed,
        usage: if loaded.closed { s.usage() } else { None },
        failure,
    })
}

fn meta_state(
    path: &Path,
    header: &[u8],
    trailer: Option<&[u8]>,
) -> Result<LoadState, PersistError> {
    let mut st = LoadState::default();
    let lines = [Some(header), trailer];
    for (n, line) in lines.into_iter().flatten().enumerate() {
        if line.contains(&b'\n') {
            return Err(PersistError::Corrupt {
                path: path.to_path_buf(),
                line: n + 1,
                message: "a stored header or trailer holds a line break".to_owned(),
            });
        }
        let src = Source {
            bytes: line,
            text: std::str::from_utf8(line).ok(),
        };
        let item = src.prepare(path, n + 1, line);
        if n == 0 && !matches!(&item, Item::Record(r) if r.record_type.as_deref() == Some("header"))
        {
            return Err(PersistError::MissingHeader {
                path: path.to_path_buf(),
            });
        }
        if n == 1
            && !matches!(&item, Item::Record(r) if r.record_type.as_deref() == Some("trailer"))
        {
            return Err(PersistError::Structure {
                path: path.to_path_buf(),
                line: 2,
                message: "the stored trailer is not a trailer record".to_owned(),
            });
        }
        st.apply(path, n + 1, item)?;
    }
    Ok(st)
}
