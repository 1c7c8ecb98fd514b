//! `cargo xtask setup`: prepares a machine for the tests and the evidence packets.
//!
//! It sources the `.ci/install.d` parts a user picks (all by default) in one bash, exactly as
//! `.ci/run` does, so the same parts install the same things and start the same services.
//! What they export (`RATH_*`) is written to [`crate::prereq::env_file`]; every later xtask
//! command reads that file first, so nobody has to `source` a script by hand. It ends by
//! saying which parts ran, what each left unset, and how to stop the services it started.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::prereq::{PREREQS, env_file};

/// Arguments of `cargo xtask setup`.
#[derive(clap::Args, Debug)]
pub struct SetupArgs {
    /// Run only these parts: a file stem (`60-postgres`) or its number (`60`); repeatable.
    /// Default: every part.
    #[arg(long, value_name = "PART")]
    pub only: Vec<String>,
    /// List the parts (and the prerequisites each provides) and exit.
    #[arg(long)]
    pub list: bool,
}

/// The `.ci/install.d` parts, sorted by name, as `(stem, path)`.
pub fn parts(root: &Path) -> Result<Vec<(String, PathBuf)>> {
    let dir = root.join(".ci/install.d");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("read {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "sh") {
            let stem = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            out.push((stem, path));
        }
    }
    out.sort();
    Ok(out)
}

/// The parts `only` picks (all when empty); an unknown name is an error naming the known.
pub fn pick<'a>(
    all: &'a [(String, PathBuf)],
    only: &[String],
) -> Result<Vec<&'a (String, PathBuf)>> {
    if only.is_empty() {
        return Ok(all.iter().collect());
    }
    let mut out = Vec::new();
    for want in only {
        let found: Vec<&(String, PathBuf)> = all
            .iter()
            .filter(|(stem, _)| {
                stem == want || stem.split_once('-').is_some_and(|(n, _)| n == want)
            })
            .collect();
        if found.is_empty() {
            let known: Vec<&str> = all.iter().map(|(s, _)| s.as_str()).collect();
            bail!("no install part {want:?}; known: {}", known.join(", "));
        }
        for f in found {
            if !out.iter().any(|o: &&(String, PathBuf)| o.0 == f.0) {
                out.push(f);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Runs `cargo xtask setup`.
pub fn run(args: &SetupArgs) -> Result<()> {
    let root = crate::workspace_root();
    let all = parts(&root)?;
    if args.list {
        for (stem, _) in &all {
            let gives: Vec<&str> = PREREQS
                .iter()
                .filter(|p| p.part == stem)
                .map(|p| p.id)
                .collect();
            println!("{stem:<22} {}", gives.join(", "));
        }
        return Ok(());
    }
    let chosen = pick(&all, &args.only)?;
    let dump = tempfile::NamedTempFile::new()?;
    let mut script = String::from("set -euo pipefail\n");
    for (stem, path) in &chosen {
        script.push_str(&format!(
            "echo \"== setup: {stem} ($((SECONDS)) s)\"\nsource {}\n",
            shell_quote(&path.to_string_lossy())
        ));
    }
    script.push_str(&format!(
        "env -0 > {}\n",
        shell_quote(&dump.path().to_string_lossy())
    ));
    if !is_root() {
        println!(
            "setup: not running as root: parts that install Debian packages or make a \
             PostgreSQL cluster may leave their part unset"
        );
    }
    let status = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(&root)
        .status()
        .context("run bash")?;
    if !status.success() {
        bail!("an install part failed ({status}); its output is above");
    }
    let after = parse_env0(&std::fs::read(dump.path())?);
    let saved: BTreeMap<String, String> = after
        .into_iter()
        .filter(|(k, v)| k.starts_with("RATH_") && std::env::var(k).ok().as_ref() != Some(v))
        .filter(|(_, v)| !v.contains('\n'))
        .collect();
    let file = env_file();
    let mut text = String::from(
        "# Written by `cargo xtask setup`: what the .ci/install.d parts exported. Every\n\
         # `cargo xtask` command reads it (a variable already set wins). Delete to forget.\n",
    );
    // Keep what earlier runs of other parts saved.
    let mut merged: BTreeMap<String, String> = std::fs::read_to_string(&file)
        .map(|t| crate::prereq::parse_env_file(&t).into_iter().collect())
        .unwrap_or_default();
    merged.extend(saved.clone());
    for (k, v) in &merged {
        text.push_str(&crate::prereq::env_line(k, v));
    }
    if let Some(parent) = file.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&file, text).with_context(|| format!("write {}", file.display()))?;

    println!("\nsetup: ran {} part(s)", chosen.len());
    let var = |k: &str| merged.get(k).cloned().or_else(|| std::env::var(k).ok());
    for (stem, _) in &chosen {
        let gives: Vec<String> = PREREQS
            .iter()
            .filter(|p| p.part == stem)
            .map(|p| {
                let state = if p.met_with(&var) {
                    "ready"
                } else {
                    "NOT READY"
                };
                format!("{} {state}", p.id)
            })
            .collect();
        if !gives.is_empty() {
            println!("  {stem:<22} {}", gives.join(", "));
        }
    }
    println!(
        "setup: {} variable(s) saved to {} ({})",
        merged.len(),
        file.display(),
        merged.keys().cloned().collect::<Vec<_>>().join(", ")
    );
    let stops = stop_commands(&merged);
    if !stops.is_empty() {
        println!("setup: services left running; to stop them:");
        for s in stops {
            println!("  {s}");
        }
    }
    Ok(())
}

/// How to stop each service the saved variables say is running.
fn stop_commands(vars: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    if vars.contains_key("RATH_TEST_POSTGRES_URL") {
        out.push("pg_ctlcluster 15 main stop        # PostgreSQL (60-postgres)".to_owned());
    }
    if let Some(c) = vars.get("RATH_TEST_PG_FAULTS_CLUSTER") {
        out.push(format!(
            "pg_ctlcluster {c} stop   # the fault tests' cluster (62-postgres-faults)"
        ));
    }
    if vars.contains_key("RATH_LIVE_BASE_URL") {
        out.push("pkill -f llama_cpp.server         # the live model (20-llama)".to_owned());
    }
    if vars.contains_key("RATH_PHOENIX_URL") {
        out.push("pkill -f 'phoenix serve'          # Arize Phoenix (70-phoenix)".to_owned());
    }
    out
}

fn parse_env0(bytes: &[u8]) -> Vec<(String, String)> {
    bytes
        .split(|b| *b == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            kv.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
        })
        .collect()
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_picked_by_stem_or_number() {
        let root = crate::workspace_root();
        let all = parts(&root).unwrap();
        assert!(all.iter().any(|(s, _)| s == "60-postgres"));
        let picked = pick(&all, &["60".into(), "10-bubblewrap".into()]).unwrap();
        let names: Vec<&str> = picked.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(names, ["10-bubblewrap", "60-postgres"]);
        let err = pick(&all, &["99-nope".into()]).unwrap_err().to_string();
        assert!(
            err.contains("no install part") && err.contains("60-postgres"),
            "{err}"
        );
    }

    #[test]
    fn env0_dumps_parse_and_values_keep_their_equals_signs() {
        let got = parse_env0(b"A=1\0RATH_X=postgresql://h/db?a=b\0\0junk\0");
        assert_eq!(
            got,
            [
                ("A".to_owned(), "1".to_owned()),
                ("RATH_X".to_owned(), "postgresql://h/db?a=b".to_owned())
            ]
        );
    }
}
