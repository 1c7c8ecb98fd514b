//! `long_running_coding`: one agent builds a small Python package over many tool rounds (one
//! file per round, then a real check in a `local` sandbox), streaming every new chunk into the
//! store as it goes. Kill it mid-run and [`CodingConfig::resume`] continues from the partial
//! session left in the store: a new session (operator `resume_session_loop`, kind
//! `op_resume`) whose parent is the loaded one, ending with the same transcript an
//! uninterrupted run produces.
//!
//! The agent answers from a script; on resume the script is positioned at the response after
//! the last assistant chunk found in the loaded session, so the model turns line up.
//!
//! ```no_run
//! use openrath::demos::long_running_coding::{CodingConfig, run};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let home = std::path::Path::new("/tmp/openrath-coding");
//! let first = run(CodingConfig::offline(home)).await?;            // (imagine it was killed)
//! let again = run(CodingConfig::offline(home).resume(true)).await; // continues a partial one
//! # let _ = (first, again);
//! # Ok::<(), openrath::demos::DemoError>(())
//! # });
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rath_flow::{FlowContext, FlowEvent, LoopOptions, SessionLoop, StoreSink, ToolSet};
use rath_persist::Store;
use rath_provider::{Provider, RecordingProvider, ScriptedProvider, ScriptedResponse};
use rath_session::{ChunkBody, SandboxSpec, Session, SessionId, Stamper, Usage};
use serde_json::json;

use super::{DemoError, io};
use crate::inspect::usage_text;

/// The task given to the agent.
pub const TASK: &str = "Create the `shapes` Python package: one module per shape (square, \
                        rectangle, circle, triangle), a package __init__ re-exporting their \
                        `area` functions, and a check script; then run the check.";

/// The system prompt.
pub const SYSTEM: &str = "You are a methodical Python engineer. Write one file per step with write_workspace_file, \
     then run the check with run_shell_command and report.";

/// The files the agent writes, in order.
pub const FILES: &[(&str, &str)] = &[
    (
        "shapes/square.py",
        "def area(side):\n    \"\"\"Area of a square.\"\"\"\n    return side * side\n",
    ),
    (
        "shapes/rectangle.py",
        "def area(width, height):\n    \"\"\"Area of a rectangle.\"\"\"\n    return width * height\n",
    ),
    (
        "shapes/circle.py",
        "import math\n\n\ndef area(radius):\n    \"\"\"Area of a circle.\"\"\"\n    return math.pi * radius * radius\n",
    ),
    (
        "shapes/triangle.py",
        "def area(base, height):\n    \"\"\"Area of a triangle.\"\"\"\n    return base * height / 2\n",
    ),
    (
        "shapes/__init__.py",
        "from shapes.circle import area as circle_area\nfrom shapes.rectangle import area as rectangle_area\nfrom shapes.square import area as square_area\nfrom shapes.triangle import area as triangle_area\n\n__all__ = [\"circle_area\", \"rectangle_area\", \"square_area\", \"triangle_area\"]\n",
    ),
    (
        "check.py",
        "import shapes\n\nassert shapes.square_area(3) == 9\nassert shapes.rectangle_area(2, 5) == 10\nassert round(shapes.circle_area(1), 4) == 3.1416\nassert shapes.triangle_area(4, 3) == 6\nprint(\"4 shapes ok\")\n",
    ),
];

/// The check the agent runs.
pub const CHECK_COMMAND: &str = "PYTHONDONTWRITEBYTECODE=1 python3 check.py";

/// The environment variable read by [`CodingConfig::from_env`]: milliseconds to wait before
/// every model call (lets a test kill the run mid-way).
pub const STEP_DELAY_ENV: &str = "RATH_STEP_DELAY_MS";

/// The agent's whole script: one response per model turn.
pub fn script() -> Vec<ScriptedResponse> {
    let mut out: Vec<ScriptedResponse> = FILES
        .iter()
        .enumerate()
        .map(|(i, (path, content))| {
            ScriptedResponse::tool_calls(vec![(
                format!("write_{i}"),
                "write_workspace_file",
                json!({"path": path, "content": content}),
            )])
            .usage(200 + 40 * i as u64, 60)
        })
        .collect();
    out.push(
        ScriptedResponse::tool_calls(vec![(
            "check",
            "run_shell_command",
            json!({"cmd": CHECK_COMMAND}),
        )])
        .usage(520, 20),
    );
    out.push(
        ScriptedResponse::text(
            "Done: the shapes package has four modules and the check passes (4 shapes ok).",
        )
        .usage(600, 18),
    );
    out
}

/// How to run.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CodingConfig {
    /// The OpenRath home: the workspace goes to `<home>/workspaces/long_running_coding`.
    pub home: PathBuf,
    /// The sessions directory (default `<home>/sessions`).
    pub store_dir: PathBuf,
    /// Continue the latest partial session in the store instead of starting afresh.
    pub resume: bool,
    /// Wait this long before each model call.
    pub step_delay: Duration,
    /// Print a line per step.
    pub progress: bool,
    /// Record every model call to this cassette (JSONL; created on a fresh run, appended to
    /// on resume), for `rath replay`.
    pub cassette: Option<PathBuf>,
    /// Counter ids and clock (a resume: seeded UUIDv7-shaped ids) instead of unique UUIDv7
    /// ids; see [`super::deterministic_requested`].
    pub deterministic: bool,
}

impl CodingConfig {
    /// A fresh, silent, undelayed run under `home`.
    pub fn offline(home: impl Into<PathBuf>) -> Self {
        let home = home.into();
        CodingConfig {
            store_dir: home.join("sessions"),
            home,
            resume: false,
            step_delay: Duration::ZERO,
            progress: false,
            cassette: None,
            deterministic: false,
        }
    }

    /// `home` from the OPENRATH_HOME rules, delay from `RATH_STEP_DELAY_MS`, progress on.
    pub fn from_env() -> Self {
        let mut c = Self::offline(rath_persist::openrath_home());
        c.step_delay = std::env::var(STEP_DELAY_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(Duration::ZERO, Duration::from_millis);
        c.progress = true;
        c.deterministic = super::deterministic_requested();
        c
    }

    /// Sets [`CodingConfig::deterministic`].
    pub fn deterministic(mut self, on: bool) -> Self {
        self.deterministic = on;
        self
    }

    /// Uses `dir` as the store: a home holding `sessions/`, or a sessions directory. The
    /// workspace goes next to it.
    pub fn store(mut self, dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        if dir.join("sessions").is_dir() || !looks_like_sessions_dir(&dir) {
            self.store_dir = dir.join("sessions");
            self.home = dir;
        } else {
            self.home = dir.parent().map_or_else(|| dir.clone(), Path::to_path_buf);
            self.store_dir = dir;
        }
        self
    }

    /// Sets [`CodingConfig::resume`].
    pub fn resume(mut self, on: bool) -> Self {
        self.resume = on;
        self
    }

    /// Sets [`CodingConfig::cassette`].
    pub fn cassette(mut self, path: impl Into<PathBuf>) -> Self {
        self.cassette = Some(path.into());
        self
    }

    /// Sets [`CodingConfig::step_delay`].
    pub fn step_delay(mut self, delay: Duration) -> Self {
        self.step_delay = delay;
        self
    }
}

fn looks_like_sessions_dir(dir: &Path) -> bool {
    dir.file_name().is_some_and(|n| n == "sessions")
}

/// What a run left behind.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CodingReport {
    /// The final session.
    pub final_session: Session,
    /// The partial session a resume continued, if any.
    pub resumed_from: Option<SessionId>,
    /// Model turns skipped on resume (assistant chunks already in the loaded session).
    pub skipped_turns: usize,
    /// Exit code of the last check run.
    pub check_exit_code: Option<i64>,
    /// The sessions directory.
    pub store_dir: PathBuf,
    /// The sandbox workspace.
    pub workspace: PathBuf,
    /// A short text summary.
    pub summary: String,
}

/// The latest crashed (partial, no trailer) loop session in `store` that no other session
/// continues.
pub fn latest_partial(store: &Store) -> Result<Option<SessionId>, DemoError> {
    let list = store.list()?;
    let continued: std::collections::HashSet<&SessionId> =
        list.iter().flat_map(|s| s.parents.iter()).collect();
    Ok(list
        .iter()
        .filter(|s| !s.closed && !continued.contains(&s.id))
        .filter(|s| s.operator == "run_session_loop" || s.operator == "resume_session_loop")
        .map(|s| s.id.clone())
        .next_back())
}

/// `s` with its usage totals rebuilt from its `model_call` evidence when it has none (a
/// partial file has no trailer to carry them), so a resumed session counts every call.
pub fn with_evidence_usage(s: &Session) -> Session {
    if s.usage().is_some() {
        return s.clone();
    }
    let mut total: Option<Usage> = None;
    let mut per_agent: BTreeMap<String, Usage> = BTreeMap::new();
    for c in s.chunks() {
        if let ChunkBody::ModelCall(m) = c.body()
            && let Some(u) = m.usage
        {
            *total.get_or_insert_with(Usage::default) += u;
            if let Some(a) = &m.agent {
                *per_agent.entry(a.clone()).or_default() += u;
            }
        }
    }
    s.with_usage_totals(total, per_agent)
}

/// Number of assistant chunks in `s` (model turns already taken).
pub fn assistant_turns(s: &Session) -> usize {
    s.chunks()
        .iter()
        .filter(|c| matches!(c.body(), ChunkBody::Assistant(_)))
        .count()
}

/// Runs (or resumes) the agent.
pub async fn run(config: CodingConfig) -> Result<CodingReport, DemoError> {
    let workspace = config.home.join("workspaces/long_running_coding");
    let store = Store::at(&config.store_dir);
    std::fs::create_dir_all(&config.store_dir).map_err(io(&config.store_dir))?;

    let delay = config.step_delay;
    let progress = config.progress;
    let cx = FlowContext::new().with_observer(move |ev: &FlowEvent<'_>| match ev {
        FlowEvent::Request { .. } if !delay.is_zero() => std::thread::sleep(delay),
        FlowEvent::ToolEnd { call, outcome, .. } if progress => {
            println!("  {} -> {outcome}", call.function.name);
        }
        _ => {}
    });

    let (loaded, resumed_from) = if config.resume {
        let Some(id) = latest_partial(&store)? else {
            return Err(DemoError::Io {
                path: config.store_dir.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no partial long_running_coding session to resume",
                ),
            });
        };
        let loaded = store.load(&id)?;
        (Some(loaded.session), Some(id))
    } else {
        if workspace.exists() {
            std::fs::remove_dir_all(&workspace).map_err(io(&workspace))?;
        }
        std::fs::create_dir_all(&workspace).map_err(io(&workspace))?;
        (None, None)
    };

    let skipped = loaded.as_ref().map_or(0, assistant_turns);
    let remaining: Vec<ScriptedResponse> = script().into_iter().skip(skipped).collect();
    let scripted = ScriptedProvider::new(remaining).named("scripted:coder");
    let provider: Arc<dyn Provider> = match &config.cassette {
        None => Arc::new(scripted),
        Some(path) if config.resume => Arc::new(RecordingProvider::append(scripted, path)?),
        Some(path) => Arc::new(RecordingProvider::create(scripted, path)?),
    };
    let looper = SessionLoop::new(provider, ToolSet::builtins())
        .with_agent_name("coder")
        .with_options(LoopOptions::default().max_tool_rounds(32));
    let cx = cx.with_sink(StoreSink::new(store.clone()));

    let out = match loaded {
        Some(stopped) => {
            // Fresh ids that cannot collide with the first run's: unique UUIDv7 ids, or in
            // deterministic mode seeded ones (never equal to the first run's counter ids).
            let stamper = if config.deterministic {
                Stamper::seeded(skipped as u64 + 1)
            } else {
                Stamper::system()
            };
            let stopped = with_evidence_usage(&stopped).with_stamper(stamper);
            let agent = Session::system_with(SYSTEM, stopped.stamper().clone());
            store.save(&agent)?;
            if progress {
                println!("resuming {} after {skipped} model turn(s)", stopped.id());
            }
            looper
                .resume(&stopped, &agent, &cx)
                .await
                .map_err(|e| super::keep_failed(store.dir(), Vec::new(), e))?
        }
        None => {
            let ws = workspace.canonicalize().map_err(io(&workspace))?;
            let stamper = super::demo_stamper(config.deterministic);
            let user = Session::user_with(TASK, stamper.clone()).to_with(
                "local",
                SandboxSpec::working_dir(ws.to_string_lossy().into_owned()),
            );
            let agent = Session::system_with(SYSTEM, stamper);
            store.save(&user)?;
            store.save(&agent)?;
            looper
                .run(&user, &agent, &cx)
                .await
                .map_err(|e| super::keep_failed(store.dir(), Vec::new(), e))?
        }
    };

    let check_exit_code = check_exit(&out);
    let summary = summary(&out, resumed_from.as_ref(), skipped, check_exit_code);
    Ok(CodingReport {
        final_session: out,
        resumed_from,
        skipped_turns: skipped,
        check_exit_code,
        store_dir: config.store_dir,
        workspace,
        summary,
    })
}

/// The exit code of the last check run in `s`.
pub fn check_exit(s: &Session) -> Option<i64> {
    s.chunks()
        .iter()
        .filter_map(|c| match c.body() {
            ChunkBody::ToolEvidence(e) if e.tool == "run_shell_command" => Some(e.exit_code),
            _ => None,
        })
        .next_back()
        .flatten()
}

fn summary(
    out: &Session,
    resumed: Option<&SessionId>,
    skipped: usize,
    code: Option<i64>,
) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# long_running_coding\n");
    match resumed {
        Some(id) => {
            let _ = writeln!(o, "resumed {id} after {skipped} model turn(s)");
        }
        None => {
            let _ = writeln!(o, "fresh run");
        }
    }
    let l = out.lineage();
    let _ = writeln!(
        o,
        "final session {} ({} / {:?}), {} chunks ({} conversation), usage {}",
        out.id(),
        l.operator,
        l.kind,
        out.len(),
        out.conversation_len(),
        usage_text(out.usage())
    );
    let _ = writeln!(
        o,
        "check: {}",
        code.map_or("not run".to_owned(), |c| format!("exit {c}"))
    );
    o
}
