//! A session on the `isolated` (bubblewrap) backend: file tools and shell commands run inside
//! it; the network is refused and the root is read-only. Exits 0 with the reason when
//! bubblewrap is unavailable.
//!
//! ```sh
//! cargo run --release --example sandbox_isolated
//! ```
//!
//! Ids are fresh UUIDv7s on every run, so runs sharing a store never collide; pass
//! `--deterministic` (or set `OPENRATH_DETERMINISTIC=1`) for counter ids and a fixed clock
//! (the same bytes every run: give each such run its own OPENRATH_HOME).

use openrath::demos::engineering_team::display;
use openrath::demos::hello_agent::DemoConfig;
use openrath::demos::sandbox_isolated::{SandboxOutcome, run};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = DemoConfig::from_env();
    println!(
        "sandbox_isolated ({}), store {}",
        if config.live {
            "live model from OPENAI_BASE_URL"
        } else {
            "offline, scripted model"
        },
        display(&config.store_dir())
    );
    let outcome = match run(config).await {
        Ok(r) => r,
        Err(e) => openrath::demos::exit_failed("sandbox_isolated", &e),
    };
    match outcome {
        SandboxOutcome::Unavailable(reason) => {
            println!("\nSkipped: the isolated backend is unavailable here: {reason}");
        }
        SandboxOutcome::Ran(r) => {
            println!("\nTool evidence (backend, tool, exit code, outcome):");
            for e in &r.evidence {
                println!(
                    "  {} {} exit={} {} {}",
                    e.backend.as_deref().unwrap_or("-"),
                    e.tool,
                    e.exit_code.map_or("-".to_owned(), |c| c.to_string()),
                    e.outcome,
                    e.summary.as_deref().unwrap_or("")
                );
            }
            let refused = |c: Option<i64>| match c {
                Some(0) => "NOT refused (exit 0)".to_owned(),
                Some(c) => format!("refused (exit {c})"),
                None => "not probed".to_owned(),
            };
            println!("Summary:");
            println!("  network:   {}", refused(r.network_exit));
            println!("  root fs:   write {}", refused(r.readonly_exit));
            println!(
                "  workspace: {} (read back: {})",
                display(&r.workspace),
                r.read_back.as_deref().unwrap_or("-").trim()
            );
            println!("  store:     {}", display(&r.store_dir));
        }
    }
    Ok(())
}
