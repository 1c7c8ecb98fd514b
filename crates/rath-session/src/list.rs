//! `ChunkList`: the persistent sequence a session's chunks live in.
//!
//! ```
//! use rath_session::{Chunk, ChunkList};
//!
//! let mut a: ChunkList = (0..100).map(|i| Chunk::user(i.to_string())).collect();
//! let b = a.clone();                     // O(1): shares every node
//! a.append(b.clone());                   // O(1) for equal heights, O(log n) otherwise
//! assert_eq!(a.len(), 200);
//! assert_eq!(a[150].text(), Some("50"));
//! let tail = a.split_off(190);           // O(log n)
//! assert_eq!(tail.len(), 10);
//! ```
//!
//! A height-balanced (AVL) concatenation tree whose leaves hold up to [`LEAF_MAX`] chunks.
//! Cloning copies one pointer; concatenating two trees of similar height allocates one node,
//! which is why `merge` stays flat from 10³ to 10⁶ chunks; splitting and indexing walk one path.
//! Nodes are reference-counted and copied on write, so a push onto a fork never disturbs the
//! session it was forked from.

use std::fmt;
use std::ops::{Bound, Index, RangeBounds};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::Chunk;
use crate::merkle::{ChunkRoots, Digest};

/// Most chunks a leaf holds.
pub const LEAF_MAX: usize = 64;

type Link = Arc<Node>;

#[derive(Clone)]
enum Node {
    Leaf(Vec<Chunk>),
    Branch {
        left: Link,
        right: Link,
        len: usize,
        height: u8,
    },
}

impl Node {
    fn len(&self) -> usize {
        match self {
            Node::Leaf(v) => v.len(),
            Node::Branch { len, .. } => *len,
        }
    }

    fn height(&self) -> u8 {
        match self {
            Node::Leaf(_) => 0,
            Node::Branch { height, .. } => *height,
        }
    }
}

fn branch(left: Link, right: Link) -> Link {
    let len = left.len() + right.len();
    let height = left.height().max(right.height()) + 1;
    Arc::new(Node::Branch {
        left,
        right,
        len,
        height,
    })
}

fn children(node: &Link) -> Option<(Link, Link)> {
    match &**node {
        Node::Branch { left, right, .. } => Some((left.clone(), right.clone())),
        Node::Leaf(_) => None,
    }
}

fn rotate_left(node: Link) -> Link {
    match children(&node) {
        Some((l, r)) => match children(&r) {
            Some((rl, rr)) => branch(branch(l, rl), rr),
            None => node,
        },
        None => node,
    }
}

fn rotate_right(node: Link) -> Link {
    match children(&node) {
        Some((l, r)) => match children(&l) {
            Some((ll, lr)) => branch(ll, branch(lr, r)),
            None => node,
        },
        None => node,
    }
}

/// Concatenates two non-empty trees, keeping the AVL balance.
fn join(l: Link, r: Link) -> Link {
    if let (Node::Leaf(a), Node::Leaf(b)) = (&*l, &*r)
        && a.len() + b.len() <= LEAF_MAX
    {
        let mut v = Vec::with_capacity(a.len() + b.len());
        v.extend_from_slice(a);
        v.extend_from_slice(b);
        return Arc::new(Node::Leaf(v));
    }
    let (hl, hr) = (l.height(), r.height());
    if hl > hr + 1 {
        join_right(l, r)
    } else if hr > hl + 1 {
        join_left(l, r)
    } else {
        branch(l, r)
    }
}

// l is taller than r by two or more, so l is a branch.
fn join_right(l: Link, r: Link) -> Link {
    let Some((ll, lr)) = children(&l) else {
        return branch(l, r);
    };
    if lr.height() <= r.height() + 1 {
        let t = join(lr, r);
        if t.height() <= ll.height() + 1 {
            branch(ll, t)
        } else {
            rotate_left(branch(ll, rotate_right(t)))
        }
    } else {
        let t = join_right(lr, r);
        let th = t.height();
        let out = branch(ll.clone(), t);
        if th <= ll.height() + 1 {
            out
        } else {
            rotate_left(out)
        }
    }
}

// r is taller than l by two or more, so r is a branch.
fn join_left(l: Link, r: Link) -> Link {
    let Some((rl, rr)) = children(&r) else {
        return branch(l, r);
    };
    if rl.height() <= l.height() + 1 {
        let t = join(l, rl);
        if t.height() <= rr.height() + 1 {
            branch(t, rr)
        } else {
            rotate_right(branch(rotate_left(t), rr))
        }
    } else {
        let t = join_left(l, rl);
        let th = t.height();
        let out = branch(t, rr.clone());
        if th <= rr.height() + 1 {
            out
        } else {
            rotate_right(out)
        }
    }
}

fn join_opt(l: Option<Link>, r: Option<Link>) -> Option<Link> {
    match (l, r) {
        (None, x) | (x, None) => x,
        (Some(a), Some(b)) => Some(join(a, b)),
    }
}

fn leaf(v: Vec<Chunk>) -> Option<Link> {
    if v.is_empty() {
        None
    } else {
        Some(Arc::new(Node::Leaf(v)))
    }
}

/// Splits into `[0, at)` and `[at, len)`.
fn split(node: &Link, at: usize) -> (Option<Link>, Option<Link>) {
    if at == 0 {
        return (None, Some(node.clone()));
    }
    if at >= node.len() {
        return (Some(node.clone()), None);
    }
    match &**node {
        Node::Leaf(v) => (leaf(v[..at].to_vec()), leaf(v[at..].to_vec())),
        Node::Branch { left, right, .. } => {
            let ll = left.len();
            if at < ll {
                let (a, b) = split(left, at);
                (a, join_opt(b, Some(right.clone())))
            } else {
                let (a, b) = split(right, at - ll);
                (join_opt(Some(left.clone()), a), b)
            }
        }
    }
}

/// Pushes onto the rightmost leaf in place when it has room; returns the chunk otherwise.
fn push_in_place(node: &mut Link, chunk: Chunk) -> Result<(), Chunk> {
    match Arc::make_mut(node) {
        Node::Leaf(v) => {
            v.push(chunk);
            Ok(())
        }
        Node::Branch { right, len, .. } => {
            push_in_place(right, chunk)?;
            *len += 1;
            Ok(())
        }
    }
}

fn rightmost_leaf_len(mut node: &Link) -> usize {
    loop {
        match &**node {
            Node::Leaf(v) => return v.len(),
            Node::Branch { right, .. } => node = right,
        }
    }
}

/// A persistent sequence of chunks with O(1) clone, cheap concatenation and O(log n) access.
#[derive(Clone, Default)]
pub struct ChunkList {
    root: Option<Link>,
    /// The Merkle roots of the chunks' digests, once asked for; kept up to date by pushes
    /// (O(log n) each) and dropped by any other change, which asks again from scratch.
    /// Clones share it, so a fork never hashes its prefix again.
    roots: OnceLock<ChunkRoots>,
}

impl ChunkList {
    /// An empty list.
    pub fn new() -> Self {
        Self {
            root: None,
            roots: OnceLock::new(),
        }
    }

    /// The incremental Merkle roots of the chunks' digests (see [`crate::merkle`]): computed
    /// on first use, then cached in this list and its clones and kept up to date by
    /// [`ChunkList::push_back`] and [`Extend`].
    pub fn chunk_roots(&self) -> &ChunkRoots {
        self.roots
            .get_or_init(|| ChunkRoots::from_leaves(self.iter().map(Chunk::digest)))
    }

    /// The Merkle root over the chunks' digests in order (see [`crate::merkle`]).
    pub fn merkle_root(&self) -> Digest {
        self.chunk_roots().root()
    }

    /// Number of chunks.
    pub fn len(&self) -> usize {
        self.root.as_ref().map_or(0, |r| r.len())
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.root.is_none()
    }

    /// The chunk at `index`.
    pub fn get(&self, mut index: usize) -> Option<&Chunk> {
        let mut node = self.root.as_ref()?;
        if index >= node.len() {
            return None;
        }
        loop {
            match &**node {
                Node::Leaf(v) => return v.get(index),
                Node::Branch { left, right, .. } => {
                    let ll = left.len();
                    if index < ll {
                        node = left;
                    } else {
                        index -= ll;
                        node = right;
                    }
                }
            }
        }
    }

    /// The first chunk.
    pub fn first(&self) -> Option<&Chunk> {
        self.get(0)
    }

    /// The last chunk.
    pub fn last(&self) -> Option<&Chunk> {
        self.len().checked_sub(1).and_then(|i| self.get(i))
    }

    /// Appends a chunk: in place when this list owns its right spine, O(log n) otherwise.
    pub fn push_back(&mut self, chunk: Chunk) {
        if let Some(mut roots) = self.roots.take() {
            roots.push(chunk.digest());
            self.roots = OnceLock::from(roots);
        }
        match &mut self.root {
            None => self.root = leaf(vec![chunk]),
            Some(root) => {
                let chunk = if rightmost_leaf_len(root) < LEAF_MAX {
                    match push_in_place(root, chunk) {
                        Ok(()) => return,
                        Err(c) => c,
                    }
                } else {
                    chunk
                };
                let new_leaf = Arc::new(Node::Leaf(vec![chunk]));
                self.root = Some(join(root.clone(), new_leaf));
            }
        }
    }

    /// Moves every chunk of `other` to the end of this list.
    pub fn append(&mut self, other: ChunkList) {
        // A short tail (a loop round's chunks) keeps the cached roots current; a long one
        // (a merge) drops them rather than hash it now.
        if let Some(mut roots) = self.roots.take()
            && other.len() <= LEAF_MAX
        {
            for c in &other {
                roots.push(c.digest());
            }
            self.roots = OnceLock::from(roots);
        }
        self.root = join_opt(self.root.take(), other.root);
    }

    /// Splits the list at `at`: `self` keeps `[0, at)`, the returned list holds the rest.
    /// `at` past the end is clamped.
    pub fn split_off(&mut self, at: usize) -> ChunkList {
        if at >= self.len() {
            return ChunkList::new();
        }
        self.roots = OnceLock::new();
        match self.root.take() {
            None => ChunkList::new(),
            Some(root) => {
                let (a, b) = split(&root, at);
                self.root = a;
                ChunkList {
                    root: b,
                    roots: OnceLock::new(),
                }
            }
        }
    }

    /// Removes the chunks in `range` from this list and returns them (the range is clamped to
    /// the list).
    pub fn slice(&mut self, range: impl RangeBounds<usize>) -> ChunkList {
        let len = self.len();
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        }
        .min(len);
        let end = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => len,
        }
        .clamp(start, len);
        let mut middle = self.split_off(start);
        let rest = middle.split_off(end - start);
        self.append(rest);
        middle
    }

    /// The chunks in `range` as a new list, leaving this one unchanged.
    pub fn range(&self, range: impl RangeBounds<usize>) -> ChunkList {
        self.clone().slice(range)
    }

    /// Iterates over the chunks in order (double-ended).
    pub fn iter(&self) -> Iter<'_> {
        let mut it = Iter {
            front: Vec::new(),
            back: Vec::new(),
            front_leaf: [].iter(),
            back_leaf: [].iter(),
            remaining: self.len(),
        };
        match self.root.as_deref() {
            // One leaf (every small session): iterate the slice, no traversal stack.
            Some(Node::Leaf(v)) => it.front_leaf = v.iter(),
            Some(Node::Branch { .. }) => {
                if let Some(root) = &self.root {
                    it.front.push(root);
                    it.back.push(root);
                }
            }
            None => {}
        }
        it
    }

    /// How many chunks satisfy `pred`, walking the leaves in place (no iterator stack).
    pub fn count_where(&self, mut pred: impl FnMut(&Chunk) -> bool) -> usize {
        fn walk(node: &Node, pred: &mut impl FnMut(&Chunk) -> bool) -> usize {
            match node {
                Node::Leaf(v) => v.iter().filter(|c| pred(c)).count(),
                Node::Branch { left, right, .. } => walk(left, pred) + walk(right, pred),
            }
        }
        self.root.as_deref().map_or(0, |r| walk(r, &mut pred))
    }

    /// Tree height (0 for one leaf), for tests and diagnostics.
    pub fn height(&self) -> usize {
        self.root.as_ref().map_or(0, |r| usize::from(r.height()))
    }

    /// Length of the longest prefix both lists share by chunk identity. Forks of one parent
    /// share a prefix of identical allocations, and identity is prefix-closed for them, so a
    /// binary search finds the boundary in O(log² n).
    pub fn shared_prefix_len(&self, other: &ChunkList) -> usize {
        let (mut lo, mut hi) = (0usize, self.len().min(other.len()));
        // invariant: self[..lo] is shared; the answer lies in [lo, hi]
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            match (self.get(mid - 1), other.get(mid - 1)) {
                (Some(a), Some(b)) if a.ptr_eq(b) => lo = mid,
                _ => hi = mid - 1,
            }
        }
        lo
    }

    /// True when both lists share one root (so certainly hold the same chunks).
    pub fn ptr_eq(&self, other: &ChunkList) -> bool {
        match (&self.root, &other.root) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// Iterator over a [`ChunkList`].
pub struct Iter<'a> {
    front: Vec<&'a Link>,
    back: Vec<&'a Link>,
    front_leaf: std::slice::Iter<'a, Chunk>,
    back_leaf: std::slice::Iter<'a, Chunk>,
    remaining: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a Chunk;

    fn next(&mut self) -> Option<&'a Chunk> {
        if self.remaining == 0 {
            return None;
        }
        loop {
            if let Some(c) = self.front_leaf.next() {
                self.remaining -= 1;
                return Some(c);
            }
            let Some(node) = self.front.pop() else {
                // A one-leaf list starts in `front_leaf` with no stacks: what the back end
                // has not taken is there.
                let c = self.back_leaf.next()?;
                self.remaining -= 1;
                return Some(c);
            };
            match &**node {
                Node::Leaf(v) => self.front_leaf = v.iter(),
                Node::Branch { left, right, .. } => {
                    self.front.push(right);
                    self.front.push(left);
                }
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        loop {
            if let Some(c) = self.back_leaf.next_back() {
                self.remaining -= 1;
                return Some(c);
            }
            let Some(node) = self.back.pop() else {
                // A one-leaf list: the rest sits in `front_leaf`.
                let c = self.front_leaf.next_back()?;
                self.remaining -= 1;
                return Some(c);
            };
            match &**node {
                Node::Leaf(v) => self.back_leaf = v.iter(),
                Node::Branch { left, right, .. } => {
                    self.back.push(left);
                    self.back.push(right);
                }
            }
        }
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a ChunkList {
    type Item = &'a Chunk;
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl IntoIterator for ChunkList {
    type Item = Chunk;
    type IntoIter = std::vec::IntoIter<Chunk>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter().cloned().collect::<Vec<_>>().into_iter()
    }
}

impl FromIterator<Chunk> for ChunkList {
    fn from_iter<I: IntoIterator<Item = Chunk>>(iter: I) -> Self {
        let mut list = ChunkList::new();
        list.extend(iter);
        list
    }
}

impl Extend<Chunk> for ChunkList {
    fn extend<I: IntoIterator<Item = Chunk>>(&mut self, iter: I) {
        // Build full leaves and join them: far cheaper than pushing one by one.
        let mut buf = Vec::with_capacity(LEAF_MAX);
        let mut roots = self.roots.take();
        for c in iter {
            if let Some(r) = &mut roots {
                r.push(c.digest());
            }
            buf.push(c);
            if buf.len() == LEAF_MAX {
                let full = std::mem::replace(&mut buf, Vec::with_capacity(LEAF_MAX));
                self.root = join_opt(self.root.take(), leaf(full));
            }
        }
        self.root = join_opt(self.root.take(), leaf(buf));
        if let Some(r) = roots {
            self.roots = OnceLock::from(r);
        }
    }
}

impl From<Vec<Chunk>> for ChunkList {
    fn from(v: Vec<Chunk>) -> Self {
        v.into_iter().collect()
    }
}

impl Index<usize> for ChunkList {
    type Output = Chunk;
    fn index(&self, index: usize) -> &Chunk {
        match self.get(index) {
            Some(c) => c,
            None => panic!(
                "chunk index {index} out of range for a list of {}",
                self.len()
            ),
        }
    }
}

impl PartialEq for ChunkList {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && (self.ptr_eq(other) || self.iter().zip(other.iter()).all(|(a, b)| a == b))
    }
}

impl fmt::Debug for ChunkList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for ChunkList {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for ChunkList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Vec::<Chunk>::deserialize(d)?.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(range: std::ops::Range<usize>) -> ChunkList {
        range.map(|i| Chunk::user(i.to_string())).collect()
    }

    fn texts(l: &ChunkList) -> Vec<String> {
        l.iter()
            .map(|c| c.text().unwrap_or_default().to_owned())
            .collect()
    }

    fn check_balanced(node: &Link) -> (usize, u8) {
        match &**node {
            Node::Leaf(v) => {
                assert!(!v.is_empty() && v.len() <= LEAF_MAX);
                (v.len(), 0)
            }
            Node::Branch {
                left,
                right,
                len,
                height,
            } => {
                let (a, ha) = check_balanced(left);
                let (b, hb) = check_balanced(right);
                assert_eq!(*len, a + b);
                assert_eq!(*height, ha.max(hb) + 1);
                assert!(ha.abs_diff(hb) <= 1, "unbalanced: {ha} vs {hb}");
                (a + b, *height)
            }
        }
    }

    fn balanced(l: &ChunkList) {
        if let Some(r) = &l.root {
            check_balanced(r);
        }
    }

    #[test]
    fn push_append_split_keep_order_and_balance() {
        let mut a = ChunkList::new();
        for i in 0..5000 {
            a.push_back(Chunk::user(i.to_string()));
        }
        balanced(&a);
        assert_eq!(
            texts(&a),
            (0..5000).map(|i| i.to_string()).collect::<Vec<_>>()
        );
        let mut small = list(0..3);
        small.append(a.clone());
        balanced(&small);
        assert_eq!(small.len(), 5003);
        assert_eq!(small[3].text(), Some("0"));
        let mut big = a.clone();
        big.append(list(7..9));
        balanced(&big);
        assert_eq!(big.last().and_then(Chunk::text), Some("8"));
        for at in [0, 1, 63, 64, 65, 2500, 4999, 5000, 6000] {
            let mut left = a.clone();
            let right = left.split_off(at);
            balanced(&left);
            balanced(&right);
            assert_eq!(left.len(), at.min(5000));
            assert_eq!(left.len() + right.len(), 5000);
            let mut joined = left.clone();
            joined.append(right);
            assert_eq!(joined, a);
        }
        assert_eq!(texts(&a.range(10..13)), vec!["10", "11", "12"]);
        let rev: Vec<_> = a
            .iter()
            .rev()
            .take(2)
            .map(|c| c.text().unwrap_or(""))
            .collect();
        assert_eq!(rev, vec!["4999", "4998"]);
    }

    #[test]
    fn double_ended_iteration_meets_in_the_middle() {
        // 200 chunks make a tree; 7 fit one leaf (the iterator's no-stack path).
        for n in [200usize, 7, 1] {
            meet_in_the_middle(n);
        }
    }

    #[test]
    fn count_where_counts_across_leaves() {
        for n in [0usize, 1, 63, 64, 65, 1000] {
            let l = list(0..n);
            let even = l.count_where(|c| {
                c.text()
                    .and_then(|t| t.parse::<usize>().ok())
                    .is_some_and(|i| i % 2 == 0)
            });
            assert_eq!(even, n.div_ceil(2), "n = {n}");
        }
    }

    fn meet_in_the_middle(n: usize) {
        let l = list(0..n);
        assert_eq!(l.iter().rev().count(), n);
        let mut it = l.iter();
        let mut seen = Vec::new();
        loop {
            match (it.next(), it.next_back()) {
                (Some(a), Some(b)) => {
                    seen.push(a.text().unwrap_or("").to_owned());
                    seen.push(b.text().unwrap_or("").to_owned());
                }
                (Some(a), None) => seen.push(a.text().unwrap_or("").to_owned()),
                (None, _) => break,
            }
        }
        seen.sort_by_key(|s| s.parse::<usize>().unwrap_or(0));
        assert_eq!(seen.len(), n);
        assert_eq!(seen, (0..n).map(|i| i.to_string()).collect::<Vec<_>>());
    }

    #[test]
    fn forks_do_not_see_each_others_pushes() {
        let base = list(0..64);
        let mut a = base.clone();
        let mut b = base.clone();
        a.push_back(Chunk::user("a"));
        b.push_back(Chunk::user("b"));
        assert_eq!(base.len(), 64);
        assert_eq!(a.last().and_then(Chunk::text), Some("a"));
        assert_eq!(b.last().and_then(Chunk::text), Some("b"));
    }

    #[test]
    fn many_small_merges_stay_balanced() {
        let mut acc = ChunkList::new();
        for i in 0..3000 {
            let mut one = list(i..i + 1);
            if i % 2 == 0 {
                acc.append(one);
            } else {
                one.append(acc);
                acc = one;
            }
            balanced(&acc);
        }
        assert_eq!(acc.len(), 3000);
        assert!(acc.height() < 12, "height {}", acc.height());
    }
}
