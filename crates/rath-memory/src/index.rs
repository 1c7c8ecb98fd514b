//! A small in-memory inverted index with BM25 ranking, one per scope.
//!
//! It is derived state: the store rebuilds it from the log on open and can rebuild it at any
//! time. Deleting a document marks its slot dead and corrects the document frequencies; dead
//! postings are skipped at query time and dropped when the store compacts.

use std::cmp::Ordering;
use std::collections::HashMap;

/// BM25 term-frequency saturation.
const K1: f32 = 1.2;
/// BM25 length normalisation.
const B: f32 = 0.75;

/// Splits text into lowercase alphanumeric terms (Unicode-aware), at most 64 bytes each.
pub fn tokenize(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(|t| {
            let mut s = t.to_lowercase();
            if s.len() > 64 {
                let mut cut = 64;
                while !s.is_char_boundary(cut) {
                    cut -= 1;
                }
                s.truncate(cut);
            }
            s
        })
}

#[derive(Clone, Copy, Debug)]
struct Posting {
    doc: u32,
    tf: u32,
}

#[derive(Clone, Copy, Debug)]
struct Doc {
    len: u32,
    live: bool,
}

/// The BM25 index of one scope.
#[derive(Debug, Default)]
pub(crate) struct Bm25Index {
    terms: HashMap<Box<str>, u32>,
    postings: Vec<Vec<Posting>>,
    df: Vec<u32>,
    docs: Vec<Doc>,
    live: u32,
    total_len: u64,
}

impl Bm25Index {
    /// Adds a document, returning its slot.
    pub(crate) fn add(&mut self, text: &str) -> u32 {
        let slot = u32::try_from(self.docs.len()).unwrap_or(u32::MAX);
        // Sorted, so postings are appended in a reproducible order; runs give term counts.
        let mut tokens: Vec<String> = tokenize(text).collect();
        let len = u32::try_from(tokens.len()).unwrap_or(u32::MAX);
        tokens.sort_unstable();
        let mut counts: Vec<(String, u32)> = Vec::new();
        for t in tokens {
            match counts.last_mut() {
                Some((last, n)) if *last == t => *n += 1,
                _ => counts.push((t, 1)),
            }
        }
        for (term, tf) in counts {
            let id = match self.terms.get(term.as_str()) {
                Some(&id) => id,
                None => {
                    let id = u32::try_from(self.postings.len()).unwrap_or(u32::MAX);
                    self.terms.insert(term.into_boxed_str(), id);
                    self.postings.push(Vec::new());
                    self.df.push(0);
                    id
                }
            };
            self.postings[id as usize].push(Posting { doc: slot, tf });
            self.df[id as usize] += 1;
        }
        self.docs.push(Doc { len, live: true });
        self.live += 1;
        self.total_len += u64::from(len);
        slot
    }

    /// Marks `slot` (which held `text`) dead.
    pub(crate) fn remove(&mut self, slot: u32, text: &str) {
        let Some(doc) = self.docs.get_mut(slot as usize) else {
            return;
        };
        if !doc.live {
            return;
        }
        doc.live = false;
        self.live -= 1;
        self.total_len -= u64::from(doc.len);
        let mut seen: Vec<String> = tokenize(text).collect();
        seen.sort_unstable();
        seen.dedup();
        for term in seen {
            if let Some(&id) = self.terms.get(term.as_str()) {
                self.df[id as usize] = self.df[id as usize].saturating_sub(1);
            }
        }
    }

    /// Number of live documents.
    pub(crate) fn live(&self) -> usize {
        self.live as usize
    }

    /// Number of slots, dead ones included.
    pub(crate) fn slots(&self) -> usize {
        self.docs.len()
    }

    /// The `k` best live slots for `query_terms` (deduplicated by the caller), best first;
    /// equal scores are ordered by `tie`.
    pub(crate) fn search(
        &self,
        query_terms: &[String],
        k: usize,
        tie: impl Fn(u32, u32) -> Ordering,
    ) -> Vec<(u32, f32)> {
        if k == 0 || self.live == 0 {
            return Vec::new();
        }
        let n = self.live as f32;
        let avgdl = (self.total_len as f32 / n).max(1.0);
        let mut acc = vec![0f32; self.docs.len()];
        let mut touched: Vec<u32> = Vec::new();
        for term in query_terms {
            let Some(&id) = self.terms.get(term.as_str()) else {
                continue;
            };
            let df = self.df[id as usize] as f32;
            if df == 0.0 {
                continue;
            }
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for p in &self.postings[id as usize] {
                let doc = self.docs[p.doc as usize];
                if !doc.live {
                    continue;
                }
                let tf = p.tf as f32;
                let norm = K1 * (1.0 - B + B * doc.len as f32 / avgdl);
                let slot = &mut acc[p.doc as usize];
                if *slot == 0.0 {
                    touched.push(p.doc);
                }
                *slot += idf * tf * (K1 + 1.0) / (tf + norm);
            }
        }
        let cmp = |a: &u32, b: &u32| {
            acc[*b as usize]
                .total_cmp(&acc[*a as usize])
                .then_with(|| tie(*a, *b))
        };
        if touched.len() > k {
            touched.select_nth_unstable_by(k - 1, cmp);
            touched.truncate(k);
        }
        touched.sort_unstable_by(cmp);
        touched.into_iter().map(|d| (d, acc[d as usize])).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizes_unicode_and_case() {
        let t: Vec<String> = tokenize("Héllo, WORLD! foo_bar 42").collect();
        assert_eq!(t, ["héllo", "world", "foo", "bar", "42"]);
    }

    #[test]
    fn rare_terms_outrank_common_ones() {
        let mut ix = Bm25Index::default();
        let a = ix.add("the cat sat");
        let b = ix.add("the dog sat");
        let _ = ix.add("the bird sat");
        let hits = ix.search(&["the".into(), "dog".into()], 3, |x, y| x.cmp(&y));
        assert_eq!(hits[0].0, b);
        ix.remove(b, "the dog sat");
        let hits = ix.search(&["dog".into()], 3, |x, y| x.cmp(&y));
        assert!(hits.is_empty());
        assert_eq!(ix.live(), 2);
        let hits = ix.search(&["cat".into()], 3, |x, y| x.cmp(&y));
        assert_eq!(hits[0].0, a);
    }
}
