//! Two runs, two processes, one memory store: run 1 answers a question and commits the
//! exchange; run 2 recalls it before its own model call, and its session's recall event names
//! run 1's commit.
//!
//! ```text
//! cargo run --release --example memory_assisted                 # both phases, as child processes
//! cargo run --release --example memory_assisted -- --phase 1 --store DIR
//! cargo run --release --example memory_assisted -- --phase 2 --store DIR
//! cargo run --release --example memory_assisted -- --deterministic   # counter ids
//! ```
//!
//! Without `--store` the store is `$OPENRATH_HOME/memory/local/memory-assisted/` (else
//! `./.openrath/memory/local/memory-assisted/`). Each run saves its sessions to the session
//! store the OPENRATH_HOME rules resolve (`$OPENRATH_HOME/sessions`, else
//! `./.openrath/sessions`, else `~/.openrath/sessions`), so `rath sessions` shows both runs.
//! Sessions and commits get unique UUIDv7 ids, so running it again on the same stores adds
//! new sessions and a second commit under new ids, never replacing the first run's. With
//! `--deterministic` (or `OPENRATH_DETERMINISTIC=1`) run 1 uses the counter stamper and run 2
//! a seeded one (distinct ids), and every run on fresh stores prints the same bytes; repeating
//! it on the same stores repeats the same commit and sessions, which are kept once. No model
//! is called: run 1's answer is scripted.

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use rath_memory::{
    CommitPolicy, LocalMemory, LocalOptions, MemoryPolicy, RecallPolicy, Scope, memory_events,
    store_dir,
};
use rath_session::{Chunk, Session, Stamper};

const STORE_ID: &str = "memory-assisted";
const AGENT: &str = "assistant";

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Run 1's ids: the counter stamper in deterministic mode, else unique UUIDv7 ids. Run 2
/// gets `seeded(2)` in deterministic mode, so its sessions never take run 1's ids.
fn stamper(deterministic: bool, phase: u64) -> Stamper {
    match (deterministic, phase) {
        (false, _) => Stamper::system(),
        (true, 1) => Stamper::counter(),
        (true, n) => Stamper::seeded(n),
    }
}

/// Saves `sessions` to the session store. A file already stored under one of their ids is
/// kept when it holds the same session and is an error otherwise: never replaced.
fn save(sessions: &[&Session]) -> Result<()> {
    let store = rath_persist::Store::default_location();
    for s in sessions {
        store.save(s)?;
    }
    println!(
        "saved {} session(s) to {}",
        sessions.len(),
        store.dir().display()
    );
    Ok(())
}

fn policy() -> MemoryPolicy {
    MemoryPolicy {
        recall: Some(RecallPolicy::new(Scope::Agent, 3)),
        commit: Some(CommitPolicy::new(Scope::Agent, "answers")),
    }
}

fn open(store: &Option<PathBuf>) -> Result<LocalMemory> {
    let dir = match store {
        Some(d) => d.clone(),
        None => store_dir(&rath_memory::openrath_home(), STORE_ID)?,
    };
    Ok(LocalMemory::open_at(
        &dir,
        STORE_ID,
        LocalOptions::default(),
    )?)
}

/// Run 1: a question, a (scripted) answer, and commit-on-forward of the exchange.
fn phase1(store: &Option<PathBuf>, deterministic: bool) -> Result<()> {
    let mem = open(store)?;
    let input = Session::user_with(
        "Which port does the staging API listen on?",
        stamper(deterministic, 1),
    );
    let output = input.push(Chunk::assistant_text(
        "The staging API listens on port 8443, behind the gateway.",
    ));
    let output = policy().commit_on_forward(&input, &output, &mem, Some(AGENT))?;
    for event in memory_events(&output) {
        println!("event {}", serde_json::to_string(event)?);
    }
    let commit = memory_events(&output)
        .last()
        .and_then(|e| e.commit_id.clone())
        .ok_or("run 1 made no commit")?;
    println!("commit_id={commit}");
    save(&[&output])?;
    Ok(())
}

/// Run 2: a new question; recall-and-inject before the model call.
fn phase2(store: &Option<PathBuf>, deterministic: bool) -> Result<()> {
    let mem = open(store)?;
    let input = Session::user_with(
        "What port is the staging API on?",
        stamper(deterministic, 2),
    );
    let ready = policy().recall_and_inject(&input, &mem, Some(AGENT))?;
    for chunk in ready.chunks() {
        println!("chunk {}", serde_json::to_string(chunk)?);
    }
    let recall = memory_events(&ready)
        .into_iter()
        .find(|e| e.operation == "recall")
        .ok_or("run 2 made no recall")?;
    let named = recall.commit_id.clone().ok_or("run 2 recalled nothing")?;
    println!("recalled_commit_id={named}");
    let all: Vec<&str> = recall
        .hits
        .iter()
        .filter_map(|h| h.commit_id.as_deref())
        .collect();
    println!("recalled_commit_ids={}", all.join(","));
    save(&[&ready])?;
    Ok(())
}

fn value_of(out: &str, key: &str) -> Option<String> {
    out.lines()
        .find_map(|l| l.strip_prefix(key))
        .map(str::to_owned)
}

/// Both phases as child processes of this same binary.
fn both(store: &Option<PathBuf>, deterministic: bool) -> Result<()> {
    let exe = std::env::current_exe()?;
    let run = |phase: &str| -> Result<String> {
        let mut cmd = Command::new(&exe);
        cmd.args(["--phase", phase]);
        if deterministic {
            cmd.arg("--deterministic");
        }
        if let Some(d) = store {
            cmd.arg("--store").arg(d);
        }
        let out = cmd.output()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        print!("--- run {phase} (pid-separate process)\n{text}");
        if !out.status.success() {
            return Err(format!(
                "run {phase} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )
            .into());
        }
        Ok(text)
    };
    let first = value_of(&run("1")?, "commit_id=").ok_or("run 1 printed no commit id")?;
    let named = value_of(&run("2")?, "recalled_commit_ids=").ok_or("run 2 printed no recall")?;
    // On a store earlier runs also committed to, run 1's commit is one of the hits.
    if !named.split(',').any(|c| c == first) {
        return Err(format!("run 2 recalled commits {named}, run 1 made {first}").into());
    }
    println!("ok: run 2's recall event names run 1's commit {first}");
    Ok(())
}

fn main() -> ExitCode {
    let mut phase = None;
    let mut store = None;
    let mut deterministic = std::env::var("OPENRATH_DETERMINISTIC")
        .is_ok_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes"));
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--phase" => phase = args.next(),
            "--store" => store = args.next().map(PathBuf::from),
            "--deterministic" => deterministic = true,
            other => {
                eprintln!(
                    "unknown argument {other:?}; use --phase 1|2, --store DIR, --deterministic"
                );
                return ExitCode::from(2);
            }
        }
    }
    let result = match phase.as_deref() {
        None => both(&store, deterministic),
        Some("1") => phase1(&store, deterministic),
        Some("2") => phase2(&store, deterministic),
        Some(p) => Err(format!("unknown phase {p:?}").into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("memory_assisted: {e}");
            ExitCode::FAILURE
        }
    }
}
