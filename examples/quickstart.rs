//! Build a session, fork it twice, merge the branches and print the lineage.
//!
//! `cargo run --release --example quickstart` (unique UUIDv7 ids), or with `--deterministic`
//! (or `OPENRATH_DETERMINISTIC=1`) counter ids and a stepping clock: the same output every run.
//! Nothing is stored unless a store is named: `--store URL` (or `$OPENRATH_STORE`;
//! `sqlite://FILE`, `postgres://...`, a directory) saves the six sessions there.

use openrath::prelude::*;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Unique ids by default; `--deterministic` selects counter ids and a stepping clock.
    let stamper = Stamper::from_env();
    let agent = Session::system_with("You are a careful assistant.", stamper.clone());
    let root = Session::user_with("How many words are in 'the quick brown fox'?", stamper)
        .to_with("local", SandboxSpec::working_dir("/workspace/demo"));
    let a = root
        .fork()
        .push(Chunk::assistant_text("Four words."))
        .with_usage(Some("counter"), Usage::new(40, 12));
    let b = root.fork().push(Chunk::assistant_text("4"));
    let merged = a.merge_with(&b, MergeStrategy::SharedPrefix)?;
    let detached = merged.detach();

    let all = [&agent, &root, &a, &b, &merged, &detached];
    println!("lineage (one JSON row per session, OpenRath's export fields):");
    for s in all {
        let row = serde_json::json!({
            "id": s.id(),
            "parent_session_ids": s.lineage().parents,
            "lineage_operator": s.lineage().operator,
            "lineage_kind": s.lineage().kind,
            "lineage_extras": s.lineage().extras,
            "chunk_count": s.len(),
            "cumulative_usage": s.usage(),
        });
        println!("{row}");
    }
    let graph = LineageGraph::from_sessions(all);
    println!("\nedges (parent -> child):");
    for (p, c) in graph.edges() {
        println!("  {p} -> {c}");
    }
    println!("\nmerged transcript (branch tags from the shared-prefix merge):");
    for chunk in merged.chunks() {
        let tag = chunk
            .branch()
            .map(|b| format!(" from {b}"))
            .unwrap_or_default();
        println!("  [{}{tag}] {}", chunk.kind(), chunk.text().unwrap_or(""));
    }
    if openrath::store::requested_store().is_some() {
        let store = openrath::run_store::RunStore::from_args().await?;
        let saved = store.save_all(all).await?;
        println!("\nsaved {saved} sessions to {store}");
    }
    Ok(())
}
