//! What each evidence packet needs from the machine, checked before anything runs.
//!
//! A packet whose prerequisite is missing would otherwise run for minutes and then fail
//! (`test_report` counts every test that skipped for a missing prerequisite as a failed
//! check). `cargo xtask evidence` looks first: it prints each prerequisite of the packets it
//! was asked for, met or missing, and stops before running anything when one is missing,
//! naming the `.ci/install.d` part that provides it and `cargo xtask setup`, which runs
//! those parts. With `--available` it builds the packets it can and records the others as
//! skipped for the missing prerequisite.
//!
//! The variables the install parts export reach xtask through the file `cargo xtask setup`
//! writes ([`env_file`]), so nothing has to be sourced by hand.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// How a prerequisite is found on this machine.
#[derive(Clone, Copy, Debug)]
pub enum Check {
    /// An environment variable, set and non-empty (an install part exported it).
    Env(&'static str),
    /// Any of these variables set and non-empty.
    AnyEnv(&'static [&'static str]),
    /// Every one of these variables set and non-empty.
    AllEnv(&'static [&'static str]),
    /// A program on `PATH`.
    Program(&'static str),
    /// An environment variable, or else one of these files.
    EnvOrFile(&'static str, &'static [&'static str]),
}

/// One thing a packet needs, and the install part that provides it.
#[derive(Clone, Copy, Debug)]
pub struct Prereq {
    /// Short id, used in messages and tests.
    pub id: &'static str,
    /// What it is, for a person.
    pub what: &'static str,
    /// How it is found.
    pub check: Check,
    /// The `.ci/install.d` part (file stem) that installs or starts it.
    pub part: &'static str,
}

/// Every prerequisite any packet has.
pub const PREREQS: &[Prereq] = &[
    Prereq {
        id: "bwrap",
        what: "bubblewrap (`bwrap`), the isolated sandbox backend",
        check: Check::Program("bwrap"),
        part: "10-bubblewrap",
    },
    Prereq {
        id: "python3",
        what: "`python3` on PATH (the flagship's QA runs `python3 -m unittest`)",
        check: Check::Program("python3"),
        part: "30-persist-python",
    },
    Prereq {
        id: "live-model",
        what: "a live model server (RATH_LIVE_BASE_URL or OPENAI_BASE_URL)",
        check: Check::AnyEnv(&["RATH_LIVE_BASE_URL", "OPENAI_BASE_URL"]),
        part: "20-llama",
    },
    Prereq {
        id: "openrath-python",
        what: "Python OpenRath 2.0 in a venv (RATH_OPENRATH_PYTHON)",
        check: Check::Env("RATH_OPENRATH_PYTHON"),
        part: "30-persist-python",
    },
    Prereq {
        id: "chromium",
        what: "Chromium (RATH_CHROMIUM, or /usr/bin/chromium)",
        check: Check::EnvOrFile(
            "RATH_CHROMIUM",
            &["/usr/bin/chromium", "/usr/bin/chromium-browser"],
        ),
        part: "40-chromium",
    },
    Prereq {
        id: "mcp-servers",
        what: "the MCP reference servers (RATH_MCP_EVERYTHING, RATH_MCP_TIME_PYTHON)",
        check: Check::AllEnv(&["RATH_MCP_EVERYTHING", "RATH_MCP_TIME_PYTHON"]),
        part: "50-mcp",
    },
    Prereq {
        id: "postgres",
        what: "PostgreSQL 15, the shared cluster (RATH_TEST_POSTGRES_URL)",
        check: Check::Env("RATH_TEST_POSTGRES_URL"),
        part: "60-postgres",
    },
    Prereq {
        id: "postgres-faults",
        what: "a private PostgreSQL cluster for the fault tests (RATH_TEST_PG_FAULTS_URL; as root)",
        check: Check::Env("RATH_TEST_PG_FAULTS_URL"),
        part: "62-postgres-faults",
    },
    Prereq {
        id: "langgraph-sdk",
        what: "LangGraph's Python client langgraph-sdk (RATH_LANGGRAPH_SDK_PYTHON)",
        check: Check::Env("RATH_LANGGRAPH_SDK_PYTHON"),
        part: "67-langgraph-sdk",
    },
    Prereq {
        id: "schemathesis",
        what: "the OpenAPI fuzzer schemathesis (RATH_SCHEMATHESIS)",
        check: Check::Env("RATH_SCHEMATHESIS"),
        part: "68-schemathesis",
    },
    Prereq {
        id: "phoenix",
        what: "an Arize Phoenix collector (RATH_PHOENIX_URL)",
        check: Check::Env("RATH_PHOENIX_URL"),
        part: "70-phoenix",
    },
];

/// The prerequisites of the test suite, which `test_report` runs whole: every test that
/// needs one of these skips without it, and a skipped test fails that packet.
const TESTS: &[&str] = &[
    "bwrap",
    "python3",
    "live-model",
    "openrath-python",
    "chromium",
    "mcp-servers",
    "postgres",
    "postgres-faults",
    "langgraph-sdk",
    "schemathesis",
    "phoenix",
];

/// The ids of the prerequisites of packet `name` (none for a packet that needs only Rust).
pub fn needs(name: &str) -> &'static [&'static str] {
    match name {
        "local_sandbox" | "store_sharing" => &["python3"],
        "isolated_sandbox" => &["bwrap", "python3"],
        "visual_qa" => &["chromium"],
        "live_provider_run" => &["live-model"],
        "test_report" => TESTS,
        _ => &[],
    }
}

/// The prerequisite with id `id`.
pub fn prereq(id: &str) -> Option<&'static Prereq> {
    PREREQS.iter().find(|p| p.id == id)
}

impl Prereq {
    /// True when this machine has it, as the environment `var` reads it.
    pub fn met_with(&self, var: &dyn Fn(&str) -> Option<String>) -> bool {
        let set = |k: &str| var(k).is_some_and(|v| !v.is_empty());
        match self.check {
            Check::Env(k) => set(k),
            Check::AnyEnv(ks) => ks.iter().any(|k| set(k)),
            Check::AllEnv(ks) => ks.iter().all(|k| set(k)),
            Check::Program(p) => on_path(p, var("PATH").as_deref()),
            Check::EnvOrFile(k, files) => set(k) || files.iter().any(|f| Path::new(f).is_file()),
        }
    }

    /// True when this machine has it.
    pub fn met(&self) -> bool {
        self.met_with(&|k| std::env::var(k).ok())
    }
}

fn on_path(program: &str, path: Option<&str>) -> bool {
    path.unwrap_or_default()
        .split(':')
        .filter(|d| !d.is_empty())
        .any(|d| Path::new(d).join(program).is_file())
}

/// One packet's missing prerequisites.
#[derive(Clone, Debug)]
pub struct Missing {
    /// The packet.
    pub packet: &'static str,
    /// What it lacks.
    pub lacks: Vec<&'static Prereq>,
}

impl Missing {
    /// `prerequisite missing: <what>; <what>`, the reason a skipped packet records.
    pub fn reason(&self) -> String {
        let what: Vec<&str> = self.lacks.iter().map(|p| p.what).collect();
        format!("prerequisite missing: {}", what.join("; "))
    }
}

/// The table printed before any packet runs: every prerequisite of `packets`, met or not.
/// Returns the table and each packet's missing prerequisites (packets lacking none left out).
pub fn survey(
    packets: &[&'static str],
    var: &dyn Fn(&str) -> Option<String>,
) -> (String, Vec<Missing>) {
    let mut wanted: Vec<&'static Prereq> = Vec::new();
    let mut missing = Vec::new();
    for &name in packets {
        let mut lacks = Vec::new();
        for id in needs(name) {
            let Some(p) = prereq(id) else { continue };
            if !wanted.iter().any(|w| w.id == p.id) {
                wanted.push(p);
            }
            if !p.met_with(var) {
                lacks.push(p);
            }
        }
        if !lacks.is_empty() {
            missing.push(Missing {
                packet: name,
                lacks,
            });
        }
    }
    let mut table = String::new();
    for p in &wanted {
        let users: Vec<&str> = packets
            .iter()
            .copied()
            .filter(|n| needs(n).contains(&p.id))
            .collect();
        let state = if p.met_with(var) {
            "met    "
        } else {
            "MISSING"
        };
        table.push_str(&format!(
            "  {state} {:<16} {} (for {}; .ci/install.d/{}.sh)\n",
            p.id,
            p.what,
            users.join(", "),
            p.part
        ));
    }
    (table, missing)
}

/// The install parts that provide what `missing` lacks, sorted.
pub fn parts_for(missing: &[Missing]) -> Vec<&'static str> {
    let parts: BTreeSet<&str> = missing
        .iter()
        .flat_map(|m| m.lacks.iter().map(|p| p.part))
        .collect();
    parts.into_iter().collect()
}

/// The variables `cargo xtask setup` saved: `$RATH_ENV_FILE`, else `target/rath-env` in the
/// workspace.
pub fn env_file() -> PathBuf {
    match std::env::var_os("RATH_ENV_FILE") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => crate::workspace_root().join("target").join("rath-env"),
    }
}

/// Parses `KEY=VALUE` lines (blank lines and `#` comments skipped); a value in single
/// quotes, as [`env_line`] writes it, is unquoted.
pub fn parse_env_file(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .map(|(k, v)| (k.to_owned(), unquote(v)))
        .collect()
}

/// `KEY='value'`: a line of the setup file, quoted so that a shell can also source it.
pub fn env_line(key: &str, value: &str) -> String {
    format!("{key}='{}'\n", value.replace('\'', "'\\''"))
}

fn unquote(v: &str) -> String {
    match v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')) {
        Some(inner) => inner.replace("'\\''", "'"),
        None => v.to_owned(),
    }
}

/// Sets every variable of [`env_file`] this process does not have yet (what is set already
/// wins), so the packets and the tests they run see what `cargo xtask setup` exported.
/// Returns how many were set. Called once, first thing in `main`, before any thread starts.
pub fn load_env_file() -> usize {
    let Ok(text) = std::fs::read_to_string(env_file()) else {
        return 0;
    };
    let mut n = 0;
    for (k, v) in parse_env_file(&text) {
        if std::env::var_os(&k).is_none() {
            // SAFETY: called at the start of main, before xtask starts any thread, so no
            // other thread reads the environment meanwhile.
            unsafe { std::env::set_var(&k, &v) };
            n += 1;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_needed_id_is_a_prerequisite_and_every_named_packet_exists() {
        let built: Vec<&str> = crate::evidence::packets().iter().map(|p| p.name).collect();
        for name in &built {
            for id in needs(name) {
                assert!(prereq(id).is_some(), "{name} needs unknown {id}");
            }
        }
        for name in [
            "local_sandbox",
            "store_sharing",
            "isolated_sandbox",
            "visual_qa",
            "live_provider_run",
            "test_report",
        ] {
            assert!(built.contains(&name), "needs() names {name}, not a packet");
        }
        for p in PREREQS {
            assert!(
                crate::workspace_root()
                    .join(".ci/install.d")
                    .join(format!("{}.sh", p.part))
                    .is_file(),
                "{} names part {}, which does not exist",
                p.id,
                p.part
            );
        }
    }

    #[test]
    fn an_empty_environment_lacks_every_variable_prerequisite() {
        let (table, missing) = survey(&["test_report", "visual_qa"], &|_| None);
        let report = missing.iter().find(|m| m.packet == "test_report").unwrap();
        for id in ["postgres", "live-model", "phoenix", "langgraph-sdk"] {
            assert!(report.lacks.iter().any(|p| p.id == id), "{id}: {table}");
            assert!(table.contains(&format!("MISSING {id:<16}")), "{table}");
        }
        assert!(report.reason().starts_with("prerequisite missing: "));
        let parts = parts_for(&missing);
        assert!(parts.contains(&"60-postgres") && parts.contains(&"70-phoenix"));
    }

    #[test]
    fn the_environment_meets_what_it_sets() {
        let var = |k: &str| (k == "RATH_TEST_POSTGRES_URL").then(|| "postgresql://x".to_owned());
        assert!(prereq("postgres").unwrap().met_with(&var));
        assert!(!prereq("phoenix").unwrap().met_with(&var));
        let empty = |k: &str| (k == "RATH_PHOENIX_URL").then(String::new);
        assert!(
            !prereq("phoenix").unwrap().met_with(&empty),
            "empty is unset"
        );
    }

    #[test]
    fn env_file_lines_parse() {
        let text = "# written by cargo xtask setup\nA=1\n\nB_C=postgresql://u:p@h/db?x=y\nbad line\n=x\nD-E=no\n";
        assert_eq!(
            parse_env_file(text),
            [
                ("A".to_owned(), "1".to_owned()),
                ("B_C".to_owned(), "postgresql://u:p@h/db?x=y".to_owned())
            ]
        );
        let quoted = env_line("C", "15 it's") + &env_line("D", "");
        assert_eq!(
            parse_env_file(&quoted),
            [
                ("C".to_owned(), "15 it's".to_owned()),
                ("D".to_owned(), String::new())
            ]
        );
        // And a shell reads the same value.
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("{quoted}printf %s \"$C\""))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "15 it's");
    }
}
