//! A session file's chunks as stored, line by line, for a verifier
//! (`SessionStore::chunk_docs` of the JSONL store).
//!
//! Each chunk record is decoded alone and written again as the writer writes it (its index,
//! its conversation chunk, the evidence riding on it); a line that does not decode, or whose
//! bytes differ from that, makes every chunk it carries an `Err`, and the other lines are
//! still read. Evidence riding on the trailer must appear in it exactly as written. Chunks
//! are then put at their positions as the loader puts them (evidence at its `at`,
//! conversation chunks in the other positions in order), each as its chunk document.

use std::collections::BTreeMap;
use std::path::Path;

use rath_session::Chunk;

use crate::contract::StoredDoc;
use crate::doc;
use crate::loader::{Item, Source, is_blank};
use crate::record::{ExtIn, body_from_raw};
use crate::writer::evidence_out;

/// Evidence entries of an extension object as chunks with their positions.
fn evidence_of(ext: Option<&ExtIn>) -> Result<Vec<(u64, Chunk)>, String> {
    let Some(ext) = ext else {
        return Ok(Vec::new());
    };
    ext.evidence
        .iter()
        .map(|e| {
            let body = body_from_raw(&e.kind, e.payload.clone())?;
            let chunk = match &e.branch {
                Some(b) => Chunk::new(body).with_branch(b),
                None => Chunk::new(body),
            };
            Ok((e.at, chunk))
        })
        .collect()
}

/// The bytes the writer writes for conversation record `index` carrying `riding`.
fn chunk_line(index: u64, chunk: &Chunk, riding: &[(u64, Chunk)]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    crate::writer::write_chunk_record(&mut out, index, chunk, riding).ok()?;
    Some(out)
}

fn doc_of(chunk: &Chunk) -> StoredDoc {
    doc::encode_chunk(chunk).map_err(|e| e.to_string())
}

/// See the [module docs](self).
pub(crate) fn chunk_docs(path: &Path, bytes: &[u8]) -> Vec<StoredDoc> {
    let src = Source {
        bytes,
        text: std::str::from_utf8(bytes).ok(),
    };
    let mut conv: Vec<StoredDoc> = Vec::new();
    let mut evidence: BTreeMap<u64, StoredDoc> = BTreeMap::new();
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate().skip(1) {
        if is_blank(line) {
            continue;
        }
        let lineno = i + 1;
        let bad = |why: String| Err(format!("line {lineno}: {why}"));
        match src.prepare(path, lineno, line) {
            Item::Chunk(Ok((chunk, ext))) => {
                let riding = match evidence_of(ext.as_deref()) {
                    Ok(r) => r,
                    Err(why) => {
                        conv.push(bad(why));
                        continue;
                    }
                };
                let mut expected = chunk_line(conv.len() as u64, &chunk, &riding);
                if let Some(e) = &mut expected
                    && e.last() == Some(&b'\n')
                {
                    e.pop();
                }
                if expected.as_deref() == Some(line) {
                    conv.push(doc_of(&chunk));
                    for (at, c) in &riding {
                        evidence.insert(*at, doc_of(c));
                    }
                } else {
                    conv.push(bad("its bytes are not the record the writer writes".into()));
                    for (at, _) in &riding {
                        evidence.insert(*at, bad("rides on a changed record".into()));
                    }
                }
            }
            Item::Chunk(Err(e)) => conv.push(bad(e.to_string())),
            Item::Invalid(e) => conv.push(bad(e.to_string())),
            Item::Record(raw) if raw.record_type.as_deref() == Some("trailer") => {
                match evidence_of(raw.rath_ext.as_deref()) {
                    Ok(riding) => {
                        for (at, c) in riding {
                            let ok = crate::json::to_string(&evidence_out(at, &c))
                                .is_ok_and(|w| memchr::memmem::find(line, w.as_bytes()).is_some());
                            evidence.insert(
                                at,
                                if ok {
                                    doc_of(&c)
                                } else {
                                    bad("an evidence entry of the trailer changed".into())
                                },
                            );
                        }
                    }
                    Err(why) => conv.push(bad(why)),
                }
            }
            Item::Record(_) => conv.push(bad("not a chunk record".into())),
            Item::Blank => {}
        }
    }
    let total = conv.len() + evidence.len();
    let mut out = Vec::with_capacity(total);
    let mut conv = conv.into_iter();
    let mut ev = evidence.into_iter().peekable();
    for pos in 0..total as u64 {
        match ev.peek() {
            Some((at, _)) if *at <= pos => out.extend(ev.next().map(|(_, d)| d)),
            _ => match conv.next() {
                Some(d) => out.push(d),
                None => out.extend(ev.next().map(|(_, d)| d)),
            },
        }
    }
    out
}
