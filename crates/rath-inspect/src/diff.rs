//! Where two sessions agree and where they part.

use std::fmt::Write as _;

use rath_session::{Chunk, LineageGraph, Session, SessionId};
use serde::Serialize;

use super::describe_chunk;

/// One chunk, summarised for a diff.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ChunkLine {
    /// Position in its session.
    pub index: usize,
    /// Wire kind.
    pub kind: String,
    /// Label and text on one line, cut at 160 characters.
    pub summary: String,
}

impl ChunkLine {
    fn new(index: usize, c: &Chunk) -> Self {
        let (label, text) = describe_chunk(c);
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut summary = format!("{label}: {flat}");
        if summary.chars().count() > 160 {
            summary = summary.chars().take(157).collect::<String>() + "...";
        }
        ChunkLine {
            index,
            kind: c.kind().as_str().to_owned(),
            summary,
        }
    }
}

/// The comparison of two sessions' chunk sequences (branch tags ignored), plus how they are
/// related in the lineage graph when one is given.
///
/// ```
/// use rath_inspect::SessionDiff;
/// use rath_session::{Chunk, Session, Stamper};
///
/// let root = Session::user_with("q", Stamper::counter());
/// let a = root.fork().push(Chunk::assistant_text("yes"));
/// let b = root.fork().push(Chunk::assistant_text("no"));
/// let d = SessionDiff::new(&a, &b, None);
/// assert_eq!(d.common_prefix, 1);
/// assert!(!d.identical);
/// assert_eq!(d.first_difference.0.as_ref().unwrap().summary, "assistant: yes");
/// ```
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct SessionDiff {
    /// First session.
    pub a: SessionId,
    /// Second session.
    pub b: SessionId,
    /// Chunks in `a`.
    pub a_len: usize,
    /// Chunks in `b`.
    pub b_len: usize,
    /// Leading chunks that are equal in both.
    pub common_prefix: usize,
    /// Leading conversation chunks (what a model saw) that are equal in both.
    pub common_conversation_prefix: usize,
    /// True when both hold the same chunks.
    pub identical: bool,
    /// The first chunk after the common prefix on each side (`None` past the end).
    pub first_difference: (Option<ChunkLine>, Option<ChunkLine>),
    /// How the two relate in the lineage (`b descends from a`, `siblings of X`, ...).
    pub relation: Option<String>,
    /// Nearest common ancestors in the lineage graph.
    pub common_ancestors: Vec<SessionId>,
}

fn same(x: &Chunk, y: &Chunk) -> bool {
    x.ptr_eq(y) || x.body() == y.body()
}

fn prefix<'a>(xs: impl Iterator<Item = &'a Chunk>, ys: impl Iterator<Item = &'a Chunk>) -> usize {
    xs.zip(ys).take_while(|(x, y)| same(x, y)).count()
}

impl SessionDiff {
    /// Compares `a` and `b`; `graph` (e.g. the store's) adds their lineage relation.
    pub fn new(a: &Session, b: &Session, graph: Option<&LineageGraph>) -> Self {
        let common = prefix(a.chunks().iter(), b.chunks().iter());
        let conv = prefix(a.conversation(), b.conversation());
        let first_difference = (
            a.get(common).map(|c| ChunkLine::new(common, c)),
            b.get(common).map(|c| ChunkLine::new(common, c)),
        );
        let (relation, common_ancestors) = match graph {
            Some(g) => relate(g, a.id(), b.id()),
            None => (None, Vec::new()),
        };
        SessionDiff {
            a: a.id().clone(),
            b: b.id().clone(),
            a_len: a.len(),
            b_len: b.len(),
            common_prefix: common,
            common_conversation_prefix: conv,
            identical: common == a.len() && common == b.len(),
            first_difference,
            relation,
            common_ancestors,
        }
    }

    /// The diff as text.
    pub fn render(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "a  {}  ({} chunks)", self.a, self.a_len);
        let _ = writeln!(o, "b  {}  ({} chunks)", self.b, self.b_len);
        if let Some(r) = &self.relation {
            let _ = writeln!(o, "lineage: {r}");
        }
        if self.identical {
            let _ = writeln!(o, "identical: all {} chunks are equal", self.a_len);
            return o;
        }
        let _ = writeln!(
            o,
            "common prefix: {} chunk(s) ({} conversation)",
            self.common_prefix, self.common_conversation_prefix
        );
        let _ = writeln!(o, "diverge at index {}:", self.common_prefix);
        for (side, c) in [
            ("a", &self.first_difference.0),
            ("b", &self.first_difference.1),
        ] {
            match c {
                Some(c) => {
                    let _ = writeln!(o, "  {side}[{}] {}", c.index, c.summary);
                }
                None => {
                    let _ = writeln!(o, "  {side}: (ends here)");
                }
            }
        }
        let _ = writeln!(
            o,
            "after the prefix: a has {} more, b has {} more",
            self.a_len - self.common_prefix,
            self.b_len - self.common_prefix
        );
        o
    }
}

fn relate(g: &LineageGraph, a: &SessionId, b: &SessionId) -> (Option<String>, Vec<SessionId>) {
    if !g.contains(a) || !g.contains(b) {
        return (None, Vec::new());
    }
    if a == b {
        return (Some("same session".to_owned()), Vec::new());
    }
    let anc_a = g.ancestors(a);
    let anc_b = g.ancestors(b);
    if anc_b.contains(a) {
        return (Some("b descends from a".to_owned()), vec![a.clone()]);
    }
    if anc_a.contains(b) {
        return (Some("a descends from b".to_owned()), vec![b.clone()]);
    }
    // Nearest common ancestors: common ones none of whose descendants is also common.
    let common: Vec<SessionId> = anc_a
        .iter()
        .filter(|x| anc_b.contains(x))
        .cloned()
        .collect();
    let nearest: Vec<SessionId> = common
        .iter()
        .filter(|x| {
            let below = g.descendants(x);
            !common.iter().any(|y| y != *x && below.contains(y))
        })
        .cloned()
        .collect();
    let text = if nearest.is_empty() {
        "unrelated (no common ancestor in the store)".to_owned()
    } else {
        let names: Vec<String> = nearest.iter().map(ToString::to_string).collect();
        format!("both descend from {}", names.join(", "))
    };
    (Some(text), nearest)
}
