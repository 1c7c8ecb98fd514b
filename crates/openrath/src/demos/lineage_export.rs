//! `lineage_export`: builds a small lineage with every structural operation (fork, merge,
//! detach, a session loop), records each session in a [`LineageJournal`], saves them to the
//! store and writes the lineage as JSONL, Graphviz DOT and Mermaid next to it
//! (`<home>/lineage/lineage_export.{jsonl,dot,mmd}`).

use std::path::PathBuf;

use rath_flow::{FlowContext, FlowError, SessionLoop, ToolSet};
use rath_persist::{LineageJournal, export_jsonl_string, to_dot, to_mermaid};
use rath_provider::ScriptedResponse;
use rath_session::{Chunk, Session, Usage};

use super::hello_agent::{DemoConfig, provider};
use super::{DemoError, engineering_team::display, io};

/// What `lineage_export` left behind.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct LineageReport {
    /// Every session built, in creation order.
    pub sessions: Vec<Session>,
    /// Lineage kinds of the journal's rows, in order.
    pub kinds: Vec<String>,
    /// The JSONL export.
    pub jsonl_path: PathBuf,
    /// The DOT export.
    pub dot_path: PathBuf,
    /// The Mermaid export.
    pub mermaid_path: PathBuf,
    /// The JSONL text.
    pub jsonl: String,
    /// The DOT text.
    pub dot: String,
    /// The Mermaid text.
    pub mermaid: String,
    /// The sessions directory written.
    pub store_dir: PathBuf,
}

/// Builds the sessions, records and saves them, and writes the three exports.
pub async fn run(config: DemoConfig) -> Result<LineageReport, DemoError> {
    let journal = LineageJournal::new();
    let mut all: Vec<Session> = Vec::new();
    let mut keep = |s: Session, what: &str| -> Session {
        journal.record(&s);
        config.step(format!(
            "{:<8} {} <- [{}] ({})",
            what,
            s.id(),
            s.lineage()
                .parents
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            s.lineage().kind.as_str()
        ));
        all.push(s.clone());
        s
    };

    let root = keep(
        Session::user_with(
            "Name two prime numbers below ten, one per branch.",
            config.stamper(),
        ),
        "root",
    );
    let a = keep(
        root.fork()
            .push(Chunk::assistant_text("Branch A: 3."))
            .with_usage(Some("branch_a"), Usage::new(20, 4)),
        "fork",
    );
    let b = keep(
        root.fork()
            .push(Chunk::assistant_text("Branch B: 7."))
            .with_usage(Some("branch_b"), Usage::new(22, 4)),
        "fork",
    );
    let merged = keep(a.merge(&b).map_err(FlowError::from)?, "merge");
    let detached = keep(
        merged.detach().push(Chunk::user(
            "Now, in one sentence: what do 3 and 7 have in common?",
        )),
        "detach",
    );
    let agent = keep(
        Session::system_with(
            "You answer in one short sentence.",
            detached.stamper().clone(),
        ),
        "agent",
    );
    let provider = provider(
        config.live,
        vec![ScriptedResponse::text("Both 3 and 7 are odd primes.").usage(48, 9)],
        "summarizer",
    )?;
    let looped = SessionLoop::new(provider, ToolSet::new())
        .with_agent_name("summarizer")
        .run(&detached, &agent, &FlowContext::new())
        .await;
    match looped {
        Ok(s) => {
            keep(s, "loop");
        }
        Err(e) => return Err(super::keep_failed(&config.store_dir(), all, e)),
    }

    let store_dir = config.save_sessions(&all)?;

    let rows = journal.rows();
    let dir = config.home.join("lineage");
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let jsonl = export_jsonl_string(&rows);
    let dot = to_dot(&rows);
    let mermaid = to_mermaid(&rows);
    let jsonl_path = dir.join("lineage_export.jsonl");
    let dot_path = dir.join("lineage_export.dot");
    let mermaid_path = dir.join("lineage_export.mmd");
    for (p, text) in [
        (&jsonl_path, &jsonl),
        (&dot_path, &dot),
        (&mermaid_path, &mermaid),
    ] {
        std::fs::write(p, text).map_err(io(p))?;
        config.step(format!("wrote {}", display(p)));
    }
    Ok(LineageReport {
        kinds: rows
            .iter()
            .map(|r| r.lineage_kind.as_str().to_owned())
            .collect(),
        sessions: all,
        jsonl_path,
        dot_path,
        mermaid_path,
        jsonl,
        dot,
        mermaid,
        store_dir,
    })
}
