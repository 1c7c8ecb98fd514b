//! `local_sandbox` (tool placement auditable) and `isolated_sandbox` (bubblewrap).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use rath_backend::{
    Backend, BackendRegistry, CodePayload, CommandPayload, DispatchContext, Output, Payload,
    isolated::IsolatedBackend, local::LocalBackend,
};
use rath_persist::Store;
use rath_session::{Chunk, ChunkBody, Session, Stamper, ToolCall};
use serde_json::{Value, json};

use super::{Ctx, Packet, Report};

/// The `local_sandbox` packet.
pub fn local_sandbox() -> Packet {
    Packet {
        name: "local_sandbox",
        about: "Places a session on the `local` backend and dispatches file, listing and command \
                payloads plus refused ones (path escape, timeout, failing exit); every call leaves \
                a tool_evidence chunk and a tool_result in the persisted session. Then a bounded \
                symlink-swap race: a command swaps a workspace directory with links to a \
                host-only directory while the host dispatches a fixed number of file payloads \
                through it.",
        env: &[],
        build: |ctx| build(ctx, "local"),
    }
}

/// The `isolated_sandbox` packet.
pub fn isolated_sandbox() -> Packet {
    Packet {
        name: "isolated_sandbox",
        about: "The local_sandbox workload (race included) on the `isolated` (bubblewrap) \
                backend, plus probes of what the sandbox sees: no network, a read-only root \
                holding exactly the claimed paths (capabilities.json: system directories, a \
                minimal /etc, /dev, /proc, a private /tmp and the workspace), no other host \
                directory, and a working python3.",
        env: &[],
        build: |ctx| build(ctx, "isolated"),
    }
}

struct Step {
    tool: &'static str,
    payload: Payload,
    /// `ok` or the expected failure kind.
    expect_outcome: &'static str,
    /// Expected exit code, when a process exits.
    expect_exit: Option<i64>,
    /// Expected trimmed stdout (commands) or content (reads).
    expect_text: Option<String>,
}

fn step(
    tool: &'static str,
    payload: Payload,
    expect_outcome: &'static str,
    expect_exit: Option<i64>,
    expect_text: Option<&str>,
) -> Step {
    Step {
        tool,
        payload,
        expect_outcome,
        expect_exit,
        expect_text: expect_text.map(str::to_owned),
    }
}

/// What `ls -A /` and `ls -A /etc` list inside an `isolated` sandbox, from its claim: the
/// top-level directory of every claimed path, and the claimed `/etc` entries.
fn claimed_listing(isolated: &IsolatedBackend) -> (String, String) {
    let view = isolated
        .capabilities()
        .filesystem
        .and_then(|f| f.command_view)
        .unwrap_or_default();
    let workspace = std::env::temp_dir();
    let mut top = BTreeSet::new();
    let mut etc = BTreeSet::new();
    for m in &view {
        let path = if m.path == rath_backend::isolated::WORKSPACE {
            workspace.to_string_lossy().into_owned()
        } else {
            m.path.clone()
        };
        let mut parts = path.trim_start_matches('/').split('/');
        let first = parts.next().unwrap_or("").to_owned();
        if first == "etc"
            && let Some(e) = parts.next()
        {
            etc.insert(e.to_owned());
        }
        top.insert(first);
    }
    let join = |s: BTreeSet<String>| s.into_iter().collect::<Vec<_>>().join("\n");
    (join(top), join(etc))
}

fn steps(backend: &str, isolated: &IsolatedBackend) -> Vec<Step> {
    let sh = |line: &str| Payload::Command(CommandPayload::shell(line));
    let mut v = vec![
        step(
            "write_file",
            Payload::write("notes.txt", "the quick brown fox\n"),
            "ok",
            None,
            None,
        ),
        step(
            "read_file",
            Payload::read("notes.txt"),
            "ok",
            None,
            Some("the quick brown fox"),
        ),
        step("list_dir", Payload::list("."), "ok", None, None),
        step("shell", sh("wc -w < notes.txt"), "ok", Some(0), Some("4")),
        step(
            "shell",
            sh("echo out; echo err >&2; exit 3"),
            "ok",
            Some(3),
            Some("out"),
        ),
        step(
            "read_file",
            Payload::read("../../etc/hostname"),
            "path_escape",
            None,
            None,
        ),
        step(
            "shell",
            Payload::Command(CommandPayload::shell("sleep 5").timeout(Duration::from_millis(300))),
            "tool_timeout",
            None,
            None,
        ),
        step(
            "read_file",
            Payload::read("missing.txt"),
            "not_found",
            None,
            None,
        ),
    ];
    if backend == "isolated" {
        v.extend([
            // Only loopback in a fresh network namespace: /proc/net/dev has 2 header lines + lo.
            step(
                "shell",
                sh("wc -l < /proc/net/dev"),
                "ok",
                Some(0),
                Some("3"),
            ),
            step(
                "shell",
                sh("touch /etc/rath-probe 2>/dev/null && echo writable || echo read-only"),
                "ok",
                Some(0),
                Some("read-only"),
            ),
            step(
                "shell",
                sh("test -e /etc/shadow && echo visible || echo absent"),
                "ok",
                Some(0),
                Some("absent"),
            ),
            step(
                "shell",
                sh("python3 -c 'import json, ssl, sqlite3; print(\"python ok\")'"),
                "ok",
                Some(0),
                Some("python ok"),
            ),
        ]);
        // The whole visible tree, against the claim in capabilities.json.
        let (top, etc) = claimed_listing(isolated);
        v.push(step(
            "shell",
            sh("LC_ALL=C ls -A /"),
            "ok",
            Some(0),
            Some(&top),
        ));
        v.push(step(
            "shell",
            sh("LC_ALL=C ls -A /etc"),
            "ok",
            Some(0),
            Some(&etc),
        ));
    }
    v
}

/// Host dispatches in the race probe (a fixed count, so the packet is reproducible).
const RACE_DISPATCHES: u64 = 2000;
const RACE_SECRET: &str = "HOST-ONLY-SECRET";

/// The command inside the sandbox: swaps `d` between a real directory and links (absolute,
/// and relative when one reaches) to the host-only directory, until `stop` appears.
fn swapper(abs: &str, rel: Option<&str>) -> String {
    let rel = rel.map_or("None".to_owned(), |r| format!("{r:?}"));
    format!(
        r#"import os, time
os.mkdir('real')
with open('real/secret.txt', 'w') as f:
    f.write('inside')
os.symlink({abs:?}, 'abs')
links = ['abs']
if {rel} is not None:
    os.symlink({rel}, 'rel')
    links.append('rel')
end = time.monotonic() + 60
swaps = 0
def swap(name):
    global swaps
    try:
        os.rename(name, 'd')
    except OSError:
        try:
            os.rename('d', 'aside%d' % swaps)
        except OSError:
            pass
        return
    os.rename('d', name)
    swaps += 1
while not os.path.exists('stop') and time.monotonic() < end:
    for link in links:
        swap('real')
        swap(link)
print(swaps)
"#
    )
}

/// What the race probe found.
struct Race {
    dispatches: u64,
    escapes: u64,
    host_dir_unchanged: bool,
    swapped: bool,
}

/// Runs the bounded race on `handle`: the swapper inside, [`RACE_DISPATCHES`] reads, writes,
/// listings and existence checks of `d/...` from the host. Uses its own stamper, so the
/// session's ids are untouched.
async fn race_probe(
    backend: &dyn Backend,
    handle: &rath_session::SandboxHandle,
    root: &Path,
    host_dir: &Path,
) -> Result<Race> {
    std::fs::write(host_dir.join("secret.txt"), RACE_SECRET)?;
    std::fs::write(host_dir.join("host_only_marker"), "")?;
    let rel = host_dir
        .strip_prefix(root.parent().unwrap_or(root))
        .ok()
        .map(|p| format!("../{}", p.display()));
    let stamper = Stamper::counter();
    let cx = || DispatchContext::new(&stamper);
    let code = Payload::Code(CodePayload::python(swapper(
        &host_dir.to_string_lossy(),
        rel.as_deref(),
    )));
    let swap_cx = cx();
    let swap = backend.dispatch(handle, &code, &swap_cx);
    let hammer = async {
        for _ in 0..500 {
            if root.join("abs").exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut escapes = 0u64;
        for i in 0..RACE_DISPATCHES {
            let p = match i % 5 {
                0 => Payload::read("d/secret.txt"),
                1 => Payload::write("d/secret.txt", "overwritten"),
                2 => Payload::write(format!("d/new_{}.txt", i % 16), "x"),
                3 => Payload::list("d"),
                _ => Payload::exists("d/host_only_marker"),
            };
            let escaped = match backend.dispatch(handle, &p, &cx()).await {
                Ok(Output::FileContent(c)) => String::from_utf8_lossy(&c).contains(RACE_SECRET),
                Ok(Output::Listing(e)) => e.iter().any(|e| e.name == "host_only_marker"),
                Ok(Output::Exists(found)) => found,
                _ => false,
            };
            escapes += u64::from(escaped);
        }
        let stop = backend
            .dispatch(handle, &Payload::write("stop", ""), &cx())
            .await;
        (escapes, stop.is_ok())
    };
    let (swapped, (escapes, stopped)) = tokio::join!(swap, hammer);
    let swaps = match swapped {
        Ok(Output::Code(o)) => o.stdout.trim().parse::<u64>().unwrap_or(0),
        _ => 0,
    };
    let mut left: Vec<String> = std::fs::read_dir(host_dir)?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    let host_dir_unchanged = left == ["host_only_marker", "secret.txt"]
        && std::fs::read_to_string(host_dir.join("secret.txt"))? == RACE_SECRET;
    Ok(Race {
        dispatches: RACE_DISPATCHES,
        escapes,
        host_dir_unchanged,
        swapped: stopped && swaps > 0,
    })
}

fn output_text(result: &Value) -> Option<String> {
    result
        .get("stdout")
        .or_else(|| result.get("content"))
        .and_then(|v| v.as_str())
        .map(|s| s.trim().to_string())
}

fn build(ctx: &mut Ctx, backend: &'static str) -> Result<Report> {
    let mut r = if backend == "local" {
        Report::new(
            &[
                "placement is intent: the sandbox opens on first use and forks share its handle",
                "every dispatch, including refused and failed ones, leaves a tool_evidence chunk \
                 (backend, handle, payload kind, secret-free summary, exit code, outcome, bytes) \
                 beside the tool_result the model sees",
                "path escapes are refused before touching the host; timeouts and failing exits \
                 are outcomes, not crashes",
                "the sandbox is closed exactly once when the last holder drops it",
                "file payloads resolve beneath the workspace handle: while a command swaps a \
                 workspace directory with symlinks to a host-only directory, a fixed run of \
                 host reads, writes, listings and existence checks through it never reaches \
                 that directory (0 escapes; the swap count varies and is not recorded)",
            ],
            &[
                "isolation: `local` is a confined host directory, not a security boundary (see \
                 isolated_sandbox)",
                "that a model chose these calls: the calls are scripted here",
            ],
        )
    } else {
        Report::new(
            &[
                "the local_sandbox contract holds under bubblewrap, the bounded symlink-swap \
                 race included (0 escapes)",
                "inside the sandbox there is no network (only loopback) and the root is \
                 read-only; `ls -A /` and `ls -A /etc` list exactly what capabilities.json \
                 claims (system directories and a minimal /etc read-only, /dev, /proc, a \
                 private /tmp, the workspace read-write): no home directory, no /etc/shadow, \
                 no other host tree; python3 runs",
            ],
            &[
                "resistance to a determined attacker (kernel exploits, bwrap bugs)",
                "resource limits (CPU, memory): not enforced by this backend",
            ],
        )
    };
    let local = LocalBackend::new();
    let isolated = IsolatedBackend::new();
    let caps = json!({
        "backend": backend,
        "capabilities": if backend == "local" { serde_json::to_value(local.capabilities())? }
                        else { serde_json::to_value(isolated.capabilities())? },
    });
    ctx.write_json("capabilities.json", &caps)?;
    if backend == "isolated"
        && let Some(reason) = isolated.availability().reason()
    {
        r.skip(format!("isolated backend unavailable: {reason}"));
        return Ok(r);
    }
    let registry = BackendRegistry::new()
        .with(local.clone())
        .with(isolated.clone());
    let stamper = Stamper::counter();
    let session = Session::user_with("Count the words in notes.txt.", stamper.clone()).to(backend);
    let fork = session.fork();
    let r_ctx = &mut r;
    let host_dir = std::fs::canonicalize(ctx.tmp_dir("host_only")?)?;
    let (done, log, results, race) = ctx.block_on(async {
        let handle = registry.sandbox_for(&session).await?;
        let fork_handle = registry.sandbox_for(&fork).await?;
        r_ctx.check_eq(
            "fork shares the sandbox handle",
            fork_handle.id().to_string(),
            handle.id().to_string(),
        );
        drop(fork_handle);
        let mut s = session.clone();
        let mut log = Vec::new();
        let mut results = Vec::new();
        for (i, st) in steps(backend, &isolated).into_iter().enumerate() {
            let call_id = format!("call_{}", i + 1);
            let args = serde_json::to_string(&st.payload.summary()).unwrap_or_default();
            s = s.push(Chunk::assistant(
                None,
                Some(vec![ToolCall::function(&call_id, st.tool, args)]),
            ));
            let done = registry.dispatch(&handle, &st.payload, s.stamper()).await;
            let evidence = done.evidence.to_tool_evidence(&call_id, st.tool);
            let result = done.to_tool_result_json();
            r_ctx.check_eq(
                &format!("{call_id} {} outcome", st.payload.summary()),
                evidence.outcome.clone(),
                st.expect_outcome.to_string(),
            );
            if st.expect_exit.is_some() {
                r_ctx.check_eq(
                    &format!("{call_id} exit code"),
                    evidence.exit_code,
                    st.expect_exit,
                );
            }
            if let Some(want) = st.expect_text {
                r_ctx.check_eq(
                    &format!("{call_id} output"),
                    output_text(&result).unwrap_or_default(),
                    want,
                );
            }
            log.push(serde_json::to_value(&evidence)?);
            results.push(json!({"tool_call_id": call_id, "tool": st.tool, "result": result}));
            s = s
                .push(Chunk::new(ChunkBody::ToolEvidence(evidence)))
                .push(Chunk::tool_result(&call_id, st.tool, result.to_string()));
        }
        let root = handle
            .lease()
            .as_any()
            .downcast_ref::<rath_backend::local::LocalSandbox>()
            .map(|l| l.root().to_path_buf())
            .ok_or_else(|| anyhow::anyhow!("not a workspace sandbox"))?;
        let chosen: &dyn Backend = if backend == "local" {
            &local
        } else {
            &isolated
        };
        let race = race_probe(chosen, &handle, &root, &host_dir).await?;
        Ok::<_, anyhow::Error>((s, log, results, race))
    })??;
    r.check(
        "race: the swapper ran and stopped",
        race.swapped,
        "swapped during the probe",
    );
    r.check_eq(
        &format!(
            "race: host dispatches (of {}) that reached the host-only directory",
            race.dispatches
        ),
        race.escapes,
        0,
    );
    r.check(
        "race: the host-only directory is unchanged",
        race.host_dir_unchanged,
        "same two files, same content",
    );
    // Only the finished value (and the fork, dropped below) may hold the sandbox now.
    drop(session);
    let session = done;
    let evidence_chunks = session
        .chunks()
        .iter()
        .filter(|c| matches!(c.body(), ChunkBody::ToolEvidence(_)))
        .count();
    let calls = session.unanswered_tool_calls();
    r.check_eq("every call has evidence", evidence_chunks, log.len());
    r.check_eq("every call is answered", calls.len(), 0);
    r.check(
        "evidence is not sent to a model",
        session.messages().len() == session.conversation_len(),
        format!(
            "{} chunks, {} conversation messages",
            session.len(),
            session.messages().len()
        ),
    );
    let mut tool_log = String::new();
    for e in &log {
        tool_log.push_str(&serde_json::to_string(e)?);
        tool_log.push('\n');
    }
    ctx.write("tool_log.jsonl", tool_log)?;
    ctx.write_json("tool_results.json", &results)?;
    let store_dir = ctx.tmp_dir("sessions")?;
    let handle_id = session.placement().handle().map(|h| h.id().to_string());
    Store::at(&store_dir).save(&session)?;
    ctx.copy_tree(&store_dir, "store/sessions")?;
    drop(session);
    drop(fork);
    let closed = if backend == "local" {
        local.closed_count()
    } else {
        isolated.closed_count()
    };
    r.check_eq(
        "sandbox closed exactly once after the last holder",
        closed,
        1,
    );
    r.note(format!(
        "sandbox handle: {}",
        handle_id.unwrap_or_else(|| "bound lazily (not recorded on the parent value)".into())
    ));
    Ok(r)
}
