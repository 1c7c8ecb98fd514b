//! Helpers shared by the tests that run example binaries: missing prerequisites, locating an
//! example binary, and the Python OpenRath 2.0 loader check of a whole store.
#![allow(dead_code)] // each test binary uses the part it needs

use std::path::{Path, PathBuf};
use std::process::Command;

use openrath::persist::{Store, export_jsonl_string};

/// The Python with `openrath==2.0.0` (`RATH_OPENRATH_PYTHON`), when it is installed.
pub fn openrath_python() -> Option<PathBuf> {
    let p = PathBuf::from(std::env::var_os("RATH_OPENRATH_PYTHON")?);
    p.is_file().then_some(p)
}

/// `target/<profile>/examples/<name>`, next to this test binary (`cargo test -p openrath`
/// builds the examples there); built with `cargo build` when absent.
pub fn example_binary(name: &str) -> PathBuf {
    example_binary_with(name, &[])
}

/// [`example_binary`] for an example that needs the facade's `features`.
pub fn example_binary_with(name: &str, features: &[&str]) -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>");
    let bin = profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    if !bin.is_file() {
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "-p", "openrath", "--example", name])
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if !features.is_empty() {
            cmd.args(["--features", &features.join(",")]);
        }
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        if let Some(target) = profile_dir.parent() {
            cmd.env("CARGO_TARGET_DIR", target);
        }
        let status = cmd.status().expect("cargo build");
        assert!(status.success(), "cargo build --example {name}: {status}");
    }
    assert!(bin.is_file(), "{} was not built", bin.display());
    bin
}

/// Python OpenRath 2.0's own loader on the store under `home` (rath-persist's
/// `tests/python/check_store.py`): every session file loads, and every lineage row as we read
/// it is what Python rebuilds (parents included). `label` names the run in a failure.
pub fn python_loads(label: &str, home: &Path) {
    let Some(py) = openrath_python() else {
        rath_testkit::skip(
            "RATH_OPENRATH_PYTHON is not set to a Python with openrath==2.0.0 \
             (see .ci/install.d/30-persist-python.sh)",
        );
        return;
    };
    let store = Store::at(home.join("sessions"));
    let rows = store.lineage_rows().expect("rows");
    let files = store.list().expect("list").len();
    let tmp = tempfile::tempdir().expect("tmp");
    let rows_path = tmp.path().join("rows.jsonl");
    std::fs::write(&rows_path, export_jsonl_string(&rows)).expect("rows");
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../rath-persist/tests/python/check_store.py");
    let out = Command::new(&py)
        .arg(&script)
        .arg(home)
        .arg(&rows_path)
        .arg(files.to_string())
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.starts_with("OK"),
        "{label}: Python OpenRath 2.0 did not load the store at {}:\n{stdout}\n{}",
        home.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.trim(), format!("OK {}", rows.len()), "{label}");
}
