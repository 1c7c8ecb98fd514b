//! A long-running coding agent that survives being killed: every new chunk is streamed into
//! the store, and `--resume` continues the latest partial session from where it stopped.
//!
//! ```sh
//! RATH_STEP_DELAY_MS=500 cargo run --example long_running_coding   # Ctrl-C it mid-way
//! cargo run --example long_running_coding -- --resume
//! cargo run -p rath-cli -- lineage
//! ```
//!
//! Options: `--store DIR` (an OpenRath home or a sessions directory; default: the
//! OPENRATH_HOME rules), `--resume`, `--cassette FILE` (record the model calls for
//! `rath replay`), `--deterministic` (counter ids instead of unique UUIDv7 ids; also
//! `OPENRATH_DETERMINISTIC=1`). `RATH_STEP_DELAY_MS` waits before every model call.

use openrath::demos::long_running_coding::{CodingConfig, run};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut config = CodingConfig::from_env();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--resume" => config = config.resume(true),
            "--deterministic" => config = config.deterministic(true),
            "--store" => {
                let dir = args
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("--store needs a directory"))?;
                config = config.store(dir);
            }
            "--cassette" => {
                let file = args
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("--cassette needs a file"))?;
                config = config.cassette(file);
            }
            other => anyhow::bail!(
                "unknown argument {other:?} (expected --store DIR, --resume, --cassette FILE, \
                 --deterministic)"
            ),
        }
    }
    println!(
        "long_running_coding ({}), store {}",
        if config.resume { "resume" } else { "fresh run" },
        config.store_dir.display()
    );
    let report = match run(config).await {
        Ok(r) => r,
        Err(e) => openrath::demos::exit_failed("long_running_coding", &e),
    };
    print!("{}", report.summary);
    if report.check_exit_code != Some(0) {
        anyhow::bail!("the check did not pass (exit {:?})", report.check_exit_code);
    }
    Ok(())
}
