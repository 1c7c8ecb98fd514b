//! `rath keys` and `rath serve` as processes: a key minted on the database side opens the
//! API of a server (running the bundled workflows on its embedded worker) that a SIGTERM
//! stops gracefully (exit 0).

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

#[path = "common/phoenix.rs"]
mod phoenix;

fn rath(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rath"))
        .args(args)
        .env_remove("OPENRATH_HOME")
        .env_remove("OPENRATH_STORE")
        .output()
        .expect("run rath");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The address `rath serve` announces on stderr (log lines may come first).
fn served_at(lines: &mut impl Iterator<Item = std::io::Result<String>>) -> String {
    for line in lines.by_ref() {
        let line = line.expect("read rath serve's stderr");
        if let Some(rest) = line.split("serving on http://").nth(1) {
            return rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned();
        }
    }
    panic!("rath serve exited without announcing its address");
}

/// The status of `GET http://{addr}{path}`, with `key` as the bearer token when given.
fn get(addr: &str, path: &str, key: Option<&str>) -> u16 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut req = reqwest::Client::new().get(format!("http://{addr}{path}"));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        req.send().await.unwrap().status().as_u16()
    })
}

/// A `rath serve` on SQLite files in `dir`, with `env` (stderr piped).
fn serve(dir: &std::path::Path, env: &[(&str, &str)]) -> std::process::Child {
    let runs = format!("sqlite:{}", dir.join("runs.db").display());
    let store = format!("sqlite:{}", dir.join("sessions.db").display());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rath"));
    cmd.args([
        "--store",
        &store,
        "serve",
        "--runs",
        &runs,
        "--bind",
        "127.0.0.1:0",
    ])
    .env_remove("OPENRATH_HOME")
    .env_remove("OPENRATH_STORE")
    .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn rath serve")
}

fn stop(child: &mut std::process::Child) -> std::process::ExitStatus {
    // SAFETY: kill(2) on a child we spawned and have not reaped; no memory effects.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let start = std::time::Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "rath serve did not stop"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn keys_mint_list_revoke_and_a_served_api_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let runs = format!("sqlite:{}", dir.path().join("runs.db").display());

    let (code, out, err) = rath(&[
        "keys", "create", "--runs", &runs, "--tenant", "acme", "--label", "ci",
    ]);
    assert_eq!(code, 0, "{err}");
    let secret = out.lines().next().unwrap().to_owned();
    assert!(secret.starts_with("rath_"), "{out}");
    let (code, listed, _) = rath(&["keys", "list", "--runs", &runs]);
    assert_eq!(code, 0);
    assert!(listed.contains("tenant=acme") && listed.contains("live"));
    assert!(!listed.contains(&secret), "a listing never shows a secret");
    let id = listed.split_whitespace().next().unwrap().to_owned();
    let (code, _, err) = rath(&["keys", "revoke", "--runs", &runs, "key_nope"]);
    assert_eq!(code, 2);
    assert!(err.contains("no key key_nope"), "{err}");

    let mut child = serve(dir.path(), &[]);
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = served_at(&mut lines);

    assert_eq!(get(&addr, "/health/ready", None), 200);
    assert_eq!(get(&addr, "/v1/sessions", Some(&secret)), 200);
    assert_eq!(get(&addr, "/v1/sessions", None), 401);
    let (code, _, _) = rath(&["keys", "revoke", "--runs", &runs, &id]);
    assert_eq!(code, 0);
    assert_eq!(
        get(&addr, "/v1/sessions", Some(&secret)),
        401,
        "a revoked key is refused at once"
    );

    // SIGTERM: a graceful shutdown, exit 0.
    let status = stop(&mut child);
    assert!(status.success(), "{status:?}");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(rest.iter().any(|l| l.contains("shutting down")), "{rest:?}");
}

/// With an OTLP endpoint set, `rath serve` exports a SERVER span per request to a real
/// collector (Arize Phoenix): named by method and route template, with the status code,
/// and never an id or a key in a name.
#[test]
fn request_spans_reach_a_real_collector() {
    let Some(url) = phoenix::url() else {
        rath_testkit::skip(
            "RATH_PHOENIX_URL is not set (.ci/install.d/70-phoenix.sh starts Phoenix)",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let project = phoenix::project("rath-serve");
    let resource = format!("openinference.project.name={project}");
    let mut child = serve(
        dir.path(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", url.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_RESOURCE_ATTRIBUTES", resource.as_str()),
        ],
    );
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = served_at(&mut lines);
    assert_eq!(get(&addr, "/health/live", None), 200);
    assert_eq!(
        get(&addr, "/v1/sessions/sess_nope", Some("rath_not_a_key")),
        401
    );
    assert!(stop(&mut child).success());

    let spans = phoenix::phoenix_spans(&url, &project, |s| {
        !phoenix::named(s, "GET /health/live").is_empty()
            && !phoenix::named(s, "GET /v1/sessions/{id}").is_empty()
    });
    let live = phoenix::named(&spans, "GET /health/live");
    assert_eq!(live.len(), 1, "{spans:#?}");
    assert_eq!(phoenix::attr(live[0], "http.response.status_code"), 200);
    assert_eq!(phoenix::attr(live[0], "http.route"), "/health/live");
    let got = phoenix::named(&spans, "GET /v1/sessions/{id}");
    assert_eq!(got.len(), 1, "{spans:#?}");
    assert_eq!(phoenix::attr(got[0], "http.response.status_code"), 401);
    assert_eq!(phoenix::attr(got[0], "http.request.method"), "GET");
    let text = serde_json::to_string(&spans).unwrap();
    assert!(
        !text.contains("sess_nope") && !text.contains("rath_not_a_key"),
        "{text}"
    );
}
