//! The flagship: a lead plans, two specialists fix different files in parallel on forks of one
//! sandbox, the forks merge, QA runs the real tests, and a Selector routes until they pass.
//!
//! ```sh
//! cargo run --release --example engineering_team          # offline, scripted agents
//! OPENAI_BASE_URL=http://127.0.0.1:8099/v1 cargo run --release --example engineering_team
//! ```
//!
//! Ids are fresh UUIDv7s on every run, so runs sharing a store never collide; pass
//! `--deterministic` (or set `OPENRATH_DETERMINISTIC=1`) for counter ids and a fixed clock
//! (the same bytes every run: give each such run its own OPENRATH_HOME).
//!
//! Sessions go to the store the OPENRATH_HOME rules resolve ($OPENRATH_HOME, else ./.openrath,
//! else ~/.openrath); the lineage export and a report go next to it. Then try
//! `cargo run -p rath-cli -- sessions` or `-- view`.

use openrath::demos::engineering_team::{TeamConfig, run};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = TeamConfig::from_env();
    let live = config.live;
    println!(
        "engineering_team ({}), store under {}",
        if config.live {
            "live model from OPENAI_BASE_URL"
        } else {
            "offline, scripted agents"
        },
        openrath::demos::engineering_team::display(&config.home)
    );
    let report = match run(config).await {
        Ok(r) => r,
        Err(e) => openrath::demos::exit_failed("engineering_team", &e),
    };
    println!();
    print!("{}", report.summary);
    if !report.qa_passed {
        if live {
            // A real model may not fix the code within the live bounds; the run itself
            // finished and is stored, which is what the live tier checks.
            println!(
                "QA's tests did not pass within the live bounds (exit {:?}); the run is stored.",
                report.qa_exit_code
            );
            return Ok(());
        }
        anyhow::bail!("QA's tests did not pass (exit {:?})", report.qa_exit_code);
    }
    Ok(())
}
