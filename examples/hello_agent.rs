//! One agent, one typed tool (`word_count`), one session loop.
//!
//! ```sh
//! cargo run --release --example hello_agent          # offline, scripted model
//! OPENAI_BASE_URL=http://127.0.0.1:8099/v1 cargo run --release --example hello_agent
//! ```
//!
//! Ids are fresh UUIDv7s on every run, so runs sharing a store never collide; pass
//! `--deterministic` (or set `OPENRATH_DETERMINISTIC=1`) for counter ids and a fixed clock
//! (the same bytes every run: give each such run its own OPENRATH_HOME).
//!
//! Sessions go to the store the OPENRATH_HOME rules resolve ($OPENRATH_HOME, else ./.openrath,
//! else ~/.openrath).

use openrath::demos::engineering_team::display;
use openrath::demos::hello_agent::{DemoConfig, run};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = DemoConfig::from_env();
    println!(
        "hello_agent ({}), store {}",
        if config.live {
            "live model from OPENAI_BASE_URL"
        } else {
            "offline, scripted model"
        },
        display(&config.store_dir())
    );
    let report = match run(config).await {
        Ok(r) => r,
        Err(e) => openrath::demos::exit_failed("hello_agent", &e),
    };
    println!();
    print!("{}", report.summary);
    Ok(())
}
