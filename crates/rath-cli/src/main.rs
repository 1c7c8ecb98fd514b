//! `rath`: inspect, compare, replay and view openrath session stores.
//!
//! A thin shell over [`rath_inspect`] (and its HTML viewer, [`rath_inspect::view`]): it
//! parses arguments, picks the store, prints what the library returns (human text, or JSON
//! with `--json`) and turns every error into one line on stderr with exit code 2.
//!
//! Exit codes: 0 done; 1 done, but files of the store were left out of the output (each is
//! named in one `rath: warning:` line on stderr and, with `--json`, under `warnings`), or
//! `replay` found a difference; 2 an error (one `rath:` line on stderr); 3 `verify` found
//! the store tampered with (each failure on stdout).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use rath_inspect::view::{ViewOptions, write_store_page};
use rath_inspect::{FileWarning, InspectError, Page, StoreView};

mod alloc;
mod export;
mod run;
mod runs;
mod seal;
mod serve;
mod telemetry;
mod workflows;

/// Inspect, compare, replay and view openrath session stores.
#[derive(Debug, Parser)]
#[command(name = "rath", version, about, long_about = None)]
struct Cli {
    /// The store: a JSONL directory (an OpenRath home holding `sessions/`, or a sessions
    /// directory), `sqlite://FILE` or `postgres://USER@HOST/DB`. Default: $OPENRATH_STORE,
    /// else the JSONL directory under $OPENRATH_HOME, else ./.openrath, else ~/.openrath.
    #[arg(long, global = true, value_name = "URL")]
    store: Option<String>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List sessions: id, created, operator, kind, chunks, status, usage.
    Sessions,
    /// Show one session's transcript with evidence, route decisions, memory events, usage.
    /// Streams from the file: memory stays small whatever the session's size.
    Show {
        /// Session id as its file's header names it (or a unique prefix or suffix of one, or
        /// the file's name).
        id: String,
        /// First chunk to show (its index, as printed in `[K]`; at most 2^32).
        #[arg(long, value_name = "K", default_value_t = 0, value_parser = count(MAX_INDEX))]
        from: usize,
        /// Show at most N chunks (at most 2^32).
        #[arg(long, value_name = "N", value_parser = count(MAX_INDEX))]
        limit: Option<usize>,
    },
    /// Print the lineage of every session in the store.
    Lineage {
        /// Output format.
        #[arg(long, value_enum, default_value_t = LineageFormat::Tree)]
        format: LineageFormat,
    },
    /// Compare two sessions: common prefix and where they diverge.
    Diff {
        /// First session id.
        a: String,
        /// Second session id.
        b: String,
    },
    /// Load every file; report torn, partial and unreadable files. When the store is sealed
    /// (`rath seal`), also recompute every chunk digest and session root from what the store
    /// holds and check them, the lineage and the signatures against the seal ledger, naming
    /// each failure (session, chunk, kind). Modifies nothing. Exit 3: tampered.
    Verify(seal::VerifyArgs),
    /// Seal stored sessions: record their Merkle roots and chunk digests in the store's seal
    /// ledger, signed with --key (or $OPENRATH_SIGNING_KEY) when given.
    Seal(seal::SealArgs),
    /// Erase chunks: replace each (everywhere the store holds it) by a tombstone that keeps
    /// its digest, and record who, when and why in the seal ledger; `rath verify` still
    /// passes and reports the erasure.
    Erase(seal::EraseArgs),
    /// Re-ask a recorded cassette for each model turn of a session, offline, and compare the
    /// replies: `identical` (exit 0) or the first difference (exit 1).
    Replay {
        /// Session id (or a unique prefix or suffix of one).
        id: String,
        /// The cassette (JSONL written by rath-provider's RecordingProvider).
        #[arg(long, value_name = "FILE")]
        cassette: PathBuf,
    },
    /// Show the live model provider the environment chooses (`RATH_PROVIDER=openai|anthropic`,
    /// else the provider whose variables are set) and its manifest, the key redacted. Needs
    /// no store.
    Provider,
    /// Write one self-contained HTML page: session list, lineage graph, transcripts (the
    /// first and last chunks of each; the page says how to print the rest).
    View {
        /// Where to write the page.
        #[arg(long, value_name = "FILE", default_value = "rath-view.html")]
        out: PathBuf,
        /// Chunks shown from the start, and again from the end, of each transcript (at most
        /// 100000).
        #[arg(
            long,
            value_name = "N",
            default_value_t = rath_inspect::view::TRANSCRIPT_CHUNKS,
            value_parser = count(MAX_TRANSCRIPT_CHUNKS)
        )]
        transcript_chunks: usize,
    },
    /// Manage a store: copy it, collect garbage, migrate its schema, count what it holds.
    #[command(subcommand)]
    Store(StoreCommand),
    /// Send the store's sessions elsewhere.
    Export {
        #[command(subcommand)]
        target: ExportTarget,
    },
    /// Serve sessions and runs over HTTP (the agent server; docs/server.md): the session
    /// store is --store, the run store and the server's tables --runs.
    Serve(serve::ServeArgs),
    /// Mint, list and revoke the agent server's API keys.
    #[command(subcommand)]
    Keys(serve::KeysCommand),
    /// Run one workflow in the foreground on the store: a progress line per step on
    /// stderr, the answer on stdout, then where its sessions were stored.
    Run(run::RunArgs),
    /// Run a worker: claim runs of the bundled workflows from the run store (`--runs`), run
    /// them with leases and fencing, store their sessions in `--store`; on SIGTERM or ctrl-c
    /// hand in-flight runs back and exit 0.
    Worker(runs::WorkerArgs),
    /// Submit, list, show, cancel, resolve, approve and reject durable runs.
    Runs(runs::RunsArgs),
}

#[derive(Debug, Subcommand)]
enum StoreCommand {
    /// Copy every session of one store into another, losslessly (timestamps, closed or
    /// not, every field): a JSONL store copied through any store and back gives the same
    /// bytes. Sessions already in TO unchanged are skipped. A session file of FROM that
    /// cannot be read (torn, unreadable) fails the copy, naming each, before anything is
    /// written, unless --skip-unreadable.
    Copy {
        /// The store to read (a URL as for --store; it must exist, and is only read).
        from: String,
        /// The store to write (created when absent).
        to: String,
        /// Leave out sessions of FROM that cannot be read, naming each in a `rath:
        /// warning:` line (exit code 0), instead of failing.
        #[arg(long)]
        skip_unreadable: bool,
    },
    /// Reclaim what no stored session reaches any more, and report what was freed.
    Gc,
    /// Bring the store's schema to this build's version (opening a store does too) and
    /// report the version.
    Migrate,
    /// Rows and bytes per table, sessions, and distinct chunks (reads the store, never
    /// creates or changes it).
    Stats,
}

#[derive(Debug, Subcommand)]
enum ExportTarget {
    /// Send the spans of stored sessions (all, or ID and its ancestors) to an OTLP collector
    /// (HTTP/protobuf or gRPC, set by the OTEL_EXPORTER_OTLP_* variables); timestamps come
    /// from the store (any kind: the same sessions give the same spans). Exit 1 when spans
    /// were dropped, or when the store holds no session to export (a warning says so).
    Otel {
        /// Session id (or a unique prefix or suffix of one); default every session.
        id: Option<String>,
        /// The collector endpoint (overrides OTEL_EXPORTER_OTLP_TRACES_ENDPOINT and OTEL_EXPORTER_OTLP_ENDPOINT).
        #[arg(long, value_name = "URL")]
        endpoint: Option<String>,
        /// Print the spans as JSON instead of sending them.
        #[arg(long)]
        print: bool,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LineageFormat {
    Tree,
    Jsonl,
    Dot,
    Mermaid,
}

impl From<LineageFormat> for rath_inspect::LineageFormat {
    fn from(f: LineageFormat) -> Self {
        match f {
            LineageFormat::Tree => Self::Tree,
            LineageFormat::Jsonl => Self::Jsonl,
            LineageFormat::Dot => Self::Dot,
            LineageFormat::Mermaid => Self::Mermaid,
        }
    }
}

/// The largest chunk index or count `rath show` accepts (a bound, so no option's value is
/// ever used unchecked).
const MAX_INDEX: u64 = 1 << 32;

/// The largest `rath view --transcript-chunks`: the viewer keeps up to twice this many chunks
/// of each session in memory.
const MAX_TRANSCRIPT_CHUNKS: u64 = 100_000;

/// A parser of counts from 0 to `max` (a larger value is refused by clap with the range, exit
/// code 2, before anything runs).
fn count(max: u64) -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(0..=max)
}

/// A parser of milliseconds (or seconds) from `min` to `max`.
fn duration(min: u64, max: u64) -> clap::builder::RangedU64ValueParser<u64> {
    clap::builder::RangedU64ValueParser::<u64>::new().range(min..=max)
}

/// Bad input: one line on stderr, exit code 2.
struct Failure(String);

impl From<InspectError> for Failure {
    fn from(e: InspectError) -> Self {
        Failure(e.to_string())
    }
}

/// What a command produced: text for stdout (unless it streamed there itself), lines for
/// stderr and the exit code.
struct Output {
    stdout: String,
    stderr: Vec<String>,
    code: u8,
}

impl Output {
    fn ok(stdout: String) -> Self {
        Output {
            stdout,
            stderr: Vec::new(),
            code: 0,
        }
    }

    /// The one way every command reports files it left out: one `warning:` line per file on
    /// stderr (JSON output lists the same under `warnings`). When `partial`, the output would
    /// have included those files, and the exit code becomes 1.
    fn warn(mut self, warnings: &[FileWarning], partial: bool) -> Self {
        self.stderr.extend(warnings.iter().map(FileWarning::line));
        if partial && !warnings.is_empty() && self.code == 0 {
            self.code = 1;
        }
        self
    }
}

fn main() -> ExitCode {
    alloc::tune();
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_owned());
        eprintln!("rath: internal error: {}", one_line(&msg));
        std::process::exit(2);
    }));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_failure(&e),
    };
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    let out = match run(&cli, &mut stdout) {
        Ok(out) => out,
        Err(Failure(msg)) => {
            let _ = stdout.flush();
            eprintln!("rath: {}", one_line(&msg));
            return ExitCode::from(2);
        }
    };
    if let Err(e) = stdout
        .write_all(out.stdout.as_bytes())
        .and_then(|()| stdout.flush())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!("rath: cannot write output: {e}");
        return ExitCode::from(2);
    }
    for line in out.stderr {
        eprintln!("rath: {}", one_line(&line));
    }
    ExitCode::from(out.code)
}

fn clap_failure(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            }
        }
        _ => {
            let text = e.render().to_string();
            let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
            let mut first = lines
                .next()
                .unwrap_or("invalid arguments")
                .trim_start_matches("error: ")
                .to_owned();
            // "the following required arguments were not provided:" names them next.
            if first.ends_with(':')
                && let Some(next) = lines.next()
            {
                first = format!("{first} {next}");
            }
            eprintln!("rath: {first} (see `rath --help`)");
            ExitCode::from(2)
        }
    }
}

fn one_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

fn open_store(cli: &Cli) -> Result<StoreView, Failure> {
    Ok(match &cli.store {
        Some(url) => StoreView::open_url(url)?,
        None => StoreView::from_env()?,
    })
}

/// The store `--store`, else `$OPENRATH_STORE`, names; `None` when neither does.
fn named_store(cli: &Cli) -> Option<String> {
    cli.store.clone().or_else(|| {
        std::env::var("OPENRATH_STORE")
            .ok()
            .filter(|v| !v.trim().is_empty())
    })
}

/// The URL `--store` or the environment names (for the `store` commands, which may create
/// or change a store).
fn store_url(cli: &Cli) -> String {
    named_store(cli).unwrap_or_else(|| {
        rath_persist::openrath_home()
            .join("sessions")
            .display()
            .to_string()
    })
}

fn json<T: serde::Serialize>(value: &T) -> Result<String, Failure> {
    serde_json::to_string_pretty(value)
        .map(|s| s + "\n")
        .map_err(|e| Failure(format!("cannot render JSON: {e}")))
}

fn run(cli: &Cli, stdout: &mut dyn std::io::Write) -> Result<Output, Failure> {
    if let Command::Provider = cli.command {
        return provider(cli);
    }
    if let Command::Store(cmd) = &cli.command {
        return store_command(cli, cmd);
    }
    if let Command::Serve(args) = &cli.command {
        return serve::serve(&store_url(cli), args);
    }
    if let Command::Keys(cmd) = &cli.command {
        return serve::keys(cmd, cli.json, named_store(cli));
    }
    if let Command::Seal(args) = &cli.command {
        return seal::seal(&store_url(cli), args, cli.json);
    }
    if let Command::Erase(args) = &cli.command {
        return seal::erase_cmd(&store_url(cli), args, cli.json);
    }
    if let Command::Run(args) = &cli.command {
        return run::run(named_store(cli).as_deref(), args, cli.json);
    }
    if let Command::Worker(args) = &cli.command {
        return runs::worker(&store_url(cli), args, cli.json);
    }
    if let Command::Runs(args) = &cli.command {
        return runs::runs(&store_url(cli), args, cli.json);
    }
    let store = open_store(cli)?;
    match &cli.command {
        Command::Sessions => {
            let listing = store.sessions()?;
            let out = Output::ok(if cli.json {
                json(&listing)?
            } else {
                listing.render()
            });
            Ok(out.warn(&listing.warnings, true))
        }
        Command::Show { id, from, limit } => {
            let id = store.resolve(id)?;
            let (t, warnings) = store.transcript_stream(&id, Page::new(*from, *limit))?;
            let written = if cli.json {
                t.write_json(stdout)
            } else {
                t.write_text(stdout)
            };
            match written {
                Ok(()) => {}
                Err(InspectError::Write { source })
                    if source.kind() == std::io::ErrorKind::BrokenPipe => {}
                Err(e) => return Err(e.into()),
            }
            Ok(Output::ok(String::new()).warn(&warnings, false))
        }
        Command::Lineage { format } => {
            let listing = store.lineage()?;
            let text = if cli.json {
                json(&listing)?
            } else {
                listing.render((*format).into())
            };
            Ok(Output::ok(text).warn(&listing.warnings, true))
        }
        Command::Diff { a, b } => {
            let (a, b) = (store.resolve(a)?, store.resolve(b)?);
            let d = store.diff(&a, &b)?;
            let mut warnings = store.locate(&a)?.1;
            if a != b {
                warnings.extend(store.locate(&b)?.1);
            }
            Ok(Output::ok(if cli.json { json(&d)? } else { d.render() }).warn(&warnings, false))
        }
        Command::Verify(args) => {
            let report = store.verify()?;
            // A session named by a prefix resolves as every command's does; an id the store
            // no longer holds is still checked against its seals.
            let session = args.session.as_ref().map(|s| {
                store
                    .resolve(s)
                    .map(|id| id.to_string())
                    .unwrap_or_else(|_| s.clone())
            });
            let seals = seal::verify(&store_url(cli), args, session)?;
            // An unsealed store prints what it always printed.
            let shown = seals.sealed.then_some(&seals);
            let mut out = Output::ok(match (cli.json, shown) {
                (true, None) => json(&report)?,
                (true, Some(seals)) => {
                    #[derive(serde::Serialize)]
                    struct WithSeals<'a> {
                        #[serde(flatten)]
                        files: &'a rath_inspect::VerifyReport,
                        seals: &'a rath_seal::Report,
                    }
                    json(&WithSeals {
                        files: &report,
                        seals,
                    })?
                }
                (false, _) => {
                    let mut text = report.render();
                    if let Some(seals) = shown {
                        text.push_str(&seals.render());
                    }
                    text
                }
            });
            if !report.is_clean() {
                out.stderr.push(format!(
                    "verify: {} of {} file(s) failed to load consistently",
                    report.errors(),
                    report.files.len()
                ));
                out.code = 2;
            }
            if !seals.is_clean() {
                out.stderr.push(format!(
                    "verify: tampered: {} failure(s)",
                    seals.failures.len()
                ));
                out.code = 3;
            }
            Ok(out)
        }
        Command::Replay { id, cassette } => {
            let id = store.resolve(id)?;
            let report = store.replay(&id, cassette)?;
            let warnings = store.locate(&id)?.1;
            let mut out = Output::ok(if cli.json {
                json(&report)?
            } else {
                report.render()
            });
            if !report.identical {
                out.code = 1;
            }
            Ok(out.warn(&warnings, false))
        }
        Command::View {
            out,
            transcript_chunks,
        } => view(cli, &store, out, *transcript_chunks),
        Command::Provider => provider(cli),
        Command::Store(_)
        | Command::Serve(_)
        | Command::Keys(_)
        | Command::Seal(_)
        | Command::Erase(_)
        | Command::Worker(_)
        | Command::Run(_)
        | Command::Runs(_) => {
            unreachable!("handled above")
        }
        Command::Export {
            target:
                ExportTarget::Otel {
                    id,
                    endpoint,
                    print,
                },
        } => {
            let id = id.as_deref().map(|id| store.resolve(id)).transpose()?;
            export::otel(&store, id.as_ref(), endpoint.as_deref(), *print, cli.json)
        }
    }
}

/// `rath provider`: the choice `openrath::select` makes from the environment (the same rule
/// every example follows) and the chosen provider's manifest.
fn provider(cli: &Cli) -> Result<Output, Failure> {
    let live = openrath::select::live_provider().map_err(|e| Failure(e.to_string()))?;
    let manifest = live.as_ref().map(|p| p.manifest());
    if cli.json {
        return Ok(Output::ok(json(
            &serde_json::json!({ "provider": manifest }),
        )?));
    }
    let Some(m) = manifest else {
        return Ok(Output::ok(format!(
            "offline: no live provider chosen (set {}=openai|anthropic, OPENAI_BASE_URL or \
             ANTHROPIC_API_KEY)\n",
            openrath::select::ENV_PROVIDER
        )));
    };
    let layers: Vec<&str> = m.layers.iter().map(|l| l.layer.as_str()).collect();
    Ok(Output::ok(format!(
        "{}\nprovider: {}\nmodel: {}\nhost: {}\nlayers: {}\n",
        openrath::select::describe(),
        m.provider,
        m.model.as_deref().unwrap_or("-"),
        m.base_url_host.as_deref().unwrap_or("-"),
        if layers.is_empty() {
            "-".to_owned()
        } else {
            layers.join(", ")
        },
    )))
}

impl From<rath_persist::PersistError> for Failure {
    fn from(e: rath_persist::PersistError) -> Self {
        Failure(e.to_string())
    }
}

fn store_command(cli: &Cli, cmd: &StoreCommand) -> Result<Output, Failure> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure(format!("cannot start the async runtime: {e}")))?;
    rt.block_on(store_command_async(cli, cmd))
}

async fn store_command_async(cli: &Cli, cmd: &StoreCommand) -> Result<Output, Failure> {
    use rath_store_sql::admin;
    let text = match cmd {
        StoreCommand::Copy {
            from,
            to,
            skip_unreadable,
        } => {
            let options = rath_persist::CopyOptions::default().skip_unreadable(*skip_unreadable);
            let r = admin::copy_with(from, to, options).await?;
            let mut out = Output::ok(if cli.json { json(&r)? } else { r.render() });
            out.stderr.extend(
                r.skipped
                    .iter()
                    .map(|s| format!("warning: left out (unreadable): {s}")),
            );
            return Ok(out);
        }
        StoreCommand::Gc => {
            let r = admin::gc(&store_url(cli)).await?;
            if cli.json { json(&r)? } else { r.render() }
        }
        StoreCommand::Migrate => {
            let r = admin::migrate(&store_url(cli)).await?;
            if cli.json { json(&r)? } else { r.render() }
        }
        StoreCommand::Stats => {
            let r = admin::stats(&store_url(cli)).await?;
            if cli.json { json(&r)? } else { r.render() }
        }
    };
    Ok(Output::ok(text))
}

fn view(cli: &Cli, store: &StoreView, out: &Path, chunks: usize) -> Result<Output, Failure> {
    let source = cli
        .store
        .clone()
        .unwrap_or_else(|| "the default store".to_owned());
    let options = ViewOptions::default()
        .source(source)
        .transcript_chunks(chunks);
    let report = write_store_page(store, options, out)?;
    Ok(Output::ok(if cli.json {
        json(&report)?
    } else {
        report.render()
    })
    .warn(&report.warnings, true))
}
