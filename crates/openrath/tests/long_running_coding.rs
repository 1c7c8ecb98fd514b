//! Kill the `long_running_coding` example mid-run (SIGKILL), run it again with `--resume`,
//! and check the resumed transcript equals an uninterrupted run's and that the resume shows
//! in the lineage.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use openrath::persist::Store;
use openrath::session::{ChatMessage, ChunkBody, LineageKind, Session};

/// The example's script: six files, the check, the final answer.
const TURNS: usize = 8;

/// Milliseconds the example waits before every model call.
const STEP_DELAY_ENV: &str = "RATH_STEP_DELAY_MS";

/// Number of assistant chunks in `s` (model turns taken).
fn assistant_turns(s: &Session) -> usize {
    s.chunks()
        .iter()
        .filter(|c| matches!(c.body(), ChunkBody::Assistant(_)))
        .count()
}

fn python3_available() -> bool {
    Command::new("python3")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `target/<profile>/examples/long_running_coding`, built with `cargo build` when absent.
fn example_binary() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    // target/<profile>/deps/<test binary>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| anyhow::anyhow!("unexpected test binary location {}", exe.display()))?;
    let bin = profile_dir.join("examples").join(format!(
        "long_running_coding{}",
        std::env::consts::EXE_SUFFIX
    ));
    if !bin.is_file() {
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args([
            "build",
            "-p",
            "openrath",
            "--example",
            "long_running_coding",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        if let Some(target) = profile_dir.parent() {
            cmd.env("CARGO_TARGET_DIR", target);
        }
        let status = cmd.status()?;
        anyhow::ensure!(status.success(), "cargo build --example failed: {status}");
    }
    anyhow::ensure!(bin.is_file(), "{} was not built", bin.display());
    Ok(bin)
}

fn rows_in(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".__partial__"))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .map(|t| t.lines().count())
        .sum()
}

fn conversation(s: &Session) -> Vec<ChatMessage> {
    s.messages()
}

#[tokio::test]
async fn killed_mid_run_then_resumed_matches_an_uninterrupted_run() -> anyhow::Result<()> {
    if !python3_available() {
        rath_testkit::skip("python3 is not on PATH (the agent's check runs it)");
        return Ok(());
    }
    let bin = example_binary()?;

    // The reference: an uninterrupted run.
    let reference_home = tempfile::tempdir()?;
    let out = Command::new(&bin)
        .args(["--store".as_ref(), reference_home.path().as_os_str()])
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "reference run: {stdout}");
    assert!(stdout.contains("check: exit 0"), "{stdout}");
    let reference_store = Store::at(reference_home.path().join("sessions"));
    let looped = reference_store
        .list()?
        .into_iter()
        .find(|s| s.operator == "run_session_loop" && s.closed)
        .ok_or_else(|| anyhow::anyhow!("no closed loop session in the reference store"))?;
    let reference_final = reference_store.load(&looped.id)?.session;
    assert_eq!(assistant_turns(&reference_final), TURNS);

    // The interrupted run: slowed down, killed after a few chunk rows reach the store.
    let home = tempfile::tempdir()?;
    let sessions = home.path().join("sessions");
    let mut child = Command::new(&bin)
        .args(["--store".as_ref(), home.path().as_os_str()])
        .env(STEP_DELAY_ENV, "250")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    // Header + a few chunk rows: at least two model turns persisted, several still to come.
    while rows_in(&sessions) < 7 {
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("the example exited ({status}) before it could be killed");
        }
        anyhow::ensure!(Instant::now() < deadline, "no chunk rows appeared in time");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill()?; // SIGKILL on unix
    child.wait()?;

    let store = Store::at(&sessions);
    let partial = store
        .list()?
        .into_iter()
        .find(|s| s.crashed)
        .ok_or_else(|| anyhow::anyhow!("no partial session left by the killed run"))?;
    let stopped = store.load(&partial.id)?.session;
    let done_before = assistant_turns(&stopped);
    assert!(
        (2..TURNS).contains(&done_before),
        "killed after {done_before} model turns"
    );

    // Resume in a new process.
    let out = Command::new(&bin)
        .args([
            "--store".as_ref(),
            home.path().as_os_str(),
            "--resume".as_ref(),
        ])
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "resume failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("resumed {}", partial.id)),
        "{stdout}"
    );

    // Lineage: the resumed session continues the partial one.
    let list = store.list()?;
    let resumed = list
        .iter()
        .find(|s| s.operator == "resume_session_loop")
        .ok_or_else(|| anyhow::anyhow!("no resume_session_loop session in the store"))?;
    assert_eq!(resumed.kind, LineageKind::OpResume);
    assert_eq!(resumed.parents.first(), Some(&partial.id));
    assert!(resumed.closed, "the resumed session was closed");
    assert!(
        list.iter().any(|s| s.id == partial.id && s.crashed),
        "the interrupted session stays in the store as evidence"
    );

    // Transcript: the same conversation as the uninterrupted run.
    let final_session = store.load(&resumed.id)?.session;
    assert_eq!(conversation(&final_session), conversation(&reference_final));
    assert_eq!(assistant_turns(&final_session), TURNS);
    // Usage counts every model call once: the interrupted run's plus the resumed run's.
    assert_eq!(final_session.usage(), reference_final.usage());

    // A second --resume finds nothing left to continue.
    let again = Command::new(&bin)
        .args([
            "--store".as_ref(),
            home.path().as_os_str(),
            "--resume".as_ref(),
        ])
        .output()?;
    assert!(!again.status.success());
    Ok(())
}
