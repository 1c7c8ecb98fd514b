//! `lineage_export` (lineage inspectable, strict merge rule) and `interop_openrath`.

use std::path::Path;

use anyhow::{Result, anyhow};
use rath_backend::BackendRegistry;
use rath_persist::{
    LineageJournal, LineageRow, Store, export_jsonl_string, load_file, parse_lineage_jsonl, to_dot,
    to_mermaid,
};
use rath_session::{
    Chunk, Lineage, LineageGraph, LineageKind, SandboxSpec, Session, SessionId, Stamper, ToolCall,
    Usage,
};
use serde_json::json;

use super::{Ctx, Packet, Report};

/// The seven sessions of the OpenRath interop scenario (agent, root, fork_a, fork_b, loop_a,
/// merged, detached), made with a counter stamper.
pub fn scenario(stamper: Stamper) -> Result<Vec<(&'static str, Session)>> {
    let agent = Session::system_with(
        "You are a careful assistant. Use tools when helpful.",
        stamper.clone(),
    );
    let root = Session::user_with("How many words are in 'the quick brown fox'?", stamper)
        .to_with("local", SandboxSpec::working_dir("/workspace/demo"));
    let fork_a = root.fork();
    let fork_b = root.fork();
    let loop_a = fork_a
        .derive(Lineage::new(
            vec![fork_a.id().clone(), agent.id().clone()],
            "run_session_loop",
            LineageKind::OpSessionLoop,
        ))
        .push(Chunk::assistant(
            None,
            Some(vec![ToolCall::function(
                "call_wc_1",
                "word_count",
                r#"{"text": "the quick brown fox"}"#,
            )]),
        ))
        .with_usage(None, Usage::new(40, 12))
        .push(Chunk::tool_result(
            "call_wc_1",
            "word_count",
            r#"{"words": 4, "unique_lowercase": 4}"#,
        ))
        .push(Chunk::assistant_text(
            "The text 'the quick brown fox' has 4 words.",
        ))
        .with_usage(None, Usage::new(70, 11));
    let merged = loop_a.merge(&fork_b)?;
    let detached = merged.detach();
    Ok(vec![
        ("agent", agent),
        ("root", root),
        ("fork_a", fork_a),
        ("fork_b", fork_b),
        ("loop_a", loop_a),
        ("merged", merged),
        ("detached", detached),
    ])
}

/// The `lineage_export` packet.
pub fn lineage_export() -> Packet {
    Packet {
        name: "lineage_export",
        about: "Builds the fork/loop/merge/detach scenario with a counter stamper, persists every \
                session, exports lineage as JSONL, DOT and Mermaid from the live values and from \
                the store, and exercises the strict merge rule.",
        env: &[],
        build: build_lineage_export,
    }
}

fn build_lineage_export(ctx: &mut Ctx) -> Result<Report> {
    let mut r = Report::new(
        &[
            "lineage (parents, operator, kind, extras, chunk count, usage) of fork, loop, merge \
             and detach is exported as JSONL and renders as DOT and Mermaid graphs",
            "the export from the persisted store equals the export from the live values (the \
             lineage survives persistence)",
            "the strict merge rule: unbound sessions naming the same backend merge; different \
             backends, different live sandboxes, or bound vs unbound are refused with a typed \
             error",
            "usage semantics: fork and detach start empty, merge sums",
        ],
        &[
            "that a real model or tool produced loop_a (its chunks are written directly here; \
             see workflow_transcript for a loop that runs)",
            "anything about lineage of sessions made with the system (UUIDv7) stamper beyond id \
             format",
        ],
    );
    let stamper = Stamper::counter();
    let sessions = scenario(stamper.clone())?;
    let journal = LineageJournal::new();
    for (_, s) in &sessions {
        journal.record(s);
    }
    let rows: Vec<LineageRow> = sessions
        .iter()
        .map(|(_, s)| LineageRow::from_session(s))
        .collect();
    let jsonl = export_jsonl_string(&rows);
    ctx.write("lineage.jsonl", &jsonl)?;
    ctx.write("lineage.dot", to_dot(&rows))?;
    ctx.write("lineage.mmd", to_mermaid(&rows))?;
    ctx.write("journal.jsonl", journal.to_jsonl())?;
    let names: Vec<_> = sessions
        .iter()
        .map(|(n, s)| json!({"name": n, "id": s.id().as_str()}))
        .collect();
    ctx.write_json("sessions_index.json", &names)?;

    // Persist, reload, re-export.
    let store_dir = ctx.tmp_dir("sessions")?;
    let store = Store::at(&store_dir);
    for (_, s) in &sessions {
        store.save(s)?;
    }
    ctx.copy_tree(&store_dir, "store/sessions")?;
    let mut reloaded = Vec::new();
    for (_, s) in &sessions {
        reloaded.push(LineageRow::from_session(&store.load(s.id())?.session));
    }
    r.check_eq(
        "store round trip: export of reloaded sessions equals export of live values",
        export_jsonl_string(&reloaded) == jsonl,
        true,
    );
    let parsed = parse_lineage_jsonl(Path::new("lineage.jsonl"), &jsonl)?;
    r.check_eq(
        "lineage.jsonl parses back to the same rows",
        parsed == rows,
        true,
    );

    let get = |name: &str| -> Result<&Session> {
        sessions
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, s)| s)
            .ok_or_else(|| anyhow!("no session {name}"))
    };
    let (merged, loop_a, fork_b) = (get("merged")?, get("loop_a")?, get("fork_b")?);
    r.check_eq(
        "merged.parents = [loop_a, fork_b]",
        merged.lineage().parents.to_vec(),
        vec![loop_a.id().clone(), fork_b.id().clone()],
    );
    r.check_eq(
        "merged kind",
        merged.lineage().kind.as_str().to_string(),
        "op_merge".into(),
    );
    r.check_eq(
        "detached has no parents",
        get("detached")?.lineage().parents.len(),
        0,
    );
    r.check_eq(
        "merge sums usage",
        merged.usage(),
        Some(Usage::new(110, 23)),
    );
    r.check_eq("fork starts with no usage", get("fork_a")?.usage(), None);
    r.check_eq("detach drops usage", get("detached")?.usage(), None);
    let graph = LineageGraph::from_sessions(sessions.iter().map(|(_, s)| s));
    r.check_eq(
        "lineage graph has no cycle",
        graph.find_cycle().is_none(),
        true,
    );
    let ancestors: Vec<String> = graph
        .ancestors(merged.id())
        .iter()
        .map(|i| i.to_string())
        .collect();
    r.check(
        "merged's ancestors include root and agent",
        ancestors.contains(&get("root")?.id().to_string())
            && ancestors.contains(&get("agent")?.id().to_string()),
        ancestors.join(", "),
    );
    r.check_eq("graph edges", graph.edges().len(), 6);

    let merge_rule = merge_rule_cases(ctx, &stamper)?;
    let all_as_expected = merge_rule.iter().all(|c| c["outcome"] == c["expected"]);
    ctx.write_json("merge_rule.json", &merge_rule)?;
    r.check(
        "strict merge rule: every case as expected",
        all_as_expected,
        format!("{} cases", merge_rule.len()),
    );
    Ok(r)
}

fn merge_rule_cases(ctx: &mut Ctx, stamper: &Stamper) -> Result<Vec<serde_json::Value>> {
    let registry = BackendRegistry::new().with(rath_backend::local::LocalBackend::new());
    let a = Session::user_with("left", stamper.clone()).to("local");
    let b = Session::user_with("right", stamper.clone()).to("local");
    let c = Session::user_with("elsewhere", stamper.clone()).to("isolated");
    let unplaced = Session::user_with("nowhere", stamper.clone());
    // Bound sessions are separate values: binding fills the placement slot a session shares
    // with its forks, so the unbound cases above must never be bound.
    let x = Session::user_with("bound left", stamper.clone()).to("local");
    let y = Session::user_with("bound right", stamper.clone()).to("local");
    let (bound_a, bound_b) = ctx.block_on(async {
        registry.sandbox_for(&x).await?;
        registry.sandbox_for(&y).await?;
        Ok::<_, rath_backend::BackendError>((x.clone(), y.clone()))
    })??;
    let bound_fork = bound_a.fork().push(Chunk::assistant_text("from the fork"));
    let cases: Vec<(&str, &Session, &Session, &str)> = vec![
        ("unbound, same backend", &a, &b, "merged"),
        ("unbound, different backends", &a, &c, "refused"),
        ("unbound and unplaced", &a, &unplaced, "refused"),
        (
            "bound to one live sandbox (fork)",
            &bound_a,
            &bound_fork,
            "merged",
        ),
        (
            "bound to two different live sandboxes",
            &bound_a,
            &bound_b,
            "refused",
        ),
        ("bound vs unbound", &bound_a, &b, "refused"),
    ];
    Ok(cases
        .into_iter()
        .map(|(case, x, y, expected)| {
            let res = x.merge(y);
            let (outcome, detail) = match &res {
                Ok(m) => (
                    "merged",
                    json!({"parents": m.lineage().parents.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
                           "chunks": m.len()}),
                ),
                Err(e) => ("refused", json!({"error": e.to_string()})),
            };
            json!({"case": case, "left": x.id().as_str(), "right": y.id().as_str(),
                   "expected": expected, "outcome": outcome, "detail": detail})
        })
        .collect())
}

/// The `interop_openrath` packet.
pub fn interop_openrath() -> Packet {
    Packet {
        name: "interop_openrath",
        about: "Loads the store written by Python OpenRath 1.3.0 (../shared/interop/openrath-1.3.0) \
                with rath-persist, re-exports its lineage and compares it byte for byte with \
                Python's lineage_explicit.jsonl; writes the same operations with our writer and \
                compares the store files.",
        env: &[],
        build: build_interop,
    }
}

fn id(n: u32) -> SessionId {
    SessionId::from(format!("00000000-0000-4000-8000-{n:012}"))
}

fn build_interop(ctx: &mut Ctx) -> Result<Report> {
    let mut r = Report::new(
        &[
            "every session file Python OpenRath 1.3.0 wrote loads (7 closed sessions, 1 crash \
             file without trailer)",
            "the lineage export of the loaded sessions is byte-identical to Python's \
             lineage_explicit.jsonl and lineage_journal.jsonl",
            "the same operations written by our writer give byte-identical session files",
        ],
        &[
            "compatibility with OpenRath versions other than 1.3.0/2.0.0 (the fixture notes \
             both write identical bytes)",
            "that Python can load our files: rath-persist's python_loader test checks that with \
             openrath 2.0.0 in CI",
            "durable_run (rath.runtime) interop, which this project does not implement",
        ],
    );
    let dir = crate::shared_dir().join("interop/openrath-1.3.0");
    if !dir.is_dir() {
        r.skip("../shared/interop/openrath-1.3.0 is not beside the workspace");
        return Ok(r);
    }
    let store = Store::at(dir.join("openrath_home/sessions"));
    let mut rows = Vec::new();
    let mut loaded_index = Vec::new();
    for n in 1..=7 {
        let l = store.load(&id(n))?;
        loaded_index.push(json!({
            "id": l.session.id().as_str(),
            "closed": l.closed,
            "chunks": l.session.chunks().iter().map(|c| c.kind().as_str()).collect::<Vec<_>>(),
            "usage": l.session.usage(),
            "backend": l.session.placement().backend(),
        }));
        rows.push(LineageRow::from_session(&l.session));
    }
    let crash = load_file(&dir.join("crash/abandoned.jsonl.__partial__"))?;
    loaded_index.push(json!({
        "id": crash.session.id().as_str(),
        "file": "crash/abandoned.jsonl.__partial__",
        "closed": crash.closed,
        "chunks": crash.session.chunks().iter().map(|c| c.kind().as_str()).collect::<Vec<_>>(),
        "lineage_operator": crash.session.lineage().operator,
    }));
    ctx.write_json("loaded_sessions.json", &loaded_index)?;
    let ours = export_jsonl_string(&rows);
    ctx.write("lineage_reexported.jsonl", &ours)?;
    ctx.write("lineage_reexported.dot", to_dot(&rows))?;
    for name in ["lineage_explicit.jsonl", "lineage_journal.jsonl"] {
        let want = std::fs::read_to_string(dir.join(name))?;
        let same = ours == want;
        r.check(
            format!("re-export == python {name}"),
            same,
            if same {
                format!("{} bytes identical", want.len())
            } else {
                format!("{} vs {} bytes", ours.len(), want.len())
            },
        );
    }
    r.check_eq("crash file loads unclosed", crash.closed, false);

    // Same operations through our writer, compared file by file.
    let out = ctx.tmp_dir("ours")?;
    let written = write_like_python(&out)?;
    let mut same_files = Vec::new();
    for name in &written {
        let a = std::fs::read(out.join("openrath_home/sessions").join(name))?;
        let b = std::fs::read(dir.join("openrath_home/sessions").join(name))?;
        same_files.push(json!({"file": name, "identical": a == b}));
        r.check(
            format!("our {name} == python's"),
            a == b,
            format!("{} bytes", a.len()),
        );
    }
    ctx.copy_tree(&out.join("openrath_home/sessions"), "ours/sessions")?;
    ctx.write_json("store_comparison.json", &same_files)?;
    ctx.write(
        "source.txt",
        "Reference data: ../shared/interop/openrath-1.3.0 (written by Python OpenRath 1.3.0; \
         read in place, not copied).\n",
    )?;
    Ok(r)
}

/// Writes sessions 1..=7 the way the fixture script did: loop_a first by the loop's own
/// writer, then the others; timestamps from a clock like the script's pinned `datetime.now`.
fn write_like_python(root: &Path) -> Result<Vec<String>> {
    use rath_persist::WriterOptions;
    use rath_session::{CounterSource, Timestamp};
    let sessions: Vec<Session> = scenario(Stamper::counter())?
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    let clock = Stamper::new(CounterSource::new(
        Timestamp::from_unix_micros(1_767_225_601_000_000),
        1_000_000,
    ));
    let store = Store::at(root.join("openrath_home/sessions"));
    let opts = || WriterOptions::default().clock(clock.clone());
    let loop_a = &sessions[4];
    let mut w = store.writer(loop_a, opts())?;
    for c in loop_a.chunks() {
        w.append(c)?;
    }
    w.close_with(loop_a)?;
    for (i, s) in sessions.iter().enumerate() {
        if i != 4 {
            store.save_with(s, opts())?;
        }
    }
    Ok((1..=7).map(|n| format!("{}.jsonl", id(n))).collect())
}
