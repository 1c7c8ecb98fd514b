//! A Selector routes among three self-describing agents until the reviewer approves; every
//! decision is recorded as a `route_decision` chunk.
//!
//! ```sh
//! cargo run --release --example dynamic_selector          # offline, function decider
//! OPENAI_BASE_URL=http://127.0.0.1:8099/v1 cargo run --release --example dynamic_selector
//! ```
//!
//! Ids are fresh UUIDv7s on every run, so runs sharing a store never collide; pass
//! `--deterministic` (or set `OPENRATH_DETERMINISTIC=1`) for counter ids and a fixed clock
//! (the same bytes every run: give each such run its own OPENRATH_HOME).

use openrath::demos::dynamic_selector::run;
use openrath::demos::engineering_team::display;
use openrath::demos::hello_agent::DemoConfig;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = DemoConfig::from_env();
    println!(
        "dynamic_selector ({}), store {}",
        if config.live {
            "live model decides from OPENAI_BASE_URL"
        } else {
            "offline, function decider, scripted agents"
        },
        display(&config.store_dir())
    );
    let r = match run(config).await {
        Ok(r) => r,
        Err(e) => openrath::demos::exit_failed("dynamic_selector", &e),
    };
    println!("\nRoute decisions (route_decision chunks of the final session):");
    for (i, d) in r.decisions.iter().enumerate() {
        println!(
            "  {}. {} -> {}: {} [{}]",
            i + 1,
            d.selector,
            d.choice.as_deref().unwrap_or("done"),
            d.reason,
            d.decided_by
        );
    }
    println!(
        "Final answer: {}",
        openrath::demos::dynamic_selector::final_answer(&r.final_session)
    );
    println!(
        "Summary: {} decisions, {} sessions saved to {}",
        r.decisions.len(),
        r.sessions,
        display(&r.store_dir)
    );
    Ok(())
}
