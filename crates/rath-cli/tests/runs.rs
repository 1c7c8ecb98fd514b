//! `rath worker` and `rath runs` on SQLite, with real worker processes: graceful shutdown
//! hands a run back for another worker at once; an ambiguous call is listed and resolved;
//! a waiting run is approved (and one rejected) from the command line; bad input is one
//! typed line with exit code 2.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

#[path = "common/phoenix.rs"]
mod phoenix;
use phoenix::{attr, named, phoenix_spans};

struct Rig {
    dir: tempfile::TempDir,
}

impl Rig {
    fn new() -> Rig {
        Rig {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn runs(&self) -> String {
        format!("sqlite:{}", self.dir.path().join("runs.db").display())
    }
    fn store(&self) -> String {
        format!("sqlite://{}", self.dir.path().join("sessions.db").display())
    }
    fn effects(&self) -> PathBuf {
        self.dir.path().join("effects.txt")
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_rath"));
        c.args(args)
            .args(["--runs", &self.runs(), "--store", &self.store()])
            .env_remove("OPENRATH_HOME")
            .env_remove("OPENRATH_STORE")
            .env_remove("RATH_RUNS")
            .env_remove("RATH_RUNTIME_CRASH");
        c
    }

    /// Runs `rath` with the rig's stores; returns (exit code, stdout, stderr).
    fn rath(&self, args: &[&str]) -> (i32, String, String) {
        let out = self.cmd(args).output().expect("run rath");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn ok(&self, args: &[&str]) -> String {
        let (code, stdout, stderr) = self.rath(args);
        assert_eq!(code, 0, "rath {args:?}: {stderr}\n{stdout}");
        stdout
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        serde_json::from_str(&self.ok(&all)).unwrap()
    }

    fn submit(&self, workflow: &str) -> String {
        let run = self.json(&["runs", "submit", workflow, "--input", "Plan and write it."]);
        run["id"].as_str().unwrap().to_owned()
    }

    fn status(&self, id: &str) -> String {
        self.json(&["runs", "show", id])["run"]["status"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    fn wait_for(&self, id: &str, want: &str) -> Value {
        // A guard against a hang, minutes above what any run here needs; the test waits
        // for the status, not for a clock.
        let within = Duration::from_secs(120);
        let start = Instant::now();
        loop {
            let shown = self.json(&["runs", "show", id]);
            if shown["run"]["status"] == want {
                return shown;
            }
            assert!(
                start.elapsed() < within,
                "run {id} is {} after {within:?}, wanted {want}",
                shown["run"]["status"]
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A `rath worker` process named `name` with extra arguments and environment.
    fn worker(&self, name: &str, extra: &[&str], env: &[(&str, &str)]) -> Child {
        let effects = self.effects();
        let mut args = vec![
            "worker",
            "--name",
            name,
            "--lease-ms",
            "1000",
            "--poll-ms",
            "20",
            "--effects",
            effects.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let mut c = self.cmd(&args);
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        c.spawn().expect("spawn rath worker")
    }

    fn effect_lines(&self) -> Vec<String> {
        std::fs::read_to_string(self.effects())
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on a child we spawned and have not reaped; no memory effects.
    unsafe {
        libc::kill(child.id() as i32, sig);
    }
}

fn no_duplicates(lines: &[String]) {
    let mut seen = std::collections::HashSet::new();
    for l in lines {
        assert!(seen.insert(l), "key {l} recorded twice");
    }
}

fn events_of(shown: &Value, kind: &str) -> Vec<Value> {
    shown["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == kind)
        .cloned()
        .collect()
}

impl Rig {
    /// `rath sessions --json` on the rig's session store: its rows.
    fn session_rows(&self) -> Vec<Value> {
        let out = Command::new(env!("CARGO_BIN_EXE_rath"))
            .args(["--json", "--store", &self.store(), "sessions"])
            .env_remove("OPENRATH_HOME")
            .env_remove("OPENRATH_STORE")
            .output()
            .expect("run rath sessions");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let listing: Value = serde_json::from_slice(&out.stdout).unwrap();
        listing["rows"].as_array().unwrap().clone()
    }

    /// The rows of `rath sessions` once `want` holds for them.
    fn session_rows_when(&self, want: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        // A guard against a hang, minutes above what any run here needs.
        let within = Duration::from_secs(120);
        let start = Instant::now();
        loop {
            let rows = self.session_rows();
            if want(&rows) {
                return rows;
            }
            assert!(
                start.elapsed() < within,
                "sessions never as wanted: {rows:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn loop_outputs(rows: &[Value]) -> Vec<&Value> {
    rows.iter()
        .filter(|r| r["kind"] == "op_session_loop")
        .collect()
}

/// Issue 48 (4): a run cancelled while it works, and one cancelled while it waits for an
/// approval, leave their sessions `cancelled` in `rath sessions` (they showed `closed`).
#[test]
fn cancelled_runs_leave_their_sessions_cancelled() {
    let rig = Rig::new();
    // A slow model: the run is mid-way (its planner's session stored as it grows) when the
    // cancel comes.
    let mut w = rig.worker("worker-a", &["--think-ms", "3000"], &[]);
    let running = rig.submit("team");
    let rows = rig.session_rows_when(|rows| !loop_outputs(rows).is_empty());
    let working = loop_outputs(&rows)[0]["id"].as_str().unwrap().to_owned();
    rig.ok(&["runs", "cancel", &running]);
    assert_eq!(rig.status(&running), "cancelled");
    let rows = rig.session_rows();
    let row = rows.iter().find(|r| r["id"] == working.as_str()).unwrap();
    assert_eq!(row["status"], "cancelled", "{row}");
    signal(&w, libc::SIGTERM);
    assert!(w.wait().unwrap().success());
    // The cancelled session stays cancelled: the fenced worker wrote nothing after it.
    let rows = rig.session_rows();
    let row = rows.iter().find(|r| r["id"] == working.as_str()).unwrap();
    assert_eq!(row["status"], "cancelled", "{row}");

    let mut w = rig.worker("worker-b", &[], &[]);
    let waiting = rig.submit("gated");
    let shown = rig.wait_for(&waiting, "waiting");
    let out = shown["run"]["output_session"].as_str().unwrap().to_owned();
    signal(&w, libc::SIGTERM);
    assert!(w.wait().unwrap().success());
    rig.ok(&["runs", "cancel", &waiting]);
    let rows = rig.session_rows();
    let row = rows.iter().find(|r| r["id"] == out.as_str()).unwrap();
    assert_eq!(row["status"], "cancelled", "{row}");
    let text = {
        let out = Command::new(env!("CARGO_BIN_EXE_rath"))
            .args(["--store", &rig.store(), "sessions"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(
        text.contains(&format!("cancelled {out}: cancelled")),
        "{text}"
    );
}

#[test]
fn sigterm_hands_the_run_back_and_another_worker_finishes_it() {
    let rig = Rig::new();
    let id = rig.submit("team");
    // A slow model (400 ms a reply) so the run is mid-way when the signal comes.
    let mut a = rig.worker("worker-a", &["--think-ms", "400", "--grace-ms", "0"], &[]);
    rig.wait_for(&id, "running");
    std::thread::sleep(Duration::from_millis(900));
    signal(&a, libc::SIGTERM);
    let status = a.wait().unwrap();
    let out = a.wait_with_output_now();
    assert!(status.success(), "worker a exited {status}: {out}");
    assert!(out.contains("handed back"), "logs: {out}");
    // Handed back: queued at once, not running under a lease left to expire.
    assert_eq!(rig.status(&id), "queued");

    let mut b = rig.worker("worker-b", &[], &[]);
    let shown = rig.wait_for(&id, "succeeded");
    signal(&b, libc::SIGTERM);
    assert!(b.wait().unwrap().success());
    let claims: Vec<String> = events_of(&shown, "claimed")
        .iter()
        .map(|e| e["by"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(claims, ["worker-a", "worker-b"]);
    assert_eq!(shown["run"]["attempts"], 2);
    assert!(shown["ambiguous"].as_array().unwrap().is_empty());
    // Two `record` calls, each happened once (none in flight was cut off by the shutdown).
    let lines = rig.effect_lines();
    assert_eq!(lines.len(), 2, "{lines:?}");
    no_duplicates(&lines);
    let text = rig.ok(&["runs", "show", &id]);
    assert!(text.contains("status      succeeded"), "{text}");
    assert!(text.contains("claimed"), "{text}");
}

trait OutputNow {
    fn wait_with_output_now(self) -> String;
}

impl OutputNow for &mut Child {
    fn wait_with_output_now(self) -> String {
        use std::io::Read as _;
        let mut s = String::new();
        if let Some(mut e) = self.stderr.take() {
            let _ = e.read_to_string(&mut s);
        }
        if let Some(mut o) = self.stdout.take() {
            let _ = o.read_to_string(&mut s);
        }
        s
    }
}

#[test]
fn an_ambiguous_call_is_shown_and_resolved_from_the_command_line() {
    let rig = Rig::new();
    let id = rig.submit("team");
    // The fifth tool answer (lookup, lookup, ... the writer's first `record`) is never
    // recorded: the worker dies between the effect and its recording.
    let mut a = rig.worker("worker-a", &[], &[("RATH_RUNTIME_CRASH", "tool_effect:3")]);
    let _ = a.wait().unwrap();
    assert_eq!(rig.effect_lines().len(), 1, "the effect happened once");
    let mut b = rig.worker("worker-b", &[], &[]);
    let shown = rig.wait_for(&id, "needs_review");
    let amb = shown["ambiguous"].as_array().unwrap();
    assert_eq!(amb.len(), 1, "{shown}");
    assert_eq!(amb[0]["tool"], "record");
    let call = amb[0]["call_id"].as_str().unwrap().to_owned();
    let text = rig.ok(&["runs", "show", &id]);
    assert!(text.contains(&format!("AMBIGUOUS record {call}")), "{text}");
    assert!(text.contains("rath runs resolve"), "{text}");

    // The effect did happen (its key is in the file): settle it with the tool's answer.
    let (code, _, err) = rig.rath(&["runs", "resolve", &id, &call]);
    assert_eq!(code, 2);
    assert!(
        err.starts_with("rath: resolve needs exactly one of"),
        "{err}"
    );
    let answer = r#"{"recorded":"writer 0"}"#;
    let out = rig.ok(&["runs", "resolve", &id, &call, "--succeeded", answer]);
    assert!(out.contains("queued"), "{out}");
    let done = rig.wait_for(&id, "succeeded");
    signal(&b, libc::SIGTERM);
    assert!(b.wait().unwrap().success());
    // The resolved call was not dispatched again; the second `record` ran once.
    let lines = rig.effect_lines();
    assert_eq!(lines.len(), 2, "{lines:?}");
    no_duplicates(&lines);
    let states: Vec<&str> = done["ledger"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["state"].as_str().unwrap())
        .collect();
    assert!(states.iter().all(|s| *s == "succeeded"), "{states:?}");
    // Resolving again is refused: the run is not in review any more.
    let (code, _, err) = rig.rath(&["runs", "resolve", &id, &call, "--rerun"]);
    assert_eq!(code, 2);
    assert!(err.contains("is succeeded"), "{err}");
}

#[test]
fn waiting_runs_are_approved_and_rejected_from_the_command_line() {
    let rig = Rig::new();
    let yes = rig.submit("gated");
    let no = rig.submit("gated");
    let mut w = rig.worker("worker-a", &["--concurrency", "2"], &[]);
    let shown = rig.wait_for(&yes, "waiting");
    rig.wait_for(&no, "waiting");
    assert_eq!(shown["pending"].as_array().unwrap().len(), 1, "{shown}");
    let text = rig.ok(&["runs", "show", &yes]);
    assert!(text.contains("PENDING writer_call_0 record"), "{text}");
    assert!(
        rig.effect_lines().is_empty(),
        "nothing recorded before approval"
    );
    signal(&w, libc::SIGTERM);
    assert!(w.wait().unwrap().success());

    rig.ok(&["runs", "approve", &yes, "--by", "reviewer"]);
    rig.ok(&[
        "runs",
        "reject",
        &no,
        "writer_call_0",
        "--reason",
        "not today",
    ]);
    let mut w2 = rig.worker("worker-b", &[], &[]);
    // The approved run records, then stops on its second gated call; approve that too.
    rig.wait_for(&yes, "waiting");
    let shown = rig.json(&["runs", "show", &yes]);
    let second = shown["pending"][0]["call"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(second, "writer_call_1");
    rig.ok(&["runs", "approve", &yes]);
    let done = rig.wait_for(&yes, "succeeded");
    assert_eq!(events_of(&done, "claimed").len(), 3);
    assert_eq!(rig.effect_lines().len(), 2);
    // The rejected call was answered `denied_by_policy`; the model then asks again and the
    // run is waiting on its next call.
    let after = rig.wait_for(&no, "waiting");
    assert_eq!(after["run"]["segment"], 1);
    signal(&w2, libc::SIGTERM);
    assert!(w2.wait().unwrap().success());

    let listed = rig.json(&["runs", "list", "--status", "succeeded"]);
    assert_eq!(listed["runs"].as_array().unwrap().len(), 1);
    let table = rig.ok(&["runs", "list"]);
    assert!(table.contains("2 run(s)"), "{table}");
}

#[test]
fn bad_input_is_one_typed_line_with_exit_code_2() {
    let rig = Rig::new();
    let id = rig.submit("team");
    let cases: &[(&[&str], &str)] = &[
        (&["runs", "show", "run_nosuch"], "rath: no run run_nosuch"),
        (&["runs", "approve", &id], "is queued: no pending call"),
        (
            &["runs", "submit", "nosuch", "--input", "x"],
            "workflow \"nosuch\" is not registered",
        ),
        (
            &["runs", "list", "--status", "asleep"],
            "unknown status \"asleep\"",
        ),
        (
            &["runs", "resolve", &id, "c1", "--rerun"],
            "is queued: resolve",
        ),
    ];
    for (args, want) in cases {
        let (code, stdout, stderr) = rig.rath(args);
        assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_rath"))
        .args([
            "runs",
            "list",
            "--runs",
            "mysql://x",
            "--store",
            &rig.store(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("rath: not a run store URL"), "{err}");
    // Cancel works once, then is refused.
    assert!(rig.ok(&["runs", "cancel", &id]).contains("cancelled"));
    let (code, _, err) = rig.rath(&["runs", "cancel", &id]);
    assert_eq!(code, 2, "{err}");
}

/// With an OTLP endpoint set, `rath worker` exports its own `tracing` spans to a real
/// collector (Arize Phoenix, `.ci/install.d/70-phoenix.sh`): the run's `worker.execute`
/// with the session store's writes and the `worker.release` under it, in one trace, and no
/// store path in any attribute.
#[test]
fn worker_spans_reach_a_real_collector() {
    let Some(url) = phoenix::url() else {
        rath_testkit::skip(
            "RATH_PHOENIX_URL is not set (.ci/install.d/70-phoenix.sh starts Phoenix)",
        );
        return;
    };
    let rig = Rig::new();
    let id = rig.submit("team");
    let project = phoenix::project("rath-worker");
    let resource = format!("openinference.project.name={project}");
    let mut w = rig.worker(
        "traced",
        &["--grace-ms", "0"],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", url.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_RESOURCE_ATTRIBUTES", resource.as_str()),
        ],
    );
    rig.wait_for(&id, "succeeded");
    signal(&w, libc::SIGTERM);
    let status = w.wait().unwrap();
    assert!(status.success(), "worker: {}", w.wait_with_output_now());

    let spans = phoenix_spans(&url, &project, |s| {
        !named(s, "worker.execute").is_empty() && !named(s, "worker.release").is_empty()
    });
    let execute = named(&spans, "worker.execute");
    assert_eq!(execute.len(), 1, "one execute span: {spans:#?}");
    let execute = execute[0];
    assert_eq!(attr(execute, "rath.run.id"), id.as_str(), "{execute:#}");
    assert_eq!(attr(execute, "rath.worker.name"), "traced", "{execute:#}");
    let trace = &execute["context"]["trace_id"];
    let exec_id = &execute["context"]["span_id"];
    // Under it: the release, and the session store's writes (SQLite: a client span each).
    let under: Vec<&Value> = spans
        .iter()
        .filter(|s| &s["parent_id"] == exec_id)
        .collect();
    assert!(
        under.iter().any(|s| s["name"] == "worker.release"),
        "{under:#?}"
    );
    let writes: Vec<&&Value> = under
        .iter()
        .filter(|s| s["name"] == "write rath_sessions")
        .collect();
    assert!(
        !writes.is_empty(),
        "no store write under the execute span: {under:#?}"
    );
    assert!(
        writes.iter().all(|s| attr(s, "db.system.name") == "sqlite"),
        "{writes:#?}"
    );
    assert!(under.iter().all(|s| &s["context"]["trace_id"] == trace));
    // No attribute names the store's file.
    let dir = rig.dir.path().to_string_lossy().into_owned();
    let text = serde_json::to_string(&spans).unwrap();
    assert!(!text.contains(&dir), "a span names the store's path");
}
