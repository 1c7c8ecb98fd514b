//! The lineage as an indented text tree.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use rath_persist::LineageRow;
use rath_session::SessionId;

use super::usage_text;

/// Levels of indentation the tree draws. A session deeper than this is drawn at this
/// indentation with its true depth in front (`[depth 40] <id> ...`), so every line stays
/// short and the output of a chain grows linearly with its length, not quadratically.
pub const MAX_TREE_DEPTH: usize = 24;

/// Renders rows as a tree: each session under its first parent present in `rows`, roots at
/// the left margin, in row order. A session with more parents (a merge) names the others as
/// `+ also <id>`; a parent outside `rows` is named `(parent <id> not in store)`. Indentation
/// stops growing at [`MAX_TREE_DEPTH`] levels (see there). `rows` should hold one row per id
/// ([`super::StoreView::lineage`] gives that); a repeated id is drawn once. Each line says
/// the session's chunks as `counts` has them ([`super::ChunkCounts::total`], conversation
/// and evidence); a session missing from `counts` is taken to hold what its row says (the
/// row's `chunk_count`, conversation chunks alone).
///
/// ```
/// use rath_inspect::lineage_tree;
/// use rath_persist::LineageRow;
/// use rath_session::{Session, Stamper};
///
/// let root = Session::user_with("q", Stamper::counter());
/// let (a, b) = (root.fork(), root.fork());
/// let m = a.merge(&b)?;
/// let rows: Vec<_> = [&root, &a, &b, &m].into_iter().map(LineageRow::from_session).collect();
/// let tree = lineage_tree(&rows, &Default::default());
/// assert_eq!(tree.lines().count(), 4);
/// assert!(tree.contains("│   └── "), "{tree}");
/// # Ok::<(), rath_session::SessionError>(())
/// ```
pub fn lineage_tree(
    rows: &[LineageRow],
    counts: &HashMap<SessionId, super::ChunkCounts>,
) -> String {
    let mut first: HashMap<&SessionId, usize> = HashMap::new();
    for (i, r) in rows.iter().enumerate() {
        first.entry(&r.id).or_insert(i);
    }
    let known: HashSet<&SessionId> = first.keys().copied().collect();
    let mut children: HashMap<&SessionId, Vec<usize>> = HashMap::new();
    let mut roots = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        if first.get(&r.id) != Some(&i) {
            continue;
        }
        match r
            .parent_session_ids
            .iter()
            .find(|p| known.contains(p) && *p != &r.id)
        {
            Some(p) => children.entry(p).or_default().push(i),
            None => roots.push(i),
        }
    }
    let mut out = String::new();
    // A repeated id's later rows count as drawn already.
    let mut seen: HashSet<usize> = (0..rows.len())
        .filter(|i| first.get(&rows[*i].id) != Some(i))
        .collect();
    for &i in &roots {
        walk(rows, &children, &known, counts, i, &mut seen, &mut out);
    }
    // Sessions only reachable through a cycle (a hand-edited store) are still listed.
    for i in 0..rows.len() {
        if !seen.contains(&i) {
            walk(rows, &children, &known, counts, i, &mut seen, &mut out);
        }
    }
    out
}

/// Draws the subtree under row `top`, depth first, without recursion (a chain may be
/// thousands of sessions deep).
fn walk(
    rows: &[LineageRow],
    children: &HashMap<&SessionId, Vec<usize>>,
    known: &HashSet<&SessionId>,
    counts: &HashMap<SessionId, super::ChunkCounts>,
    top: usize,
    seen: &mut HashSet<usize>,
    out: &mut String,
) {
    // (row, prefix of its line, is it the last child (None for a root), depth)
    let mut stack: Vec<(usize, String, Option<bool>, usize)> = vec![(top, String::new(), None, 0)];
    while let Some((i, prefix, last, depth)) = stack.pop() {
        if !seen.insert(i) {
            continue;
        }
        let r = &rows[i];
        let chunks = counts.get(&r.id).map_or(r.chunk_count, |c| c.total);
        let (branch, child_prefix) = match last {
            None => (String::new(), String::new()),
            Some(true) => (format!("{prefix}└── "), format!("{prefix}    ")),
            Some(false) => (format!("{prefix}├── "), format!("{prefix}│   ")),
        };
        // Past the cap the prefix stops growing; the depth is written out instead.
        let child_prefix = if depth >= MAX_TREE_DEPTH {
            prefix
        } else {
            child_prefix
        };
        let deep = if depth > MAX_TREE_DEPTH {
            format!("[depth {depth}] ")
        } else {
            String::new()
        };
        let _ = write!(
            out,
            "{branch}{deep}{}  {} / {}  {} chunk{}  usage {}",
            r.id,
            r.lineage_operator,
            r.lineage_kind.as_str(),
            chunks,
            if chunks == 1 { "" } else { "s" },
            usage_text(r.cumulative_usage)
        );
        let mut first_known = true;
        for p in &r.parent_session_ids {
            if known.contains(p) {
                if first_known {
                    first_known = false;
                } else {
                    let _ = write!(out, "  + also {p}");
                }
            } else {
                let _ = write!(out, "  (parent {p} not in store)");
            }
        }
        out.push('\n');
        let kids = children.get(&r.id).map(Vec::as_slice).unwrap_or(&[]);
        for (k, &c) in kids.iter().enumerate().rev() {
            stack.push((
                c,
                child_prefix.clone(),
                Some(k + 1 == kids.len()),
                depth + 1,
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rath_session::LineageKind;

    fn chain(n: usize) -> Vec<LineageRow> {
        (0..n)
            .map(|i| LineageRow {
                id: SessionId::from(format!("s{i:05}")),
                parent_session_ids: if i == 0 {
                    Vec::new()
                } else {
                    vec![SessionId::from(format!("s{:05}", i - 1))]
                },
                lineage_operator: "op".to_owned(),
                lineage_kind: LineageKind::parse("op_fork"),
                lineage_extras: Vec::new(),
                chunk_count: 1,
                cumulative_usage: None,
            })
            .collect()
    }

    #[test]
    fn a_deep_chain_gives_output_linear_in_its_length() {
        let small = lineage_tree(&chain(1_000), &HashMap::new());
        let big = lineage_tree(&chain(10_000), &HashMap::new());
        assert_eq!(big.lines().count(), 10_000);
        let longest = big.lines().map(|l| l.chars().count()).max().unwrap_or(0);
        assert!(
            longest <= 4 * MAX_TREE_DEPTH + 80,
            "lines stay short: {longest}"
        );
        // Ten times the sessions, about ten times the text (not a hundred).
        let ratio = big.len() as f64 / small.len() as f64;
        assert!(ratio < 11.0, "ratio {ratio}");
        assert!(big.len() < 10_000 * (4 * MAX_TREE_DEPTH + 80));
        // Deep lines say how deep they are.
        assert!(
            big.contains("[depth 9999] s09999  op / op_fork"),
            "{}",
            &big[big.len() - 300..]
        );
    }

    #[test]
    fn a_repeated_id_is_drawn_once() {
        let mut rows = chain(3);
        rows.push(rows[1].clone());
        assert_eq!(lineage_tree(&rows, &HashMap::new()).lines().count(), 3);
    }
}
