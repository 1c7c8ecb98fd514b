//! Graph helpers over a set of sessions' lineage.
//!
//! ```
//! use rath_session::{LineageGraph, Session, Stamper};
//!
//! let root = Session::user_with("q", Stamper::counter());
//! let a = root.fork();
//! let b = root.fork();
//! let m = a.merge(&b).unwrap();
//! let g = LineageGraph::from_sessions([&root, &a, &b, &m]);
//! assert_eq!(g.ancestors(m.id()).len(), 3);
//! assert_eq!(g.descendants(root.id()).len(), 3);
//! assert_eq!(g.edges().len(), 4);
//! assert!(g.find_cycle().is_none());
//! ```

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::lineage::SessionId;
use crate::session::Session;

/// Parent links of a set of sessions, in insertion order.
#[derive(Clone, Debug, Default)]
pub struct LineageGraph {
    order: Vec<SessionId>,
    parents: BTreeMap<SessionId, Vec<SessionId>>,
    children: BTreeMap<SessionId, Vec<SessionId>>,
}

impl LineageGraph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// A graph of `sessions`.
    pub fn from_sessions<'a>(sessions: impl IntoIterator<Item = &'a Session>) -> Self {
        Self::from_edges(
            sessions
                .into_iter()
                .map(|s| (s.id().clone(), s.lineage().parents.to_vec())),
        )
    }

    /// A graph from `(id, parents)` rows (for lineage exports and stores).
    pub fn from_edges(rows: impl IntoIterator<Item = (SessionId, Vec<SessionId>)>) -> Self {
        let mut g = Self::new();
        for (id, parents) in rows {
            g.insert(id, parents);
        }
        g
    }

    /// Adds a node; a repeated id replaces its parent list.
    pub fn insert(&mut self, id: SessionId, parents: Vec<SessionId>) {
        if let Some(old) = self.parents.insert(id.clone(), parents.clone()) {
            for p in old {
                if let Some(c) = self.children.get_mut(&p) {
                    c.retain(|x| x != &id);
                }
            }
        } else {
            self.order.push(id.clone());
        }
        for p in parents {
            self.children.entry(p).or_default().push(id.clone());
        }
    }

    /// Node ids in insertion order.
    pub fn nodes(&self) -> &[SessionId] {
        &self.order
    }

    /// True when `id` is a node.
    pub fn contains(&self, id: &SessionId) -> bool {
        self.parents.contains_key(id)
    }

    /// The parents of `id` (which may name sessions outside the graph).
    pub fn parents_of(&self, id: &SessionId) -> &[SessionId] {
        self.parents.get(id).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The children of `id` within the graph.
    pub fn children_of(&self, id: &SessionId) -> &[SessionId] {
        self.children.get(id).map(Vec::as_slice).unwrap_or(&[])
    }

    fn walk<'a>(
        &'a self,
        start: &SessionId,
        next: impl Fn(&SessionId) -> &'a [SessionId],
    ) -> Vec<SessionId> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        let mut queue: VecDeque<SessionId> = next(start).iter().cloned().collect();
        while let Some(id) = queue.pop_front() {
            if id == *start || !seen.insert(id.clone()) {
                continue;
            }
            queue.extend(next(&id).iter().cloned());
            out.push(id);
        }
        out
    }

    /// Every ancestor of `id`, nearest first (breadth-first), each once.
    pub fn ancestors(&self, id: &SessionId) -> Vec<SessionId> {
        self.walk(id, |x| self.parents_of(x))
    }

    /// Every descendant of `id` within the graph, nearest first, each once.
    pub fn descendants(&self, id: &SessionId) -> Vec<SessionId> {
        self.walk(id, |x| self.children_of(x))
    }

    /// `(parent, child)` pairs, children in insertion order, parents in lineage order.
    pub fn edges(&self) -> Vec<(SessionId, SessionId)> {
        self.order
            .iter()
            .flat_map(|c| {
                self.parents_of(c)
                    .iter()
                    .map(move |p| (p.clone(), c.clone()))
            })
            .collect()
    }

    /// Nodes with no parent inside the graph.
    pub fn roots(&self) -> Vec<SessionId> {
        self.order
            .iter()
            .filter(|id| self.parents_of(id).iter().all(|p| !self.contains(p)))
            .cloned()
            .collect()
    }

    /// A cycle, if the parent links contain one (they never should), as the ids along it.
    pub fn find_cycle(&self) -> Option<Vec<SessionId>> {
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            Active,
            Done,
        }
        let mut marks: BTreeMap<&SessionId, Mark> = BTreeMap::new();
        for start in &self.order {
            if marks.contains_key(start) {
                continue;
            }
            // iterative DFS: (node, next parent index)
            let mut stack: Vec<(&SessionId, usize)> = vec![(start, 0)];
            marks.insert(start, Mark::Active);
            while let Some((node, i)) = stack.last_mut() {
                let parents = self.parents_of(node);
                if *i >= parents.len() {
                    marks.insert(*node, Mark::Done);
                    stack.pop();
                    continue;
                }
                let p = &parents[*i];
                *i += 1;
                if !self.contains(p) {
                    continue;
                }
                match marks.get(p) {
                    Some(Mark::Active) => {
                        let pos = stack.iter().position(|(n, _)| *n == p).unwrap_or(0);
                        return Some(stack[pos..].iter().map(|(n, _)| (*n).clone()).collect());
                    }
                    Some(Mark::Done) => {}
                    None => {
                        marks.insert(p, Mark::Active);
                        stack.push((p, 0));
                    }
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> SessionId {
        SessionId::new(s)
    }

    #[test]
    fn finds_a_cycle() {
        let g = LineageGraph::from_edges([
            (id("a"), vec![id("c")]),
            (id("b"), vec![id("a")]),
            (id("c"), vec![id("b")]),
        ]);
        let cycle = g.find_cycle().expect("cycle");
        assert_eq!(cycle.len(), 3);
    }

    #[test]
    fn outside_parents_are_not_roots_blockers() {
        let g = LineageGraph::from_edges([(id("x"), vec![id("gone")]), (id("y"), vec![id("x")])]);
        assert_eq!(g.roots(), vec![id("x")]);
        assert_eq!(g.ancestors(&id("y")), vec![id("x"), id("gone")]);
        assert!(g.find_cycle().is_none());
    }
}
