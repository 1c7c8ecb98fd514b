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
use crate::loader::{Item, LoadState, LoadedSession, Source, lines, parallel_split};
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
    if chunk.branch().is_none()
        && (crate::fast::write_conversation_chunk(&mut out, 0, chunk.body())
            || crate::fast::write_evidence_chunk(&mut out, 0, chunk.body()))
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

/// Decodes chunk documents joined by line breaks (`doc₀\ndoc₁\n…`, what one aggregate
/// query returns; empty input is no chunk) in order: the same chunks [`decode_chunk`] gives
/// one by one, without a buffer or a UTF-8 check per document, and on two threads for a large
/// input, as the JSONL loader parses a large file. An error names the chunk's position.
///
/// ```
/// use rath_persist::doc;
/// use rath_session::Chunk;
///
/// let chunks = [Chunk::user("hi"), Chunk::assistant_text("hello")];
/// let docs: Vec<Vec<u8>> = chunks.iter().map(doc::encode_chunk).collect::<Result<_, _>>()?;
/// let decoded = doc::decode_chunks(&docs.join(&b'\n'))?;
/// assert_eq!(decoded, chunks);
/// assert!(doc::decode_chunks(b"{\"kind\": \"user\"}\nnot json").is_err());
/// # Ok::<(), rath_persist::PersistError>(())
/// ```
pub fn decode_chunks(joined: &[u8]) -> Result<Vec<Chunk>, PersistError> {
    if joined.is_empty() {
        return Ok(Vec::new());
    }
    let count = memchr::memchr_iter(b'\n', joined).count() + 1;
    // The documents as the record lines of a file (each behind the record prefix), so the
    // loader's line reader and its direct path for conversation rows apply unchanged.
    let mut buf = Vec::with_capacity(joined.len() + count * RECORD_PREFIX.len());
    for (pos, d) in joined.split(|&b| b == b'\n').enumerate() {
        if d.first() != Some(&b'{') {
            return Err(doc_error(pos, "not a chunk document"));
        }
        buf.extend_from_slice(RECORD_PREFIX);
        buf.extend_from_slice(&d[1..]);
        buf.push(b'\n');
    }
    let src = Source {
        bytes: &buf,
        text: std::str::from_utf8(&buf).ok(),
    };
    let path = Path::new(DOC_PATH);
    let decode = |part: &[u8], first: usize| -> Result<Vec<Chunk>, PersistError> {
        let mut out = Vec::with_capacity(memchr::memchr_iter(b'\n', part).count());
        for (n, line) in lines(part) {
            let pos = first + n - 1;
            let line = line.ok_or_else(|| doc_error(pos, "not a chunk document"))?;
            match src.prepare(path, pos + 1, line) {
                Item::Chunk(Ok((chunk, _))) => out.push(chunk),
                Item::Chunk(Err(e)) => return Err(doc_error(pos, &e.to_string())),
                Item::Invalid(e) => {
                    return Err(doc_error(pos, &format!("invalid chunk document: {e}")));
                }
                Item::Blank | Item::Record(_) => {
                    return Err(doc_error(pos, "not a chunk document"));
                }
            }
        }
        Ok(out)
    };
    let split = parallel_split(&buf);
    let (first, second) = buf.split_at(split);
    if second.is_empty() {
        return decode(first, 0);
    }
    let first_count = memchr::memchr_iter(b'\n', first).count();
    let (head, tail) = std::thread::scope(|scope| {
        let worker = scope.spawn(|| decode(second, first_count));
        let head = decode(first, 0);
        let tail = worker
            .join()
            .map_err(|_| doc_error(first_count, "the decoding thread panicked"));
        (head, tail)
    });
    let mut out = head?;
    out.extend(tail??);
    Ok(out)
}

fn doc_error(pos: usize, message: &str) -> PersistError {
    PersistError::Corrupt {
        path: DOC_PATH.into(),
        line: pos + 1,
        message: format!("chunk {pos}: {message}"),
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

#[cfg(test)]
mod tests {
    use super::*;
    use rath_session::ToolCall;

    /// Enough documents to be decoded on two threads, of every row shape.
    fn docs(n: usize) -> (Vec<Chunk>, Vec<Vec<u8>>) {
        let chunks: Vec<Chunk> = (0..n)
            .map(|i| match i % 4 {
                0 => Chunk::user(format!("question {i} {}", "x".repeat(100))),
                1 => Chunk::assistant(
                    None,
                    Some(vec![ToolCall::function(
                        format!("call_{i}"),
                        "search",
                        format!("{{\"q\": {i}}}"),
                    )]),
                ),
                2 => Chunk::tool_result(format!("call_{}", i - 1), "search", "found \"it\""),
                _ if i % 8 == 3 => Chunk::note("agent", format!("evidence {i}")),
                _ => Chunk::assistant_text(format!("answer {i}")).with_branch("b"),
            })
            .collect();
        let docs = chunks
            .iter()
            .map(encode_chunk)
            .collect::<Result<_, _>>()
            .expect("encode");
        (chunks, docs)
    }

    #[test]
    fn joined_documents_decode_like_one_by_one_on_two_threads() {
        let (chunks, docs) = docs(4000);
        let joined = docs.join(&b'\n');
        assert!(
            joined.len() > 256 * 1024,
            "large enough for the parallel path"
        );
        assert_eq!(decode_chunks(&joined).expect("decode"), chunks);
        for (d, c) in docs.iter().zip(&chunks) {
            assert_eq!(&decode_chunk(d).expect("one"), c);
        }
    }

    #[test]
    fn a_bad_document_is_named_by_its_position_in_either_half() {
        let (_, mut docs) = docs(4000);
        for bad in [7, 3500] {
            let saved = std::mem::replace(&mut docs[bad], b"{\"kind\": 1}".to_vec());
            match decode_chunks(&docs.join(&b'\n')) {
                Err(PersistError::Corrupt { line, message, .. }) => {
                    assert_eq!(line, bad + 1, "{message}");
                    assert!(message.starts_with(&format!("chunk {bad}:")), "{message}");
                }
                other => panic!("a bad document must be refused: {other:?}"),
            }
            docs[bad] = saved;
        }
        assert!(decode_chunks(b"").expect("empty").is_empty());
        assert!(
            decode_chunks(b"{\"kind\": \"user\", \"payload\": {\"content\": \"a\"}}\n").is_err()
        );
    }
}
