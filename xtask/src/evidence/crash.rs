//! `crash_recovery`: a writer killed with SIGKILL leaves a file that loads, and the session
//! resumes exactly where it stopped.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result, bail};
use rath_persist::{Durability, Store, WriterOptions, load_file};
use rath_session::{Chunk, Session, Stamper, ToolCall};
use serde_json::json;

use super::{Ctx, Packet, Report};

/// Set (to a store directory) when the xtask binary runs as the crash child.
pub const CHILD_ENV: &str = "RATH_EVIDENCE_CRASH_CHILD";

/// The session the child writes: a question, a tool call left unanswered (pending work).
fn crash_session() -> Session {
    Session::user_with(
        "Summarise build.log, then count its warnings.",
        Stamper::counter(),
    )
    .push(Chunk::assistant_text("I will read the log first."))
    .push(Chunk::user("Go ahead."))
    .push(Chunk::assistant(
        None,
        Some(vec![ToolCall::function(
            "call_read_1",
            "read_file",
            r#"{"path": "build.log"}"#,
        )]),
    ))
}

/// When the binary was started as the crash child: writes the session row by row, reports
/// `READY`, then waits for the SIGKILL that ends it. Returns `None` in a normal run.
pub fn child_main() -> Option<std::process::ExitCode> {
    let dir = PathBuf::from(std::env::var_os(CHILD_ENV)?);
    let run = || -> Result<()> {
        let s = crash_session();
        let store = Store::at(&dir);
        let mut w = store.writer(&s, WriterOptions::default().durability(Durability::Flush))?;
        for c in s.chunks() {
            w.append(c)?;
        }
        println!("READY {}", w.rows_written());
        // Blocks until the parent kills us; never closes the writer.
        let mut sink = Vec::new();
        std::io::stdin().read_to_end(&mut sink)?;
        std::mem::forget(w);
        Ok(())
    };
    Some(match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crash child: {e:#}");
            std::process::ExitCode::FAILURE
        }
    })
}

/// The `crash_recovery` packet.
pub fn crash_recovery() -> Packet {
    Packet {
        name: "crash_recovery",
        about: "A child process writes a session with a pending tool call and is killed with \
                SIGKILL mid-session; the parent finds the crashed file, loads it, resumes the \
                session (answers the pending call) and closes it. A torn last line is skipped.",
        env: &[],
        build: build_crash,
    }
}

fn kill_child(dir: &Path) -> Result<String> {
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .env(CHILD_ENV, dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("spawn crash child")?;
    let stdout = child.stdout.take().context("child stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    if !line.starts_with("READY") {
        let _ = child.kill();
        bail!("crash child did not report READY: {line:?}");
    }
    child.kill()?; // SIGKILL on Unix
    let status = child.wait()?;
    Ok(format!("{} ({status})", line.trim()))
}

fn build_crash(ctx: &mut Ctx) -> Result<Report> {
    let mut r = Report::new(
        &[
            "a writer killed with SIGKILL leaves a `__partial__` file that the store lists as \
             crashed and that loads with every row written before the kill",
            "the pending tool call survives the crash and is visible after loading \
             (`unanswered_tool_calls`), so the run resumes where it stopped",
            "the resumed session is written whole and closed; a torn last line (a write cut \
             short) is skipped on load",
        ],
        &[
            "durability against power loss (the child flushes to the OS, it does not fsync here; \
             rath-persist documents the fsync mode)",
            "randomised kill points: rath-persist's crash test kills writers 200 times at random \
             points; this packet kills at one fixed point so it stays deterministic",
        ],
    );
    let dir = ctx.tmp_dir("sessions")?;
    let outcome = kill_child(&dir)?;
    r.check(
        "child killed after its rows",
        outcome.starts_with("READY 4"),
        outcome.clone(),
    );
    let store = Store::at(&dir);
    let (summaries, errors) = store.scan()?;
    r.check_eq(
        "scan finds one file, no unreadable one",
        (summaries.len(), errors.len()),
        (1, 0),
    );
    let crashed = summaries.first().context("no session file")?;
    r.check_eq(
        "listed as crashed (not closed)",
        (crashed.crashed, crashed.closed),
        (true, false),
    );
    let partial = store.partial_path_of(&crashed.id);
    let crashed_bytes = std::fs::read(&partial)?;
    ctx.write("crashed/session.jsonl.__partial__", &crashed_bytes)?;

    let loaded = store.load(&crashed.id)?;
    r.check_eq("every row before the kill loads", loaded.session.len(), 4);
    let pending: Vec<String> = loaded
        .session
        .unanswered_tool_calls()
        .iter()
        .map(|c| c.id.clone())
        .collect();
    r.check_eq(
        "pending tool call survives",
        pending.clone(),
        vec!["call_read_1".to_string()],
    );

    // A torn last line: the same file with half a record appended.
    let torn_path = ctx.tmp_dir("torn")?.join("session.jsonl.__partial__");
    let mut torn = crashed_bytes.clone();
    torn.extend_from_slice(br#"{"record_type": "chunk", "index": 4, "kind": "assis"#);
    std::fs::write(&torn_path, &torn)?;
    ctx.write("torn/session.jsonl.__partial__", &torn)?;
    let torn_loaded = load_file(&torn_path)?;
    r.check_eq(
        "torn line skipped, rows kept",
        (torn_loaded.torn_line_skipped, torn_loaded.session.len()),
        (true, 4),
    );

    // Resume: answer the pending call, finish, write whole, close.
    let resumed = loaded
        .session
        .with_stamper(Stamper::counter())
        .push(Chunk::tool_result(
            "call_read_1",
            "read_file",
            r#"{"ok": true, "content": "warning: unused variable\nwarning: dead code\n"}"#,
        ))
        .push(Chunk::assistant_text("The log has 2 warnings."));
    let clock = WriterOptions::default().clock(Stamper::counter());
    let mut w = store.writer(&resumed, clock)?;
    w.sync_to(&resumed)?;
    let final_path = w.close_with(&resumed)?;
    let reloaded = load_file(&final_path)?;
    r.check_eq(
        "resumed file closed with all rows",
        (reloaded.closed, reloaded.session.len()),
        (true, 6),
    );
    r.check_eq(
        "no pending call after resume",
        reloaded.session.unanswered_tool_calls().len(),
        0,
    );
    r.check_eq("partial file gone after close", partial.exists(), false);
    ctx.write("recovered/session.jsonl", std::fs::read(&final_path)?)?;
    ctx.write_json(
        "recovery.json",
        &json!({
            "session_id": crashed.id.as_str(),
            "child": outcome.split(" (").next().unwrap_or(""),
            "crashed_rows": loaded.session.len(),
            "pending_before": pending,
            "torn_line_skipped": torn_loaded.torn_line_skipped,
            "resumed_rows": reloaded.session.len(),
            "closed": reloaded.closed,
        }),
    )?;
    Ok(r)
}
