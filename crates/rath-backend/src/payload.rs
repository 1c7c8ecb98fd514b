//! Payloads (what a tool asks a sandbox to do) and their outputs, as typed enums.
//!
//! ```
//! use std::time::Duration;
//! use rath_backend::{CommandPayload, Payload, PayloadKind};
//!
//! let p = Payload::Command(
//!     CommandPayload::shell("wc -w")
//!         .stdin("a b c")
//!         .env("LANG", "C")
//!         .timeout(Duration::from_secs(5)),
//! );
//! assert_eq!(p.kind(), PayloadKind::Command);
//! assert_eq!(p.summary(), "sh -c 'wc -w' (stdin 5 B, env LANG, timeout 5s)");
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The longest argument summary kept in evidence, in characters.
pub const SUMMARY_LIMIT: usize = 200;

/// What to run: an argv vector, or one shell string for `sh -c`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommandLine {
    /// Program and arguments, no shell.
    Argv(Vec<String>),
    /// A string for `sh -c`.
    Shell(String),
}

impl CommandLine {
    /// The argv that runs this line (`["sh", "-c", s]` for a shell string).
    pub fn to_argv(&self) -> Vec<String> {
        match self {
            CommandLine::Argv(v) => v.clone(),
            CommandLine::Shell(s) => vec!["sh".into(), "-c".into(), s.clone()],
        }
    }

    /// One shell-quoted line (what a shell-only API such as OpenSandbox's `/command` runs).
    pub fn to_shell(&self) -> String {
        match self {
            CommandLine::Shell(s) => s.clone(),
            CommandLine::Argv(v) => v
                .iter()
                .map(|a| shell_quote(a))
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

/// Quotes `s` for a POSIX shell.
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// A command run: argv or shell string, env, cwd, stdin, timeout.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CommandPayload {
    /// What to run.
    pub line: CommandLine,
    /// Extra environment (on top of the backend's scrubbed allow-list).
    pub env: BTreeMap<String, String>,
    /// Working directory, relative to the sandbox workspace.
    pub cwd: Option<String>,
    /// Bytes written to the child's stdin (then closed); `None` gives an empty stdin.
    pub stdin: Option<Vec<u8>>,
    /// Kill the command (and everything it started) after this long.
    pub timeout: Option<Duration>,
}

impl CommandPayload {
    /// Runs `argv` without a shell.
    pub fn argv<I, S>(argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::from_line(CommandLine::Argv(
            argv.into_iter().map(Into::into).collect(),
        ))
    }

    /// Runs `line` with `sh -c`.
    pub fn shell(line: impl Into<String>) -> Self {
        Self::from_line(CommandLine::Shell(line.into()))
    }

    /// A payload for `line` with no env, cwd, stdin or timeout.
    pub fn from_line(line: CommandLine) -> Self {
        Self {
            line,
            env: BTreeMap::new(),
            cwd: None,
            stdin: None,
            timeout: None,
        }
    }

    /// Adds one environment variable.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Sets the working directory (relative to the workspace).
    pub fn cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Sets stdin.
    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }

    /// Sets the timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

/// Languages a code run accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CodeLanguage {
    /// Python 3 (`python3`).
    Python,
}

impl CodeLanguage {
    /// The wire name (`python`).
    pub fn as_str(self) -> &'static str {
        match self {
            CodeLanguage::Python => "python",
        }
    }
}

/// A code run: source text in a language, with an optional timeout.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CodePayload {
    /// The language.
    pub language: CodeLanguage,
    /// The source text.
    pub code: String,
    /// Kill the run after this long.
    pub timeout: Option<Duration>,
}

impl CodePayload {
    /// Python source.
    pub fn python(code: impl Into<String>) -> Self {
        Self {
            language: CodeLanguage::Python,
            code: code.into(),
            timeout: None,
        }
    }

    /// Sets the timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

/// One unit of work for a sandbox. File paths are relative to the sandbox workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Payload {
    /// Run a command.
    Command(CommandPayload),
    /// Read a whole file.
    ReadFile {
        /// Workspace-relative path.
        path: String,
    },
    /// Write (create or replace) a file, creating parent directories.
    WriteFile {
        /// Workspace-relative path.
        path: String,
        /// The new content.
        content: Vec<u8>,
        /// Unix permission bits (e.g. `0o644`); the backend's default when `None`.
        mode: Option<u32>,
    },
    /// List a directory's entries (sorted by name).
    ListDir {
        /// Workspace-relative path (`.` for the workspace root).
        path: String,
    },
    /// Whether a path exists.
    Exists {
        /// Workspace-relative path.
        path: String,
    },
    /// Run source code.
    Code(CodePayload),
}

impl Payload {
    /// A read of `path`.
    pub fn read(path: impl Into<String>) -> Self {
        Payload::ReadFile { path: path.into() }
    }

    /// A write of `content` to `path` with the default mode.
    pub fn write(path: impl Into<String>, content: impl Into<Vec<u8>>) -> Self {
        Payload::WriteFile {
            path: path.into(),
            content: content.into(),
            mode: None,
        }
    }

    /// A listing of `path`.
    pub fn list(path: impl Into<String>) -> Self {
        Payload::ListDir { path: path.into() }
    }

    /// An existence check of `path`.
    pub fn exists(path: impl Into<String>) -> Self {
        Payload::Exists { path: path.into() }
    }

    /// The payload's kind.
    pub fn kind(&self) -> PayloadKind {
        match self {
            Payload::Command(_) => PayloadKind::Command,
            Payload::ReadFile { .. } => PayloadKind::FileRead,
            Payload::WriteFile { .. } => PayloadKind::FileWrite,
            Payload::ListDir { .. } => PayloadKind::FileList,
            Payload::Exists { .. } => PayloadKind::FileExists,
            Payload::Code(_) => PayloadKind::Code,
        }
    }

    /// Bytes the payload sends into the sandbox (stdin, file content, source text, argv).
    pub fn bytes_in(&self) -> u64 {
        let n = match self {
            Payload::Command(c) => {
                let line: usize = match &c.line {
                    CommandLine::Argv(v) => v.iter().map(String::len).sum(),
                    CommandLine::Shell(s) => s.len(),
                };
                line + c.stdin.as_ref().map_or(0, Vec::len)
            }
            Payload::WriteFile { content, .. } => content.len(),
            Payload::Code(c) => c.code.len(),
            Payload::ReadFile { .. } | Payload::ListDir { .. } | Payload::Exists { .. } => 0,
        };
        n as u64
    }

    /// A short, secret-free summary of the arguments for evidence: env values, stdin and file
    /// content are never included (only their keys or sizes); at most [`SUMMARY_LIMIT`] chars.
    pub fn summary(&self) -> String {
        let full = match self {
            Payload::Command(c) => {
                let mut extras = Vec::new();
                if let Some(cwd) = &c.cwd {
                    extras.push(format!("cwd {cwd}"));
                }
                if let Some(s) = &c.stdin {
                    extras.push(format!("stdin {} B", s.len()));
                }
                if !c.env.is_empty() {
                    let keys: Vec<&str> = c.env.keys().map(String::as_str).collect();
                    extras.push(format!("env {}", keys.join(",")));
                }
                if let Some(t) = c.timeout {
                    extras.push(format!("timeout {}", fmt_duration(t)));
                }
                let line = CommandLine::Argv(c.line.to_argv()).to_shell();
                if extras.is_empty() {
                    line
                } else {
                    format!("{line} ({})", extras.join(", "))
                }
            }
            Payload::ReadFile { path } => format!("read {path}"),
            Payload::WriteFile {
                path,
                content,
                mode,
            } => match mode {
                Some(m) => format!("write {path} ({} B, mode {m:o})", content.len()),
                None => format!("write {path} ({} B)", content.len()),
            },
            Payload::ListDir { path } => format!("list {path}"),
            Payload::Exists { path } => format!("exists {path}"),
            Payload::Code(c) => {
                let first = c.code.lines().next().unwrap_or("");
                format!("{} ({} B): {first}", c.language.as_str(), c.code.len())
            }
        };
        truncate_chars(&full, SUMMARY_LIMIT)
    }
}

fn fmt_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

fn truncate_chars(s: &str, limit: usize) -> String {
    match s.char_indices().nth(limit) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// The kind of a payload, as recorded in evidence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PayloadKind {
    /// `command`
    Command,
    /// `file_read`
    FileRead,
    /// `file_write`
    FileWrite,
    /// `file_list`
    FileList,
    /// `file_exists`
    FileExists,
    /// `code`
    Code,
}

impl PayloadKind {
    /// Every kind.
    pub const ALL: [PayloadKind; 6] = [
        PayloadKind::Command,
        PayloadKind::FileRead,
        PayloadKind::FileWrite,
        PayloadKind::FileList,
        PayloadKind::FileExists,
        PayloadKind::Code,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            PayloadKind::Command => "command",
            PayloadKind::FileRead => "file_read",
            PayloadKind::FileWrite => "file_write",
            PayloadKind::FileList => "file_list",
            PayloadKind::FileExists => "file_exists",
            PayloadKind::Code => "code",
        }
    }
}

impl fmt::Display for PayloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a finished command produced. A non-zero exit is an output, not a failure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CommandOutput {
    /// The exit code; `None` when the process was ended by a signal.
    pub exit_code: Option<i32>,
    /// Standard output (lossy UTF-8), at most the backend's cap.
    pub stdout: String,
    /// Standard error (lossy UTF-8), at most the backend's cap.
    pub stderr: String,
    /// True when stdout was cut at the cap.
    pub stdout_truncated: bool,
    /// True when stderr was cut at the cap.
    pub stderr_truncated: bool,
    /// Total bytes the command wrote to stdout and stderr (before any cut).
    pub bytes_out: u64,
    /// Elapsed milliseconds (0 in deterministic mode).
    pub elapsed_ms: f64,
}

impl CommandOutput {
    /// An output from its parts.
    pub fn new(exit_code: Option<i32>, stdout: String, stderr: String) -> Self {
        let bytes_out = (stdout.len() + stderr.len()) as u64;
        Self {
            exit_code,
            stdout,
            stderr,
            stdout_truncated: false,
            stderr_truncated: false,
            bytes_out,
            elapsed_ms: 0.0,
        }
    }

    /// True when the command exited with code 0.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0)
    }
}

/// What a code run produced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CodeOutput {
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// The error the code raised (e.g. `ZeroDivisionError: division by zero`), if any.
    pub error: Option<String>,
}

impl CodeOutput {
    /// An output from its parts.
    pub fn new(stdout: String, stderr: String, error: Option<String>) -> Self {
        Self {
            stdout,
            stderr,
            error,
        }
    }
}

/// The type of a directory entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (not followed).
    Symlink,
    /// Anything else (socket, fifo, device).
    Other,
}

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// The entry's name (no directory part).
    pub name: String,
    /// Its type.
    pub kind: EntryKind,
    /// Its size in bytes (0 for directories on some backends).
    pub size: u64,
}

/// The result of a payload that ran.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Output {
    /// A command's output.
    Command(CommandOutput),
    /// A file's bytes.
    FileContent(Vec<u8>),
    /// A write finished; this many bytes were written.
    FileWritten {
        /// Bytes written.
        bytes: u64,
    },
    /// A directory listing, sorted by name.
    Listing(Vec<FileEntry>),
    /// Whether the path exists.
    Exists(bool),
    /// A code run's output.
    Code(CodeOutput),
}

impl Output {
    /// Bytes the sandbox sent back.
    pub fn bytes_out(&self) -> u64 {
        match self {
            Output::Command(c) => c.bytes_out,
            Output::FileContent(b) => b.len() as u64,
            Output::FileWritten { .. } | Output::Exists(_) => 0,
            Output::Listing(v) => v.iter().map(|e| e.name.len() as u64).sum(),
            Output::Code(c) => (c.stdout.len() + c.stderr.len()) as u64,
        }
    }

    /// The exit code, for a command.
    pub fn exit_code(&self) -> Option<i32> {
        match self {
            Output::Command(c) => c.exit_code,
            _ => None,
        }
    }

    /// The output as JSON for a tool result (`ok: true` plus the fields).
    pub fn to_tool_result_json(&self) -> serde_json::Value {
        use serde_json::json;
        match self {
            Output::Command(c) => json!({
                "ok": true,
                "exit_code": c.exit_code,
                "stdout": c.stdout,
                "stderr": c.stderr,
                "stdout_truncated": c.stdout_truncated,
                "stderr_truncated": c.stderr_truncated,
            }),
            Output::FileContent(b) => json!({"ok": true, "content": String::from_utf8_lossy(b)}),
            Output::FileWritten { bytes } => json!({"ok": true, "bytes_written": bytes}),
            Output::Listing(v) => json!({"ok": true, "entries": v}),
            Output::Exists(e) => json!({"ok": true, "exists": e}),
            Output::Code(c) => json!({
                "ok": c.error.is_none(),
                "stdout": c.stdout,
                "stderr": c.stderr,
                "error": c.error,
            }),
        }
    }
}
