//! `rath serve` (the agent server, a `rath-server` call) and `rath keys` (its API keys, read
//! and written in the run store's database).

use std::time::Duration;

use clap::{Args, Subcommand};
use rath_server::{RateLimit, Server, ServerConfig, ServerDb};

use crate::{Failure, Output, json};

impl From<rath_server::ServerError> for Failure {
    fn from(e: rath_server::ServerError) -> Self {
        Failure(e.to_string())
    }
}

/// `rath serve`'s flags (the session store is the global `--store`).
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The run store, which also holds the server's tables: `sqlite:FILE` or
    /// `postgres://USER@HOST/DB`.
    #[arg(long, value_name = "URL")]
    runs: String,
    /// The address to listen on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    bind: String,
    /// Worker loops in the server process (0: runs wait for `rath worker` elsewhere; at most
    /// 256).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = crate::count(256))]
    workers: usize,
    /// Largest request body accepted, in bytes (at most 1 GiB).
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20, value_parser = crate::count(1 << 30))]
    body_limit: usize,
    /// Requests per second each key may make on average (default: unlimited).
    #[arg(long, value_name = "PER_SECOND")]
    rate_limit: Option<f64>,
    /// Requests a key may make at once (with --rate-limit).
    #[arg(long, value_name = "N", default_value_t = 20.0)]
    burst: f64,
    /// An origin CORS allows (repeatable; none: no CORS headers).
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    cors_origins: Vec<String>,
    /// On shutdown, seconds in-flight runs may go on before they are handed back (at most a
    /// day).
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = crate::duration(0, 86_400))]
    grace: u64,
    /// Serve the declared workflows of DIR (every `*.toml` in it) instead of the bundled
    /// ones; a bad file stops the server before it listens, naming the file and line.
    #[arg(long, value_name = "DIR")]
    workflows: Option<std::path::PathBuf>,
}

/// `rath keys`.
#[derive(Debug, Subcommand)]
pub(crate) enum KeysCommand {
    /// Mint a key; its secret is printed once and stored only as its sha256.
    Create {
        /// The run store holding the server's tables.
        #[arg(long, value_name = "URL")]
        runs: String,
        /// The tenant whose sessions and runs the key reaches.
        #[arg(long)]
        tenant: String,
        /// An admin key (mints and revokes keys over HTTP).
        #[arg(long)]
        admin: bool,
        /// Who or what the key is for.
        #[arg(long, default_value = "")]
        label: String,
    },
    /// List keys (ids, tenants, labels; never secrets).
    List {
        /// The run store holding the server's tables.
        #[arg(long, value_name = "URL")]
        runs: String,
    },
    /// Revoke a key by id: it is refused from the next request on.
    Revoke {
        /// The run store holding the server's tables.
        #[arg(long, value_name = "URL")]
        runs: String,
        /// The key's id (`key_...`).
        id: String,
    },
    /// Signing keys for seals (`rath seal`, `rath verify`; not API keys).
    #[command(subcommand)]
    Signing(crate::seal::SigningCommand),
}

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(crate::alloc::on_park)
        .build()
        .map_err(|e| Failure(format!("cannot start the async runtime: {e}")))
}

/// Serves until SIGINT or SIGTERM, then shuts down gracefully.
pub(crate) fn serve(store: &str, args: &ServeArgs) -> Result<Output, Failure> {
    let config = ServerConfig {
        body_limit: args.body_limit,
        rate_limit: args.rate_limit.map(|per_second| RateLimit {
            per_second,
            burst: args.burst.max(1.0),
        }),
        cors_origins: args.cors_origins.clone(),
        workers: args.workers,
        worker_name: format!("serve-{}", std::process::id()),
        grace: Duration::from_secs(args.grace),
        ..ServerConfig::default()
    };
    if args.rate_limit.is_some_and(|r| !r.is_finite() || r <= 0.0) {
        return Err(Failure("--rate-limit must be a number above 0".into()));
    }
    if !args.burst.is_finite() {
        return Err(Failure("--burst must be a finite number".into()));
    }
    runtime()?.block_on(async {
        // Checked (and a declared file's MCP servers started) before anything is opened or
        // bound: the server never starts half-configured.
        let registry = crate::workflows::registry(
            args.workflows.as_deref(),
            &rath_runtime::bundled::BundledOptions::default(),
        )
        .await?;
        let telemetry = crate::telemetry::init()?;
        let served = serve_on(store, &args.runs, &args.bind, registry, config).await;
        telemetry.shutdown();
        served
    })
}

async fn serve_on(
    store: &str,
    runs: &str,
    bind: &str,
    registry: rath_runtime::WorkflowRegistry,
    config: ServerConfig,
) -> Result<Output, Failure> {
    let server = Server::connect(store, runs, registry, config).await?;
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|e| Failure(format!("cannot listen on {bind}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Failure(format!("cannot read the bound address: {e}")))?;
    eprintln!("rath: serving on http://{addr} (Ctrl-C or SIGTERM stops)");
    let stop = server.shutdown_token();
    tokio::spawn(async move {
        openrath::serve::shutdown_signal().await;
        eprintln!("rath: shutting down");
        stop.cancel();
    });
    server.serve(listener).await?;
    Ok(Output::ok(String::new()))
}

/// `rath keys ...`.
pub(crate) fn keys(
    cmd: &KeysCommand,
    as_json: bool,
    store: Option<String>,
) -> Result<Output, Failure> {
    if let KeysCommand::Signing(cmd) = cmd {
        return crate::seal::signing(cmd, store, as_json);
    }
    runtime()?.block_on(async {
        match cmd {
            KeysCommand::Create {
                runs,
                tenant,
                admin,
                label,
            } => {
                let db = ServerDb::connect(runs).await?;
                let k = db.create_key(tenant, *admin, label).await?;
                Ok::<Output, Failure>(Output::ok(if as_json {
                    json(&k)?
                } else {
                    format!(
                        "{}\nkey {} for tenant {}{} (the secret above is shown once)\n",
                        k.secret,
                        k.info.id,
                        k.info.tenant,
                        if k.info.admin { ", admin" } else { "" }
                    )
                }))
            }
            KeysCommand::List { runs } => {
                let keys = ServerDb::connect(runs).await?.list_keys().await?;
                if as_json {
                    return Ok::<Output, Failure>(Output::ok(json(&keys)?));
                }
                let mut text = String::new();
                for k in keys {
                    text.push_str(&format!(
                        "{}  tenant={}  {}  {}  {}\n",
                        k.id,
                        k.tenant,
                        if k.admin { "admin" } else { "tenant" },
                        if k.revoked_ms.is_some() {
                            "revoked"
                        } else {
                            "live"
                        },
                        k.label
                    ));
                }
                Ok(Output::ok(text))
            }
            KeysCommand::Revoke { runs, id } => {
                if ServerDb::connect(runs).await?.revoke_key(id).await? {
                    Ok(Output::ok(format!("revoked {id}\n")))
                } else {
                    Err(Failure(format!("no key {id}")))
                }
            }
            KeysCommand::Signing(cmd) => crate::seal::signing(cmd, None, as_json),
        }
    })
}
