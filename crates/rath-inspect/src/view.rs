//! A self-contained HTML session viewer: one file, inline CSS and JS, no network.
//!
//! ```
//! use rath_session::{Chunk, Session, Stamper};
//! use rath_inspect::view::{ViewOptions, render_sessions};
//!
//! let root = Session::user_with("q", Stamper::counter());
//! let fork = root.fork().push(Chunk::assistant_text("a"));
//! let html = render_sessions(&[root, fork], &ViewOptions::default());
//! assert_eq!(html.matches(r#"<g class="node "#).count(), 2);
//! assert_eq!(html.matches(r#"class="edge""#).count(), 1);
//! assert!(!html.contains("<script src") && !html.contains("<link"));
//! ```
//!
//! The page has three parts: the session list, the lineage graph as inline SVG (one
//! `<g class="node ..." data-session-id=...>` per session, showing its agents, status, size,
//! tokens and the first line of its answer, one `<path class="edge">` per parent
//! link whose both ends are on the page, laid out by dagre's layered algorithm so links cross as
//! little as the lineage allows and never run across a box, and the same store always draws
//! the same picture), and one transcript panel per session (`<article class="transcript"
//! data-session-id=...>`, evidence included). Clicking a node, a list row or a parent link
//! shows that session's panel. Parents that are not on the page are named in the panel, not
//! drawn.
//!
//! Each panel holds at most [`ViewOptions::transcript_chunks`] chunks from the start of the
//! session and as many from its end; a longer session's panel says which chunks are left out
//! and gives the `rath show ID --from K --limit N` command that prints them. A store is read
//! file by file in bounded memory ([`crate::TranscriptStream`]), so the page and the
//! memory it takes to make it stay small whatever the size of the sessions.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::Path;

use rath_persist::LoadedSession;
use rath_session::{Session, SessionId};

use crate::{
    FileWarning, InspectError, Page, SessionStatus, StoreView, Transcript, TranscriptEntry,
    TranscriptStream, show_command, usage_text,
};

/// What to put on the page besides the sessions.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ViewOptions {
    /// The page title.
    pub title: String,
    /// Where the sessions came from (shown under the title).
    pub source: Option<String>,
    /// Files left out (unreadable, duplicate ids), shown as a warning list.
    pub warnings: Vec<FileWarning>,
    /// Chunks shown from the start, and again from the end, of each session's transcript.
    pub transcript_chunks: usize,
}

/// The default of [`ViewOptions::transcript_chunks`].
pub const TRANSCRIPT_CHUNKS: usize = 50;

impl Default for ViewOptions {
    fn default() -> Self {
        ViewOptions {
            title: "openrath sessions".to_owned(),
            source: None,
            warnings: Vec::new(),
            transcript_chunks: TRANSCRIPT_CHUNKS,
        }
    }
}

impl ViewOptions {
    /// Sets the title.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = title.into();
        self
    }

    /// Sets the source line.
    pub fn source(mut self, source: impl Into<String>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// Sets how many chunks each panel shows from the start and from the end.
    pub fn transcript_chunks(mut self, n: usize) -> Self {
        self.transcript_chunks = n;
        self
    }
}

/// Renders every readable session of a store (one per id); the files left out are listed
/// on the page.
pub fn render_store(view: &StoreView, options: ViewOptions) -> Result<String, InspectError> {
    Ok(render_store_report(view, options)?.0)
}

/// [`render_store`], also returning the files left out (the caller may report them).
pub fn render_store_report(
    view: &StoreView,
    options: ViewOptions,
) -> Result<(String, Vec<FileWarning>), InspectError> {
    let (facts, mut warnings) = view.facts()?;
    let n = options.transcript_chunks;
    let mut transcripts = Vec::with_capacity(facts.len());
    for f in &facts {
        // A file that read through once but fails now (changed meanwhile) is left out too.
        match TranscriptStream::of(view, f, Page::default()).and_then(|t| t.collect_ends(n)) {
            Ok(t) => transcripts.push(t),
            Err(e) => warnings.push(crate::FileWarning::unreadable_text(
                f.file.clone(),
                e.to_string(),
            )),
        }
    }
    let mut options = options;
    options.warnings.extend(warnings.iter().cloned());
    Ok((render_transcripts(&transcripts, &options), warnings))
}

/// What [`write_store_page`] wrote (`rath view` prints it; `--json` gives this value).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct PageReport {
    /// The page's size in bytes.
    pub bytes: usize,
    /// Parent links drawn (`<line class="edge">` elements).
    pub edges: usize,
    /// The file written, as given.
    pub out: String,
    /// Sessions on the page (`<g class="node">` elements).
    pub sessions: usize,
    /// The files left out (also listed on the page).
    pub warnings: Vec<FileWarning>,
}

impl PageReport {
    /// One line: `wrote FILE (N sessions, M parent links, B bytes)`.
    pub fn render(&self) -> String {
        format!(
            "wrote {} ({} sessions, {} parent links, {} bytes)\n",
            self.out, self.sessions, self.edges, self.bytes
        )
    }
}

/// Renders a store ([`render_store_report`]) and writes the page to `out`. A missing
/// directory for `out` is an error ([`InspectError::NoOutputDir`]), never created.
pub fn write_store_page(
    view: &StoreView,
    options: ViewOptions,
    out: &Path,
) -> Result<PageReport, InspectError> {
    let (page, warnings) = render_store_report(view, options)?;
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty())
        && !parent.is_dir()
    {
        return Err(InspectError::NoOutputDir {
            path: out.to_path_buf(),
            dir: parent.to_path_buf(),
        });
    }
    std::fs::write(out, &page).map_err(|source| InspectError::WriteFile {
        path: out.to_path_buf(),
        source,
    })?;
    Ok(PageReport {
        bytes: page.len(),
        edges: page.matches("<line class=\"edge\"").count(),
        out: out.display().to_string(),
        sessions: page.matches("<g class=\"node").count(),
        warnings,
    })
}

/// Renders in-memory sessions (they get no file name or timestamps beyond their own).
pub fn render_sessions(sessions: &[Session], options: &ViewOptions) -> String {
    let transcripts: Vec<Transcript> = sessions.iter().map(Transcript::from_session).collect();
    render_transcripts(&transcripts, options)
}

/// Renders loaded sessions. A repeated id (a closed file next to its `__partial__`) is shown
/// once, the first time.
pub fn render_loaded(sessions: &[LoadedSession], options: &ViewOptions) -> String {
    let transcripts: Vec<Transcript> = sessions.iter().map(Transcript::new).collect();
    render_transcripts(&transcripts, options)
}

fn render_transcripts(all: &[Transcript], options: &ViewOptions) -> String {
    let mut seen = HashSet::new();
    let ts: Vec<&Transcript> = all.iter().filter(|t| seen.insert(t.id.clone())).collect();
    let mut o = String::with_capacity(64 * 1024);
    o.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    let _ = writeln!(o, "<title>{}</title>", esc(&options.title));
    let _ = writeln!(o, "<style>{CSS}</style>\n</head>\n<body>");
    let keep = options.transcript_chunks;
    let _ = writeln!(o, "<header><h1>{}</h1>", esc(&options.title));
    let links = ts
        .iter()
        .flat_map(|t| t.parents.iter())
        .filter(|p| ts.iter().any(|t| &t.id == *p))
        .count();
    let _ = write!(
        o,
        "<p class=\"meta\">{} sessions, {links} parent links",
        ts.len()
    );
    if let Some(src) = &options.source {
        let _ = write!(o, " &middot; {}", esc(src));
    }
    o.push_str("</p>\n");
    if !options.warnings.is_empty() {
        o.push_str("<ul class=\"unreadable\">\n");
        for w in &options.warnings {
            let _ = writeln!(o, "<li>{}</li>", esc(&w.line()));
        }
        o.push_str("</ul>\n");
    }
    o.push_str("</header>\n<main>\n");
    session_list(&mut o, &ts);
    graph(&mut o, &ts);
    o.push_str("<section id=\"panels\">\n<p id=\"hint\">Click a session in the list or the graph to see its transcript.</p>\n");
    for (i, t) in ts.iter().enumerate() {
        panel(&mut o, i, t, &ts, keep);
    }
    o.push_str("</section>\n</main>\n");
    let _ = writeln!(o, "<script>{JS}</script>\n</body>\n</html>");
    o
}

fn session_list(o: &mut String, ts: &[&Transcript]) {
    o.push_str("<section id=\"list\"><h2>Sessions</h2>\n<table>\n<thead><tr><th>id</th><th>created</th><th>operator</th><th>kind</th><th>chunks</th><th>status</th><th>usage</th></tr></thead>\n<tbody>\n");
    for t in ts {
        let status = t.status.as_str();
        let _ = writeln!(
            o,
            "<tr class=\"row\" data-session-id=\"{}\"><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{status}</td><td>{}</td></tr>",
            esc(t.id.as_str()),
            esc(t.id.as_str()),
            esc(&t.created_at),
            esc(&t.operator),
            esc(&t.kind),
            t.counts().describe(),
            esc(&usage_text(t.usage)),
        );
    }
    o.push_str("</tbody>\n</table>\n</section>\n");
}

const NODE_W: f64 = 236.0;
const NODE_H: f64 = 82.0;
const MARGIN: f64 = 12.0;

/// The points of a drawn link, in order.
type Points = Vec<(f64, f64)>;

/// Where [`layout`] put each session (its box's top left corner) and each parent link (the
/// points of its path), and the drawing's size.
struct Drawing {
    at: Vec<(f64, f64)>,
    /// `(parent, child, points)` per parent link whose both ends are on the page, in the
    /// order of the sessions and of each one's parents.
    edges: Vec<(usize, usize, Points)>,
    width: f64,
    height: f64,
}

/// The points of the link from session `j` to session `i` as laid out in `g` (`at`: each
/// box's top left): a loop on the box's right side for a session naming itself.
fn link_points(g: &dagre_dgl_rs::Graph, at: &[(f64, f64)], j: usize, i: usize) -> Points {
    if j == i {
        let (x, y) = at[i];
        return vec![
            (x + NODE_W, y + NODE_H * 0.3),
            (x + NODE_W + 18.0, y + NODE_H * 0.5),
            (x + NODE_W, y + NODE_H * 0.7),
        ];
    }
    let e = dagre_dgl_rs::Edge::new(&format!("s{j}"), &format!("s{i}"));
    g.edge(&e)
        .and_then(|l| l.points.clone())
        .map(|ps| ps.iter().map(|p| (p.x, p.y)).collect())
        .unwrap_or_default()
}

/// Lays the lineage out with dagre's layered algorithm (`dagre-dgl-rs`): ranks top to bottom
/// by network simplex, each rank ordered to reduce crossings, a link that skips ranks routed
/// through points of its own so it never runs across a session's box. Deterministic: the
/// same sessions in the same order give the same drawing.
fn layout(ts: &[&Transcript]) -> Drawing {
    use dagre_dgl_rs::{EdgeLabel, Graph, GraphLabel, NodeLabel};
    if ts.is_empty() {
        // dagre cannot lay out a graph without a node (its highest rank underflows).
        return Drawing {
            at: Vec::new(),
            edges: Vec::new(),
            width: 2.0 * MARGIN,
            height: 2.0 * MARGIN,
        };
    }
    let index: HashMap<&SessionId, usize> =
        ts.iter().enumerate().map(|(i, t)| (&t.id, i)).collect();
    let name = |i: usize| format!("s{i}");
    let mut g = Graph::default();
    g.set_graph(GraphLabel {
        rankdir: Some("TB".into()),
        nodesep: Some(28.0),
        ranksep: Some(46.0),
        edgesep: Some(14.0),
        marginx: Some(MARGIN),
        marginy: Some(MARGIN),
        ..Default::default()
    });
    for i in 0..ts.len() {
        g.set_node(
            &name(i),
            NodeLabel {
                width: NODE_W,
                height: NODE_H,
                ..Default::default()
            },
        );
    }
    let mut links = Vec::new();
    let mut laid = HashSet::new();
    for (i, t) in ts.iter().enumerate() {
        for p in &t.parents {
            let Some(&j) = index.get(p) else { continue };
            links.push((j, i));
            // A link drawn twice (a parent named twice) is laid out once; a link to itself
            // is drawn as a loop on the box, not laid out.
            if j != i && laid.insert((j, i)) {
                g.set_edge(&name(j), &name(i), EdgeLabel::default(), None);
            }
        }
    }
    dagre_dgl_rs::layout(&mut g);
    let at: Vec<(f64, f64)> = (0..ts.len())
        .map(|i| {
            let n = g.node(&name(i));
            (
                n.x.unwrap_or(0.0) - NODE_W / 2.0,
                n.y.unwrap_or(0.0) - NODE_H / 2.0,
            )
        })
        .collect();
    let edges = links
        .into_iter()
        .map(|(j, i)| (j, i, link_points(&g, &at, j, i)))
        .collect();
    let right = at.iter().map(|(x, _)| x + NODE_W).fold(0.0, f64::max);
    let bottom = at.iter().map(|(_, y)| y + NODE_H).fold(0.0, f64::max);
    Drawing {
        at,
        edges,
        width: (right + MARGIN + 20.0).ceil(),
        height: (bottom + MARGIN).ceil(),
    }
}

/// The first line of the session's answer: its last assistant text among the chunks shown.
fn answer_line(t: &Transcript) -> Option<String> {
    t.chunks
        .iter()
        .rev()
        .find(|c| c.kind == "assistant" && !c.text.trim().is_empty())
        .and_then(|c| c.text.lines().map(str::trim).find(|l| !l.is_empty()))
        .map(str::to_owned)
}

fn graph(o: &mut String, ts: &[&Transcript]) {
    let d = layout(ts);
    let (width, height) = (d.width, d.height);
    let _ = writeln!(
        o,
        "<section id=\"graph\"><h2>Lineage</h2>\n<svg id=\"lineage\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"lineage graph\">"
    );
    o.push_str("<g id=\"edges\">\n");
    for (j, i, points) in &d.edges {
        let mut path = String::new();
        for (k, (x, y)) in points.iter().enumerate() {
            let _ = write!(path, "{}{x:.1} {y:.1}", if k == 0 { "M" } else { " L" });
        }
        let _ = writeln!(
            o,
            "<path class=\"edge\" data-from=\"{}\" data-to=\"{}\" d=\"{path}\"/>",
            esc(ts[*j].id.as_str()),
            esc(ts[*i].id.as_str()),
        );
    }
    o.push_str("</g>\n<g id=\"nodes\">\n");
    for (i, t) in ts.iter().enumerate() {
        let (x, y) = d.at[i];
        let status = t.status.as_str();
        let open = if t.status.is_unfinished() {
            " open"
        } else {
            ""
        };
        let agents: Vec<&str> = t.agent_usage.iter().map(|(a, _)| a.as_str()).collect();
        let who = if agents.is_empty() {
            t.kind.clone()
        } else {
            agents.join(", ")
        };
        let tokens = t
            .usage
            .map_or_else(String::new, |u| format!(" · {} tokens", u.total_tokens));
        let answer = answer_line(t).map_or_else(|| "—".to_owned(), |a| format!("“{a}”"));
        let line = |o: &mut String, k: usize, class: &str, text: &str| {
            let _ = write!(
                o,
                "<text{class} x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                x + 8.0,
                y + 17.0 + 18.0 * k as f64,
                esc(text)
            );
        };
        let _ = write!(
            o,
            "<g class=\"node {status}{open}\" data-session-id=\"{}\" tabindex=\"0\"><title>{}</title><rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{NODE_W}\" height=\"{NODE_H}\" rx=\"6\"/>",
            esc(t.id.as_str()),
            esc(t.id.as_str()),
        );
        line(
            o,
            0,
            "",
            &format!("{} · {}", short(t.id.as_str()), clip(&t.operator, 14)),
        );
        line(o, 1, " class=\"sub\"", &clip(&who, 34));
        line(
            o,
            2,
            " class=\"sub\"",
            &format!("{status} · {} chunks{tokens}", t.chunk_count),
        );
        line(o, 3, " class=\"sub answer\"", &clip(&answer, 36));
        o.push_str("</g>\n");
    }
    o.push_str("</g>\n</svg>\n</section>\n");
}

/// Writes the transcript panel of `t`, the `i`th session of `ts` (the sessions on the page):
/// its facts, then its chunks (at most the first and last `keep`).
fn panel(o: &mut String, i: usize, t: &Transcript, ts: &[&Transcript], keep: usize) {
    let _ = writeln!(
        o,
        "<article class=\"transcript\" id=\"t{i}\" data-session-id=\"{}\" hidden>",
        esc(t.id.as_str())
    );
    let _ = writeln!(
        o,
        "<h2>Session <code>{}</code></h2>\n<dl>",
        esc(t.id.as_str())
    );
    let shown = bounded(&t.chunks, keep);
    panel_facts(o, t, ts, keep, shown.len());
    o.push_str("</dl>\n<ol class=\"chunks\">\n");
    panel_chunks(o, t, &shown);
    o.push_str("</ol>\n</article>\n");
}

/// Writes a panel's facts (`<dt>`/`<dd>` pairs): file, dates and status, failure, lineage,
/// parents, extras, placement, usage, pending calls, and how many chunks there are when
/// the page holds only `shown` of them.
fn panel_facts(o: &mut String, t: &Transcript, ts: &[&Transcript], keep: usize, shown: usize) {
    let mut fact = |k: &str, v: String| {
        let _ = writeln!(o, "<dt>{k}</dt><dd>{v}</dd>");
    };
    if !t.file.is_empty() {
        fact("file", esc(&t.file));
    }
    let status = esc(&SessionStatus::describe(t.closed, t.closed_at.as_deref()));
    fact("created", format!("{}; {status}", esc(&t.created_at)));
    if let Some(f) = &t.failure {
        fact(
            if f.is_cancellation() {
                "cancelled"
            } else {
                "failed"
            },
            format!("<strong>{}</strong>", esc(&crate::failure_text(f))),
        );
    }
    fact(
        "lineage",
        format!("{} / {}", esc(&t.operator), esc(&t.kind)),
    );
    fact("parents", parent_links(t, ts));
    if !t.extras.is_empty() {
        let ex: Vec<String> = t
            .extras
            .iter()
            .map(|(k, v)| esc(&format!("{k}={v}")))
            .collect();
        fact("extras", ex.join(", "));
    }
    fact("placement", esc(&t.placement));
    let mut usage = esc(&usage_text(t.usage));
    for (agent, u) in &t.agent_usage {
        let _ = write!(usage, "<br>{}: {}", esc(agent), esc(&usage_text(Some(*u))));
    }
    fact("usage", usage);
    for p in &t.pending {
        fact("pending", esc(p));
    }
    if shown < t.chunk_count {
        fact(
            "chunks",
            format!(
                "{} in all; the first and last {keep} are on this page",
                t.chunk_count
            ),
        );
    }
}

/// A panel's parents fact: a link to each parent on the page (`ts`), the others named as
/// not on it; `(root)` for a session without parents.
fn parent_links(t: &Transcript, ts: &[&Transcript]) -> String {
    let parents: Vec<String> = t
        .parents
        .iter()
        .map(|p| {
            if ts.iter().any(|x| &x.id == p) {
                format!(
                    "<a href=\"#\" class=\"goto\" data-session-id=\"{0}\"><code>{0}</code></a>",
                    esc(p.as_str())
                )
            } else {
                format!("<code>{}</code> (not on this page)", esc(p.as_str()))
            }
        })
        .collect();
    if parents.is_empty() {
        "(root)".to_owned()
    } else {
        parents.join(", ")
    }
}

/// Writes a panel's chunk list items: the `shown` chunks, with a note standing in for each
/// run of chunks left out.
fn panel_chunks(o: &mut String, t: &Transcript, shown: &[&TranscriptEntry]) {
    let mut next = 0usize;
    for c in shown {
        if c.index > next {
            omitted(o, t, next, c.index);
        }
        next = c.index + 1;
        let class = if c.conversation { "conv" } else { "evidence" };
        let branch = c
            .branch
            .as_deref()
            .map(|b| format!(" <span class=\"branch\">branch {}</span>", esc(b)))
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "<li class=\"chunk {class} kind-{}\" value=\"{}\"><div class=\"label\">{}{branch}</div><pre>{}</pre></li>",
            esc(&c.kind),
            c.index,
            esc(&c.label),
            esc(&c.text)
        );
    }
    if next < t.chunk_count {
        omitted(o, t, next, t.chunk_count);
    }
}

/// The first and last `keep` of `chunks` (all of them when there are at most `2 * keep`).
fn bounded(chunks: &[TranscriptEntry], keep: usize) -> Vec<&TranscriptEntry> {
    if chunks.len() <= keep.saturating_mul(2) {
        chunks.iter().collect()
    } else {
        chunks[..keep]
            .iter()
            .chain(&chunks[chunks.len() - keep..])
            .collect()
    }
}

/// The note standing in for chunks `from..to`, with the command that prints them.
fn omitted(o: &mut String, t: &Transcript, from: usize, to: usize) {
    let n = to - from;
    let _ = writeln!(
        o,
        "<li class=\"omitted\" value=\"{from}\">{n} chunk(s) ({from} to {}) are not on this page; print them with <code>{}</code></li>",
        to - 1,
        esc(&show_command(&t.id, from, Some(n)))
    );
}

fn short(id: &str) -> String {
    let n = id.chars().count();
    if n <= 22 {
        id.to_owned()
    } else {
        let tail: String = id.chars().skip(n - 12).collect();
        format!("…{tail}")
    }
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        s.chars().take(n - 1).collect::<String>() + "…"
    }
}

/// Escapes text for HTML element content and quoted attribute values.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const CSS: &str = r#"
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#f7f8fa}
header{padding:12px 20px;background:#1d2330;color:#fff}
header h1{margin:0;font-size:20px}.meta{margin:4px 0 0;opacity:.8}
.unreadable{color:#ffb4a8}
main{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:16px;padding:16px 20px}
#list,#graph{grid-column:1/3;overflow:auto}
#panels{grid-column:1/3}
h2{font-size:16px;margin:8px 0}
table{border-collapse:collapse;width:100%;background:#fff}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #e3e6eb;white-space:nowrap}
tr.row{cursor:pointer}tr.row:hover,tr.row.selected{background:#e8f0ff}
svg{background:#fff;border:1px solid #e3e6eb}
.edge{stroke:#8a94a6;stroke-width:1.5;fill:none}
.node{cursor:pointer}.node rect{fill:#fff;stroke:#3d6fd9;stroke-width:1.5}
.node.open rect{stroke:#d9822b;stroke-dasharray:4 3}.node.failed rect{stroke:#c62828}
.node text.answer{font-style:italic}
.node text{font:12px monospace;fill:#1d2330}.node text.sub{font:11px system-ui;fill:#5b6475}
.node.selected rect{fill:#e8f0ff;stroke-width:3}
.transcript{background:#fff;border:1px solid #e3e6eb;padding:12px 16px}
dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px}dt{font-weight:600}dd{margin:0}
ol.chunks{padding-left:36px}
.chunk{margin:6px 0;padding:6px 8px;border-left:3px solid #3d6fd9;background:#fbfcfe}
.chunk.evidence{border-left-color:#b0b7c3;background:#f3f4f6;color:#444c5a}
.chunk .label{font-weight:600;font-size:12px}
.kind-user{border-left-color:#2f9e44}.kind-system{border-left-color:#7048e8}.kind-tool_result{border-left-color:#e8590c}
.branch{font-weight:400;color:#7048e8}
.omitted{margin:6px 0;padding:6px 8px;border-left:3px dashed #b0b7c3;color:#5b6475;font-style:italic}
pre{margin:4px 0 0;white-space:pre-wrap;word-break:break-word;font:12px/1.35 monospace}
"#;

const JS: &str = r#"
(function () {
  "use strict";
  function show(id) {
    var found = false;
    document.querySelectorAll("article.transcript").forEach(function (p) {
      var on = p.getAttribute("data-session-id") === id;
      p.hidden = !on;
      if (on) { found = true; }
    });
    document.querySelectorAll(".node, tr.row").forEach(function (n) {
      n.classList.toggle("selected", n.getAttribute("data-session-id") === id);
    });
    var hint = document.getElementById("hint");
    if (hint) { hint.hidden = found; }
    return found;
  }
  document.addEventListener("click", function (ev) {
    var el = ev.target && ev.target.closest ? ev.target.closest("[data-session-id]") : null;
    if (!el || el.tagName.toLowerCase() === "article") { return; }
    ev.preventDefault();
    show(el.getAttribute("data-session-id"));
  });
  document.addEventListener("keydown", function (ev) {
    if (ev.key !== "Enter") { return; }
    var el = document.activeElement;
    if (el && el.classList && el.classList.contains("node")) { show(el.getAttribute("data-session-id")); }
  });
  window.rathShow = show;
})();
"#;
