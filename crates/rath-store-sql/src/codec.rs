//! What the SQL stores compute before they touch the database: chunk documents, their
//! content addresses, the chain digests that say whether one session's chunks start with
//! another's, and the session's header and trailer lines.

use rath_persist::{PersistError, doc};
use rath_session::{Chunk, Session, Timestamp};
use sha2::{Digest, Sha256};

/// Bytes of a chunk's content address (a truncated SHA-256 of its document).
pub(crate) const HASH_LEN: usize = 16;

/// One chunk ready to store.
pub(crate) struct EncodedChunk {
    pub(crate) hash: Vec<u8>,
    pub(crate) doc: String,
}

/// The content address of a chunk document.
pub(crate) fn chunk_hash(doc: &[u8]) -> Vec<u8> {
    Sha256::digest(doc)[..HASH_LEN].to_vec()
}

/// The chain digest after one more chunk: `sha256(previous || chunk hash)`. The digest of the
/// empty list is 32 zero bytes; equal digests mean equal chunk lists.
pub(crate) fn extend_digest(previous: &[u8], hash: &[u8]) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update(previous);
    h.update(hash);
    h.finalize().to_vec()
}

/// The digest of the empty chunk list.
pub(crate) fn empty_digest() -> Vec<u8> {
    vec![0; 32]
}

/// Encodes chunks `[from..]` of `session`.
pub(crate) fn encode_from(
    session: &Session,
    from: usize,
) -> Result<Vec<EncodedChunk>, PersistError> {
    let tail = session.chunks().clone().slice(from..);
    tail.iter().map(encode_one).collect()
}

pub(crate) fn encode_one(chunk: &Chunk) -> Result<EncodedChunk, PersistError> {
    let bytes = doc::encode_chunk(chunk)?;
    let hash = chunk_hash(&bytes);
    let doc = String::from_utf8(bytes).map_err(|e| PersistError::Corrupt {
        path: "<chunk document>".into(),
        line: 1,
        message: format!("a chunk document is not UTF-8: {e}"),
    })?;
    Ok(EncodedChunk { hash, doc })
}

/// The chain digests of every prefix: `out[k]` is the digest of the first `k` chunks.
pub(crate) fn prefix_digests(start: Vec<u8>, chunks: &[EncodedChunk]) -> Vec<Vec<u8>> {
    let mut out = Vec::with_capacity(chunks.len() + 1);
    out.push(start);
    for c in chunks {
        let next = extend_digest(out.last().map_or(&[][..], Vec::as_slice), &c.hash);
        out.push(next);
    }
    out
}

/// The session state a store keeps beside its chunks: the header and trailer lines, and a
/// hash of both without their timestamps plus the chunk digest (equal hashes: the same
/// session, as the JSONL store's "saving it again is a no-op" rule sees it).
pub(crate) struct EncodedState {
    pub(crate) header: String,
    pub(crate) trailer: Option<String>,
    pub(crate) content: Vec<u8>,
    pub(crate) failure: Option<String>,
    pub(crate) conversation: i64,
    pub(crate) evidence: i64,
}

pub(crate) fn encode_state(
    session: &Session,
    created_at: Timestamp,
    closed_at: Option<Timestamp>,
    digest: &[u8],
) -> Result<EncodedState, PersistError> {
    let text = |b: Vec<u8>| {
        String::from_utf8(b).map_err(|e| PersistError::Corrupt {
            path: "<session state>".into(),
            line: 1,
            message: format!("not UTF-8: {e}"),
        })
    };
    let epoch = Timestamp::from_unix_micros(0);
    let mut h = Sha256::new();
    h.update(digest);
    h.update(doc::encode_header(session, epoch)?);
    h.update(b"\n");
    h.update(doc::encode_trailer(session, epoch)?);
    let failure = match session.failure() {
        Some(f) => Some(
            serde_json::to_string(f).map_err(|source| PersistError::Serialize {
                path: "<session state>".into(),
                source,
            })?,
        ),
        None => None,
    };
    let conversation = session.conversation_len() as i64;
    Ok(EncodedState {
        header: text(doc::encode_header(session, created_at)?)?,
        trailer: match closed_at {
            Some(t) => Some(text(doc::encode_trailer(session, t)?)?),
            None => None,
        },
        content: h.finalize().to_vec(),
        failure,
        conversation,
        evidence: session.len() as i64 - conversation,
    })
}

/// Lowercase hex of `bytes` (how the set-based group writes pass binary values in JSON).
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

/// Chunks per segment row at most (a save of more writes several).
pub(crate) const SEGMENT_CHUNKS: usize = 1024;

/// A segment's stored value: the chunk documents joined by line breaks, deflated (a zlib
/// stream) when that is smaller. A chunk document is a JSON object, so a stored value that
/// starts with `{` is the plain text and any other is deflated.
pub(crate) fn encode_segment(chunks: &[EncodedChunk]) -> Vec<u8> {
    let mut plain = Vec::with_capacity(chunks.iter().map(|c| c.doc.len() + 1).sum());
    for (i, c) in chunks.iter().enumerate() {
        if i > 0 {
            plain.push(b'\n');
        }
        plain.extend_from_slice(c.doc.as_bytes());
    }
    pack_segment(plain)
}

/// A segment's stored value from its documents already joined by line breaks.
pub(crate) fn pack_segment(plain: Vec<u8>) -> Vec<u8> {
    match deflate(&plain) {
        Some(packed) if packed.len() < plain.len() => packed,
        _ => plain,
    }
}

thread_local! {
    /// One zlib compressor per thread, reset between segments: a fresh one allocates and
    /// zeroes a few hundred kilobytes of state, more than a small segment costs to deflate.
    static DEFLATE: std::cell::RefCell<flate2::Compress> =
        std::cell::RefCell::new(flate2::Compress::new(flate2::Compression::default(), true));
}

/// `plain` as a zlib stream at the default level (`None` should the compressor fail).
fn deflate(plain: &[u8]) -> Option<Vec<u8>> {
    DEFLATE.with(|z| {
        let mut z = z.try_borrow_mut().ok()?;
        z.reset();
        let mut out = Vec::with_capacity(plain.len() / 2 + 64);
        loop {
            let read = usize::try_from(z.total_in()).ok()?;
            let status = z
                .compress_vec(&plain[read..], &mut out, flate2::FlushCompress::Finish)
                .ok()?;
            match status {
                flate2::Status::StreamEnd => return Some(out),
                _ => out.reserve(out.capacity().max(64)),
            }
        }
    })
}

/// Appends a segment's documents (see [`encode_segment`]) to `out`; `Err` names what is
/// wrong with a stored value that is neither.
pub(crate) fn decode_segment(stored: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    use std::io::Read as _;
    match stored.first() {
        Some(b'{') => {
            out.extend_from_slice(stored);
            Ok(())
        }
        Some(_) => flate2::read::ZlibDecoder::new(stored)
            .read_to_end(out)
            .map(|_| ())
            .map_err(|e| format!("a segment does not inflate: {e}")),
        None => Err("an empty segment".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `deflate` replaced: a fresh `ZlibEncoder` per segment.
    fn fresh(plain: &[u8]) -> Vec<u8> {
        use std::io::Write as _;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(plain).expect("write to a Vec");
        z.finish().expect("finish to a Vec")
    }

    #[test]
    fn the_reused_compressor_writes_the_bytes_a_fresh_one_writes() {
        let mut inputs: Vec<Vec<u8>> = vec![Vec::new(), b"{}".to_vec()];
        for n in [10usize, 1_000, 6_000] {
            let text: String = (0..n)
                .map(|i| {
                    format!(
                        "{{\"kind\":\"user\",\"content\":\"message {}\"}}\n",
                        i * 7919 % 1013
                    )
                })
                .collect();
            inputs.push(text.into_bytes());
        }
        // Twice over, so every input after the first goes through a compressor reset.
        for _ in 0..2 {
            for plain in &inputs {
                let packed = deflate(plain).expect("deflate");
                assert_eq!(packed, fresh(plain), "{} bytes in", plain.len());
                let mut back = Vec::new();
                decode_segment(&packed, &mut back).expect("inflate");
                assert_eq!(&back, plain);
            }
        }
    }
}
