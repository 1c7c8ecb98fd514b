//! The lineage as an indented text tree.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use rath_persist::LineageRow;
use rath_session::SessionId;

use super::usage_text;

/// Renders rows as a tree: each session under its first parent present in `rows`, roots at
/// the left margin, in row order. A session with more parents (a merge) names the others as
/// `+ also <id>`; a parent outside `rows` is named `(parent <id> not in store)`.
///
/// ```
/// use openrath::inspect::lineage_tree;
/// use openrath::persist::LineageRow;
/// use openrath::prelude::*;
///
/// let root = Session::user_with("q", Stamper::counter());
/// let (a, b) = (root.fork(), root.fork());
/// let m = a.merge(&b)?;
/// let rows: Vec<_> = [&root, &a, &b, &m].into_iter().map(LineageRow::from_session).collect();
/// let tree = lineage_tree(&rows);
/// assert_eq!(tree.lines().count(), 4);
/// assert!(tree.contains("│   └── "), "{tree}");
/// # Ok::<(), openrath::session::SessionError>(())
/// ```
pub fn lineage_tree(rows: &[LineageRow]) -> String {
    let known: HashSet<&SessionId> = rows.iter().map(|r| &r.id).collect();
    let mut children: HashMap<&SessionId, Vec<usize>> = HashMap::new();
    let mut roots = Vec::new();
    for (i, r) in rows.iter().enumerate() {
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
    let mut seen = HashSet::new();
    for &i in &roots {
        walk(rows, &children, &known, i, "", None, &mut seen, &mut out);
    }
    // Sessions only reachable through a cycle (a hand-edited store) are still listed.
    for i in 0..rows.len() {
        if !seen.contains(&i) {
            walk(rows, &children, &known, i, "", None, &mut seen, &mut out);
        }
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn walk(
    rows: &[LineageRow],
    children: &HashMap<&SessionId, Vec<usize>>,
    known: &HashSet<&SessionId>,
    i: usize,
    prefix: &str,
    last: Option<bool>,
    seen: &mut HashSet<usize>,
    out: &mut String,
) {
    if !seen.insert(i) {
        return;
    }
    let r = &rows[i];
    let (branch, child_prefix) = match last {
        None => (String::new(), String::new()),
        Some(true) => (format!("{prefix}└── "), format!("{prefix}    ")),
        Some(false) => (format!("{prefix}├── "), format!("{prefix}│   ")),
    };
    let _ = write!(
        out,
        "{branch}{}  {} / {}  {} chunk{}  usage {}",
        r.id,
        r.lineage_operator,
        r.lineage_kind.as_str(),
        r.chunk_count,
        if r.chunk_count == 1 { "" } else { "s" },
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
    for (k, &c) in kids.iter().enumerate() {
        walk(
            rows,
            children,
            known,
            c,
            &child_prefix,
            Some(k + 1 == kids.len()),
            seen,
            out,
        );
    }
}
