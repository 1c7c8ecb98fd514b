//! The live tier: the example binaries against a real OpenAI-compatible server, and against a
//! server that refuses every request.
//!
//! - `four_examples_run_live`: hello_agent, engineering_team, research_synthesis and
//!   dynamic_selector, each with `OPENAI_BASE_URL=$RATH_LIVE_BASE_URL` (the local llama.cpp
//!   server with SmolLM2 that `.ci/install.d/20-llama.sh` starts), `OPENAI_API_KEY=sk-local`,
//!   `OPENAI_MODEL=smollm2` and a fresh `OPENRATH_HOME`. Each must finish within its bounds:
//!   exit 0, or exit non-zero with one clear line and the failure stored. Either way the store
//!   must pass `rath verify` and load in Python OpenRath 2.0 (`RATH_OPENRATH_PYTHON`), and
//!   no file, output or line may hold the key. hello_agent's session must show a
//!   non-streamed call (or a stream fallback) and a real tool call or final answer.
//! - `refusing_server_run_is_kept`: the same examples against a loopback server that answers
//!   every request with HTTP 503. The example exits non-zero with one line naming the failure
//!   and the store; the store holds the run's session, closed, marked failed, with every
//!   attempt listed.
//!
//! The examples run are the binaries `cargo test -p openrath` (or `--workspace`) builds next
//! to this test; `--test live_examples` alone does not rebuild them (run `cargo build -p
//! openrath --examples` first then).
//!
//! Locally a missing prerequisite (no `RATH_LIVE_BASE_URL`, example binaries not built, no
//! Python OpenRath) skips with a printed reason; under `RATH_CI=1` it fails.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use openrath::inspect::StoreView;
use openrath::persist::Store;
use openrath::session::{ChunkBody, Session};

const KEY: &str = "sk-local";
/// Wall-clock bound for one live example (SmolLM2 on two cores answers in seconds per call;
/// the live bounds cap the calls).
const LIVE_TIMEOUT: Duration = Duration::from_secs(420);

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs example `name` against `base_url` with a fresh home; kills it after `timeout`.
fn run_example(name: &str, base_url: &str, home: &Path, timeout: Duration) -> Run {
    let bin = common::example_binary(name);
    std::fs::create_dir_all(home).expect("home");
    let started = Instant::now();
    let mut child = Command::new(bin)
        .current_dir(home)
        .env("OPENAI_BASE_URL", base_url)
        .env("OPENAI_API_KEY", KEY)
        .env("OPENAI_MODEL", "smollm2")
        .env("OPENRATH_HOME", home)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn example");
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break Some(st);
        }
        // A guard against a hung example (a live model that never answers), not a
        // measurement: LIVE_TIMEOUT is minutes above what a run needs.
        if started.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let run = Run {
        code: status.and_then(|s| s.code()),
        stdout: reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    };
    assert!(
        status.is_some(),
        "{name} did not finish within {timeout:?}\n--- stdout\n{}\n--- stderr\n{}",
        run.stdout,
        run.stderr
    );
    run
}

/// Every stored session, loaded.
fn stored(home: &Path) -> Vec<Session> {
    let store = Store::at(home.join("sessions"));
    store
        .list()
        .expect("list")
        .iter()
        .map(|s| store.load(&s.id).expect("load").session)
        .collect()
}

/// `rath verify` on the store, the key nowhere under `home`, and Python OpenRath 2.0 loads
/// every session (when its interpreter is configured).
fn check_store(name: &str, home: &Path, run: &Run) {
    let view = StoreView::open(home).expect("open store");
    let report = view.verify().expect("verify");
    assert!(
        report.is_clean() && report.warnings() == 0,
        "{name}: rath verify rejected the store:\n{}",
        report.render()
    );
    for text in [&run.stdout, &run.stderr] {
        assert!(!text.contains(KEY), "{name}: the key is in the output");
    }
    for file in files_under(home) {
        let bytes = std::fs::read(&file).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(KEY),
            "{name}: the key is in {}",
            file.display()
        );
    }
    common::python_loads(name, home);
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// A run that exited non-zero: one clear last line naming the failure and the store, and a
/// stored session that is failed.
fn check_failed_run(name: &str, home: &Path, run: &Run) -> Session {
    let line = run.stderr.lines().last().unwrap_or_default();
    let prefix = format!("{name}: run failed: ");
    assert!(
        line.starts_with(&prefix) && line.contains("sessions saved in"),
        "{name}: the last line does not name the failure and the store: {line:?}\n{}",
        run.stderr
    );
    let listing = StoreView::open(home)
        .expect("open")
        .sessions()
        .expect("list");
    let failed: Vec<_> = listing
        .rows
        .iter()
        .filter(|r| r.status == "failed")
        .collect();
    // Parallel branches finish on their own, so more than one branch of a live run may fail
    // (each one stored); the line names the one the run failed with.
    assert!(!failed.is_empty(), "{name}: {}", listing.render());
    let named = failed
        .iter()
        .find(|r| line.contains(r.id.as_str()))
        .unwrap_or_else(|| panic!("{name}: {line:?} names no failed session"));
    let session = Store::at(home.join("sessions"))
        .load(&named.id)
        .expect("load failed session");
    assert!(session.closed, "{name}: the failed session is not closed");
    session.session
}

#[test]
fn four_examples_run_live() {
    let Ok(base) = std::env::var("RATH_LIVE_BASE_URL") else {
        rath_testkit::skip("RATH_LIVE_BASE_URL is not set (no local model server)");
        return;
    };
    let names = [
        "hello_agent",
        "engineering_team",
        "research_synthesis",
        "dynamic_selector",
    ];
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut timings = Vec::new();
    for name in names {
        let home = tmp.path().join(name);
        let run = run_example(name, &base, &home, LIVE_TIMEOUT);
        timings.push(format!("{name} exit {:?}", run.code));
        eprintln!("{name}: exit {:?}\n{}{}", run.code, run.stdout, run.stderr);
        let sessions = stored(&home);
        assert!(!sessions.is_empty(), "{name} stored no session");
        // The one-agent example must complete against a real server.
        assert!(
            name != "hello_agent" || run.code == Some(0),
            "hello_agent did not complete live:\n{}",
            run.stderr
        );
        if run.code != Some(0) {
            let failed = check_failed_run(name, &home, &run);
            assert!(failed.failure().is_some());
        }
        check_store(name, &home, &run);
        if name == "hello_agent" {
            check_hello_agent(&sessions);
        }
        // Every model call of a live run went to the real provider.
        let calls: Vec<_> = sessions
            .iter()
            .flat_map(|s| s.chunks().iter())
            .filter_map(|c| match c.body() {
                ChunkBody::ModelCall(m) => Some(m.provider.clone()),
                _ => None,
            })
            .collect();
        assert!(
            calls.iter().all(|p| p == "openai-compatible"),
            "{name}: {calls:?}"
        );
    }
    eprintln!("live tier: {}", timings.join(", "));
}

/// hello_agent's loop session: a non-streamed call or a stream fallback on record, and a
/// real tool call or a final answer from the model.
fn check_hello_agent(sessions: &[Session]) {
    let looped = sessions
        .iter()
        .find(|s| s.lineage().operator == "run_session_loop")
        .expect("hello_agent's loop session");
    let calls: Vec<_> = looped
        .chunks()
        .iter()
        .filter_map(|c| match c.body() {
            ChunkBody::ModelCall(m) => Some(m),
            _ => None,
        })
        .collect();
    assert!(!calls.is_empty(), "no model_call evidence");
    let plain = calls.iter().any(|m| {
        let v = serde_json::to_value(m).unwrap_or_default();
        v["detail"]["stream"] == serde_json::json!(false)
            || !v["detail"]["stream_fallback"].is_null()
    });
    assert!(
        plain,
        "no non-streamed call or stream fallback on record: {calls:?}"
    );
    let answered = looped.chunks().iter().any(|c| match c.body() {
        ChunkBody::Assistant(a) => {
            a.tool_calls.as_ref().is_some_and(|t| !t.is_empty())
                || a.content.as_deref().is_some_and(|t| !t.trim().is_empty())
        }
        _ => false,
    });
    assert!(answered, "the model made no tool call and gave no answer");
}

/// A loopback HTTP server that answers every request with 503; counts the requests.
struct RefusingServer {
    url: String,
    requests: Arc<AtomicUsize>,
}

impl RefusingServer {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/v1", listener.local_addr().expect("addr"));
        let requests = Arc::new(AtomicUsize::new(0));
        let count = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let count = count.clone();
                std::thread::spawn(move || {
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                    if read_request(&mut stream) {
                        count.fetch_add(1, Ordering::SeqCst);
                        let body = r#"{"error": {"message": "fault injection: this server refuses every request", "type": "server_error"}}"#;
                        let reply = format!(
                            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = stream.write_all(reply.as_bytes());
                    }
                });
            }
        });
        RefusingServer { url, requests }
    }
}

/// Reads one HTTP request (headers and a `Content-Length` body); false when none came.
fn read_request(stream: &mut std::net::TcpStream) -> bool {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let header_end = loop {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < header_end + len {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    true
}

#[test]
fn refusing_server_run_is_kept() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for (name, agent, step) in [
        ("hello_agent", "hello", "model_call"),
        ("dynamic_selector", "router", "route"),
    ] {
        let server = RefusingServer::start();
        let home = tmp.path().join(name);
        let run = run_example(name, &server.url, &home, Duration::from_secs(120));
        assert_eq!(
            run.code,
            Some(1),
            "{name} against a refusing server\n{}\n{}",
            run.stdout,
            run.stderr
        );
        let failure_lines: Vec<&str> = run
            .stderr
            .lines()
            .filter(|l| l.starts_with(&format!("{name}:")))
            .collect();
        assert_eq!(failure_lines.len(), 1, "{}", run.stderr);
        assert!(failure_lines[0].contains("503"), "{}", failure_lines[0]);
        let failed = check_failed_run(name, &home, &run);
        let f = failed.failure().expect("run_failure chunk");
        assert_eq!(f.kind, "provider");
        assert_eq!(f.agent.as_deref(), Some(agent));
        assert_eq!(f.step, step);
        assert!(f.request_id.is_some());
        // Every request the server saw is an attempt on record, each with its status.
        let requests = server.requests.load(Ordering::SeqCst);
        assert!(requests >= 1);
        assert_eq!(f.attempts.len(), requests, "{f:?}");
        assert!(f.attempts.iter().all(|a| a.status == Some(503)), "{f:?}");
        // `rath show` says why.
        let view = StoreView::open(&home).expect("open");
        let shown = view.transcript(failed.id()).expect("transcript").render();
        assert!(shown.contains("FAILED    provider"), "{shown}");
        assert!(shown.contains("attempt 1:"), "{shown}");
        check_store(name, &home, &run);
    }
}
