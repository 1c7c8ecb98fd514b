//! `rath run NAME --input TEXT` (issue 50, item 4): one workflow in the foreground on the
//! embedded store, a progress line per step, the answer, and where its sessions went.

use std::path::Path;
use std::process::{Command, Output};

fn rath(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rath"))
        .args(args)
        .env("OPENRATH_HOME", home)
        .env_remove("OPENRATH_STORE")
        .env("OPENRATH_DETERMINISTIC", "1")
        .output()
        .expect("run rath")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn run_shows_each_step_and_stores_the_run() {
    let home = tempfile::tempdir().expect("tempdir");
    let out = rath(
        home.path(),
        &["run", "team", "--input", "Plan it, then record it."],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // One line per step, in order: each agent starts, its model asks for tools, the tools
    // answer, the model answers, the agent is done.
    let steps: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("rath: "))
        .map(|l| l.split_once("s  ").map_or(l, |(_, step)| step))
        .collect();
    for expected in [
        "planner: started",
        "planner: model calls lookup",
        "planner: tool lookup ok",
        "planner: model answered",
        "writer: started",
        "writer: model calls record",
        "writer: tool record ok",
        "writer: done (",
    ] {
        assert!(
            steps.iter().any(|s| s.starts_with(expected)),
            "{expected:?} in {steps:#?}"
        );
    }
    assert_eq!(
        steps
            .iter()
            .filter(|s| s.starts_with("planner: tool lookup ok"))
            .count(),
        2,
        "two lookups: {steps:#?}"
    );
    let first = |s: &str| steps.iter().position(|l| *l == s).unwrap();
    assert!(first("planner: started") < first("writer: started"));

    // The answer, then where the sessions are: `rath show` reads the answer from there.
    let last = stdout.lines().last().expect("a last line");
    assert!(last.starts_with("stored "), "{stdout}");
    assert!(
        last.contains(&home.path().join("sessions").display().to_string()),
        "{last}"
    );
    let id = last
        .split("the answer is session ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .expect("the answer's id");
    let show = rath(home.path(), &["show", id]);
    assert_eq!(show.status.code(), Some(0), "{}", text(&show.stderr));
    let saved: usize = last
        .trim_start_matches("stored ")
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a count");
    let listed = rath(home.path(), &["--json", "sessions"]);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("json");
    assert_eq!(
        listed["rows"].as_array().map(Vec::len),
        Some(saved),
        "{listed}"
    );
}

#[test]
fn an_unknown_workflow_is_refused_with_the_known_ones() {
    let home = tempfile::tempdir().expect("tempdir");
    let out = rath(home.path(), &["run", "nope", "--input", "x"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no workflow \"nope\""), "{stderr}");
    assert!(stderr.contains("gated, team"), "{stderr}");
    assert!(!home.path().join("sessions").exists(), "nothing is written");
}

#[test]
fn a_run_stopped_on_an_approval_says_so() {
    let home = tempfile::tempdir().expect("tempdir");
    let out = rath(home.path(), &["run", "gated", "--input", "Record it."]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stdout.starts_with("the run stopped on 1 call(s) waiting for a decision: record ("),
        "{stdout}"
    );
    assert!(stdout.contains("stored "), "{stdout}");
}
