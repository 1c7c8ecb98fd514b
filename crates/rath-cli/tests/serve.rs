//! `rath keys` and `rath serve` as processes: a key minted on the database side opens the
//! API of a server (running the bundled workflows on its embedded worker) that a SIGTERM
//! stops gracefully (exit 0).

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

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

#[test]
fn keys_mint_list_revoke_and_a_served_api_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let runs = format!("sqlite:{}", dir.path().join("runs.db").display());
    let store = format!("sqlite:{}", dir.path().join("sessions.db").display());

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

    let mut child = Command::new(env!("CARGO_BIN_EXE_rath"))
        .args([
            "--store",
            &store,
            "serve",
            "--runs",
            &runs,
            "--bind",
            "127.0.0.1:0",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let addr = first
        .split("http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_owned();

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let http = reqwest::Client::new();
        let ready = http
            .get(format!("http://{addr}/health/ready"))
            .send()
            .await
            .unwrap();
        assert_eq!(ready.status(), 200);
        let page = http
            .get(format!("http://{addr}/v1/sessions"))
            .bearer_auth(&secret)
            .send()
            .await
            .unwrap();
        assert_eq!(page.status(), 200);
        let none = http
            .get(format!("http://{addr}/v1/sessions"))
            .send()
            .await
            .unwrap();
        assert_eq!(none.status(), 401);
    });
    let (code, _, _) = rath(&["keys", "revoke", "--runs", &runs, &id]);
    assert_eq!(code, 0);
    rt.block_on(async {
        let page = reqwest::Client::new()
            .get(format!("http://{addr}/v1/sessions"))
            .bearer_auth(&secret)
            .send()
            .await
            .unwrap();
        assert_eq!(page.status(), 401, "a revoked key is refused at once");
    });

    // SIGTERM: a graceful shutdown, exit 0.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "rath serve did not stop"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(rest.iter().any(|l| l.contains("shutting down")), "{rest:?}");
}
