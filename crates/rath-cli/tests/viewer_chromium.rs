//! The HTML viewer in real headless Chromium, driven over the DevTools protocol: the page
//! loads from `file://` without console errors, the SVG has one node per session and one edge
//! per parent link, and a real mouse click on a node shows that session's transcript.
//!
//! Needs Debian's `chromium` (`.ci/install.d/40-chromium.sh` installs it and exports
//! `RATH_CHROMIUM`); without it the test prints a `RATH-SKIP:` line and returns, and under
//! `RATH_CI=1` it fails.

#[path = "common/chromium.rs"]
mod chromium;
mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use chromium::{Cdp, chromium, launch};
use serde_json::{Value, json};

fn interop() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/interop/openrath-1.3.0")
}

#[test]
fn viewer_in_headless_chromium() {
    let Some(exe) = chromium() else {
        rath_testkit::skip("no chromium (set RATH_CHROMIUM or apt-get install chromium)");
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let page = tmp.path().join("view.html");
    let out = Command::new(env!("CARGO_BIN_EXE_rath"))
        .args(["--store", "openrath_home", "view", "--out"])
        .arg(&page)
        .current_dir(interop())
        .output()
        .expect("run rath view");
    assert_eq!(out.status.code(), Some(0), "{out:?}");

    // The parent links the page must draw, from the store itself.
    let listing = Command::new(env!("CARGO_BIN_EXE_rath"))
        .args(["--store", "openrath_home", "--json", "sessions"])
        .current_dir(interop())
        .output()
        .expect("run rath sessions");
    let rows: Value = serde_json::from_slice(&listing.stdout).expect("json");
    let rows = rows["rows"].as_array().expect("rows").clone();
    let ids: BTreeSet<String> = rows
        .iter()
        .map(|r| r["id"].as_str().unwrap_or_default().to_owned())
        .collect();
    let mut links = BTreeSet::new();
    for r in &rows {
        for p in r["parents"].as_array().into_iter().flatten() {
            let p = p.as_str().unwrap_or_default().to_owned();
            if ids.contains(&p) {
                links.insert(format!("{p}->{}", r["id"].as_str().unwrap_or_default()));
            }
        }
    }
    assert_eq!(links.len(), 6);

    let profile = tmp.path().join("profile");
    std::fs::create_dir_all(&profile).expect("profile dir");
    let (_browser, ws_url) = launch(&exe, &profile);
    let mut cdp = Cdp::connect(&ws_url);
    let s = cdp.page();
    let url = format!("file://{}", page.display());
    cdp.call(Some(&s), "Page.navigate", json!({"url": url}));
    cdp.wait_event("Page.loadEventFired");
    cdp.settle();

    // One node per session, one edge per parent link, and the right ones.
    let nodes = cdp.eval(
        &s,
        "Array.from(document.querySelectorAll('svg g.node[data-session-id]')).map(n => n.getAttribute('data-session-id'))",
    );
    let nodes: BTreeSet<String> = nodes
        .as_array()
        .expect("node list")
        .iter()
        .map(|v| v.as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(nodes, ids);
    let edges = cdp.eval(
        &s,
        "Array.from(document.querySelectorAll('svg .edge')).map(e => e.getAttribute('data-from') + '->' + e.getAttribute('data-to'))",
    );
    let edges: Vec<String> = edges
        .as_array()
        .expect("edge list")
        .iter()
        .map(|v| v.as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(edges.len(), links.len(), "one edge per parent link");
    assert_eq!(edges.into_iter().collect::<BTreeSet<_>>(), links);
    assert_eq!(
        cdp.eval(
            &s,
            "document.querySelectorAll('article.transcript:not([hidden])').length"
        ),
        json!(0)
    );

    // A real mouse click on the loop session's node shows its transcript, and only it.
    let loop_id = "00000000-0000-4000-8000-000000000005";
    cdp.click(&s, &format!("g.node[data-session-id=\"{loop_id}\"]"));
    let shown = cdp.eval(
        &s,
        "Array.from(document.querySelectorAll('article.transcript')).filter(a => !a.hidden && a.offsetHeight > 0).map(a => a.getAttribute('data-session-id'))",
    );
    assert_eq!(shown, json!([loop_id]));
    let text = cdp.eval(
        &s,
        &format!(
            "document.querySelector('article.transcript[data-session-id=\"{loop_id}\"]').innerText"
        ),
    );
    let text = text.as_str().expect("panel text");
    assert!(
        text.contains("The text 'the quick brown fox' has 4 words."),
        "{text}"
    );
    assert!(
        text.contains("tool_result word_count (call_wc_1)"),
        "{text}"
    );
    assert_eq!(
        cdp.eval(&s, &format!("document.querySelector('g.node[data-session-id=\"{loop_id}\"]').classList.contains('selected')")),
        json!(true)
    );

    // Clicking a parent link inside the panel moves to the parent.
    cdp.eval(
        &s,
        &format!("document.querySelector('article.transcript[data-session-id=\"{loop_id}\"] a.goto').click()"),
    );
    let shown = cdp.eval(
        &s,
        "Array.from(document.querySelectorAll('article.transcript')).filter(a => !a.hidden).map(a => a.getAttribute('data-session-id'))",
    );
    assert_eq!(shown, json!(["00000000-0000-4000-8000-000000000003"]));

    cdp.settle();
    let errors = cdp.errors();
    assert!(errors.is_empty(), "console errors: {errors:?}");
    // The capture itself works: a deliberate console error is seen.
    cdp.eval(&s, "console.error('probe'); 1");
    cdp.settle();
    assert_eq!(
        cdp.errors().len(),
        1,
        "console error capture is not working"
    );
}
