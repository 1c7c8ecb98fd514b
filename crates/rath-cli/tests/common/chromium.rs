//! Headless Chromium driven over the DevTools protocol, for the viewer tests: launch it
//! with its own profile, attach to a page, evaluate, click, and collect console errors.

#![allow(dead_code)]

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};

/// Debian's Chromium (or `RATH_CHROMIUM`), when it is installed.
pub fn chromium() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("RATH_CHROMIUM").map(PathBuf::from),
        Some(PathBuf::from("/usr/bin/chromium")),
        Some(PathBuf::from("/usr/bin/chromium-browser")),
    ];
    candidates.into_iter().flatten().find(|p| p.is_file())
}

/// Kills the browser however the test ends.
pub struct Browser(Child);

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A DevTools connection (flattened sessions over the browser socket).
pub struct Cdp {
    ws: WebSocket<TcpStream>,
    next: u64,
    events: Vec<Value>,
}

impl Cdp {
    pub fn connect(url: &str) -> Self {
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

    pub fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
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

    pub fn wait_event(&mut self, method: &str) {
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
    pub fn settle(&mut self) {
        let until = Instant::now() + Duration::from_millis(400);
        while Instant::now() < until {
            if let Some(v) = self.read()
                && v.get("method").is_some()
            {
                self.events.push(v);
            }
        }
    }

    pub fn eval(&mut self, session: &str, expr: &str) -> Value {
        let r = self.call(
            Some(session),
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true}),
        );
        assert!(r.get("exceptionDetails").is_none(), "{expr} threw: {r}");
        r["result"]["value"].clone()
    }

    /// Console errors, uncaught exceptions and error log entries seen so far.
    pub fn errors(&self) -> Vec<String> {
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

/// Starts headless Chromium with its own profile; returns it and its DevTools socket URL.
pub fn launch(exe: &Path, profile: &Path) -> (Browser, String) {
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

impl Cdp {
    /// Opens a page target and attaches to it with Runtime, Log and Page events on; returns
    /// the session id the other calls take.
    pub fn page(&mut self) -> String {
        let target = self.call(None, "Target.createTarget", json!({"url": "about:blank"}));
        let target_id = target["targetId"].as_str().expect("targetId").to_owned();
        let attached = self.call(
            None,
            "Target.attachToTarget",
            json!({"targetId": target_id, "flatten": true}),
        );
        let s = attached["sessionId"]
            .as_str()
            .expect("sessionId")
            .to_owned();
        for m in ["Runtime.enable", "Log.enable", "Page.enable"] {
            self.call(Some(&s), m, json!({}));
        }
        s
    }

    /// A real mouse click (press and release) at the centre of the element `selector`
    /// names, scrolled into view first.
    pub fn click(&mut self, session: &str, selector: &str) {
        let sel = serde_json::to_string(selector).expect("selector");
        let rect = self.eval(
            session,
            &format!(
                "(() => {{ const n = document.querySelector({sel}); n.scrollIntoView({{block: 'center'}}); const r = n.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()"
            ),
        );
        let (x, y) = (rect[0].as_f64().expect("x"), rect[1].as_f64().expect("y"));
        for kind in ["mousePressed", "mouseReleased"] {
            self.call(
                Some(session),
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            );
        }
    }

    /// Evaluates `expr` every 100 ms until it gives `want` (true after 20 s: the last value).
    pub fn eval_until(&mut self, session: &str, expr: &str, want: &Value) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let got = self.eval(session, expr);
            if &got == want || Instant::now() > deadline {
                return got;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
