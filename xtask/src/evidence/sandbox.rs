//! `local_sandbox` (tool placement auditable) and `isolated_sandbox` (bubblewrap).

use std::time::Duration;

use anyhow::Result;
use rath_backend::{
    Backend, BackendRegistry, CommandPayload, Payload, isolated::IsolatedBackend,
    local::LocalBackend,
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
                a tool_evidence chunk and a tool_result in the persisted session.",
        env: &[],
        build: |ctx| build(ctx, "local"),
    }
}

/// The `isolated_sandbox` packet.
pub fn isolated_sandbox() -> Packet {
    Packet {
        name: "isolated_sandbox",
        about: "The local_sandbox workload on the `isolated` (bubblewrap) backend, plus probes \
                that the sandbox has no network, a read-only root and masked home directories.",
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
    expect_text: Option<&'static str>,
}

fn step(
    tool: &'static str,
    payload: Payload,
    expect_outcome: &'static str,
    expect_exit: Option<i64>,
    expect_text: Option<&'static str>,
) -> Step {
    Step {
        tool,
        payload,
        expect_outcome,
        expect_exit,
        expect_text,
    }
}

fn steps(backend: &str) -> Vec<Step> {
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
                sh("find /root /home -mindepth 1 | wc -l"),
                "ok",
                Some(0),
                Some("0"),
            ),
            step(
                "shell",
                sh("test -s /etc/shadow && echo visible || echo masked"),
                "ok",
                Some(0),
                Some("masked"),
            ),
        ]);
    }
    v
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
                "the local_sandbox contract holds under bubblewrap",
                "inside the sandbox there is no network (only loopback), the root is read-only, \
                 /root and /home are empty and /etc/shadow is masked",
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
    let (done, log, results) = ctx.block_on(async {
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
        for (i, st) in steps(backend).into_iter().enumerate() {
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
                    want.to_string(),
                );
            }
            log.push(serde_json::to_value(&evidence)?);
            results.push(json!({"tool_call_id": call_id, "tool": st.tool, "result": result}));
            s = s
                .push(Chunk::new(ChunkBody::ToolEvidence(evidence)))
                .push(Chunk::tool_result(&call_id, st.tool, result.to_string()));
        }
        Ok::<_, anyhow::Error>((s, log, results))
    })??;
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
