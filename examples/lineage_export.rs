//! Fork, merge, detach and a session loop, recorded in a lineage journal and exported as
//! JSONL, Graphviz DOT and Mermaid next to the store (`<home>/lineage/lineage_export.*`).
//!
//! ```sh
//! cargo run --release --example lineage_export
//! ```
//!
//! Ids are fresh UUIDv7s on every run, so runs sharing a store never collide; pass
//! `--deterministic` (or set `OPENRATH_DETERMINISTIC=1`) for counter ids and a fixed clock
//! (the same bytes every run: give each such run its own OPENRATH_HOME).

use std::sync::Arc;

use openrath::persist::{LineageJournal, export_jsonl_string, to_dot, to_mermaid};
use openrath::prelude::*;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let live = openrath::select::live_requested();
    let home = openrath::persist::openrath_home();
    // `--store URL` or $OPENRATH_STORE, else the JSONL directory under `home`.
    let store = openrath::run_store::RunStore::from_args().await?;
    let mode = if live {
        openrath::select::describe()
    } else {
        "offline, scripted model".to_owned()
    };
    println!("lineage_export ({mode}), store {store}");

    // Every session built is recorded in the journal and kept for the store.
    let journal = LineageJournal::new();
    let mut all: Vec<Session> = Vec::new();
    let mut keep = |s: Session, what: &str| -> Session {
        journal.record(&s);
        let parents: Vec<String> = s.lineage().parents.iter().map(|p| p.to_string()).collect();
        let kind = s.lineage().kind.as_str();
        println!(
            "  {what:<8} {} <- [{}] ({kind})",
            s.id(),
            parents.join(", ")
        );
        all.push(s.clone());
        s
    };

    let question = "Name two prime numbers below ten, one per branch.";
    let root = keep(Session::user_with(question, Stamper::from_env()), "root");
    let a = root
        .fork()
        .push(Chunk::assistant_text("Branch A: 3."))
        .with_usage(Some("branch_a"), Usage::new(20, 4));
    let a = keep(a, "fork");
    let b = root
        .fork()
        .push(Chunk::assistant_text("Branch B: 7."))
        .with_usage(Some("branch_b"), Usage::new(22, 4));
    let b = keep(b, "fork");
    let merged = keep(a.merge(&b)?, "merge");
    let follow_up = Chunk::user("Now, in one sentence: what do 3 and 7 have in common?");
    let detached = keep(merged.detach().push(follow_up), "detach");
    let prompt = "You answer in one short sentence.";
    let agent = keep(
        Session::system_with(prompt, detached.stamper().clone()),
        "agent",
    );

    let model: Arc<dyn Provider> = if live {
        // What RATH_PROVIDER (or the key set) chooses: the wire, retries, a token budget.
        openrath::select::live()?
    } else {
        let answer = ScriptedResponse::text("Both 3 and 7 are odd primes.").usage(48, 9);
        Arc::new(ScriptedProvider::new(vec![answer]).named("scripted:summarizer"))
    };
    let looped = SessionLoop::new(model, ToolSet::new())
        .with_agent_name("summarizer")
        .run(&detached, &agent, &FlowContext::new())
        .await;
    match looped {
        Ok(s) => {
            keep(s, "loop");
        }
        Err(e) => {
            // Keep what the failed run made; `rath show <id>` says why it failed.
            let kept = store.keep_failed(&e, &all).await?;
            eprintln!("lineage_export: {kept}");
            std::process::exit(1);
        }
    }
    let saved = store.save_all(&all).await?;
    println!("  saved {saved} sessions to {store}");

    let rows = journal.rows();
    let dir = home.join("lineage");
    std::fs::create_dir_all(&dir)?;
    let jsonl = export_jsonl_string(&rows);
    let dot = to_dot(&rows);
    let mermaid = to_mermaid(&rows);
    let exports = [("jsonl", &jsonl), ("dot", &dot), ("mmd", &mermaid)];
    let mut paths = Vec::new();
    for (ext, text) in exports {
        let path = dir.join(format!("lineage_export.{ext}"));
        std::fs::write(&path, text)?;
        println!("  wrote {}", path.display());
        paths.push(path);
    }

    println!("\n== {} ==\n{jsonl}", paths[0].display());
    println!("== {} ==\n{dot}", paths[1].display());
    println!("== {} ==\n{mermaid}", paths[2].display());
    let kinds: Vec<&str> = rows.iter().map(|r| r.lineage_kind.as_str()).collect();
    println!(
        "Summary: {} sessions ({}) in the journal and the store",
        all.len(),
        kinds.join(", ")
    );
    Ok(())
}
