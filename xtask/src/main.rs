//! `cargo xtask`: project automation (evidence packets and the claim ledger).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The allocator `rath` (the worker and server binary) ships with, and its options, so the
/// benchmarks run ours as it ships: a bench drain allocates and frees small buffers on two
/// threads at a rate at which glibc malloc took about a fifth of our CPU.
#[path = "../../crates/rath-cli/src/alloc.rs"]
mod alloc;

mod bench;
mod bench_runtime;
mod bench_server;
mod bench_store;
mod bench_ttft;
mod chart;

/// openrath project automation.
#[derive(Parser, Debug)]
#[command(name = "xtask", about = "openrath project automation")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Regenerate evidence packets under evidence/packets/ (or check they reproduce).
    Evidence(xtask::evidence::EvidenceArgs),
    /// Check the claim ledger against the committed packets and write evidence/LEDGER.md.
    Ledger(xtask::ledger::LedgerArgs),
    /// Run our benches and Python OpenRath's in one sitting; write docs/benchmarks.md.
    Bench(bench::BenchArgs),
    /// Prepare this machine: run the .ci/install.d parts (all by default), start their
    /// services and save what they export to target/rath-env, which every command reads.
    Setup(xtask::setup::SetupArgs),
}

/// Set to a file to append every SQL statement this process (and each bench child it
/// starts) runs there, with its time (sqlx's `sqlx::query` events): what a slow bench is
/// looked at with.
const SQL_TRACE_ENV: &str = "RATH_BENCH_SQL_TRACE";

fn main() -> ExitCode {
    // First, before any thread: what `cargo xtask setup` saved (a variable already set wins).
    xtask::prereq::load_env_file();
    alloc::tune();
    if let Some(path) = std::env::var_os(SQL_TRACE_ENV) {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path);
        match file {
            Ok(file) => tracing_subscriber::fmt()
                .with_env_filter("sqlx::query=debug")
                .with_writer(std::sync::Mutex::new(file))
                .with_ansi(false)
                .init(),
            Err(e) => eprintln!("{SQL_TRACE_ENV}: cannot create {path:?}: {e}"),
        }
    }
    if let Some(code) = xtask::evidence::crash_child_main() {
        return code;
    }
    if let Some(code) = bench_runtime::child_main() {
        return code;
    }
    if let Some(code) = bench_runtime::profile_main() {
        return code;
    }
    if let Some(code) = bench_server::child_main() {
        return code;
    }
    if let Some(code) = bench_server::memory_main() {
        return code;
    }
    // After the clients: the bench's client children inherit the profile setting.
    if let Some(code) = bench_server::profile_main() {
        return code;
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Evidence(args) => xtask::evidence::run(&args),
        Command::Ledger(args) => xtask::ledger::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Setup(args) => xtask::setup::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            ExitCode::FAILURE
        }
    }
}
