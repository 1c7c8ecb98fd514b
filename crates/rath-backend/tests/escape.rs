//! Escape tests: what a tool must not reach through `local` and `isolated`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use rath_backend::local::LocalBackend;
use rath_backend::{
    Backend, CodePayload, CommandPayload, DispatchContext, Output, Payload, ToolErrorKind,
};
use rath_session::{SandboxHandle, SandboxSpec, Stamper};

/// A wait of minutes that only guards a test against a hang; never a measurement.
const HANG_GUARD: Duration = Duration::from_secs(120);

fn backends() -> Vec<Arc<dyn Backend>> {
    let mut v: Vec<Arc<dyn Backend>> = vec![Arc::new(LocalBackend::new())];
    v.extend(common::isolated_or_skip("isolated half"));
    v
}

fn isolated() -> Option<Arc<dyn Backend>> {
    common::isolated_or_skip("isolated")
}

async fn open(b: &Arc<dyn Backend>) -> SandboxHandle {
    b.open(&SandboxSpec::default(), &Stamper::counter())
        .await
        .expect("open")
}

async fn run(
    b: &Arc<dyn Backend>,
    h: &SandboxHandle,
    p: Payload,
) -> Result<Output, rath_backend::ToolError> {
    b.dispatch(h, &p, &DispatchContext::new(&Stamper::counter()))
        .await
}

async fn sh(b: &Arc<dyn Backend>, h: &SandboxHandle, line: &str) -> rath_backend::CommandOutput {
    match run(b, h, Payload::Command(CommandPayload::shell(line))).await {
        Ok(Output::Command(o)) => o,
        other => panic!("{line}: {other:?}"),
    }
}

#[tokio::test]
async fn parent_and_absolute_paths_are_refused() {
    for b in backends() {
        let h = open(&b).await;
        for p in [
            Payload::read("../../etc/passwd"),
            Payload::read("/etc/passwd"),
            Payload::read("/etc/shadow"),
            Payload::write("../../tmp/pwned", "x"),
            Payload::write("/tmp/pwned", "x"),
            Payload::list("/"),
            Payload::exists("../"),
        ] {
            let e = run(&b, &h, p.clone()).await.unwrap_err();
            assert_eq!(
                e.kind,
                ToolErrorKind::PathEscape,
                "{} on {}",
                p.summary(),
                b.name()
            );
        }
    }
}

#[tokio::test]
async fn symlinks_out_of_the_workspace_are_refused() {
    for b in backends() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "top secret").unwrap();
        let h = open(&b).await;
        let root = common::root_of(&h);
        std::os::unix::fs::symlink(outside.path(), root.join("out")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.txt"), root.join("s")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("new.txt"), root.join("dangling")).unwrap();
        for p in [
            Payload::read("out/secret.txt"),
            Payload::read("s"),
            Payload::write("out/new.txt", "x"),
            Payload::write("dangling", "x"),
            Payload::list("out"),
        ] {
            let e = run(&b, &h, p.clone()).await.unwrap_err();
            assert_eq!(
                e.kind,
                ToolErrorKind::PathEscape,
                "{} on {}",
                p.summary(),
                b.name()
            );
        }
        assert!(!outside.path().join("new.txt").exists());
        // A symlink that stays inside is fine.
        std::fs::write(root.join("real.txt"), "inside").unwrap();
        std::os::unix::fs::symlink(root.join("real.txt"), root.join("alias")).unwrap();
        assert_eq!(
            run(&b, &h, Payload::read("alias")).await.unwrap(),
            Output::FileContent(b"inside".to_vec())
        );
    }
}

#[tokio::test]
async fn isolated_commands_cannot_read_host_secrets() {
    let Some(b) = isolated() else { return };
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("id_secret");
    std::fs::write(&secret, "host secret").unwrap();
    let h = open(&b).await;
    let root = common::root_of(&h);
    std::os::unix::fs::symlink(&secret, root.join("link")).unwrap();
    let o = sh(
        &b,
        &h,
        &format!("cat {} link; cat /etc/shadow", secret.display()),
    )
    .await;
    assert!(!o.stdout.contains("host secret"), "{o:?}");
    assert!(o.stdout.trim().is_empty(), "shadow must read empty: {o:?}");
    let o = sh(
        &b,
        &h,
        "for d in /root /home; do test -e $d && echo \"visible $d\"; done; echo checked",
    )
    .await;
    assert_eq!(
        o.stdout, "checked\n",
        "home dirs do not exist inside: {o:?}"
    );
    // The root file system is read-only; the workspace and /tmp are writable.
    let o = sh(
        &b,
        &h,
        "touch /usr/rath-x 2>/dev/null || echo ro; touch w /tmp/t && echo rw",
    )
    .await;
    assert_eq!(o.stdout, "ro\nrw\n");
}

#[tokio::test]
async fn a_timeout_leaves_no_process_behind() {
    for (i, b) in backends().into_iter().enumerate() {
        let h = open(&b).await;
        let marker = format!("{}.{}7", 900 + i, std::process::id());
        // The sleeps last `marker` seconds (about 15 minutes): a dispatch that waited for
        // them would run into HANG_GUARD, a guard of minutes and not a measurement.
        let e = tokio::time::timeout(
            HANG_GUARD,
            run(
                &b,
                &h,
                Payload::Command(
                    CommandPayload::shell(format!("sleep {marker} & sleep {marker}; echo never"))
                        .timeout(Duration::from_millis(400)),
                ),
            ),
        )
        .await
        .expect("the timeout ended the dispatch")
        .unwrap_err();
        assert_eq!(e.kind, ToolErrorKind::ToolTimeout);
        wait_gone(&marker).await;
        // A background child of a command that exits normally does not outlive it either,
        // and does not hold the dispatch open.
        let marker = format!("{}.{}3", 900 + i, std::process::id());
        let o = tokio::time::timeout(
            HANG_GUARD,
            sh(&b, &h, &format!("sleep {marker} & echo started")),
        )
        .await
        .expect("the dispatch did not wait for the background child");
        assert_eq!(o.stdout, "started\n");
        wait_gone(&marker).await;
    }
}

async fn wait_gone(marker: &str) {
    for _ in 0..50 {
        if !process_with(marker) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("a process with {marker} in its command line is still running");
}

fn process_with(marker: &str) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .map(|c| String::from_utf8_lossy(&c).contains(marker))
            .unwrap_or(false)
    })
}

#[tokio::test]
async fn fifty_megabytes_of_stdout_are_capped() {
    for b in backends() {
        let h = open(&b).await;
        let o = sh(
            &b,
            &h,
            "head -c 52428800 /dev/zero | tr '\\0' 'x'; echo done >&2",
        )
        .await;
        assert_eq!(o.exit_code, Some(0));
        assert_eq!(o.stdout.len(), rath_backend::OUTPUT_CAP, "{}", b.name());
        assert!(o.stdout_truncated);
        assert!(!o.stderr_truncated);
        assert_eq!(o.stderr, "done\n");
        assert_eq!(o.bytes_out, 52_428_800 + 5);
    }
}

#[tokio::test]
async fn isolated_has_no_network() {
    let Some(b) = isolated() else { return };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let code = format!(
        "import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n    print('connected')\nexcept OSError as e:\n    print('refused', type(e).__name__)\n"
    );
    let h = open(&b).await;
    let Output::Code(o) = run(&b, &h, Payload::Code(CodePayload::python(code.clone())))
        .await
        .unwrap()
    else {
        panic!("not a code output")
    };
    assert!(o.stdout.starts_with("refused"), "{o:?}");
    // The same code under `local` connects, so the refusal above is the sandbox's doing.
    let local: Arc<dyn Backend> = Arc::new(LocalBackend::new());
    let h = open(&local).await;
    let Output::Code(o) = run(&local, &h, Payload::Code(CodePayload::python(code)))
        .await
        .unwrap()
    else {
        panic!("not a code output")
    };
    assert_eq!(o.stdout, "connected\n", "{o:?}");
}
