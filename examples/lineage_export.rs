//! Fork, merge, detach and a session loop, recorded in a lineage journal and exported as
//! JSONL, Graphviz DOT and Mermaid next to the store.
//!
//! ```sh
//! cargo run --release --example lineage_export
//! ```
//!
//! Ids are fresh UUIDv7s on every run, so runs sharing a store never collide; pass
//! `--deterministic` (or set `OPENRATH_DETERMINISTIC=1`) for counter ids and a fixed clock
//! (the same bytes every run: give each such run its own OPENRATH_HOME).

use openrath::demos::engineering_team::display;
use openrath::demos::hello_agent::DemoConfig;
use openrath::demos::lineage_export::run;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = DemoConfig::from_env();
    println!(
        "lineage_export ({}), store {}",
        if config.live {
            "live model from OPENAI_BASE_URL"
        } else {
            "offline, scripted model"
        },
        display(&config.store_dir())
    );
    let r = match run(config).await {
        Ok(r) => r,
        Err(e) => openrath::demos::exit_failed("lineage_export", &e),
    };
    println!("\n== {} ==\n{}", display(&r.jsonl_path), r.jsonl);
    println!("== {} ==\n{}", display(&r.dot_path), r.dot);
    println!("== {} ==\n{}", display(&r.mermaid_path), r.mermaid);
    println!(
        "Summary: {} sessions ({}) in the journal and the store",
        r.sessions.len(),
        r.kinds.join(", ")
    );
    Ok(())
}
