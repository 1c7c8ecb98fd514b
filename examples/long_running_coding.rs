//! A long-running coding agent that survives being killed: every new chunk is streamed into
//! the store, and `--resume` continues the latest partial session from where it stopped.
//!
//! ```sh
//! RATH_STEP_DELAY_MS=500 cargo run --example long_running_coding   # Ctrl-C it mid-way
//! cargo run --example long_running_coding -- --resume
//! cargo run -p rath-cli -- lineage
//! ```
//!
//! One agent builds a small Python package over many tool rounds (one file per round, then a
//! real check in a `local` sandbox). A resume is a new session (operator
//! `resume_session_loop`, kind `op_resume`) whose parent is the loaded one, ending with the
//! same transcript an uninterrupted run produces. The agent answers from a script; on resume
//! the script is positioned after the last assistant chunk of the loaded session.
//!
//! Options: `--store DIR` (an OpenRath home or a sessions directory; default: the
//! OPENRATH_HOME rules) or `--store URL` (also `$OPENRATH_STORE`: `sqlite://FILE`,
//! `postgres://...`, see `openrath::run_store`; the workspace then goes under the
//! OPENRATH_HOME rules' home), `--resume`, `--cassette FILE` (record the model calls for
//! `rath replay`), `--deterministic` (counter ids instead of unique UUIDv7 ids; also
//! `OPENRATH_DETERMINISTIC=1`). `RATH_STEP_DELAY_MS` waits before every model call.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use openrath::flow::FlowEvent;
use openrath::persist::{PersistError, SessionStore};
use openrath::prelude::*;
use openrath::provider::RecordingProvider;
use openrath::run_store::{RunStore, program_args};

/// The task given to the agent.
const TASK: &str = "Create the `shapes` Python package: one module per shape (square, \
                        rectangle, circle, triangle), a package __init__ re-exporting their \
                        `area` functions, and a check script; then run the check.";

/// The system prompt.
const SYSTEM: &str = "You are a methodical Python engineer. Write one file per step with write_workspace_file, \
     then run the check with run_shell_command and report.";

/// The files the agent writes, in order.
const FILES: &[(&str, &str)] = &[
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
const CHECK_COMMAND: &str = "PYTHONDONTWRITEBYTECODE=1 python3 check.py";

/// Milliseconds to wait before every model call (lets a test kill the run mid-way).
const STEP_DELAY_ENV: &str = "RATH_STEP_DELAY_MS";

/// The agent's whole script: one response per model turn.
fn script() -> Vec<ScriptedResponse> {
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

/// What the command line asked for.
struct Options {
    home: PathBuf,
    /// The store: a sessions directory, or a URL (`--store` or `$OPENRATH_STORE`).
    store: String,
    resume: bool,
    cassette: Option<PathBuf>,
    deterministic: bool,
    step_delay: Duration,
}

impl Options {
    fn parse() -> anyhow::Result<Self> {
        let home = openrath::persist::openrath_home();
        let mut o = Options {
            store: home.join("sessions").display().to_string(),
            home,
            resume: false,
            cassette: None,
            deterministic: openrath::session::deterministic_requested(),
            step_delay: std::env::var(STEP_DELAY_ENV)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map_or(Duration::ZERO, Duration::from_millis),
        };
        match openrath::store::requested_store() {
            Some(url) if url.contains("://") => o.store = url,
            Some(dir) => {
                // A home holding `sessions/`, or a sessions directory.
                let dir = PathBuf::from(dir);
                if dir.join("sessions").is_dir() || dir.file_name() != Some("sessions".as_ref()) {
                    o.store = dir.join("sessions").display().to_string();
                    o.home = dir;
                } else {
                    o.home = dir.parent().map_or_else(|| dir.clone(), Path::to_path_buf);
                    o.store = dir.display().to_string();
                }
            }
            None => {}
        }
        let mut args = program_args().into_iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--resume" => o.resume = true,
                "--deterministic" => o.deterministic = true,
                "--cassette" => {
                    o.cassette = Some(args.next().context("--cassette needs a file")?.into());
                }
                other => bail!(
                    "unknown argument {other:?} (expected --store DIR|URL, --resume, --cassette \
                     FILE, --deterministic)"
                ),
            }
        }
        Ok(o)
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let o = Options::parse()?;
    let runs = RunStore::open(Some(o.store.as_str())).await?;
    println!(
        "long_running_coding ({}), store {runs}",
        if o.resume { "resume" } else { "fresh run" },
    );
    let workspace = o.home.join("workspaces/long_running_coding");
    if let Some(jsonl) = runs.jsonl() {
        std::fs::create_dir_all(jsonl.dir())?;
    }
    let store = runs.store();

    // Progress lines, and the optional delay before each model call.
    let delay = o.step_delay;
    let cx = FlowContext::new().with_observer(move |ev: &FlowEvent<'_>| match ev {
        FlowEvent::Request { .. } if !delay.is_zero() => std::thread::sleep(delay),
        FlowEvent::ToolEnd { call, outcome, .. } => {
            println!("  {} -> {outcome}", call.function.name);
        }
        _ => {}
    });

    let loaded = if o.resume {
        let Some(id) = latest_partial(store).await? else {
            bail!("{runs}: no partial long_running_coding session to resume");
        };
        Some(store.load(&id).await?.session)
    } else {
        if workspace.exists() {
            std::fs::remove_dir_all(&workspace)?;
        }
        std::fs::create_dir_all(&workspace)?;
        None
    };

    // The script, positioned after the model turns a resumed session already took.
    let skipped = loaded.as_ref().map_or(0, assistant_turns);
    let remaining: Vec<ScriptedResponse> = script().into_iter().skip(skipped).collect();
    let scripted = ScriptedProvider::new(remaining).named("scripted:coder");
    let model: Arc<dyn Provider> = match &o.cassette {
        None => Arc::new(scripted),
        Some(path) if o.resume => Arc::new(RecordingProvider::append(scripted, path)?),
        Some(path) => Arc::new(RecordingProvider::create(scripted, path)?),
    };
    let looper = SessionLoop::new(model, ToolSet::builtins())
        .with_agent_name("coder")
        .with_options(LoopOptions::default().max_tool_rounds(32));
    // Every new chunk goes to the store as it is made.
    let cx = cx.with_sink(runs.sink());

    let resumed_from = loaded.as_ref().map(|s| s.id().clone());
    let run = match loaded {
        Some(stopped) => {
            // Fresh ids that cannot collide with the first run's: unique UUIDv7 ids, or in
            // deterministic mode seeded ones (never equal to the first run's counter ids).
            let stamper = if o.deterministic {
                Stamper::seeded(skipped as u64 + 1)
            } else {
                Stamper::system()
            };
            let stopped = with_evidence_usage(&stopped).with_stamper(stamper);
            let agent = Session::system_with(SYSTEM, stopped.stamper().clone());
            store.save(&agent).await?;
            println!("resuming {} after {skipped} model turn(s)", stopped.id());
            looper.resume(&stopped, &agent, &cx).await
        }
        None => {
            let ws = workspace.canonicalize()?;
            let stamper = Stamper::deterministic_if(o.deterministic);
            let spec = SandboxSpec::working_dir(ws.to_string_lossy().into_owned());
            let user = Session::user_with(TASK, stamper.clone()).to_with("local", spec);
            let agent = Session::system_with(SYSTEM, stamper);
            store.save(&user).await?;
            store.save(&agent).await?;
            looper.run(&user, &agent, &cx).await
        }
    };
    let out = match run {
        Ok(out) => out,
        Err(e) => {
            // Keep what the failed run made; `rath show <id>` says why it failed.
            let kept = runs.keep_failed(&e, std::iter::empty()).await?;
            eprintln!("long_running_coding: {kept}");
            std::process::exit(1);
        }
    };

    let code = check_exit(&out);
    println!("# long_running_coding\n");
    match &resumed_from {
        Some(id) => println!("resumed {id} after {skipped} model turn(s)"),
        None => println!("fresh run"),
    }
    let l = out.lineage();
    let usage = out.usage().map_or("-".into(), |u| {
        format!(
            "{}/{}/{}",
            u.prompt_tokens, u.completion_tokens, u.total_tokens
        )
    });
    println!(
        "final session {} ({} / {:?}), {} chunks ({} conversation), usage {usage}",
        out.id(),
        l.operator,
        l.kind,
        out.len(),
        out.conversation_len(),
    );
    println!(
        "check: {}",
        code.map_or("not run".to_owned(), |c| format!("exit {c}"))
    );
    if code != Some(0) {
        bail!("the check did not pass (exit {code:?})");
    }
    Ok(())
}

/// The latest crashed loop session in `store` that no other session continues: in a JSONL
/// directory a partial file (no trailer); in a store that writes each step in a transaction
/// (SQLite, PostgreSQL: every stored session is whole) one whose check has not passed.
async fn latest_partial(store: &dyn SessionStore) -> Result<Option<SessionId>, PersistError> {
    let list = store.list().await?;
    let continued: std::collections::HashSet<&SessionId> =
        list.iter().flat_map(|s| s.parents.iter()).collect();
    let partial_files = store.name().starts_with("jsonl:");
    for s in list.iter().rev() {
        let looped = s.operator == "run_session_loop" || s.operator == "resume_session_loop";
        if !looped || continued.contains(&s.id) {
            continue;
        }
        let unfinished = if partial_files {
            !s.closed
        } else {
            check_exit(&store.load(&s.id).await?.session) != Some(0)
        };
        if unfinished {
            return Ok(Some(s.id.clone()));
        }
    }
    Ok(None)
}

/// `s` with its usage totals rebuilt from its `model_call` evidence when it has none (a
/// partial file has no trailer to carry them), so a resumed session counts every call.
fn with_evidence_usage(s: &Session) -> Session {
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
fn assistant_turns(s: &Session) -> usize {
    s.chunks()
        .iter()
        .filter(|c| matches!(c.body(), ChunkBody::Assistant(_)))
        .count()
}

/// The exit code of the last check run in `s`.
fn check_exit(s: &Session) -> Option<i64> {
    s.chunks()
        .iter()
        .filter_map(|c| match c.body() {
            ChunkBody::ToolEvidence(e) if e.tool == "run_shell_command" => Some(e.exit_code),
            _ => None,
        })
        .next_back()
        .flatten()
}
