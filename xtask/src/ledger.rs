//! The claim ledger: `evidence/ledger.toml` maps each claim to packets and a status;
//! `cargo xtask ledger` fails when a supported claim lacks a passing packet and writes
//! `evidence/LEDGER.md`, the table a reviewer reads.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context as _, Result, bail};
use serde::{Deserialize, Serialize};

use crate::evidence::{Ctx, Packet, Report, read_manifest};

/// Arguments of `cargo xtask ledger`.
#[derive(clap::Args, Debug, Default)]
pub struct LedgerArgs {
    /// Check only; do not write evidence/LEDGER.md.
    #[arg(long)]
    pub no_write: bool,
}

/// How far a claim is backed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClaimStatus {
    /// Every listed packet passes and shows the claim within its scope.
    Supported,
    /// Packets show part of the claim; the scope says which part is missing.
    Partial,
    /// A prerequisite is disclosed (what must exist for the claim), not the claim itself.
    Prerequisite,
    /// Cited from the literature; no packet of ours backs it.
    Bibliography,
    /// Only the layout is smoke-checked (files exist, pages render).
    LayoutSmoke,
    /// Backed only when a gated packet (live model, real server) passes on the machine.
    EvidenceGated,
}

impl ClaimStatus {
    /// The ledger spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimStatus::Supported => "supported",
            ClaimStatus::Partial => "partial",
            ClaimStatus::Prerequisite => "prerequisite",
            ClaimStatus::Bibliography => "bibliography",
            ClaimStatus::LayoutSmoke => "layout-smoke",
            ClaimStatus::EvidenceGated => "evidence-gated",
        }
    }
}

/// How a packet reproduces, which decides what `--check` compares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reproducibility {
    /// Every file but `provenance.json` and the declared volatile files is byte-identical.
    #[default]
    Deterministic,
    /// Depends on the machine (a live server, a browser): when the regenerated status equals
    /// the committed one, compared like a deterministic packet; otherwise only presence.
    Environment,
}

impl Reproducibility {
    /// The ledger spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Reproducibility::Deterministic => "deterministic",
            Reproducibility::Environment => "environment",
        }
    }
}

/// One claim.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    /// Stable id.
    pub id: String,
    /// The claim, one sentence.
    pub text: String,
    /// `paper` or `openrath`.
    pub source: String,
    /// How far it is backed.
    pub status: ClaimStatus,
    /// Packets that back it.
    #[serde(default)]
    pub packets: Vec<String>,
    /// What the packets do not prove.
    pub scope: String,
}

/// One packet's declaration: how it reproduces.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PacketDecl {
    /// Packet name.
    pub name: String,
    /// How it reproduces.
    #[serde(default)]
    pub reproducibility: Reproducibility,
    /// Files (or `dir/` prefixes) excluded from byte comparison; their hashes go to
    /// `provenance.json`.
    #[serde(default)]
    pub volatile: Vec<String>,
    /// When true, `--check` in CI reuses the committed packet (the test suite just ran).
    #[serde(default)]
    pub reuse_in_ci: bool,
    /// One sentence for reviewers.
    #[serde(default)]
    pub note: String,
}

/// `evidence/ledger.toml`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Ledger {
    /// Claims, in reading order.
    #[serde(default, rename = "claim")]
    pub claims: Vec<Claim>,
    /// Packet declarations.
    #[serde(default, rename = "packet")]
    pub packets: Vec<PacketDecl>,
}

impl Ledger {
    /// Reads and parses the ledger.
    pub fn load(path: &Path) -> Result<Ledger> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("parse {}", path.display()))
    }

    /// The declaration of packet `name`.
    pub fn packet(&self, name: &str) -> Option<PacketDecl> {
        self.packets.iter().find(|p| p.name == name).cloned()
    }
}

/// A packet's state as read from its committed manifest.
#[derive(Clone, Debug, Serialize)]
pub struct PacketState {
    /// Packet name.
    pub name: String,
    /// `pass`, `skip`, `fail` or `missing`.
    pub status: String,
}

/// Every problem with the ledger against the packets under `packets_dir`; empty when it holds.
pub fn problems(ledger: &Ledger, packets_dir: &Path, built: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    let mut ids = std::collections::BTreeSet::new();
    for c in &ledger.claims {
        if !ids.insert(c.id.as_str()) {
            out.push(format!("claim {} appears twice", c.id));
        }
        if c.scope.trim().is_empty() {
            out.push(format!(
                "claim {} has no scope (what it does not prove)",
                c.id
            ));
        }
        for p in &c.packets {
            if !built.contains(&p.as_str()) {
                out.push(format!(
                    "claim {} names packet {p}, which no workload builds",
                    c.id
                ));
            }
        }
        match c.status {
            ClaimStatus::Supported => {
                if c.packets.is_empty() {
                    out.push(format!("supported claim {} lists no packet", c.id));
                }
                for p in &c.packets {
                    let st = packet_status(packets_dir, p);
                    if st == "skip" && !in_ci() && prerequisite_missing(packets_dir, p).is_some() {
                        // Unverified in this run, not failed: see `unverified`.
                        continue;
                    }
                    if st != "pass" {
                        out.push(format!(
                            "supported claim {} needs packet {p} to pass; it is {st}",
                            c.id
                        ));
                    }
                }
            }
            ClaimStatus::Partial | ClaimStatus::EvidenceGated | ClaimStatus::LayoutSmoke => {
                if c.packets.is_empty() {
                    out.push(format!(
                        "{} claim {} lists no packet",
                        c.status.as_str(),
                        c.id
                    ));
                }
            }
            ClaimStatus::Prerequisite | ClaimStatus::Bibliography => {}
        }
    }
    for name in built {
        if ledger.packet(name).is_none() {
            out.push(format!("packet {name} has no [[packet]] declaration"));
        }
    }
    for d in &ledger.packets {
        if !built.contains(&d.name.as_str()) {
            out.push(format!(
                "[[packet]] {} is declared but no workload builds it",
                d.name
            ));
        }
    }
    out
}

/// The status as the `claim_ledger` packet records it: an `environment` packet's status
/// depends on the machine, so it is written as `environment` to keep that packet
/// reproducible (`cargo xtask ledger` shows the real status in LEDGER.md).
fn masked_status(ledger: &Ledger, packets_dir: &Path, name: &str, mask: bool) -> String {
    let env = ledger
        .packet(name)
        .is_some_and(|d| d.reproducibility == Reproducibility::Environment);
    if mask && name == "claim_ledger" {
        // The packet being built: its own status is in its SUMMARY.md, not yet on disk.
        return "this packet".into();
    }
    let st = packet_status(packets_dir, name);
    if mask && env && st != "missing" {
        "environment".into()
    } else {
        st
    }
}

/// True under `RATH_CI` (set and neither empty nor `0`): there a missing prerequisite is a
/// failure, never "unverified".
fn in_ci() -> bool {
    std::env::var("RATH_CI").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Why packet `name` was skipped, when it was skipped for a missing prerequisite (`cargo
/// xtask evidence --available`).
pub fn prerequisite_missing(packets_dir: &Path, name: &str) -> Option<String> {
    read_manifest(&packets_dir.join(name))
        .ok()
        .and_then(|m| m["skip_reason"].as_str().map(str::to_string))
}

/// The claims this run could not verify: a `supported` claim whose packet was skipped for a
/// missing prerequisite, one line each (`<claim>: <packet> <reason>`). Outside CI they are
/// reported, not counted as problems.
pub fn unverified(ledger: &Ledger, packets_dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for c in &ledger.claims {
        if c.status != ClaimStatus::Supported {
            continue;
        }
        for p in &c.packets {
            if packet_status(packets_dir, p) == "skip"
                && let Some(reason) = prerequisite_missing(packets_dir, p)
            {
                out.push(format!("{}: {p} {reason}", c.id));
            }
        }
    }
    out
}

/// `pass`/`skip`/`fail` from the packet's manifest, or `missing`.
pub fn packet_status(packets_dir: &Path, name: &str) -> String {
    read_manifest(&packets_dir.join(name))
        .ok()
        .and_then(|m| m["status"].as_str().map(str::to_string))
        .unwrap_or_else(|| "missing".into())
}

/// The reviewer's table. `link_prefix` is how packet directories are reached from the file.
pub fn render(ledger: &Ledger, packets_dir: &Path, link_prefix: &str, mask: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Claim ledger\n\nGenerated by `cargo xtask ledger` from `evidence/ledger.toml` and the \
         committed packets; do not edit by hand. Every claim names the packets that back it and \
         what they do not prove. `supported` means every listed packet passes. How packets are \
         built and checked: [README.md](README.md).\n"
    );
    let count = |st: ClaimStatus| ledger.claims.iter().filter(|c| c.status == st).count();
    let _ = writeln!(s, "| status | claims |\n| --- | --- |");
    for st in [
        ClaimStatus::Supported,
        ClaimStatus::Partial,
        ClaimStatus::EvidenceGated,
        ClaimStatus::Prerequisite,
        ClaimStatus::LayoutSmoke,
        ClaimStatus::Bibliography,
    ] {
        let _ = writeln!(s, "| {} | {} |", st.as_str(), count(st));
    }
    let _ = writeln!(
        s,
        "\n## Claims\n\n| id | source | claim | status | packets | scope: what it does not prove |\n\
         | --- | --- | --- | --- | --- | --- |"
    );
    for c in &ledger.claims {
        let packets: Vec<String> = c
            .packets
            .iter()
            .map(|p| {
                format!(
                    "[{p}]({link_prefix}{p}/SUMMARY.md) ({})",
                    masked_status(ledger, packets_dir, p, mask)
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "| `{}` | {} | {} | **{}** | {} | {} |",
            c.id,
            c.source,
            cell(&c.text),
            c.status.as_str(),
            if packets.is_empty() {
                "—".to_string()
            } else {
                packets.join("<br>")
            },
            cell(&c.scope)
        );
    }
    let _ = writeln!(
        s,
        "\n## Packets\n\n| packet | status | reproducibility | volatile files | note |\n\
         | --- | --- | --- | --- | --- |"
    );
    for d in &ledger.packets {
        let volatile = if d.volatile.is_empty() {
            "—".to_string()
        } else {
            d.volatile
                .iter()
                .map(|v| format!("`{v}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            s,
            "| [{n}]({link_prefix}{n}/SUMMARY.md) | {} | {}{} | {volatile} | {} |",
            masked_status(ledger, packets_dir, &d.name, mask),
            d.reproducibility.as_str(),
            if d.reuse_in_ci { " (reused in CI)" } else { "" },
            cell(&d.note),
            n = d.name,
        );
    }
    s
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// Runs `cargo xtask ledger`.
pub fn run(args: &LedgerArgs) -> Result<()> {
    let root = crate::workspace_root();
    let ledger = Ledger::load(&root.join("evidence/ledger.toml"))?;
    let packets_dir = root.join("evidence/packets");
    let built: Vec<&str> = crate::evidence::packets().iter().map(|p| p.name).collect();
    let found = problems(&ledger, &packets_dir, &built);
    if !args.no_write {
        std::fs::write(
            root.join("evidence/LEDGER.md"),
            render(&ledger, &packets_dir, "packets/", false),
        )?;
    }
    for c in &ledger.claims {
        let states: Vec<String> = c
            .packets
            .iter()
            .map(|p| format!("{p}={}", packet_status(&packets_dir, p)))
            .collect();
        println!(
            "{:<32} {:<15} {}",
            c.id,
            c.status.as_str(),
            states.join(" ")
        );
    }
    let open = unverified(&ledger, &packets_dir);
    for u in &open {
        println!("  unverified in this run: {u}");
    }
    if found.is_empty() {
        let claims_open: std::collections::BTreeSet<&str> =
            open.iter().filter_map(|u| u.split(':').next()).collect();
        println!(
            "ledger: {} claims hold{}",
            ledger.claims.len().saturating_sub(claims_open.len()),
            if claims_open.is_empty() {
                String::new()
            } else {
                format!(
                    ", {} unverified in this run (a prerequisite was missing)",
                    claims_open.len()
                )
            }
        );
        Ok(())
    } else {
        for p in &found {
            eprintln!("  {p}");
        }
        bail!("ledger: {} problem(s)", found.len())
    }
}

/// The `claim_ledger` packet: the ledger checked against the packets of this run.
pub fn claim_ledger_packet() -> Packet {
    Packet {
        name: "claim_ledger",
        about: "Checks evidence/ledger.toml against the packets built in the same run and \
                renders the reviewer's table.",
        env: &[],
        build: build_claim_ledger,
    }
}

fn build_claim_ledger(ctx: &mut Ctx) -> Result<Report> {
    let mut r = Report::new(
        &[
            "every claim has a status, a scope (what it does not prove) and named packets",
            "every `supported` claim's packets passed in the same run",
            "every packet built is declared (reproducibility, volatile files) in the ledger",
        ],
        &[
            "that a packet's checks are the right ones for its claim: that is for reviewers \
             reading each SUMMARY.md",
            "anything about packets built on another machine or commit",
        ],
    );
    let root = crate::workspace_root();
    let ledger = Ledger::load(&root.join("evidence/ledger.toml"))?;
    let built: Vec<&str> = crate::evidence::packets().iter().map(|p| p.name).collect();
    // This packet itself is being built; the others are already in the output root.
    let others: Vec<&str> = built
        .iter()
        .copied()
        .filter(|n| *n != "claim_ledger")
        .collect();
    let mut found = problems(&ledger, &ctx.out_root, &others);
    found.retain(|p| !p.contains("claim_ledger"));
    let states: Vec<PacketState> = others
        .iter()
        .map(|n| PacketState {
            name: n.to_string(),
            status: masked_status(&ledger, &ctx.out_root, n, true),
        })
        .collect();
    ctx.write_json("packet_states.json", &states)?;
    ctx.write_json("claims.json", &ledger.claims)?;
    ctx.write("LEDGER.md", render(&ledger, &ctx.out_root, "../", true))?;
    let open = unverified(&ledger, &ctx.out_root);
    if !open.is_empty() {
        r.note(format!(
            "unverified in this run (a prerequisite was missing): {}",
            open.join("; ")
        ));
    }
    r.check(
        "ledger holds against this run's packets",
        found.is_empty(),
        if found.is_empty() {
            format!("{} claims, {} packets", ledger.claims.len(), built.len())
        } else {
            found.join("; ")
        },
    );
    let supported = ledger
        .claims
        .iter()
        .filter(|c| c.status == ClaimStatus::Supported)
        .count();
    r.check(
        "at least one supported claim",
        supported > 0,
        format!("{supported} supported"),
    );
    r.check(
        "claims cover the paper and openrath",
        ["paper", "openrath"]
            .iter()
            .all(|src| ledger.claims.iter().any(|c| c.source == *src)),
        "sources: paper, openrath",
    );
    Ok(r)
}
