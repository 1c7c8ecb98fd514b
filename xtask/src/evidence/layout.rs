//! `layout_audit`: the workspace layout a reviewer relies on, smoke-checked.

use anyhow::{Context as _, Result};
use serde_json::{Value, json};

use super::{Ctx, Packet, Report};

/// The `layout_audit` packet.
pub fn layout_audit() -> Packet {
    Packet {
        name: "layout_audit",
        about: "Audits the workspace layout: the layering law over every member's dependencies, \
                a README per crate, `#![warn(missing_docs)]` in every library, and the files a \
                reviewer starts from (README, ARCHITECTURE, ledger, LEDGER.md link).",
        env: &[],
        build: build_layout,
    }
}

const REVIEWER_FILES: &[&str] = &[
    "README.md",
    "docs/ARCHITECTURE.md",
    "rust-toolchain.toml",
    ".ci/run",
    "evidence/README.md",
    "evidence/ledger.toml",
    "evidence/LEDGER.md",
];

fn build_layout(ctx: &mut Ctx) -> Result<Report> {
    let mut r = Report::new(
        &[
            "every workspace member depends only on members of strictly lower layers",
            "every crate has a README; every library warns on missing docs",
            "the files a reviewer starts from exist and the README links the claim ledger",
        ],
        &[
            "that the documentation is good or current: this is a layout smoke test",
            "third-party dependency hygiene (licenses, advisories)",
        ],
    );
    let root = crate::workspace_root();
    let manifest: toml::Table = std::fs::read_to_string(root.join("Cargo.toml"))?.parse()?;
    let ws = manifest.get("workspace").context("no [workspace]")?;
    let members: Vec<String> = ws
        .get("members")
        .and_then(|m| m.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let layers = ws
        .get("metadata")
        .and_then(|m| m.get("layers"))
        .and_then(|l| l.as_table())
        .cloned()
        .unwrap_or_default();
    let layer_of = |name: &str| layers.get(name).and_then(|v| v.as_integer());
    let mut crates = Vec::new();
    let mut violations = Vec::new();
    for m in &members {
        let dir = root.join(m);
        let cm: toml::Table = std::fs::read_to_string(dir.join("Cargo.toml"))
            .with_context(|| format!("{m}/Cargo.toml"))?
            .parse()?;
        let name = cm
            .get("package")
            .and_then(|p| p.get("name"))
            .and_then(|n| n.as_str())
            .unwrap_or(m)
            .to_string();
        let layer = layer_of(&name);
        let mut internal: Vec<String> = cm
            .get("dependencies")
            .and_then(|d| d.as_table())
            .map(|t| {
                t.keys()
                    .filter(|k| layer_of(k).is_some())
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        internal.sort();
        for d in &internal {
            if let (Some(a), Some(b)) = (layer, layer_of(d))
                && b >= a
            {
                violations.push(format!("{name} (L{a}) depends on {d} (L{b})"));
            }
        }
        let is_lib = dir.join("src/lib.rs").is_file();
        let docs_lint = is_lib
            && std::fs::read_to_string(dir.join("src/lib.rs")).is_ok_and(|t| {
                t.contains("#![warn(missing_docs)]") || t.contains("#![deny(missing_docs)]")
            });
        let readme = dir.join("README.md").is_file();
        if m != "xtask" && !readme {
            violations.push(format!("{name} has no README.md"));
        }
        if is_lib && name != "xtask" && !docs_lint {
            violations.push(format!("{name} does not warn on missing docs"));
        }
        crates.push(json!({
            "path": m, "name": name, "layer": layer, "library": is_lib,
            "readme": readme, "missing_docs_lint": docs_lint, "internal_dependencies": internal,
        }));
    }
    let files: Vec<Value> = REVIEWER_FILES
        .iter()
        .map(|f| json!({"file": f, "present": root.join(f).is_file()}))
        .collect();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap_or_default();
    let links_ledger = readme.contains("evidence/LEDGER.md");
    ctx.write_json(
        "layout.json",
        &json!({"crates": crates, "reviewer_files": files, "readme_links_ledger": links_ledger,
                "violations": violations}),
    )?;
    r.check(
        "layering law and crate hygiene",
        violations.is_empty(),
        if violations.is_empty() {
            format!("{} members", members.len())
        } else {
            violations.join("; ")
        },
    );
    let missing: Vec<&str> = REVIEWER_FILES
        .iter()
        .copied()
        .filter(|f| !root.join(f).is_file())
        .collect();
    r.check(
        "reviewer files present",
        missing.is_empty(),
        missing.join(", "),
    );
    r.check_eq("README links evidence/LEDGER.md", links_ledger, true);
    Ok(r)
}
