//! literature → reproduction → compression → output, printing the compression record (the
//! digest of every dropped chunk).
//!
//! ```sh
//! cargo run --release --example research_synthesis          # offline, scripted models
//! OPENAI_BASE_URL=http://127.0.0.1:8099/v1 cargo run --release --example research_synthesis
//! ```
//!
//! Ids are fresh UUIDv7s on every run, so runs sharing a store never collide; pass
//! `--deterministic` (or set `OPENRATH_DETERMINISTIC=1`) for counter ids and a fixed clock
//! (the same bytes every run: give each such run its own OPENRATH_HOME).

use openrath::demos::engineering_team::display;
use openrath::demos::hello_agent::DemoConfig;
use openrath::demos::research_synthesis::run;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = DemoConfig::from_env();
    println!(
        "research_synthesis ({}), store {}",
        if config.live {
            "live model from OPENAI_BASE_URL"
        } else {
            "offline, scripted models"
        },
        display(&config.store_dir())
    );
    let r = match run(config).await {
        Ok(r) => r,
        Err(e) => openrath::demos::exit_failed("research_synthesis", &e),
    };
    println!("\nRoute decisions:");
    for (choice, reason) in &r.routes {
        println!("  -> {choice}: {reason}");
    }
    if let Some(out) = &r.reproduction_output {
        println!("Reproduction (run_code): {out}");
    }
    match &r.compression {
        Some(rec) => {
            println!(
                "Compression record ({}, lossy={}, rows_out={}), {} chunks dropped:",
                rec.compressor,
                rec.lossy,
                rec.rows_out,
                rec.dropped.len()
            );
            for d in &rec.dropped {
                println!("  #{:<3} {:<14} sha256 {}", d.index, d.kind, d.sha256);
            }
        }
        None => println!("No compression record (nothing was dropped)."),
    }
    println!(
        "Summary: answer {:?}; {} sessions saved to {}",
        r.answer.as_deref().unwrap_or("-"),
        r.sessions,
        display(&r.store_dir)
    );
    Ok(())
}
