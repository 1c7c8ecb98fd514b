//! What a command inside an `isolated` sandbox can see of the host: exactly the paths its
//! capability claim lists, and nothing else (no repository, no home directories).

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::{isolated_or_skip, open, root_of, run};
use rath_backend::{Backend, CommandPayload, MountAccess, Output, Payload};
use rath_session::SandboxHandle;

async fn sh(b: &Arc<dyn Backend>, h: &SandboxHandle, line: &str) -> rath_backend::CommandOutput {
    match run(b, h, Payload::Command(CommandPayload::shell(line))).await {
        Ok(Output::Command(o)) => o,
        other => panic!("{line}: {other:?}"),
    }
}

fn words(s: &str) -> BTreeSet<String> {
    s.split_whitespace().map(str::to_owned).collect()
}

#[tokio::test]
async fn isolated_sees_exactly_what_it_claims() {
    let Some(b) = isolated_or_skip("isolated") else {
        return;
    };
    let view = b
        .capabilities()
        .filesystem
        .expect("isolated states its file system")
        .command_view
        .expect("isolated states a command view");
    let h = open(&b).await;
    let root = root_of(&h);
    let root_str = root.to_string_lossy().into_owned();
    let paths: Vec<String> = view
        .iter()
        .map(|m| {
            if m.path == rath_backend::isolated::WORKSPACE {
                root_str.clone()
            } else {
                m.path.clone()
            }
        })
        .collect();

    // `/` holds the top-level directory of every claimed path, and nothing else.
    let top = |p: &str| {
        p.trim_start_matches('/')
            .split('/')
            .next()
            .unwrap_or("")
            .to_owned()
    };
    let want_root: BTreeSet<String> = paths.iter().map(|p| top(p)).collect();
    let o = sh(&b, &h, "ls -A /").await;
    assert_eq!(words(&o.stdout), want_root, "{o:?}");
    for must in ["usr", "etc", "tmp", "dev", "proc"] {
        assert!(
            want_root.contains(must),
            "{must} missing from {want_root:?}"
        );
    }

    // `/etc` holds exactly the claimed entries; `/etc/ssl` has no private keys.
    let want_etc: BTreeSet<String> = paths
        .iter()
        .filter_map(|p| p.strip_prefix("/etc/"))
        .map(|p| p.split('/').next().unwrap_or("").to_owned())
        .collect();
    let o = sh(&b, &h, "ls -A /etc").await;
    assert_eq!(words(&o.stdout), want_etc, "{o:?}");
    for absent in ["shadow", "gshadow", "sudoers", "ssh"] {
        assert!(
            !want_etc.contains(absent),
            "/etc/{absent} must not be claimed"
        );
    }
    if want_etc.contains("ssl") {
        let o = sh(&b, &h, "ls -A /etc/ssl").await;
        assert!(!o.stdout.contains("private"), "{o:?}");
    }

    // Host paths outside the claim do not exist inside: the repository this test runs
    // from, home directories, and every other top-level host directory.
    let mut host_only: Vec<String> = vec![
        env!("CARGO_MANIFEST_DIR").to_owned(),
        "/root".into(),
        "/home".into(),
    ];
    if let Some(home) = std::env::var_os("HOME") {
        host_only.push(home.to_string_lossy().into_owned());
    }
    for e in std::fs::read_dir("/").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !want_root.contains(&name) {
            host_only.push(format!("/{name}"));
        }
    }
    let probe: String = host_only
        .iter()
        .map(|p| format!("test -e '{p}' && echo 'visible {p}'; "))
        .collect();
    let o = sh(&b, &h, &probe).await;
    assert_eq!(o.stdout, "", "host paths visible inside: {o:?}");

    // Only the workspace and /tmp are writable; the claimed system paths are read-only.
    let o = sh(
        &b,
        &h,
        "for p in /usr/rath-x /etc/rath-x /rath-x; do \
           touch $p 2>/dev/null && echo \"wrote $p\"; done; \
         touch /tmp/t ./w && echo rw",
    )
    .await;
    assert_eq!(o.stdout, "rw\n", "{o:?}");
    assert!(root.join("w").exists());
    assert!(view.iter().any(|m| m.access == MountAccess::ReadWrite));
    assert_eq!(
        view.iter()
            .filter(|m| m.access == MountAccess::ReadWrite)
            .count(),
        1,
        "only the workspace is read-write: {view:?}"
    );

    // The pid namespace is the sandbox's own.
    let o = sh(&b, &h, "ls /proc | grep -c '^[0-9]'").await;
    let n: u32 = o.stdout.trim().parse().unwrap();
    assert!(n < 10, "{n} processes visible: {o:?}");

    // sh and python3 still work, including `python3 -m unittest` on workspace files.
    std::fs::write(
        root.join("test_x.py"),
        "import unittest, json, ssl, sqlite3\n\
         class T(unittest.TestCase):\n    def test_ok(self):\n        self.assertEqual(json.loads('[1]'), [1])\n",
    )
    .unwrap();
    let o = sh(&b, &h, "python3 -m unittest -q 2>&1; echo exit=$?; id -u").await;
    assert!(
        o.stdout.contains("OK") && o.stdout.contains("exit=0"),
        "{o:?}"
    );
}
