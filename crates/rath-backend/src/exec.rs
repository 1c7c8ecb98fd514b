//! Running a child process: scrubbed environment, own process group, capped output, and a
//! timeout that kills the whole group. Shared by `local` and `isolated`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::backend::DispatchContext;
use crate::error::{ToolError, ToolErrorKind};
use crate::payload::{CodeOutput, CommandOutput};

/// Each of stdout and stderr is kept up to this many bytes; the rest is read and dropped.
pub const OUTPUT_CAP: usize = 1 << 20;

/// Parent variables a child may inherit. Everything else (API keys, tokens, cloud
/// credentials) is dropped; explicit payload or spec env is added on top.
pub const ENV_ALLOW_LIST: &[&str] = &["PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM"];

/// The environment for a child: the allow-listed parent variables, then `extra` layers.
pub fn scrubbed_env<'a>(
    home: &Path,
    extra: impl IntoIterator<Item = &'a BTreeMap<String, String>>,
) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = ENV_ALLOW_LIST
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| ((*k).to_owned(), v)))
        .collect();
    env.entry("PATH".into())
        .or_insert_with(|| "/usr/local/bin:/usr/bin:/bin".into());
    env.insert("HOME".into(), home.to_string_lossy().into_owned());
    for layer in extra {
        env.extend(layer.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    env
}

/// A child to run.
#[derive(Debug)]
pub struct ProcessSpec {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// The complete environment.
    pub env: BTreeMap<String, String>,
    /// Host working directory (its path; what `isolated` names inside its view).
    pub cwd: PathBuf,
    /// The same directory, opened beneath the workspace root: when set, the child enters it
    /// with `fchdir` instead of by path, so a symlink swapped in meanwhile is not followed.
    pub cwd_fd: Option<std::os::fd::OwnedFd>,
    /// Stdin bytes.
    pub stdin: Option<Vec<u8>>,
    /// Timeout.
    pub timeout: Option<Duration>,
}

fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        // SAFETY: kill(2) with a negative pid signals the process group we created for the
        // child (process_group(0)); it touches no memory.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
}

async fn read_capped<R: AsyncRead + Unpin>(reader: Option<R>, cap: usize) -> (Vec<u8>, u64) {
    let Some(mut reader) = reader else {
        return (Vec::new(), 0);
    };
    let mut kept = Vec::new();
    let mut total = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                total += n as u64;
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    (kept, total)
}

/// Runs `spec`; the output is capped at [`OUTPUT_CAP`] per stream. On timeout the child's
/// whole process group is killed and a `tool_timeout` failure returned. When the child exits,
/// anything it left running in its group is killed too, so no process outlives a dispatch.
pub async fn run(spec: ProcessSpec, cx: &DispatchContext) -> Result<CommandOutput, ToolError> {
    let Some((program, args)) = spec.argv.split_first() else {
        return Err(ToolError::exception("empty command line"));
    };
    let mut cmd = command(program, args, &spec);
    let mut child = cmd.spawn().map_err(|e| {
        ToolError::exception(format!("cannot start {program:?}: {e}"))
            .with_detail(json!({ "program": program }))
    })?;
    drop(spec.cwd_fd);
    let pid = child.id();
    let Some((status, out, err)) = finish(&mut child, pid, spec.stdin, spec.timeout).await else {
        kill_group(pid);
        let _ = child.wait().await;
        let secs = spec.timeout.map_or(0.0, |t| t.as_secs_f64());
        return Err(ToolError::new(
            ToolErrorKind::ToolTimeout,
            format!("command timed out after {secs}s; its process group was killed"),
        )
        .with_detail(json!({ "timeout_seconds": secs })));
    };
    let status = status.map_err(|e| ToolError::exception(format!("wait failed: {e}")))?;
    Ok(command_output(status, out, err, cx))
}

/// The command for `program` with `args` as `spec` says: its environment only, its working
/// directory (entered by descriptor when `spec` holds one), piped output, a process group of
/// its own, killed when dropped.
fn command(program: &str, args: &[String], spec: &ProcessSpec) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).env_clear().envs(&spec.env);
    match &spec.cwd_fd {
        Some(fd) => {
            let raw = std::os::fd::AsRawFd::as_raw_fd(fd);
            // SAFETY: the closure runs in the forked child before exec and calls only
            // fchdir(2), which is async-signal-safe; `raw` stays open until spawn returns
            // (`spec.cwd_fd` outlives the spawn in `run`).
            unsafe {
                cmd.pre_exec(move || {
                    if libc::fchdir(raw) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        None => {
            cmd.current_dir(&spec.cwd);
        }
    }
    cmd.stdin(if spec.stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .process_group(0)
    .kill_on_drop(true);
    cmd
}

/// One output stream of a child: the bytes kept (at most the cap) and how many it wrote.
type Captured = (Vec<u8>, u64);

/// How a child ended: its exit status (or why waiting for it failed), its stdout, its stderr.
type Finished = (std::io::Result<ExitStatus>, Captured, Captured);

/// Feeds `input` to the spawned `child` (group `pid`), reads its output and waits for it to
/// exit, killing what it left in its group then; `None` when `timeout` passed first.
async fn finish(
    child: &mut tokio::process::Child,
    pid: Option<u32>,
    input: Option<Vec<u8>>,
    timeout: Option<Duration>,
) -> Option<Finished> {
    let stdin_pipe = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let feed = async move {
        if let (Some(mut pipe), Some(bytes)) = (stdin_pipe, input) {
            // A child that exits without reading its stdin breaks the pipe; that is its choice.
            let _ = pipe.write_all(&bytes).await;
            let _ = pipe.shutdown().await;
        }
    };
    let wait = async {
        let status = child.wait().await;
        kill_group(pid);
        status
    };
    let all = async {
        let (status, out, err, ()) = tokio::join!(
            wait,
            read_capped(stdout, OUTPUT_CAP),
            read_capped(stderr, OUTPUT_CAP),
            feed
        );
        (status, out, err)
    };
    match timeout {
        Some(t) => tokio::time::timeout(t, all).await.ok(),
        None => Some(all.await),
    }
}

/// The command output of a child that exited with `status` after writing `out` and `err`.
fn command_output(
    status: ExitStatus,
    (out, out_total): Captured,
    (err, err_total): Captured,
    cx: &DispatchContext,
) -> CommandOutput {
    let mut output = CommandOutput::new(
        status.code(),
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    );
    output.stdout_truncated = out_total > out.len() as u64;
    output.stderr_truncated = err_total > err.len() as u64;
    output.bytes_out = out_total + err_total;
    output.elapsed_ms = cx.elapsed_ms();
    output
}

/// A Python 3 interpreter path on the host, preferring the system one.
pub fn python() -> String {
    for p in ["/usr/bin/python3", "/usr/local/bin/python3"] {
        if Path::new(p).exists() {
            return p.to_owned();
        }
    }
    "python3".to_owned()
}

/// Turns a Python run's command output into a code output: the error is the last non-empty
/// stderr line (the exception line of a traceback) when the run failed.
pub fn code_output(out: CommandOutput) -> CodeOutput {
    let error = if out.success() {
        None
    } else {
        Some(
            out.stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::to_owned)
                .unwrap_or_else(|| match out.exit_code {
                    Some(c) => format!("exit code {c}"),
                    None => "killed by a signal".to_owned(),
                }),
        )
    };
    CodeOutput::new(out.stdout, out.stderr, error)
}
