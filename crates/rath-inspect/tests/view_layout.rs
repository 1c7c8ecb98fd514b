//! The viewer's lineage graph on a 30-session lineage (issue 48, item 8): every node shows
//! its agent, status, usage and the first line of its answer; no link runs across a box it
//! does not join; links do not cross each other where a layered drawing can avoid it; and
//! the same sessions always give the same page.

use rath_inspect::view::{ViewOptions, render_sessions};
use rath_session::{Chunk, Session, Stamper, Usage};

/// Thirty sessions: a root, a chain of loop rounds, forks off it with rounds of their own,
/// two parallel branches merged back, and a detached copy.
fn lineage() -> Vec<Session> {
    let st = Stamper::counter();
    let answer = |s: &Session, agent: &str, text: &str| {
        s.push(Chunk::assistant_text(format!("{text}\nmore detail")))
            .with_usage(Some(agent), Usage::new(10, 5))
    };
    let root = Session::user_with("plan the trip", st);
    let mut all = vec![root.clone()];
    let mut head = root;
    for round in 0..11 {
        let next = answer(
            &head.fork(),
            "planner",
            &format!("round {round} of the plan"),
        );
        all.push(next.clone());
        head = next;
    }
    // Three forks of the fifth round, each with rounds of its own.
    let base = all[5].clone();
    for f in 0..3 {
        let mut s = answer(&base.fork(), "critic", &format!("fork {f} objects"));
        all.push(s.clone());
        for r in 0..3 {
            s = answer(&s.fork(), "critic", &format!("fork {f} round {r}"));
            all.push(s.clone());
        }
    }
    // Two parallel branches off the last round, merged.
    let a = answer(&head.fork(), "flights", "flights booked");
    let b = answer(&head.fork(), "hotels", "hotel booked");
    let merged = a.merge(&b).expect("merge");
    let done = answer(&merged.fork(), "writer", "the itinerary");
    all.extend([a, b, merged, done.clone()]);
    all.push(done.detach());
    let last = answer(&all[all.len() - 1].fork(), "writer", "final copy");
    all.push(last);
    assert_eq!(all.len(), 30);
    all
}

/// The boxes (`x, y, w, h`) by session id, and the links as `(from, to, points)`.
type Boxes = Vec<(String, [f64; 4])>;
type Links = Vec<(String, String, Vec<(f64, f64)>)>;

fn attr<'a>(tag: &'a str, name: &str) -> &'a str {
    let key = format!(" {name}=\"");
    let from = tag.find(&key).map(|i| i + key.len()).expect(name);
    let to = tag[from..].find('"').expect("closing quote") + from;
    &tag[from..to]
}

fn parse(html: &str) -> (Boxes, Links) {
    let svg = &html[html.find("<svg id=\"lineage\"").expect("svg")..];
    let svg = &svg[..svg.find("</svg>").expect("end of svg")];
    let mut boxes = Vec::new();
    for node in svg.split("<g class=\"node ").skip(1) {
        let id = attr(node, "data-session-id").to_owned();
        let rect = &node[node.find("<rect").expect("rect")..];
        let n = |k| attr(rect, k).parse::<f64>().expect("number");
        boxes.push((id, [n("x"), n("y"), n("width"), n("height")]));
    }
    let mut links = Vec::new();
    for edge in svg.split("<path class=\"edge\"").skip(1) {
        let d = attr(edge, "d");
        let points = d
            .split(['M', 'L'])
            .filter(|p| !p.trim().is_empty())
            .map(|p| {
                let mut it = p
                    .split_whitespace()
                    .map(|v| v.parse::<f64>().expect("coord"));
                (it.next().expect("x"), it.next().expect("y"))
            })
            .collect();
        links.push((
            attr(edge, "data-from").to_owned(),
            attr(edge, "data-to").to_owned(),
            points,
        ));
    }
    (boxes, links)
}

/// True when segment `a`-`b` passes through the inside of `r` (shrunk by a pixel).
fn crosses_box(a: (f64, f64), b: (f64, f64), r: [f64; 4]) -> bool {
    let (x0, y0, x1, y1) = (r[0] + 1.0, r[1] + 1.0, r[0] + r[2] - 1.0, r[1] + r[3] - 1.0);
    // Liang-Barsky clipping of the segment against the box.
    let (dx, dy) = (b.0 - a.0, b.1 - a.1);
    let (mut t0, mut t1) = (0.0f64, 1.0f64);
    for (p, q) in [
        (-dx, a.0 - x0),
        (dx, x1 - a.0),
        (-dy, a.1 - y0),
        (dy, y1 - a.1),
    ] {
        if p == 0.0 {
            if q < 0.0 {
                return false;
            }
        } else {
            let t = q / p;
            if p < 0.0 {
                t0 = t0.max(t);
            } else {
                t1 = t1.min(t);
            }
        }
    }
    t0 < t1
}

/// True when segments `a`-`b` and `c`-`d` cross at a point inside both.
fn segments_cross(a: (f64, f64), b: (f64, f64), c: (f64, f64), d: (f64, f64)) -> bool {
    let side = |p: (f64, f64), q: (f64, f64), r: (f64, f64)| {
        (q.0 - p.0) * (r.1 - p.1) - (q.1 - p.1) * (r.0 - p.0)
    };
    let (d1, d2) = (side(c, d, a), side(c, d, b));
    let (d3, d4) = (side(a, b, c), side(a, b, d));
    d1 * d2 < -1e-6 && d3 * d4 < -1e-6
}

fn segments(points: &[(f64, f64)]) -> impl Iterator<Item = ((f64, f64), (f64, f64))> + '_ {
    points.windows(2).map(|w| (w[0], w[1]))
}

#[test]
fn a_thirty_session_lineage_is_drawn_without_crossings_and_says_what_each_session_is() {
    let sessions = lineage();
    let html = render_sessions(&sessions, &ViewOptions::default());
    let (boxes, links) = parse(&html);
    assert_eq!(boxes.len(), 30);
    let want_links: usize = sessions.iter().map(|s| s.lineage().parents.len()).sum();
    assert_eq!(links.len(), want_links);

    // No two boxes overlap.
    for (i, (a, r)) in boxes.iter().enumerate() {
        for (b, q) in &boxes[i + 1..] {
            let apart = r[0] + r[2] <= q[0]
                || q[0] + q[2] <= r[0]
                || r[1] + r[3] <= q[1]
                || q[1] + q[3] <= r[1];
            assert!(apart, "the boxes of {a} and {b} overlap");
        }
    }
    // No link runs across a box it does not join.
    for (from, to, points) in &links {
        assert!(points.len() >= 2, "a link of {} points", points.len());
        for (a, b) in segments(points) {
            for (id, r) in &boxes {
                if id != from && id != to {
                    assert!(
                        !crosses_box(a, b, *r),
                        "the link {from} -> {to} runs across the box of {id}"
                    );
                }
            }
        }
    }
    // No two links cross (this lineage has a drawing without crossings).
    let mut crossings = Vec::new();
    for (i, (f1, t1, p1)) in links.iter().enumerate() {
        for (f2, t2, p2) in &links[i + 1..] {
            let cross =
                segments(p1).any(|(a, b)| segments(p2).any(|(c, d)| segments_cross(a, b, c, d)));
            if cross {
                crossings.push(format!("{f1}->{t1} x {f2}->{t2}"));
            }
        }
    }
    assert!(crossings.is_empty(), "links cross: {crossings:?}");

    // Each node says what its session is.
    let done = &sessions[27];
    let node = html
        .split("<g class=\"node ")
        .skip(1)
        .find(|n| n.contains(&format!("data-session-id=\"{}\"", done.id())))
        .expect("the itinerary's node");
    let node = &node[..node.find("</g>").expect("end of node")];
    assert!(node.contains("writer"), "its agent: {node}");
    assert!(node.contains("closed"), "its status: {node}");
    assert!(node.contains("15 tokens"), "its usage: {node}");
    assert!(node.contains("“the itinerary”"), "its answer: {node}");
    let writer = html
        .split("<g class=\"node ")
        .skip(1)
        .find(|n| n.contains(&format!("data-session-id=\"{}\"", sessions[29].id())))
        .expect("the last node");
    assert!(
        writer.contains("“final copy”"),
        "the first line of its answer: {writer}"
    );

    // The same sessions, the same page.
    for _ in 0..10 {
        assert_eq!(render_sessions(&sessions, &ViewOptions::default()), html);
    }
}

/// A store with no session (an empty directory, one whose files are all unreadable) gives a
/// page that says so: the layout has nothing to lay out, and no panic.
#[test]
fn no_session_gives_a_page_and_no_panic() {
    let html = render_sessions(&[], &ViewOptions::default());
    assert!(html.contains("<svg"), "{html}");
    assert_eq!(parse(&html).0.len(), 0);
}
