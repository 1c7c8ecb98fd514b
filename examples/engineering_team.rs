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
    println!(
        "engineering_team ({}), store under {}",
        if config.live {
            "live model from OPENAI_BASE_URL"
        } else {
            "offline, scripted agents"
        },
        openrath::demos::engineering_team::display(&config.home)
    );
    let report = run(config).await?;
    println!();
    print!("{}", report.summary);
    if !report.qa_passed {
        anyhow::bail!("QA's tests did not pass (exit {:?})", report.qa_exit_code);
    }
    Ok(())
}
