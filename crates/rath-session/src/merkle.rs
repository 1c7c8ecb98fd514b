//! Tamper evidence in the value: chunk digests, the Merkle root over a session's chunks and
//! the session root that binds them to the session's lineage.
//!
//! ```
//! use rath_session::{Chunk, ChunkRoots, Session, Stamper, merkle};
//!
//! let s = Session::user_with("hi", Stamper::counter()).push(Chunk::assistant_text("hello"));
//! let fork = s.fork();
//! // The fork shares its parent's chunks, so it shares their Merkle root too.
//! assert_eq!(fork.chunks().merkle_root(), s.chunks().merkle_root());
//! // Its session root binds that to its lineage: the parent's root, operator and kind.
//! let parent = s.root(&[]);
//! assert_ne!(fork.root(&[parent]), parent);
//! // The same thing, one leaf at a time.
//! let mut acc = ChunkRoots::new();
//! for c in s.chunks() {
//!     acc.push(c.digest());
//! }
//! assert_eq!(acc.root(), s.chunks().merkle_root());
//! assert_eq!(merkle::hex(&acc.root()).len(), 64);
//! ```
//!
//! **Shape.** A list of `n` chunk digests is a Merkle mountain range: the perfect binary trees
//! of the binary expansion of `n`, largest first ("peaks"). Appending a leaf merges equal
//! peaks like a binary counter carries, so an append costs O(log n) hashes and the peaks a
//! list holds are at most 64 digests. The root hashes `n` and the peaks. The shape depends
//! only on `n`, never on how the list was built (a [`crate::ChunkList`]'s rope is balanced by
//! history; its Merkle root is not).
//!
//! **Hashes** (SHA-256, each input starts with a one-byte domain tag, so a leaf can never
//! pass for a node, nor a node for a root):
//! - leaf: the chunk's digest ([`crate::Chunk::digest`]), used as it is;
//! - node: `sha256(0x01 ‖ left ‖ right)`;
//! - chunks root: `sha256(0x02 ‖ n as u64 big-endian ‖ peak₁ ‖ … ‖ peakₖ)`;
//! - session root: `sha256(0x03 ‖ chunks root ‖ parents as u32 ‖ each parent's session
//!   root ‖ str(operator) ‖ str(kind) ‖ str(extras))`, where `str(x)` is the byte length of
//!   `x` as u32 big-endian then its UTF-8 bytes, `kind` is the lineage kind's stored name
//!   and `extras` the compact JSON of `[[k, v], ...]`.
//!
//! Parents' roots come from the caller (a store's seal ledger knows them; the value only
//! knows its parents' ids), so lineage is a Merkle DAG: changing any chunk of any ancestor
//! changes every descendant's root. A fork's root costs O(1) hashes given its parent's; the
//! chunks root is cached in the [`crate::ChunkList`] and shared by its clones.

use std::sync::Arc;

use sha2::{Digest as _, Sha256};

use crate::Lineage;

/// A SHA-256 digest: a chunk digest, a Merkle node or a root.
pub type Digest = [u8; 32];

const NODE: u8 = 0x01;
const CHUNKS: u8 = 0x02;
const SESSION: u8 = 0x03;

/// Lower-case hex of a digest.
pub fn hex(d: &Digest) -> String {
    hex::encode(d)
}

/// A digest from 64 hex digits (either case); `None` for anything else.
pub fn from_hex(s: &str) -> Option<Digest> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

fn node(left: &Digest, right: &Digest) -> Digest {
    let mut h = Sha256::new();
    h.update([NODE]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// The incremental Merkle root of a list of chunk digests (a Merkle mountain range's peaks).
/// Cloning shares the peaks; pushing copies at most 64 digests, so a clone pushed onto never
/// changes the original.
///
/// ```
/// use rath_session::ChunkRoots;
///
/// let mut a = ChunkRoots::new();
/// a.push([1; 32]);
/// let b = a.clone();
/// a.push([2; 32]);
/// assert_eq!((a.len(), b.len()), (2, 1));
/// assert_eq!(ChunkRoots::from_leaves([[1; 32], [2; 32]]).root(), a.root());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChunkRoots {
    len: u64,
    peaks: Arc<Vec<Digest>>,
}

impl ChunkRoots {
    /// The roots of the empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// The roots of `leaves` in order.
    pub fn from_leaves(leaves: impl IntoIterator<Item = Digest>) -> Self {
        let mut acc = Self::new();
        for leaf in leaves {
            acc.push(leaf);
        }
        acc
    }

    /// Leaves pushed.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when no leaf was pushed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends a leaf: O(log n) hashes, amortised O(1).
    pub fn push(&mut self, leaf: Digest) {
        let peaks = Arc::make_mut(&mut self.peaks);
        let mut carry = leaf;
        let mut n = self.len;
        // Each trailing one bit of `n` is a peak of the new leaf's height: merge it.
        while n & 1 == 1 {
            let Some(left) = peaks.pop() else { break };
            carry = node(&left, &carry);
            n >>= 1;
        }
        peaks.push(carry);
        self.len += 1;
    }

    /// The peaks, largest subtree first.
    pub fn peaks(&self) -> &[Digest] {
        &self.peaks
    }

    /// The Merkle root of the leaves.
    pub fn root(&self) -> Digest {
        let mut h = Sha256::new();
        h.update([CHUNKS]);
        h.update(self.len.to_be_bytes());
        for p in self.peaks.iter() {
            h.update(p);
        }
        h.finalize().into()
    }
}

fn put_str(h: &mut Sha256, s: &[u8]) {
    // A string longer than u32::MAX bytes is not a lineage field a store can hold; its
    // length saturates, which still binds its bytes (they follow).
    h.update(u32::try_from(s.len()).unwrap_or(u32::MAX).to_be_bytes());
    h.update(s);
}

/// The session root of a session whose chunks have Merkle root `chunks_root`, whose
/// parents' session roots are `parent_roots` (in its lineage's order) and whose lineage is
/// `lineage` (operator, kind and extras are bound; its parent ids are bound through
/// their roots).
pub fn session_root(chunks_root: &Digest, parent_roots: &[Digest], lineage: &Lineage) -> Digest {
    let mut h = Sha256::new();
    h.update([SESSION]);
    h.update(chunks_root);
    h.update(
        u32::try_from(parent_roots.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    for p in parent_roots {
        h.update(p);
    }
    put_str(&mut h, lineage.operator.as_bytes());
    put_str(&mut h, lineage.kind.as_str().as_bytes());
    let extras: Vec<(&str, &serde_json::Value)> = lineage
        .extras
        .iter()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    // A list of string/JSON pairs always serialises.
    let extras = serde_json::to_vec(&extras).unwrap_or_default();
    put_str(&mut h, &extras);
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Chunk, ChunkList, Lineage, LineageKind, Session, Stamper};

    fn leaves(n: u8) -> Vec<Digest> {
        (0..n).map(|i| [i; 32]).collect()
    }

    /// The tree the mountain range stands for, computed the slow way: split `n` into its
    /// powers of two, largest first, and hash each perfect tree recursively.
    fn naive_root(leaves: &[Digest]) -> Digest {
        fn perfect(l: &[Digest]) -> Digest {
            if l.len() == 1 {
                return l[0];
            }
            let (a, b) = l.split_at(l.len() / 2);
            node(&perfect(a), &perfect(b))
        }
        let mut peaks = Vec::new();
        let mut rest = leaves;
        while !rest.is_empty() {
            let size = 1usize << (usize::BITS - 1 - rest.len().leading_zeros());
            peaks.push(perfect(&rest[..size]));
            rest = &rest[size..];
        }
        let mut h = Sha256::new();
        h.update([CHUNKS]);
        h.update((leaves.len() as u64).to_be_bytes());
        for p in &peaks {
            h.update(p);
        }
        h.finalize().into()
    }

    #[test]
    fn incremental_root_equals_the_tree_it_stands_for() {
        for n in 0..70u8 {
            let l = leaves(n);
            let acc = ChunkRoots::from_leaves(l.iter().copied());
            assert_eq!(acc.root(), naive_root(&l), "n = {n}");
            assert_eq!(
                acc.peaks().len() as u32,
                u32::from(n).count_ones(),
                "n = {n}"
            );
        }
    }

    #[test]
    fn every_leaf_and_its_position_is_bound() {
        let l = leaves(9);
        let base = ChunkRoots::from_leaves(l.iter().copied()).root();
        let mut swapped = l.clone();
        swapped.swap(3, 4);
        assert_ne!(ChunkRoots::from_leaves(swapped).root(), base);
        let mut changed = l.clone();
        changed[8][31] ^= 1;
        assert_ne!(ChunkRoots::from_leaves(changed).root(), base);
        assert_ne!(ChunkRoots::from_leaves(l[..8].iter().copied()).root(), base);
    }

    /// Golden values: these bytes are a format. Changing the chunk canon, the tree shape or a
    /// domain tag changes them, and every seal ever written stops verifying. They were
    /// computed by a separate implementation (Python's `hashlib` and `json.dumps` with
    /// `separators=(",", ":")`, `ensure_ascii=False`) from the rules in the module docs.
    #[test]
    fn golden_digests_and_roots() {
        let chunks = [
            Chunk::system("You are careful."),
            Chunk::user("How many words in 'a b c'?"),
            Chunk::assistant_text("three"),
        ];
        let list: ChunkList = chunks.iter().cloned().collect();
        let digests: Vec<String> = chunks.iter().map(Chunk::sha256).collect();
        assert_eq!(
            digests,
            [
                "0b247078b37e10eab9e68ef33c2934f42d55c0e2ece2e63cf7d4d033d4084f32",
                "45cfeb76648d43664ad03408ffd4d01f992aea2d709700b1299ae02160b6880b",
                "e367dc2ad17f6f239073b5e4af665ec500a62d184a13b795dbbf43fbb8e829c9",
            ]
        );
        assert_eq!(
            hex(&ChunkRoots::new().root()),
            "4322fd2bc0a137d1375b37b3b2e2b4715b3d3dd7ca9682438d4fea0f8437fad3"
        );
        assert_eq!(
            hex(&list.merkle_root()),
            "195fc9c6748151f54248ed45c1b00e9ba4207bf3e1b312faf5b160f90d12b645"
        );
        let lineage = Lineage::new(
            Vec::<crate::SessionId>::new(),
            "create_user_session",
            LineageKind::LeafUser,
        );
        let root = session_root(&list.merkle_root(), &[], &lineage);
        assert_eq!(
            hex(&root),
            "034cdc147d745af57e0929d05ee00d3c52dd083e6d5dabbfdc390d58bc49198e"
        );
        let fork = Lineage::new(
            vec![crate::SessionId::new("p")],
            "Session.fork",
            LineageKind::OpFork,
        );
        assert_eq!(
            hex(&session_root(&list.merkle_root(), &[root], &fork)),
            "93efdc69c43193f68c922bca069f1f3802b4cabae7f412e8d087113c62ec815d"
        );
    }

    #[test]
    fn session_root_binds_parents_operator_kind_and_extras() {
        let s = Session::user_with("hi", Stamper::counter());
        let base = s.root(&[]);
        let fork = s.fork();
        assert_eq!(fork.chunks().merkle_root(), s.chunks().merkle_root());
        let a = fork.root(&[base]);
        assert_ne!(a, fork.root(&[[0; 32]]));
        assert_ne!(a, fork.root(&[]));
        let mut l = fork.lineage().clone();
        l.operator = "Session.detach".into();
        assert_ne!(session_root(&fork.chunks().merkle_root(), &[base], &l), a);
        let mut l = fork.lineage().clone();
        l.kind = LineageKind::OpDetach;
        assert_ne!(session_root(&fork.chunks().merkle_root(), &[base], &l), a);
        let mut l = fork.lineage().clone();
        l.extras.push(("k".into(), serde_json::json!(1)));
        assert_ne!(session_root(&fork.chunks().merkle_root(), &[base], &l), a);
    }

    #[test]
    fn cached_roots_follow_every_change_of_the_list() {
        let mut list: ChunkList = (0..130).map(|i| Chunk::user(i.to_string())).collect();
        let slow = |l: &ChunkList| ChunkRoots::from_leaves(l.iter().map(Chunk::digest)).root();
        assert_eq!(list.merkle_root(), slow(&list));
        // Cached now: pushes keep it up to date incrementally.
        let shared = list.clone();
        list.push_back(Chunk::assistant_text("x"));
        assert_eq!(list.merkle_root(), slow(&list));
        assert_eq!(shared.merkle_root(), slow(&shared));
        assert_ne!(shared.merkle_root(), list.merkle_root());
        let tail = list.split_off(100);
        assert_eq!(list.merkle_root(), slow(&list));
        assert_eq!(tail.merkle_root(), slow(&tail));
        list.append(tail.clone());
        assert_eq!(list.merkle_root(), slow(&list));
        let mut s = list.clone();
        let cut = s.slice(3..50);
        assert_eq!(cut.merkle_root(), slow(&cut));
        assert_eq!(s.merkle_root(), slow(&s));
        list.extend([Chunk::user("a"), Chunk::user("b")]);
        assert_eq!(list.merkle_root(), slow(&list));
    }
}
