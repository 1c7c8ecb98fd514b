//! `cargo xtask evidence`: evidence packets anyone can regenerate.
//!
//! A packet is a directory `evidence/packets/<name>/` written by one in-process workload:
//!
//! - `command.txt`: the command that regenerates it;
//! - the artifacts (session stores, lineage JSONL/DOT, tool logs, outputs), with every temp
//!   path redacted to `<tmp>` and the workspace root to `<repo>`;
//! - `SUMMARY.md`: what it proves, what it does not, pass/skip/fail and why;
//! - `manifest.json`: deterministic: status, crate versions, the names of the environment
//!   variables the workload reads, and the sha256 of every deterministic file;
//! - `provenance.json`: volatile: git revision, rustc, OS, date, which variables were set
//!   (values never written), and the sha256 of the packet's volatile files.
//!
//! `--check` regenerates every packet into a temporary directory and compares it with the
//! committed one, under the reproducibility the ledger declares for it
//! (`evidence/ledger.toml`, `[[packet]]`); see `evidence/README.md`.

mod crash;
mod durable;
mod flow;
mod layout;
mod lineage;
mod memory;
mod opensandbox;
mod otel;
mod provider;
mod sandbox;
mod store;
mod testreport;
mod visual;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, anyhow, bail};
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::ledger::{Ledger, PacketDecl, Reproducibility};

/// Arguments of `cargo xtask evidence`.
#[derive(clap::Args, Debug, Default)]
pub struct EvidenceArgs {
    /// Build only these packets (repeatable). Default: all.
    #[arg(long, value_name = "NAME")]
    pub only: Vec<String>,
    /// Regenerate into a temporary directory and fail on any difference from the committed
    /// packets (under each packet's declared reproducibility).
    #[arg(long)]
    pub check: bool,
    /// Write packets under this directory instead of evidence/packets.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// List the packets and exit.
    #[arg(long)]
    pub list: bool,
    /// Build the packets whose prerequisites are met; record the others as skipped
    /// (`prerequisite missing: ...`), and the claim ledger reports their claims unverified in
    /// this run. Without it, a missing prerequisite stops the command before anything runs.
    #[arg(long)]
    pub available: bool,
}

/// Outcome of a packet's workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Every check held.
    Pass,
    /// The workload could not run here (a prerequisite is absent); the reason says which.
    Skip,
    /// A check failed or the workload errored.
    Fail,
}

impl Status {
    /// `pass`, `skip` or `fail`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Skip => "skip",
            Status::Fail => "fail",
        }
    }
}

/// One named check inside a packet.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    /// What was checked.
    pub name: String,
    /// Whether it held.
    pub ok: bool,
    /// The observed value or why it failed.
    pub detail: String,
}

/// What a workload reports: its checks, or a skip, plus what the packet does and does not
/// prove.
#[derive(Clone, Debug, Default)]
pub struct Report {
    proves: Vec<String>,
    not_proved: Vec<String>,
    checks: Vec<Check>,
    skip: Option<String>,
    error: Option<String>,
    notes: Vec<String>,
}

impl Report {
    /// A report that claims `proves` and disclaims `not_proved`.
    pub fn new(proves: &[&str], not_proved: &[&str]) -> Self {
        Report {
            proves: proves.iter().map(|s| s.to_string()).collect(),
            not_proved: not_proved.iter().map(|s| s.to_string()).collect(),
            ..Report::default()
        }
    }

    /// Records a check.
    pub fn check(&mut self, name: impl Into<String>, ok: bool, detail: impl Into<String>) {
        self.checks.push(Check {
            name: name.into(),
            ok,
            detail: detail.into(),
        });
    }

    /// Records an equality check, with both values in the detail when they differ.
    pub fn check_eq<T: PartialEq + std::fmt::Debug>(&mut self, name: &str, got: T, want: T) {
        let ok = got == want;
        let detail = if ok {
            format!("{got:?}")
        } else {
            format!("got {got:?}, want {want:?}")
        };
        self.check(name, ok, detail);
    }

    /// Marks the packet skipped, with the reason.
    pub fn skip(&mut self, reason: impl Into<String>) {
        self.skip = Some(reason.into());
    }

    /// Adds a free-form note to the summary.
    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// Pass when every check held (and there was one), skip when skipped, else fail.
    pub fn status(&self) -> Status {
        if self.error.is_some() || self.checks.iter().any(|c| !c.ok) {
            Status::Fail
        } else if self.skip.is_some() {
            Status::Skip
        } else if self.checks.is_empty() {
            Status::Fail
        } else {
            Status::Pass
        }
    }

    /// Why the status is what it is, in one line.
    pub fn reason(&self) -> String {
        if let Some(e) = &self.error {
            return format!("workload error: {e}");
        }
        let failed: Vec<&str> = self
            .checks
            .iter()
            .filter(|c| !c.ok)
            .map(|c| c.name.as_str())
            .collect();
        if !failed.is_empty() {
            return format!("failed checks: {}", failed.join(", "));
        }
        if let Some(s) = &self.skip {
            return format!("skipped: {s}");
        }
        if self.checks.is_empty() {
            return "the workload recorded no check".into();
        }
        format!("all {} checks held", self.checks.len())
    }
}

/// A packet: its name, the environment variables it reads, and its workload.
pub struct Packet {
    /// Directory name under `evidence/packets/`.
    pub name: &'static str,
    /// One line: what the workload does.
    pub about: &'static str,
    /// Environment variables the workload reads (names only ever reach the manifest).
    pub env: &'static [&'static str],
    /// The workload: writes artifacts through the context and reports.
    pub build: fn(&mut Ctx) -> Result<Report>,
}

/// Runs the crash child when the binary was started as one (see `crash_recovery` and
/// `durable_resume`).
pub fn crash_child_main() -> Option<std::process::ExitCode> {
    crash::child_main().or_else(durable::child_main)
}

/// Every packet, in build order (`claim_ledger` last: it reads the others' manifests).
pub fn packets() -> Vec<Packet> {
    vec![
        lineage::lineage_export(),
        sandbox::local_sandbox(),
        sandbox::isolated_sandbox(),
        memory::memory_local(),
        crash::crash_recovery(),
        durable::durable_resume(),
        provider::replay(),
        provider::live_provider_manifest(),
        provider::live_provider_run(),
        opensandbox::opensandbox_optional(),
        flow::workflow_transcript(),
        flow::selector_decisions(),
        flow::compression(),
        flow::approval_round_trip(),
        otel::otel_export(),
        lineage::interop_openrath(),
        store::store_sharing(),
        testreport::test_report(),
        visual::visual_qa(),
        layout::layout_audit(),
        crate::ledger::claim_ledger_packet(),
    ]
}

/// What a workload writes through: the packet directory, a private temp root (redacted to
/// `<tmp>` in every artifact), and the directory holding the other packets of this run.
pub struct Ctx {
    /// The packet's output directory.
    pub dir: PathBuf,
    /// The directory of all packets of this run (for `claim_ledger`).
    pub out_root: PathBuf,
    /// True under `--check`.
    pub check_mode: bool,
    tmp: tempfile::TempDir,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Ctx {
    fn new(dir: PathBuf, out_root: PathBuf, check_mode: bool) -> Result<Self> {
        Ok(Ctx {
            dir,
            out_root,
            check_mode,
            tmp: tempfile::Builder::new().prefix("rath-evidence").tempdir()?,
            runtime: None,
        })
    }

    /// The private temp root; never appears in artifacts (redacted to `<tmp>`).
    pub fn tmp(&self) -> &Path {
        self.tmp.path()
    }

    /// A fresh directory `name` under the temp root.
    pub fn tmp_dir(&self, name: &str) -> Result<PathBuf> {
        let p = self.tmp.path().join(name);
        std::fs::create_dir_all(&p)?;
        Ok(p)
    }

    /// Writes `bytes` to `rel` inside the packet (parents created).
    pub fn write(&self, rel: &str, bytes: impl AsRef<[u8]>) -> Result<()> {
        let p = self.dir.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&p, bytes).with_context(|| format!("write {rel}"))
    }

    /// Writes `value` as pretty JSON with a final newline.
    pub fn write_json(&self, rel: &str, value: &impl Serialize) -> Result<()> {
        let mut s = serde_json::to_string_pretty(value)?;
        s.push('\n');
        self.write(rel, s)
    }

    /// Copies every file under `from` into `rel` inside the packet, sorted, paths relative.
    pub fn copy_tree(&self, from: &Path, rel: &str) -> Result<Vec<String>> {
        let files = list_files(from)?;
        for f in &files {
            let bytes = std::fs::read(from.join(f))?;
            self.write(&format!("{rel}/{f}"), bytes)?;
        }
        Ok(files)
    }

    /// Runs a future to completion on a current-thread runtime owned by the context.
    pub fn block_on<F: std::future::Future>(&mut self, fut: F) -> Result<F::Output> {
        if self.runtime.is_none() {
            self.runtime = Some(
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?,
            );
        }
        let rt = self.runtime.as_ref().ok_or_else(|| anyhow!("no runtime"))?;
        Ok(rt.block_on(fut))
    }

    /// `text` with this context's temp root, the system temp dir, the workspace and home
    /// directories replaced by placeholders.
    pub fn redact(&self, text: &str) -> String {
        redact_with(text, &self.redactions())
    }

    fn redactions(&self) -> Vec<(String, String)> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        let mut add = |p: &Path, to: &str| {
            for q in [
                p.to_path_buf(),
                p.canonicalize().unwrap_or_else(|_| p.into()),
            ] {
                let s = q.to_string_lossy().trim_end_matches('/').to_string();
                if s.len() > 1 {
                    pairs.push((s, to.to_string()));
                }
            }
        };
        add(self.tmp.path(), "<tmp>");
        let shared = crate::shared_dir();
        add(&shared, "<shared>");
        add(&crate::workspace_root(), "<repo>");
        if let Some(home) = std::env::var_os("HOME") {
            add(Path::new(&home), "<home>");
        }
        // Longest first, so a nested root is replaced before its parent.
        pairs.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
        pairs.dedup();
        pairs
    }
}

/// Replaces each `(from, to)` in order, then any remaining `/tmp/<name>` by `<tmp>`.
fn redact_with(text: &str, pairs: &[(String, String)]) -> String {
    let mut s = text.to_string();
    for (from, to) in pairs {
        if s.contains(from.as_str()) {
            s = s.replace(from.as_str(), to);
        }
    }
    // Temp dirs made by libraries (a sandbox workspace, say): `/tmp/.tmpXXXX` -> `<tmp>`.
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    while let Some(at) = rest.find("/tmp/") {
        let boundary = at == 0 || !rest.as_bytes()[at - 1].is_ascii_alphanumeric();
        out.push_str(&rest[..at]);
        if boundary {
            let tail = &rest[at + 5..];
            let n = tail
                .bytes()
                .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
                .count();
            out.push_str("<tmp>");
            rest = &tail[n..];
        } else {
            out.push_str("/tmp/");
            rest = &rest[at + 5..];
        }
    }
    out.push_str(rest);
    out
}

/// Every file under `dir`, as sorted `/`-separated relative paths.
pub fn list_files(dir: &Path) -> std::io::Result<Vec<String>> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                walk(root, &path, out)?;
            } else {
                let rel = path.strip_prefix(root).unwrap_or(&path);
                let parts: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                out.push(parts.join("/"));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    if dir.is_dir() {
        walk(dir, dir, &mut out)?;
    }
    out.sort();
    Ok(out)
}

/// Hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Runs the `evidence` subcommand.
pub fn run(args: &EvidenceArgs) -> Result<()> {
    let all = packets();
    if args.list {
        for p in &all {
            println!("{:<22} {}", p.name, p.about);
        }
        return Ok(());
    }
    for name in &args.only {
        if !all.iter().any(|p| p.name == name) {
            let known: Vec<&str> = all.iter().map(|p| p.name).collect();
            bail!("unknown packet {name:?}; known: {}", known.join(", "));
        }
    }
    let selected: Vec<&Packet> = all
        .iter()
        .filter(|p| args.only.is_empty() || args.only.iter().any(|n| n == p.name))
        .collect();
    // Before anything runs: what the packets need, met or missing.
    let names: Vec<&'static str> = selected.iter().map(|p| p.name).collect();
    let (table, missing) = crate::prereq::survey(&names, &|k| std::env::var(k).ok());
    if !table.is_empty() {
        println!("prerequisites:\n{table}");
    }
    if !missing.is_empty() && !args.available {
        for m in &missing {
            eprintln!("  {}: {}", m.packet, m.reason());
        }
        let only: Vec<String> = crate::prereq::parts_for(&missing)
            .iter()
            .map(|p| format!("--only {p}"))
            .collect();
        bail!(
            "{} packet(s) lack a prerequisite, so nothing was run. Prepare this machine with \
             `cargo xtask setup` (or just what is missing: `cargo xtask setup {}`), or build \
             the packets that can be built with `cargo xtask evidence --available`",
            missing.len(),
            only.join(" ")
        );
    }
    let skip_reason = |name: &str| -> Option<String> {
        missing
            .iter()
            .find(|m| m.packet == name)
            .map(|m| m.reason())
    };
    let root = crate::workspace_root();
    let ledger = Ledger::load(&root.join("evidence/ledger.toml"))?;
    let committed = root.join("evidence/packets");
    if args.check {
        let tmp = tempfile::Builder::new()
            .prefix("rath-evidence-check")
            .tempdir()?;
        let out = tmp.path().join("packets");
        return check(&selected, &ledger, &committed, &out, &skip_reason);
    }
    let out = args.out.clone().unwrap_or(committed);
    let mut failed = Vec::new();
    let n = selected.len();
    for (i, p) in selected.iter().enumerate() {
        println!("[{}/{n}] {} ...", i + 1, p.name);
        let started = std::time::Instant::now();
        let status = match skip_reason(p.name) {
            Some(reason) => build_skipped(p, &ledger, &out, &reason)?,
            None => build_packet(p, &ledger, &out, false)?,
        };
        println!(
            "{:<22} {} ({:.1} s)",
            p.name,
            status.as_str(),
            started.elapsed().as_secs_f64()
        );
        if status == Status::Fail {
            failed.push(p.name);
        }
    }
    if !missing.is_empty() {
        println!(
            "{} packet(s) skipped for a missing prerequisite; their claims are unverified in \
             this run (`cargo xtask setup`, then `cargo xtask evidence`, verifies them)",
            missing.len()
        );
    }
    if failed.is_empty() {
        Ok(())
    } else {
        bail!("packets failed: {}", failed.join(", "))
    }
}

/// What a skipped packet's reason starts with when a prerequisite was missing (the ledger
/// reports its claims as unverified in this run, not failed).
pub const PREREQUISITE_MISSING: &str = "prerequisite missing: ";

/// Writes packet `p` as skipped for `reason` (a missing prerequisite) without running its
/// workload; returns its status (skip).
pub fn build_skipped(p: &Packet, ledger: &Ledger, out_root: &Path, reason: &str) -> Result<Status> {
    build_with(p, ledger, out_root, false, &|_ctx| {
        let mut r = Report::default();
        r.skip(reason.to_owned());
        Ok(r)
    })
}

/// Builds one packet into `out_root/<name>` (replacing what was there); returns its status.
pub fn build_packet(
    p: &Packet,
    ledger: &Ledger,
    out_root: &Path,
    check_mode: bool,
) -> Result<Status> {
    build_with(p, ledger, out_root, check_mode, &p.build)
}

/// Builds packet `p` with `workload` in place of its own (the same workload, or a skip).
fn build_with(
    p: &Packet,
    ledger: &Ledger,
    out_root: &Path,
    check_mode: bool,
    workload: &dyn Fn(&mut Ctx) -> Result<Report>,
) -> Result<Status> {
    // Built in a staging directory outside the packet tree and moved into place at the end,
    // so a workload that reads the packet tree (test_report runs xtask's own tests) never
    // sees a half-written, unredacted packet.
    let final_dir = out_root.join(p.name);
    let staging = tempfile::Builder::new().prefix("rath-packet").tempdir()?;
    let dir = staging.path().join(p.name);
    std::fs::create_dir_all(&dir)?;
    let mut ctx = Ctx::new(dir.clone(), out_root.to_path_buf(), check_mode)?;
    let mut report = match workload(&mut ctx) {
        Ok(r) => r,
        Err(e) => Report {
            error: Some(ctx.redact(&format!("{e:#}"))),
            ..Report::default()
        },
    };
    let command = format!("cargo xtask evidence --only {}\n", p.name);
    ctx.write("command.txt", &command)?;

    // Redact every text artifact, then scan for leaks (a leak fails the packet).
    let pairs = ctx.redactions();
    for rel in list_files(&dir)? {
        let path = dir.join(&rel);
        let bytes = std::fs::read(&path)?;
        if let Ok(text) = String::from_utf8(bytes) {
            let clean = redact_with(&text, &pairs);
            if clean != text {
                std::fs::write(&path, clean)?;
            }
        }
    }
    let leaks = crate::leaks::scan_dir(&dir)?;
    if !leaks.is_empty() {
        let list: Vec<String> = leaks
            .iter()
            .map(|(f, l)| format!("{f}:{} {}", l.line, l.rule))
            .collect();
        report.check(
            "no secret, home dir or machine path",
            false,
            list.join("; "),
        );
    }
    let decl = ledger.packet(p.name);
    write_summary(&ctx, p, &report, decl.as_ref())?;
    write_manifests(&ctx, p, &report, decl.as_ref(), &command)?;
    if final_dir.exists() {
        std::fs::remove_dir_all(&final_dir)?;
    }
    copy_dir(&dir, &final_dir)?;
    Ok(report.status())
}

fn write_summary(ctx: &Ctx, p: &Packet, r: &Report, decl: Option<&PacketDecl>) -> Result<()> {
    let status = r.status();
    let mut s = String::new();
    writeln!(s, "# Packet `{}`\n", p.name)?;
    writeln!(s, "{}\n", p.about)?;
    writeln!(s, "**Status: {}** ({})\n", status.as_str(), r.reason())?;
    let repro = decl.map(|d| d.reproducibility).unwrap_or_default();
    writeln!(s, "Reproducibility: `{}`.", repro.as_str())?;
    if let Some(d) = decl {
        if !d.volatile.is_empty() {
            writeln!(
                s,
                " Volatile files (not compared by `--check`): {}.",
                d.volatile
                    .iter()
                    .map(|v| format!("`{v}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )?;
        }
        if !d.note.is_empty() {
            writeln!(s, " {}", d.note)?;
        }
    }
    writeln!(
        s,
        "\nRegenerate: `cargo xtask evidence --only {}`\n",
        p.name
    )?;
    writeln!(s, "## What it proves\n")?;
    for x in &r.proves {
        writeln!(s, "- {x}")?;
    }
    writeln!(s, "\n## What it does not prove\n")?;
    for x in &r.not_proved {
        writeln!(s, "- {x}")?;
    }
    if let Some(skip) = &r.skip {
        writeln!(s, "\n## Why it was skipped\n\n{skip}")?;
    }
    if let Some(e) = &r.error {
        writeln!(s, "\n## Error\n\n```\n{e}\n```")?;
    }
    if !r.notes.is_empty() {
        writeln!(s, "\n## Notes\n")?;
        for n in &r.notes {
            writeln!(s, "- {n}")?;
        }
    }
    if !r.checks.is_empty() {
        writeln!(
            s,
            "\n## Checks\n\n| check | result | detail |\n| --- | --- | --- |"
        )?;
        for c in &r.checks {
            let detail = c.detail.replace('|', "\\|").replace('\n', " ");
            let detail = if detail.len() > 300 {
                let mut end = 300;
                while !detail.is_char_boundary(end) {
                    end -= 1;
                }
                format!("{}…", &detail[..end])
            } else {
                detail
            };
            let ok = if c.ok { "ok" } else { "FAILED" };
            writeln!(s, "| {} | {ok} | {detail} |", c.name.replace('|', "\\|"))?;
        }
    }
    let files: Vec<String> = list_files(&ctx.dir)?
        .into_iter()
        .filter(|f| f != "command.txt")
        .collect();
    writeln!(s, "\n## Files\n")?;
    writeln!(
        s,
        "- `command.txt`, `SUMMARY.md`, `manifest.json` (sha256 of every deterministic file), \
         `provenance.json` (volatile: git revision, toolchain, OS)"
    )?;
    for f in files {
        writeln!(s, "- `{f}`")?;
    }
    ctx.write("SUMMARY.md", s)
}

fn write_manifests(
    ctx: &Ctx,
    p: &Packet,
    r: &Report,
    decl: Option<&PacketDecl>,
    command: &str,
) -> Result<()> {
    let volatile: Vec<String> = decl.map(|d| d.volatile.clone()).unwrap_or_default();
    let mut files = BTreeMap::new();
    let mut volatile_files = BTreeMap::new();
    for rel in list_files(&ctx.dir)? {
        let sha = sha256_hex(&std::fs::read(ctx.dir.join(&rel))?);
        if volatile.iter().any(|v| matches_decl(v, &rel)) {
            volatile_files.insert(rel, sha);
        } else {
            files.insert(rel, sha);
        }
    }
    let mut env: Vec<&str> = p.env.to_vec();
    env.sort_unstable();
    let mut manifest = json!({
        "packet": p.name,
        "status": r.status().as_str(),
        "reproducibility": decl.map(|d| d.reproducibility).unwrap_or_default().as_str(),
        "command": command.trim_end(),
        "crates": crate_versions(),
        "env_read": env,
        "files": files,
        "volatile_files": volatile_files.keys().collect::<Vec<_>>(),
    });
    // Only a packet skipped for a missing prerequisite carries it: the ledger then reports
    // its claims as unverified in this run rather than failed.
    if let Some(reason) = r
        .skip
        .as_deref()
        .filter(|s| s.starts_with(PREREQUISITE_MISSING))
    {
        manifest["skip_reason"] = json!(reason);
    }
    ctx.write_json("manifest.json", &manifest)?;
    let env_state: BTreeMap<&str, &str> = p
        .env
        .iter()
        .map(|k| {
            let set = std::env::var_os(k).is_some_and(|v| !v.is_empty());
            (
                *k,
                if set {
                    "set (value not recorded)"
                } else {
                    "unset"
                },
            )
        })
        .collect();
    let provenance = json!({
        "note": "volatile: excluded from `cargo xtask evidence --check`",
        "git_revision": git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into()),
        "git_dirty": git(&["status", "--porcelain"]).is_some_and(|s| !s.is_empty()),
        "rustc": tool_version("rustc"),
        "cargo": tool_version("cargo"),
        "os": format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
        "os_release": os_release(),
        "generated_at_unix": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        "env": env_state,
        "volatile_files": volatile_files,
    });
    let text = ctx.redact(&serde_json::to_string_pretty(&provenance)?);
    ctx.write("provenance.json", text + "\n")
}

/// True when ledger declaration `decl` (a path, or a prefix ending in `/`) covers `rel`.
pub fn matches_decl(decl: &str, rel: &str) -> bool {
    if let Some(prefix) = decl.strip_suffix('/') {
        rel.starts_with(prefix) && rel[prefix.len()..].starts_with('/')
    } else {
        decl == rel
    }
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(crate::workspace_root())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn tool_version(tool: &str) -> String {
    Command::new(tool)
        .arg("--version")
        .current_dir(crate::workspace_root())
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

fn os_release() -> String {
    std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim_matches('"').to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Versions of the workspace crates and the main third-party crates, from `Cargo.lock`.
pub fn crate_versions() -> BTreeMap<String, String> {
    const THIRD_PARTY: &[&str] = &["serde", "serde_json", "tokio", "async-openai", "axum"];
    let root = crate::workspace_root();
    let mut out = BTreeMap::new();
    let Ok(lock) = std::fs::read_to_string(root.join("Cargo.lock")) else {
        return out;
    };
    let Ok(doc) = lock.parse::<toml::Table>() else {
        return out;
    };
    let Some(pkgs) = doc.get("package").and_then(|p| p.as_array()) else {
        return out;
    };
    for p in pkgs {
        let name = p.get("name").and_then(|v| v.as_str()).unwrap_or("");
        let version = p.get("version").and_then(|v| v.as_str()).unwrap_or("");
        let local = p.get("source").is_none();
        let ours = local && (name.starts_with("rath-") || name == "openrath" || name == "xtask");
        if ours || THIRD_PARTY.contains(&name) {
            // Several versions of one third-party crate: keep them all, sorted.
            out.entry(name.to_string())
                .and_modify(|v: &mut String| {
                    let mut all: Vec<&str> = v.split(", ").chain([version]).collect();
                    all.sort_unstable();
                    all.dedup();
                    *v = all.join(", ");
                })
                .or_insert_with(|| version.to_string());
        }
    }
    out
}

/// Reads a packet's `manifest.json`.
pub fn read_manifest(dir: &Path) -> Result<Value> {
    let p = dir.join("manifest.json");
    let text = std::fs::read_to_string(&p).with_context(|| format!("read {}", p.display()))?;
    Ok(serde_json::from_str(&text)?)
}

/// True when `--check` may reuse the committed `test_report` instead of re-running the whole
/// test suite: CI (`RATH_CI=1`, set by `.ci/run`, which runs `cargo test --workspace` just
/// before) or `RATH_EVIDENCE_TESTS_RAN=1`.
pub fn tests_just_ran() -> bool {
    ["RATH_CI", "RATH_EVIDENCE_TESTS_RAN"]
        .iter()
        .any(|k| std::env::var(k).is_ok_and(|v| v == "1" || v == "true"))
}

fn check(
    selected: &[&Packet],
    ledger: &Ledger,
    committed: &Path,
    out: &Path,
    skip_reason: &dyn Fn(&str) -> Option<String>,
) -> Result<()> {
    let started = std::time::Instant::now();
    std::fs::create_dir_all(out)?;
    let mut problems: Vec<String> = Vec::new();
    let n = selected.len();
    for (i, p) in selected.iter().enumerate() {
        let decl = ledger.packet(p.name).unwrap_or_default();
        if let Some(reason) = skip_reason(p.name) {
            // Only with --available: not regenerated, so not compared; unverified here.
            println!("{:<22} not checked ({reason})", p.name);
            continue;
        }
        println!("[{}/{n}] {} ...", i + 1, p.name);
        let one = std::time::Instant::now();
        let have = committed.join(p.name);
        if !have.is_dir() {
            problems.push(format!("{}: no committed packet", p.name));
            continue;
        }
        if decl.reuse_in_ci && tests_just_ran() {
            // Not regenerated: the suite just ran in this CI job. Validate and reuse.
            let m = read_manifest(&have)?;
            let status = m["status"].as_str().unwrap_or("?");
            if status != "pass" {
                problems.push(format!("{}: committed status is {status}", p.name));
            }
            copy_dir(&have, &out.join(p.name))?;
            println!("{:<22} reused (tests ran earlier in this job)", p.name);
            continue;
        }
        let status = build_packet(p, ledger, out, true)?;
        let diffs = compare_packet(&have, &out.join(p.name), &decl)?;
        let verdict = if diffs.is_empty() {
            "reproduces".to_string()
        } else {
            format!("{} difference(s)", diffs.len())
        };
        println!(
            "{:<22} {:<5} {verdict} ({:.1} s)",
            p.name,
            status.as_str(),
            one.elapsed().as_secs_f64()
        );
        problems.extend(diffs.into_iter().map(|d| format!("{}: {d}", p.name)));
    }
    // A committed packet nobody builds any more is stale.
    let known: Vec<&str> = packets().iter().map(|p| p.name).collect();
    if selected.len() == known.len() && committed.is_dir() {
        for entry in std::fs::read_dir(committed)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if !known.contains(&name.as_str()) {
                problems.push(format!("{name}: committed but no longer built (stale)"));
            }
        }
    }
    println!(
        "evidence --check: {} packet(s) in {:.0}s",
        selected.len(),
        started.elapsed().as_secs_f64()
    );
    if problems.is_empty() {
        Ok(())
    } else {
        for p in &problems {
            eprintln!("  {p}");
        }
        bail!(
            "{} difference(s) from the committed packets; regenerate with `cargo xtask evidence` \
             and commit evidence/",
            problems.len()
        )
    }
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    for rel in list_files(from)? {
        let dest = to.join(&rel);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::copy(from.join(&rel), dest)?;
    }
    Ok(())
}

/// Differences between a committed packet and a regenerated one, under `decl`.
pub fn compare_packet(have: &Path, new: &Path, decl: &PacketDecl) -> Result<Vec<String>> {
    let mut diffs = Vec::new();
    let old_status = read_manifest(have)
        .ok()
        .and_then(|m| m["status"].as_str().map(str::to_string));
    let new_status = read_manifest(new)
        .ok()
        .and_then(|m| m["status"].as_str().map(str::to_string));
    if decl.reproducibility == Reproducibility::Environment && old_status != new_status {
        println!(
            "  note: status {} here, {} committed; `{}` depends on the machine (see ledger), \
             so only its presence is compared",
            new_status.as_deref().unwrap_or("?"),
            old_status.as_deref().unwrap_or("?"),
            new.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        );
        return Ok(diffs);
    }
    let skip =
        |rel: &str| rel == "provenance.json" || decl.volatile.iter().any(|v| matches_decl(v, rel));
    let a = list_files(have)?;
    let b = list_files(new)?;
    for rel in a.iter().filter(|f| !b.contains(f)) {
        diffs.push(format!("{rel} is committed but was not regenerated"));
    }
    for rel in b.iter().filter(|f| !a.contains(f)) {
        diffs.push(format!("{rel} was regenerated but is not committed"));
    }
    for rel in a.iter().filter(|f| b.contains(f) && !skip(f)) {
        let x = std::fs::read(have.join(rel))?;
        let y = std::fs::read(new.join(rel))?;
        if x != y {
            diffs.push(format!("{rel} differs{}", first_difference(&x, &y)));
        }
    }
    Ok(diffs)
}

fn first_difference(a: &[u8], b: &[u8]) -> String {
    let (Ok(a), Ok(b)) = (std::str::from_utf8(a), std::str::from_utf8(b)) else {
        return String::new();
    };
    for (n, (x, y)) in a.lines().zip(b.lines()).enumerate() {
        if x != y {
            return format!(" at line {}: committed {x:?}, now {y:?}", n + 1);
        }
    }
    format!(
        " in length ({} vs {} lines)",
        a.lines().count(),
        b.lines().count()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_replaces_roots_and_stray_temp_dirs() {
        let pairs = vec![("/x/root".to_string(), "<repo>".to_string())];
        assert_eq!(
            redact_with("a /x/root/b and /tmp/.tmpAb12/ws/f", &pairs),
            "a <repo>/b and <tmp>/ws/f"
        );
        assert_eq!(redact_with("no/tmp/here", &pairs), "no/tmp/here");
    }

    #[test]
    fn volatile_declarations_match_files_and_prefixes() {
        assert!(matches_decl("out.txt", "out.txt"));
        assert!(matches_decl("shots/", "shots/a.png"));
        assert!(!matches_decl("shots/", "shotsx/a.png"));
        assert!(!matches_decl("out.txt", "out.txt.bak"));
    }

    #[test]
    fn report_status_follows_checks() {
        let mut r = Report::new(&["x"], &["y"]);
        assert_eq!(r.status(), Status::Fail);
        r.check("a", true, "");
        assert_eq!(r.status(), Status::Pass);
        r.skip("absent");
        assert_eq!(r.status(), Status::Skip);
        r.check("b", false, "");
        assert_eq!(r.status(), Status::Fail);
    }
}
