//! `rath seal`, the seal part of `rath verify`, `rath erase` and `rath keys signing`: thin
//! calls into `rath-seal` on the store `--store` names.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Subcommand};
use rath_persist::SessionStore;
use rath_seal::erase::{ChunkRef, erase};
use rath_seal::{Report, SealError, Sealer, VerifyOptions, keys, verify_store};
use rath_session::{SessionId, Stamper};

use crate::{Failure, Output, json};

/// The variable naming the signing key file when `--key` is not given.
pub(crate) const KEY_ENV: &str = "OPENRATH_SIGNING_KEY";

impl From<SealError> for Failure {
    fn from(e: SealError) -> Self {
        Failure(e.to_string())
    }
}

/// `rath verify`'s flags.
#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// Verify only this session (a stored or sealed id); default every session (`--all`).
    pub(crate) session: Option<String>,
    /// Verify every session (the default).
    #[arg(long, conflicts_with = "session")]
    pub(crate) all: bool,
    /// Trust signatures by this public key (hex; repeatable). Default: the first key the
    /// store's ledger recorded.
    #[arg(long = "trusted-key", value_name = "HEX")]
    pub(crate) trusted_keys: Vec<String>,
    /// Fail on any ledger entry that is not signed by a trusted key.
    #[arg(long)]
    pub(crate) require_signatures: bool,
}

/// `rath seal`'s flags.
#[derive(Debug, Args)]
pub(crate) struct SealArgs {
    /// Seal only this session; default every stored session.
    session: Option<String>,
    /// The signing key file (`rath keys signing new`); default $OPENRATH_SIGNING_KEY, else
    /// the seals are not signed.
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
}

/// `rath erase`'s flags.
#[derive(Debug, Args)]
pub(crate) struct EraseArgs {
    /// A chunk to erase, as SESSION:INDEX (repeatable).
    #[arg(long, value_name = "SESSION:INDEX")]
    chunk: Vec<String>,
    /// Erase every chunk whose text contains PATTERN (a plain substring).
    #[arg(long, value_name = "PATTERN")]
    matching: Option<String>,
    /// Why (recorded in the ledger).
    #[arg(long)]
    reason: String,
    /// Who erases (recorded in the ledger); default $USER.
    #[arg(long)]
    by: Option<String>,
    /// The signing key file; default $OPENRATH_SIGNING_KEY, else the record is not signed.
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
}

/// `rath keys signing ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum SigningCommand {
    /// Make an ed25519 signing key in FILE (mode 0600, never overwritten; keep it outside
    /// the store) and its public half in FILE.pub; with --store (or $OPENRATH_STORE), record
    /// the public half in that store's seal ledger.
    New {
        /// Where to write the key.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
}

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure(format!("cannot start the async runtime: {e}")))
}

fn signing_key(key: Option<&PathBuf>) -> Result<Option<ed25519_dalek::SigningKey>, Failure> {
    let path = match key {
        Some(p) => Some(p.clone()),
        None => std::env::var_os(KEY_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from),
    };
    Ok(match path {
        Some(p) => Some(keys::load(&p)?),
        None => None,
    })
}

async fn writable(url: &str) -> Result<Arc<dyn SessionStore>, Failure> {
    Ok(rath_store_sql::open_store(url).await?.into())
}

/// The seal verification of `rath verify` (read-only): the report, or `None` when the
/// store has no ledger and no session was asked for by id.
pub(crate) fn verify(
    url: &str,
    args: &VerifyArgs,
    session: Option<String>,
) -> Result<Report, Failure> {
    runtime()?.block_on(async {
        let store = rath_store_sql::open_store_read(url).await?;
        let mut options = VerifyOptions::default()
            .trusting(args.trusted_keys.iter().cloned())
            .require_signatures(args.require_signatures);
        if let Some(id) = session {
            options = options.sessions([id]);
        }
        Ok(verify_store(store.as_ref(), &options).await?)
    })
}

/// `rath seal`.
pub(crate) fn seal(url: &str, args: &SealArgs, as_json: bool) -> Result<Output, Failure> {
    let key = signing_key(args.key.as_ref())?;
    let signed = key.as_ref().map(keys::public_hex);
    runtime()?.block_on(async {
        let store = writable(url).await?;
        let sealer = Sealer::open(store.clone(), key, Stamper::from_env()).await?;
        let sealed = match &args.session {
            Some(id) => {
                let loaded = store.load(&SessionId::new(id)).await?;
                usize::from(sealer.seal(&loaded.session).await?.is_some())
            }
            None => sealer.seal_all().await?,
        };
        let text = if as_json {
            json(&serde_json::json!({ "sealed": sealed, "signed_by": signed }))?
        } else {
            match &signed {
                Some(k) => format!("sealed {sealed} session(s), signed by {k}\n"),
                None => format!("sealed {sealed} session(s), unsigned\n"),
            }
        };
        Ok(Output::ok(text))
    })
}

/// `rath erase`.
pub(crate) fn erase_cmd(url: &str, args: &EraseArgs, as_json: bool) -> Result<Output, Failure> {
    if args.chunk.is_empty() && args.matching.is_none() {
        return Err(Failure(
            "erase: give --chunk SESSION:INDEX or --matching PATTERN".into(),
        ));
    }
    let key = signing_key(args.key.as_ref())?;
    let by = args
        .by
        .clone()
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "unknown".into());
    let mut targets: Vec<ChunkRef> = args
        .chunk
        .iter()
        .map(|c| c.parse())
        .collect::<Result<_, SealError>>()?;
    runtime()?.block_on(async {
        let store = writable(url).await?;
        let stamper = Stamper::from_env();
        let sealer = Sealer::open(store.clone(), key, stamper.clone()).await?;
        if let Some(pattern) = &args.matching {
            for summary in store.list().await? {
                if summary.id.as_str() == rath_seal::LEDGER_ID {
                    continue;
                }
                let loaded = store.load(&summary.id).await?;
                for (index, c) in loaded.session.chunks().iter().enumerate() {
                    if c.text().is_some_and(|t| t.contains(pattern.as_str())) {
                        targets.push(ChunkRef {
                            session: summary.id.to_string(),
                            index,
                        });
                    }
                }
            }
        }
        let at = stamper.now().to_string();
        let mut erased = Vec::new();
        let mut replaced = 0u64;
        for t in &targets {
            let done = erase(&sealer, t, &by, &args.reason, &at).await?;
            if done.replaced > 0 || !erased.contains(&done.digest) {
                replaced += done.replaced;
            }
            if !erased.contains(&done.digest) {
                erased.push(done.digest);
            }
        }
        let text = if as_json {
            json(&serde_json::json!({
                "erased": erased.iter().map(rath_session::merkle::hex).collect::<Vec<_>>(),
                "replaced": replaced,
            }))?
        } else {
            format!(
                "erased {} chunk(s) ({replaced} stored cop{} replaced by tombstones)\n",
                erased.len(),
                if replaced == 1 { "y" } else { "ies" }
            )
        };
        Ok(Output::ok(text))
    })
}

/// `rath keys signing new`.
pub(crate) fn signing(
    cmd: &SigningCommand,
    store: Option<String>,
    as_json: bool,
) -> Result<Output, Failure> {
    match cmd {
        SigningCommand::New { out } => {
            let public = keys::generate(out)?;
            let recorded = match &store {
                Some(url) => runtime()?.block_on(async {
                    let store = writable(url).await?;
                    let sealer =
                        Sealer::open(store, Some(keys::load(out)?), Stamper::from_env()).await?;
                    Ok::<_, Failure>(sealer.record_key().await?)
                })?,
                None => false,
            };
            let text = if as_json {
                json(&serde_json::json!({
                    "key": out.display().to_string(),
                    "public": public,
                    "recorded_in": recorded.then_some(store.clone()).flatten(),
                }))?
            } else {
                let mut t = format!(
                    "signing key written to {} (keep it outside the store)\npublic key {public}\n",
                    out.display()
                );
                if recorded && let Some(url) = &store {
                    t.push_str(&format!(
                        "public key recorded in the seal ledger of {url}\n"
                    ));
                }
                t
            };
            Ok(Output::ok(text))
        }
    }
}
