//! The conformance suite every backend must pass (feature `conformance`).
//!
//! ```
//! use std::sync::Arc;
//! use rath_backend::{conformance, local::LocalBackend};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let report = conformance::run_all(Arc::new(LocalBackend::new())).await;
//! assert!(report.is_ok(), "{report}");
//! # });
//! ```
//!
//! Each check opens its own sandbox, so one failure does not hide the next. The suite
//! covers commands, exit codes, stderr, stdin, env and cwd, timeouts, file write/read/list/
//! exists, lexical path confinement, python code runs, evidence records, handle sharing
//! through the registry, and close.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rath_session::{SandboxHandle, SandboxSpec, Session, Stamper};

use crate::backend::{Backend, DispatchContext};
use crate::error::ToolErrorKind;
use crate::payload::{CodePayload, CommandPayload, EntryKind, Output, Payload};
use crate::registry::BackendRegistry;

/// The outcome of [`run_all`].
#[derive(Clone, Debug, Default)]
pub struct ConformanceReport {
    /// The backend's name.
    pub backend: String,
    /// Names of the checks that passed.
    pub passed: Vec<String>,
    /// Checks that failed, with what went wrong.
    pub failed: Vec<(String, String)>,
}

impl ConformanceReport {
    /// True when every check passed.
    pub fn is_ok(&self) -> bool {
        self.failed.is_empty()
    }
}

impl fmt::Display for ConformanceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "conformance of {}: {} passed, {} failed",
            self.backend,
            self.passed.len(),
            self.failed.len()
        )?;
        for (name, why) in &self.failed {
            writeln!(f, "  FAILED {name}: {why}")?;
        }
        Ok(())
    }
}

type CheckResult = Result<(), String>;
type CheckFuture<'a> = Pin<Box<dyn Future<Output = CheckResult> + Send + 'a>>;
type Check = for<'a> fn(&'a Arc<dyn Backend>) -> CheckFuture<'a>;

/// The names of the checks, in the order [`run_all`] runs them.
pub const CHECKS: &[&str] = &[
    "command_argv",
    "command_shell_exit_code_stderr",
    "command_stdin",
    "command_env_cwd",
    "command_timeout",
    "files_roundtrip",
    "files_listing_exists",
    "files_missing",
    "paths_confined",
    "code_python",
    "evidence_records",
    "handle_shared_and_closed",
];

fn checks() -> [Check; 12] {
    [
        |b| Box::pin(command_argv(b)),
        |b| Box::pin(command_shell(b)),
        |b| Box::pin(command_stdin(b)),
        |b| Box::pin(command_env_cwd(b)),
        |b| Box::pin(command_timeout(b)),
        |b| Box::pin(files_roundtrip(b)),
        |b| Box::pin(files_listing(b)),
        |b| Box::pin(files_missing(b)),
        |b| Box::pin(paths_confined(b)),
        |b| Box::pin(code_python(b)),
        |b| Box::pin(evidence_records(b)),
        |b| Box::pin(handle_shared(b)),
    ]
}

/// Runs every check against `backend` and reports which passed. The backend must be
/// available; an unavailable one fails every check with its reason.
pub async fn run_all(backend: Arc<dyn Backend>) -> ConformanceReport {
    let mut report = ConformanceReport {
        backend: backend.name().to_owned(),
        ..ConformanceReport::default()
    };
    for (name, check) in CHECKS.iter().zip(checks()) {
        match check(&backend).await {
            Ok(()) => report.passed.push((*name).to_owned()),
            Err(why) => report.failed.push(((*name).to_owned(), why)),
        }
    }
    report
}

fn stamper() -> Stamper {
    Stamper::counter()
}

async fn open(b: &Arc<dyn Backend>) -> Result<SandboxHandle, String> {
    b.open(&SandboxSpec::default(), &stamper())
        .await
        .map_err(|e| format!("open failed: {e}"))
}

async fn run(b: &Arc<dyn Backend>, h: &SandboxHandle, p: Payload) -> Result<Output, String> {
    b.dispatch(h, &p, &DispatchContext::new(&stamper()))
        .await
        .map_err(|e| format!("{} failed: {e}", p.summary()))
}

async fn cmd(
    b: &Arc<dyn Backend>,
    h: &SandboxHandle,
    c: CommandPayload,
) -> Result<crate::payload::CommandOutput, String> {
    match run(b, h, Payload::Command(c)).await? {
        Output::Command(o) => Ok(o),
        other => Err(format!("a command returned {other:?}")),
    }
}

fn expect<T: PartialEq + fmt::Debug>(what: &str, got: T, want: T) -> CheckResult {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: got {got:?}, want {want:?}"))
    }
}

async fn command_argv(b: &Arc<dyn Backend>) -> CheckResult {
    let h = open(b).await?;
    let o = cmd(b, &h, CommandPayload::argv(["echo", "hello world"])).await?;
    expect("exit code", o.exit_code, Some(0))?;
    expect("stdout", o.stdout.as_str(), "hello world\n")?;
    expect("truncated", o.stdout_truncated, false)?;
    // An argument with shell metacharacters reaches the program unchanged.
    let o = cmd(b, &h, CommandPayload::argv(["printf", "%s", "a'b $HOME;"])).await?;
    expect("quoted argv", o.stdout.as_str(), "a'b $HOME;")
}

async fn command_shell(b: &Arc<dyn Backend>) -> CheckResult {
    let h = open(b).await?;
    let o = cmd(
        b,
        &h,
        CommandPayload::shell("echo out; echo err >&2; exit 3"),
    )
    .await?;
    expect("exit code", o.exit_code, Some(3))?;
    expect("stdout", o.stdout.as_str(), "out\n")?;
    expect("stderr", o.stderr.as_str(), "err\n")?;
    let o = cmd(b, &h, CommandPayload::shell("false")).await?;
    expect("false", o.exit_code, Some(1))
}

async fn command_stdin(b: &Arc<dyn Backend>) -> CheckResult {
    let h = open(b).await?;
    let o = cmd(
        b,
        &h,
        CommandPayload::argv(["cat"]).stdin("line one\nline two\n"),
    )
    .await?;
    expect("cat stdin", o.stdout.as_str(), "line one\nline two\n")?;
    let o = cmd(b, &h, CommandPayload::shell("wc -l").stdin("a\nb\nc\n")).await?;
    expect("wc -l", o.stdout.trim(), "3")?;
    // No stdin given: the child reads end-of-file at once instead of hanging.
    let o = cmd(
        b,
        &h,
        CommandPayload::argv(["cat"]).timeout(Duration::from_secs(10)),
    )
    .await?;
    expect("empty stdin", o.stdout.as_str(), "")
}

async fn command_env_cwd(b: &Arc<dyn Backend>) -> CheckResult {
    let h = open(b).await?;
    let o = cmd(
        b,
        &h,
        CommandPayload::shell("printf %s \"$RATH_CONF\"").env("RATH_CONF", "v 1"),
    )
    .await?;
    expect("env", o.stdout.as_str(), "v 1")?;
    run(b, &h, Payload::write("sub/dir/x.txt", "in sub")).await?;
    let o = cmd(
        b,
        &h,
        CommandPayload::shell("cat x.txt; basename \"$(pwd)\"").cwd("sub/dir"),
    )
    .await?;
    expect("cwd", o.stdout.as_str(), "in subdir\n")?;
    // A file a command writes is visible to file payloads.
    cmd(b, &h, CommandPayload::shell("echo made > made.txt")).await?;
    expect(
        "command-made file",
        run(b, &h, Payload::read("made.txt")).await?,
        Output::FileContent(b"made\n".to_vec()),
    )
}

async fn command_timeout(b: &Arc<dyn Backend>) -> CheckResult {
    let h = open(b).await?;
    let started = Instant::now();
    let r = b
        .dispatch(
            &h,
            &Payload::Command(
                CommandPayload::shell("sleep 30").timeout(Duration::from_millis(500)),
            ),
            &DispatchContext::new(&stamper()),
        )
        .await;
    let waited = started.elapsed();
    match r {
        Err(f) if f.kind == ToolErrorKind::ToolTimeout => {}
        other => return Err(format!("want tool_timeout, got {other:?}")),
    }
    if waited > Duration::from_secs(10) {
        return Err(format!("the timeout took {waited:?} to fire"));
    }
    // The sandbox still works after a timeout.
    let o = cmd(b, &h, CommandPayload::shell("echo alive")).await?;
    expect("after timeout", o.stdout.as_str(), "alive\n")
}

async fn files_roundtrip(b: &Arc<dyn Backend>) -> CheckResult {
    let h = open(b).await?;
    let bytes: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
    expect(
        "write",
        run(b, &h, Payload::write("data/blob.bin", bytes.clone())).await?,
        Output::FileWritten { bytes: 4096 },
    )?;
    expect(
        "read back",
        run(b, &h, Payload::read("data/blob.bin")).await?,
        Output::FileContent(bytes),
    )?;
    run(b, &h, Payload::write("data/blob.bin", "short")).await?;
    expect(
        "overwrite",
        run(b, &h, Payload::read("./data/../data/blob.bin")).await?,
        Output::FileContent(b"short".to_vec()),
    )?;
    run(
        b,
        &h,
        Payload::WriteFile {
            path: "run.sh".into(),
            content: b"#!/bin/sh\necho ran\n".to_vec(),
            mode: Some(0o755),
        },
    )
    .await?;
    let o = cmd(b, &h, CommandPayload::argv(["./run.sh"])).await?;
    expect("executable mode", o.stdout.as_str(), "ran\n")
}

async fn files_listing(b: &Arc<dyn Backend>) -> CheckResult {
    let h = open(b).await?;
    run(b, &h, Payload::write("d/b.txt", "bb")).await?;
    run(b, &h, Payload::write("d/a.txt", "a")).await?;
    run(b, &h, Payload::write("d/sub/c.txt", "c")).await?;
    let Output::Listing(entries) = run(b, &h, Payload::list("d")).await? else {
        return Err("list did not return a listing".into());
    };
    let names: Vec<(&str, EntryKind)> = entries.iter().map(|e| (e.name.as_str(), e.kind)).collect();
    expect(
        "entries",
        names,
        vec![
            ("a.txt", EntryKind::File),
            ("b.txt", EntryKind::File),
            ("sub", EntryKind::Dir),
        ],
    )?;
    expect("size", entries[1].size, 2)?;
    expect(
        "exists file",
        run(b, &h, Payload::exists("d/a.txt")).await?,
        Output::Exists(true),
    )?;
    expect(
        "exists dir",
        run(b, &h, Payload::exists("d/sub")).await?,
        Output::Exists(true),
    )?;
    expect(
        "missing",
        run(b, &h, Payload::exists("d/zzz")).await?,
        Output::Exists(false),
    )?;
    let Output::Listing(root) = run(b, &h, Payload::list(".")).await? else {
        return Err("list . did not return a listing".into());
    };
    if !root
        .iter()
        .any(|e| e.name == "d" && e.kind == EntryKind::Dir)
    {
        return Err(format!("workspace root listing lacks d/: {root:?}"));
    }
    Ok(())
}

async fn files_missing(b: &Arc<dyn Backend>) -> CheckResult {
    let h = open(b).await?;
    let cx = DispatchContext::new(&stamper());
    match b.dispatch(&h, &Payload::read("nope.txt"), &cx).await {
        Err(f) if f.kind == ToolErrorKind::NotFound => {}
        other => {
            return Err(format!(
                "read of a missing file: want not_found, got {other:?}"
            ));
        }
    }
    match b.dispatch(&h, &Payload::list("no/dir"), &cx).await {
        Err(f) if f.kind == ToolErrorKind::NotFound => Ok(()),
        other => Err(format!(
            "list of a missing dir: want not_found, got {other:?}"
        )),
    }
}

async fn paths_confined(b: &Arc<dyn Backend>) -> CheckResult {
    let h = open(b).await?;
    let cx = DispatchContext::new(&stamper());
    let bad = [
        Payload::read("../outside.txt"),
        Payload::read("a/../../outside.txt"),
        Payload::read("/etc/passwd"),
        Payload::write("../escape.txt", "x"),
        Payload::write("/tmp/rath-escape.txt", "x"),
        Payload::list(".."),
        Payload::exists("/etc"),
        Payload::Command(CommandPayload::argv(["true"]).cwd("..")),
    ];
    for p in bad {
        match b.dispatch(&h, &p, &cx).await {
            Err(f) if f.kind == ToolErrorKind::PathEscape => {}
            other => return Err(format!("{}: want path_escape, got {other:?}", p.summary())),
        }
    }
    Ok(())
}

async fn code_python(b: &Arc<dyn Backend>) -> CheckResult {
    let h = open(b).await?;
    let ok = run(
        b,
        &h,
        Payload::Code(CodePayload::python(
            "import sys\nprint(6 * 7)\nprint('e', file=sys.stderr)",
        )),
    )
    .await?;
    let Output::Code(o) = ok else {
        return Err(format!("code returned {ok:?}"));
    };
    expect("stdout", o.stdout.as_str(), "42\n")?;
    expect("stderr", o.stderr.as_str(), "e\n")?;
    expect("error", o.error, None)?;
    let bad = run(b, &h, Payload::Code(CodePayload::python("x = 1\n1 / 0\n"))).await?;
    let Output::Code(o) = bad else {
        return Err(format!("code returned {bad:?}"));
    };
    match o.error {
        Some(e) if e.contains("ZeroDivisionError") => {}
        other => return Err(format!("want a ZeroDivisionError, got {other:?}")),
    }
    // Code runs in the workspace.
    run(b, &h, Payload::write("in.txt", "from file")).await?;
    let r = run(
        b,
        &h,
        Payload::Code(CodePayload::python("print(open('in.txt').read())")),
    )
    .await?;
    match r {
        Output::Code(o) if o.stdout == "from file\n" => {}
        other => return Err(format!("code did not run in the workspace: {other:?}")),
    }
    match b
        .dispatch(
            &h,
            &Payload::Code(
                CodePayload::python("import time\ntime.sleep(30)")
                    .timeout(Duration::from_millis(500)),
            ),
            &DispatchContext::new(&stamper()),
        )
        .await
    {
        Err(f) if f.kind == ToolErrorKind::ToolTimeout => Ok(()),
        other => Err(format!("code timeout: want tool_timeout, got {other:?}")),
    }
}

async fn evidence_records(b: &Arc<dyn Backend>) -> CheckResult {
    let mut registry = BackendRegistry::new();
    registry.register(b.clone());
    let st = stamper();
    let h = registry
        .open(b.name(), &SandboxSpec::default(), &st)
        .await
        .map_err(|e| format!("open failed: {e}"))?;
    let d = registry
        .dispatch(
            &h,
            &Payload::Command(CommandPayload::shell("printf 12345").stdin("abc")),
            &st,
        )
        .await;
    let ev = &d.evidence;
    expect("backend", ev.backend.as_str(), b.name())?;
    expect("handle", ev.handle_id.as_str(), h.id())?;
    expect("kind", ev.payload_kind.as_str(), "command")?;
    expect("outcome", ev.outcome.as_str(), "ok")?;
    expect("exit", ev.exit_code, Some(0))?;
    expect("bytes_out", ev.bytes_out, 5)?;
    expect("bytes_in", ev.bytes_in, ("printf 12345".len() + 3) as u64)?;
    expect("elapsed (deterministic)", ev.elapsed_ms, 0.0)?;
    expect(
        "summary",
        ev.summary.as_str(),
        "sh -c 'printf 12345' (stdin 3 B)",
    )?;
    let d = registry.dispatch(&h, &Payload::read("missing"), &st).await;
    expect("failure outcome", d.evidence.outcome.as_str(), "not_found")?;
    let d = registry
        .dispatch(&h, &Payload::write("w.txt", "four"), &st)
        .await;
    expect("write bytes_in", d.evidence.bytes_in, 4)?;
    let te = d.evidence.to_tool_evidence("call_1", "write_file");
    expect(
        "tool evidence handle",
        te.sandbox_handle.as_deref(),
        Some(h.id()),
    )?;
    expect(
        "tool evidence kind",
        te.payload_kind.as_deref(),
        Some("file_write"),
    )?;
    let live = Stamper::system();
    let d = registry
        .dispatch(
            &h,
            &Payload::Command(CommandPayload::shell("sleep 0.05")),
            &live,
        )
        .await;
    if d.evidence.elapsed_ms < 40.0 {
        return Err(format!(
            "live elapsed {} ms for a 50 ms sleep",
            d.evidence.elapsed_ms
        ));
    }
    Ok(())
}

async fn handle_shared(b: &Arc<dyn Backend>) -> CheckResult {
    let mut registry = BackendRegistry::new();
    registry.register(b.clone());
    let session = Session::user_with("conformance", stamper()).to(b.name());
    let fork = session.fork();
    let h = registry
        .sandbox_for(&fork)
        .await
        .map_err(|e| format!("sandbox_for failed: {e}"))?;
    let again = registry
        .sandbox_for(&session)
        .await
        .map_err(|e| format!("sandbox_for failed: {e}"))?;
    expect("shared handle id", again.id(), h.id())?;
    expect("handle backend", h.backend(), b.name())?;
    if !h.is_live() {
        return Err("a fresh handle is not live".into());
    }
    registry
        .close(&h)
        .await
        .map_err(|e| format!("close failed: {e}"))?;
    if h.is_live() || again.is_live() {
        return Err("handle still live after close".into());
    }
    registry
        .close(&h)
        .await
        .map_err(|e| format!("second close failed: {e}"))?;
    match b
        .dispatch(&h, &Payload::exists("."), &DispatchContext::new(&stamper()))
        .await
    {
        Err(f) if f.kind == ToolErrorKind::SandboxClosed => {}
        other => {
            return Err(format!(
                "dispatch after close: want sandbox_closed, got {other:?}"
            ));
        }
    }
    match registry.sandbox_for(&session).await {
        Err(crate::BackendError::Closed { .. }) => Ok(()),
        other => Err(format!(
            "sandbox_for a closed slot: want Closed, got {other:?}"
        )),
    }
}
