//! Optional vector recall: the [`Embedder`] trait and a deterministic test embedder.
//!
//! ```
//! use rath_memory::{Embedder, HashEmbedder};
//!
//! let e = HashEmbedder::new(64);
//! let v = e.embed(&["kettle descaling", "descaling kettle"])?;
//! assert_eq!(v[0].len(), 64);
//! assert!((rath_memory::cosine(&v[0], &v[1]) - 1.0).abs() < 1e-6);
//! # Ok::<(), rath_memory::MemoryError>(())
//! ```
//!
//! An OpenAI-compatible `/v1/embeddings` embedder is an adapter over the provider crate and so
//! belongs in a crate above both (rath-flow or openrath); it implements this trait.

use std::fmt;

use sha2::{Digest, Sha256};

use crate::MemoryError;
use crate::index::tokenize;

/// Turns texts into vectors for hybrid recall. Implementations must be deterministic for a
/// given model if recall is to be reproducible.
pub trait Embedder: Send + Sync + fmt::Debug {
    /// A name for the model, recorded nowhere secret (for example `hash-bow-64` or
    /// `text-embedding-3-small`).
    fn id(&self) -> &str;

    /// One vector per text, all the same length.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, MemoryError>;
}

/// A hashed bag-of-words embedder: each term adds ±1 to a bucket chosen by its sha256, and the
/// vector is L2-normalised. Deterministic and dependency-free; for tests and offline runs.
#[derive(Clone, Debug)]
pub struct HashEmbedder {
    dims: usize,
    id: String,
}

impl HashEmbedder {
    /// An embedder producing `dims`-dimensional vectors (at least 1).
    pub fn new(dims: usize) -> Self {
        let dims = dims.max(1);
        Self {
            dims,
            id: format!("hash-bow-{dims}"),
        }
    }
}

impl Embedder for HashEmbedder {
    fn id(&self) -> &str {
        &self.id
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, MemoryError> {
        Ok(texts
            .iter()
            .map(|text| {
                let mut v = vec![0f32; self.dims];
                for term in tokenize(text) {
                    let d = Sha256::digest(term.as_bytes());
                    let h = u64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]]);
                    let bucket = (h % self.dims as u64) as usize;
                    v[bucket] += if d[8] & 1 == 0 { 1.0 } else { -1.0 };
                }
                normalize(&mut v);
                v
            })
            .collect())
    }
}

pub(crate) fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// Cosine similarity of two vectors (0 when either is zero or the lengths differ).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na * nb)
    }
}
