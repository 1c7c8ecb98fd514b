//! `visual_qa`: the HTML viewer rendered by headless Chromium, with DOM checks.

use std::path::Path;
use std::process::Command;

use anyhow::Result;
use rath_session::Stamper;
use serde_json::json;

use super::{Ctx, Packet, Report};

const CHROMIUM: &[&str] = &["/usr/bin/chromium", "/usr/bin/chromium-browser"];

/// The `visual_qa` packet.
pub fn visual_qa() -> Packet {
    Packet {
        name: "visual_qa",
        about: "Renders the lineage scenario with the HTML viewer (openrath::view, what \
                `rath view` writes), loads it in headless Chromium, counts session nodes and \
                lineage edges in the live DOM and takes a screenshot.",
        env: &[],
        build: build_visual,
    }
}

fn chromium_args(user_dir: &Path) -> Vec<String> {
    [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        "--window-size=1280,900",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("--user-data-dir={}", user_dir.display())])
    .collect()
}

fn build_visual(ctx: &mut Ctx) -> Result<Report> {
    let mut r = Report::new(
        &[
            "the viewer page renders in a real browser: after its script runs, the DOM holds \
             one node per session and one edge per parent link of the scenario",
            "the page is self-contained (loaded from a file:// URL with networking disabled)",
        ],
        &[
            "visual quality: the screenshot is for a human reviewer and is volatile (not \
             compared)",
            "browsers other than Chromium",
        ],
    );
    let sessions: Vec<rath_session::Session> = super::lineage::scenario(Stamper::counter())?
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    let options = rath_inspect::view::ViewOptions::default()
        .title("openrath evidence: lineage scenario")
        .source("xtask evidence (lineage_export scenario)");
    let html = rath_inspect::view::render_sessions(&sessions, &options);
    ctx.write("view.html", &html)?;
    let want_nodes = sessions.len();
    let want_edges: usize = sessions.iter().map(|s| s.lineage().parents.len()).sum();
    r.check_eq(
        "page source: nodes",
        html.matches("<g class=\"node").count(),
        want_nodes,
    );
    let Some(chromium) = CHROMIUM.iter().find(|p| Path::new(p).is_file()) else {
        r.skip("Chromium is not installed (CI installs it with .ci/install.d/40-chromium.sh)");
        return Ok(r);
    };
    let page = ctx.tmp_dir("page")?.join("view.html");
    std::fs::write(&page, &html)?;
    let url = format!("file://{}", page.display());
    let profile = ctx.tmp_dir("profile")?;
    let dom = Command::new(chromium)
        .args(chromium_args(&profile))
        .arg("--dump-dom")
        .arg(&url)
        .output()?;
    let dom_text = String::from_utf8_lossy(&dom.stdout).to_string();
    let nodes = dom_text.matches("<g class=\"node").count();
    let edges = dom_text.matches("class=\"edge\"").count();
    let has_transcripts = dom_text.matches("class=\"transcript\"").count();
    ctx.write_json(
        "dom_checks.json",
        &json!({"nodes": nodes, "edges": edges, "transcripts": has_transcripts,
                "expected_nodes": want_nodes, "expected_edges": want_edges}),
    )?;
    r.check(
        "chromium --dump-dom ran",
        dom.status.success(),
        dom.status.to_string(),
    );
    r.check_eq("DOM: one node per session", nodes, want_nodes);
    r.check_eq("DOM: one edge per parent link", edges, want_edges);
    r.check_eq(
        "DOM: one transcript per session",
        has_transcripts,
        want_nodes,
    );
    let shot = ctx.tmp_dir("shot")?.join("screenshot.png");
    let s = Command::new(chromium)
        .args(chromium_args(&ctx.tmp_dir("profile2")?))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(&url)
        .output()?;
    let png = std::fs::read(&shot).unwrap_or_default();
    r.check(
        "screenshot taken",
        s.status.success() && png.starts_with(b"\x89PNG"),
        format!("{} bytes", png.len()),
    );
    if !png.is_empty() {
        ctx.write("screenshot.png", png)?;
    }
    Ok(r)
}
