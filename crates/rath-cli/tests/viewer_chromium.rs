//! The HTML viewer in real headless Chromium, driven over the DevTools protocol: the page
//! loads from `file://` without console errors, the SVG has one node per session and one edge
//! per parent link, and a real mouse click on a node shows that session's transcript.
//!
//! Needs Debian's `chromium` (`.ci/install.d/40-chromium.sh` installs it and exports
//! `RATH_CHROMIUM`); without it the test prints a `RATH-SKIP:` line and returns, and under
//! `RATH_CI=1` it fails.

mod common;

use std::collections::BTreeSet;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};

fn interop() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/interop/openrath-1.3.0")
}

fn chromium() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("RATH_CHROMIUM").map(PathBuf::from),
        Some(PathBuf::from("/usr/bin/chromium")),
        Some(PathBuf::from("/usr/bin/chromium-browser")),
    ];
    candidates.into_iter().flatten().find(|p| p.is_file())
}

/// Kills the browser however the test ends.
struct Browser(Child);

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A DevTools connection (flattened sessions over the browser socket).
struct Cdp {
    ws: WebSocket<TcpStream>,
    next: u64,
    events: Vec<Value>,
}

impl Cdp {
    fn connect(url: &str) -> Self {
        let rest = url.strip_prefix("ws://").expect("ws url");
        let host = rest.split('/').next().expect("host");
        let stream = TcpStream::connect(host).expect("connect to DevTools");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        let (ws, _) = tungstenite::client(url, stream).expect("websocket handshake");
        // Short reads from now on, so waiting loops can check their deadlines.
        ws.get_ref()
            .set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        Cdp {
            ws,
            next: 1,
            events: Vec::new(),
        }
    }

    fn read(&mut self) -> Option<Value> {
        match self.ws.read() {
            Ok(Message::Text(t)) => serde_json::from_str(t.as_str()).ok(),
            Ok(_) => None,
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                None
            }
            Err(e) => panic!("DevTools connection failed: {e}"),
        }
    }

    fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        self.ws
            .send(Message::text(msg.to_string()))
            .expect("send to DevTools");
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let Some(v) = self.read() else { continue };
            if v.get("id").and_then(Value::as_u64) == Some(id) {
                assert!(v.get("error").is_none(), "{method} failed: {v}");
                return v["result"].clone();
            }
            if v.get("method").is_some() {
                self.events.push(v);
            }
        }
        panic!("no answer to {method} in 20 s");
    }

    fn wait_event(&mut self, method: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self.events.iter().any(|e| e["method"] == method) {
                return;
            }
            if let Some(v) = self.read()
                && v.get("method").is_some()
            {
                self.events.push(v);
            }
        }
        panic!("no {method} event in 20 s");
    }

    /// Drains pending events for a moment (console messages arrive asynchronously).
    fn settle(&mut self) {
        let until = Instant::now() + Duration::from_millis(400);
        while Instant::now() < until {
            if let Some(v) = self.read()
                && v.get("method").is_some()
            {
                self.events.push(v);
            }
        }
    }

    fn eval(&mut self, session: &str, expr: &str) -> Value {
        let r = self.call(
            Some(session),
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true}),
        );
        assert!(r.get("exceptionDetails").is_none(), "{expr} threw: {r}");
        r["result"]["value"].clone()
    }

    /// Console errors, uncaught exceptions and error log entries seen so far.
    fn errors(&self) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|e| match e["method"].as_str() {
                Some("Runtime.exceptionThrown") => {
                    Some(e["params"]["exceptionDetails"].to_string())
                }
                Some("Runtime.consoleAPICalled") if e["params"]["type"] == "error" => {
                    Some(e["params"]["args"].to_string())
                }
                Some("Log.entryAdded") if e["params"]["entry"]["level"] == "error" => {
                    Some(e["params"]["entry"].to_string())
                }
                _ => None,
            })
            .collect()
    }
}

fn launch(exe: &Path, profile: &Path) -> (Browser, String) {
    let child = Command::new(exe)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--remote-debugging-port=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let browser = Browser(child);
    let port_file = profile.join("DevToolsActivePort");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(text) = std::fs::read_to_string(&port_file) {
            let mut lines = text.lines();
            if let (Some(port), Some(path)) = (lines.next(), lines.next()) {
                return (browser, format!("ws://127.0.0.1:{port}{path}"));
            }
        }
        assert!(
            Instant::now() < deadline,
            "chromium did not open DevTools in 30 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
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
    let target = cdp.call(None, "Target.createTarget", json!({"url": "about:blank"}));
    let target_id = target["targetId"].as_str().expect("targetId").to_owned();
    let attached = cdp.call(
        None,
        "Target.attachToTarget",
        json!({"targetId": target_id, "flatten": true}),
    );
    let s = attached["sessionId"]
        .as_str()
        .expect("sessionId")
        .to_owned();
    for m in ["Runtime.enable", "Log.enable", "Page.enable"] {
        cdp.call(Some(&s), m, json!({}));
    }
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
    let rect = cdp.eval(
        &s,
        &format!(
            "(() => {{ const n = document.querySelector('g.node[data-session-id=\"{loop_id}\"]'); n.scrollIntoView({{block: 'center'}}); const r = n.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()"
        ),
    );
    let (x, y) = (rect[0].as_f64().expect("x"), rect[1].as_f64().expect("y"));
    for kind in ["mousePressed", "mouseReleased"] {
        cdp.call(
            Some(&s),
            "Input.dispatchMouseEvent",
            json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
        );
    }
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
