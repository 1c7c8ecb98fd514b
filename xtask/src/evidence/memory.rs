//! `memory_local`: the memory plane as session-visible events.

use anyhow::{Result, anyhow};
use rath_memory::{
    CommitPolicy, LocalMemory, LocalOptions, MemoryPolicy, MemoryUri, NewItem, RecallPolicy, Scope,
    commit_from, memory_events, recall_into,
};
use rath_persist::Store;
use rath_session::{Chunk, ChunkBody, Session, Stamper};

use super::{Ctx, Packet, Report};

/// The `memory_local` packet.
pub fn memory_local() -> Packet {
    Packet {
        name: "memory_local",
        about: "Two runs on one local memory store: run 1 answers and commits on forward; run 2 \
                reopens the store, recalls and injects before its model call. Every memory \
                operation is a memory_event chunk on the session that caused it.",
        env: &[],
        build: build_memory,
    }
}

fn policy() -> MemoryPolicy {
    MemoryPolicy {
        recall: Some(RecallPolicy::new(Scope::Agent, 3)),
        commit: Some(CommitPolicy::new(Scope::Agent, "answers")),
    }
}

fn build_memory(ctx: &mut Ctx) -> Result<Report> {
    let mut r = Report::new(
        &[
            "memory is a plane the session can see: each commit and recall appends a \
             memory_event chunk (operation, store, uris, commit id, hits) to the session",
            "a later run recalls what an earlier run committed, after reopening the store from \
             its on-disk log, and its recall event names the earlier commit",
            "memory events never reach the model as messages; injected recall does, as a \
             conversation chunk",
        ],
        &[
            "recall quality beyond this lexical (BM25) example",
            "concurrent writers from several processes (rath-memory's crash and lock tests cover \
             those)",
            "remote or vector memory stores",
        ],
    );
    let dir = ctx.tmp_dir("memory/agent")?;
    let stamper = Stamper::counter();
    // Run 1: a question, a scripted answer, commit-on-forward; plus an explicit resource fact.
    let (run1, commit_id) = {
        let mem = LocalMemory::open_at(&dir, "evidence", LocalOptions::default())?;
        let input = Session::user_with(
            "Which port does the staging API listen on?",
            stamper.clone(),
        );
        let output = input.push(Chunk::assistant_text(
            "The staging API listens on port 8443, behind the gateway.",
        ));
        let output = policy().commit_on_forward(&input, &output, &mem, Some("assistant"))?;
        let fact = NewItem::new(
            MemoryUri::new(Scope::Resources, "infra/staging-db")?,
            "The staging database is pg-staging-3.",
        );
        let (output, _) = commit_from(&output, &mem, vec![fact], Some("ops"))?;
        let commit = memory_events(&output)
            .first()
            .and_then(|e| e.commit_id.clone())
            .ok_or_else(|| anyhow!("run 1 made no commit"))?;
        (output, commit)
    };
    // Run 2: the store reopened from disk, as a new process would.
    let run2 = {
        let mem = LocalMemory::open_at(&dir, "evidence", LocalOptions::default())?;
        let input = Session::user_with("What port is the staging API on?", stamper.clone());
        let ready = policy().recall_and_inject(&input, &mem, Some("assistant"))?;
        let (ready, hits) = recall_into(
            &ready,
            &mem,
            "which staging database?",
            Some(Scope::Resources),
            5,
            Some("ops"),
        )?;
        r.check_eq(
            "direct recall finds the resource fact",
            hits.first().map(|h| h.uri.path().to_string()),
            Some("infra/staging-db".to_string()),
        );
        ready
    };
    let events1 = memory_events(&run1);
    let events2 = memory_events(&run2);
    r.check_eq(
        "run 1 events",
        events1
            .iter()
            .map(|e| e.operation.clone())
            .collect::<Vec<_>>(),
        vec!["commit".to_string(), "commit".to_string()],
    );
    let recall = events2.iter().find(|e| e.operation == "recall");
    r.check_eq(
        "run 2's recall names run 1's commit",
        recall.and_then(|e| e.commit_id.clone()),
        Some(commit_id.clone()),
    );
    let injected = run2.chunks().iter().filter(|c| c.is_conversation()).count();
    r.check(
        "recall is injected as conversation before the model call",
        injected >= 2,
        format!("{injected} conversation chunks in run 2"),
    );
    let event_chunks = run2
        .chunks()
        .iter()
        .filter(|c| matches!(c.body(), ChunkBody::MemoryEvent(_)))
        .count();
    r.check(
        "memory events are evidence, not messages",
        run2.messages().len() == run2.conversation_len() && event_chunks == events2.len(),
        format!(
            "{event_chunks} memory_event chunks, {} messages",
            run2.messages().len()
        ),
    );
    ctx.write_json("run1_events.json", &events1)?;
    ctx.write_json("run2_events.json", &events2)?;
    ctx.write_json("run2_messages.json", &run2.messages())?;
    let sessions = ctx.tmp_dir("sessions")?;
    let store = Store::at(&sessions);
    store.save(&run1)?;
    store.save(&run2)?;
    ctx.copy_tree(&sessions, "store/sessions")?;
    for f in super::list_files(&dir)? {
        if !f.contains("lock") {
            ctx.write(&format!("memory_store/{f}"), std::fs::read(dir.join(&f))?)?;
        }
    }
    Ok(r)
}
