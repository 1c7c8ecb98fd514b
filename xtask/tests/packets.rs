//! The committed evidence: no packet holds a secret, a home directory or a machine path; every
//! packet has its summary and manifests; the ledger parses and names only declared packets.

use std::path::{Path, PathBuf};

fn evidence() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../evidence")
}

#[test]
fn no_packet_leaks_secrets_or_machine_paths() {
    let dir = evidence().join("packets");
    let leaks = xtask::leaks::scan_dir(&dir).expect("scan");
    assert!(
        leaks.is_empty(),
        "leaks in committed packets:\n{}",
        leaks
            .iter()
            .map(|(f, l)| format!("  {f}:{} {} {}", l.line, l.rule, l.excerpt))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The ledger's own files too.
    for f in ["ledger.toml", "LEDGER.md", "README.md"] {
        let p = evidence().join(f);
        if let Ok(text) = std::fs::read_to_string(&p) {
            assert!(xtask::leaks::scan_text(&text).is_empty(), "{f} leaks");
        }
    }
}

#[test]
fn every_packet_has_its_summary_and_manifests() {
    let dir = evidence().join("packets");
    // The packets are committed: a missing directory is a failure, not a skip.
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e} (the committed evidence packets)", dir.display()));
    for entry in entries {
        let p = entry.expect("entry").path();
        for f in [
            "command.txt",
            "SUMMARY.md",
            "manifest.json",
            "provenance.json",
        ] {
            assert!(p.join(f).is_file(), "{} lacks {f}", p.display());
        }
        let m = xtask::evidence::read_manifest(&p).expect("manifest");
        let status = m["status"].as_str().unwrap_or("");
        assert!(matches!(status, "pass" | "skip" | "fail"), "{status}");
        // Every deterministic file is listed with its current sha256.
        for (rel, sha) in m["files"].as_object().expect("files") {
            if rel == "manifest.json" || rel == "provenance.json" {
                continue;
            }
            let bytes = std::fs::read(p.join(rel)).expect("listed file exists");
            assert_eq!(
                Some(xtask::evidence::sha256_hex(&bytes).as_str()),
                sha.as_str(),
                "{rel}"
            );
        }
    }
}

#[test]
fn ledger_parses_and_names_declared_packets() {
    let ledger = xtask::ledger::Ledger::load(&evidence().join("ledger.toml")).expect("ledger");
    assert!(!ledger.claims.is_empty());
    let built: Vec<&str> = xtask::evidence::packets().iter().map(|p| p.name).collect();
    for c in &ledger.claims {
        for p in &c.packets {
            assert!(
                built.contains(&p.as_str()),
                "claim {} names unknown {p}",
                c.id
            );
        }
    }
}
