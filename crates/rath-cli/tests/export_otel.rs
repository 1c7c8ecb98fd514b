//! `rath export otel`: the spans of the Python OpenRath 1.3.0 interop store (read in place),
//! printed as JSON, sent to a closed collector port (exit 1, the drop counted), and sent to a
//! loopback collector that accepts OTLP/HTTP.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[path = "common/postgres.rs"]
mod postgres;
use postgres::postgres_store;

fn interop_home() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/interop/openrath-1.3.0/openrath_home")
}

fn rath(args: &[&str], endpoint: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rath"));
    cmd.arg("--store").arg(interop_home()).args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("OTEL_") {
            cmd.env_remove(k);
        }
    }
    if let Some(e) = endpoint {
        cmd.env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", e)
            .env("OTEL_EXPORTER_OTLP_TIMEOUT", "2000");
    }
    cmd.output().expect("run rath")
}

/// An attribute of a printed span (attributes print as `[[name, value], ...]`).
fn attr<'a>(span: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|kv| kv[0] == name)
        .map(|kv| &kv[1])
}

#[test]
fn print_gives_the_spans_of_every_stored_session() {
    let out = rath(&["export", "otel", "--print"], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spans: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let sessions = spans
        .iter()
        .filter(|s| attr(s, "rath.session.id").is_some_and(|v| v.is_string()))
        .count();
    let files = std::fs::read_dir(interop_home().join("sessions"))
        .unwrap()
        .count();
    assert_eq!(sessions, files, "one span per stored session");
    assert!(spans.iter().any(|s| s["name"] == "invoke_workflow"));
    let merge = spans
        .iter()
        .find(|s| attr(s, "rath.lineage.kind").is_some_and(|v| v == "op_merge"))
        .expect("the interop store has a merge");
    assert_eq!(merge["links"].as_array().unwrap().len(), 2);
}

#[test]
fn a_closed_collector_port_is_exit_1_with_the_drop_counted() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("http://127.0.0.1:{port}/v1/traces");
    let out = rath(&["export", "otel"], Some(&endpoint));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("spans were dropped"), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(" 0 spans exported"), "{stdout}");
}

#[test]
fn an_accepting_collector_gets_every_span() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}/v1/traces", listener.local_addr().unwrap());
    let server = std::thread::spawn(move || {
        let mut bodies = 0;
        listener.set_nonblocking(false).unwrap();
        let (mut sock, _) = listener.accept().unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 65536];
        // Read one request (headers and a Content-Length body), answer 200.
        loop {
            let n = sock.read(&mut chunk).unwrap();
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf);
            if let Some(end) = text.find("\r\n\r\n") {
                let len = text[..end]
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap())
                    })
                    .unwrap_or(0);
                if buf.len() >= end + 4 + len {
                    bodies += 1;
                    assert!(
                        text[..end].starts_with("POST /v1/traces"),
                        "{}",
                        &text[..end]
                    );
                    sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n").unwrap();
                    break;
                }
            }
        }
        bodies
    });
    let out = rath(&["export", "otel", "--json"], Some(&endpoint));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["dropped"], 0);
    assert_eq!(report["exported"], report["spans"]);
    assert_eq!(server.join().unwrap(), 1, "one batch");
}

/// Runs `rath --store STORE ARGS` with no OTEL_* variables; returns (exit code, stdout,
/// stderr).
fn rath_on(store: &str, args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rath"));
    cmd.arg("--store").arg(store).args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("OTEL_") || k.starts_with("OPENRATH_") {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output().expect("run rath");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issue 48 (1): a SQL store exported through `--store sqlite://...` printed `[]`, read as
/// the JSONL directory its name is not. The same seven sessions in a JSONL directory, in
/// SQLite and in PostgreSQL give the same spans, all of them or one session's trace.
#[test]
fn every_store_kind_exports_the_same_spans() {
    let tmp = tempfile::tempdir().unwrap();
    let jsonl = interop_home().join("sessions").display().to_string();
    let sqlite = format!("sqlite://{}", tmp.path().join("copy.sqlite").display());
    let mut stores = vec![sqlite];
    if let Some(pg) = postgres_store("rath_cli_export_otel") {
        stores.push(pg);
    }
    let (code, want, stderr) = rath_on(&jsonl, &["export", "otel", "--print"]);
    assert_eq!(code, 0, "{stderr}");
    let spans: Vec<serde_json::Value> = serde_json::from_str(&want).unwrap();
    let sessions = spans
        .iter()
        .filter(|s| attr(s, "rath.session.id").is_some())
        .count();
    assert_eq!(sessions, 7, "one span per stored session");
    let merge = spans
        .iter()
        .find(|s| attr(s, "rath.lineage.kind").is_some_and(|v| v == "op_merge"))
        .expect("a merge");
    let merge_id = attr(merge, "rath.session.id").unwrap().as_str().unwrap();
    let (_, want_one, _) = rath_on(&jsonl, &["export", "otel", merge_id, "--print"]);
    for store in &stores {
        let (code, _, stderr) = rath_on(&jsonl, &["store", "copy", &jsonl, store]);
        assert_eq!(code, 0, "copy into {store}: {stderr}");
        let (code, got, stderr) = rath_on(store, &["export", "otel", "--print"]);
        assert_eq!(code, 0, "{store}: {stderr}");
        assert_eq!(got, want, "{store} exports what the JSONL directory does");
        let (code, got, stderr) = rath_on(store, &["export", "otel", merge_id, "--print"]);
        assert_eq!(code, 0, "{store}: {stderr}");
        assert_eq!(got, want_one, "{store}: the merge's trace");
    }
}

/// Issue 48 (1): an export of a store that holds no session says so (a warning, exit 1)
/// instead of printing `[]` as if all went well; a JSONL directory and SQLite alike.
#[test]
fn an_export_of_nothing_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let empty_dir = tmp.path().join("sessions");
    std::fs::create_dir_all(&empty_dir).unwrap();
    let sqlite = format!("sqlite://{}", tmp.path().join("empty.sqlite").display());
    let (code, _, stderr) = rath_on(&sqlite, &["store", "migrate"]);
    assert_eq!(code, 0, "{stderr}");
    for store in [empty_dir.display().to_string(), sqlite] {
        let (code, stdout, stderr) = rath_on(&store, &["export", "otel", "--print"]);
        assert_eq!(code, 1, "{store}: {stdout} {stderr}");
        assert!(stderr.contains("nothing to export"), "{store}: {stderr}");
        assert_eq!(stdout.trim(), "[]");
        let (code, stdout, stderr) = rath_on(&store, &["export", "otel"]);
        assert_eq!(code, 1, "{store}: {stdout} {stderr}");
        assert!(stderr.contains("nothing to export"), "{store}: {stderr}");
        assert!(stdout.contains("0 spans of 0 sessions"), "{stdout}");
    }
}
