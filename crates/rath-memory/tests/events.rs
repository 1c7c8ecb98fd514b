//! Session events: every recall and commit leaves a memory event; the policy's
//! recall-and-inject and commit-on-forward are reproducible in deterministic mode.

use rath_memory::{
    ChunkSelection, CommitPolicy, LocalMemory, LocalOptions, MemoryPolicy, MemoryUri, NewItem,
    QuerySource, RecallPolicy, Scope, commit_from, delete_into, memory_events, read_into,
    recall_into, write_into,
};
use rath_session::{Chunk, ChunkKind, Session, Stamper};

fn open(dir: &std::path::Path) -> LocalMemory {
    LocalMemory::open_at(dir, "events", LocalOptions::default()).unwrap()
}

#[test]
fn every_operation_leaves_an_event() {
    let dir = tempfile::tempdir().unwrap();
    let mem = open(dir.path());
    let s = Session::user_with("start", Stamper::counter());
    let uri = MemoryUri::new(Scope::User, "name").unwrap();
    let (s, receipt) = commit_from(
        &s,
        &mem,
        vec![NewItem::new(uri.clone(), "the user is Ada")],
        Some("a1"),
    )
    .unwrap();
    // UUID-shaped (a version-8 digest in deterministic mode), and reproducible.
    assert!(
        rath_session::is_uuid(&receipt.commit_id),
        "{}",
        receipt.commit_id
    );
    assert_eq!(&receipt.commit_id[14..15], "8");
    assert_eq!(
        receipt.commit_id,
        rath_memory::commit_id_for(
            &Session::user_with("start", Stamper::counter()),
            &[NewItem::new(uri.clone(), "the user is Ada").agent("a1")]
        )
    );
    let (s, hits) = recall_into(&s, &mem, "Ada", Some(Scope::User), 2, Some("a1")).unwrap();
    assert_eq!(hits.len(), 1);
    let (s, item) = read_into(&s, &mem, &uri, None).unwrap();
    assert_eq!(item.agent.as_deref(), Some("a1"));
    assert_eq!(item.session_id.as_deref(), Some(s.id().as_str()));
    let other = MemoryUri::new(Scope::Session, "scratch").unwrap();
    let (s, _) = write_into(&s, &mem, NewItem::new(other.clone(), "tmp"), None).unwrap();
    let (s, existed) = delete_into(&s, &mem, &other, None).unwrap();
    assert!(existed);

    let ops: Vec<&str> = memory_events(&s)
        .iter()
        .map(|e| e.operation.as_str())
        .collect();
    assert_eq!(ops, ["commit", "recall", "read", "write", "delete"]);
    let ev = memory_events(&s);
    assert_eq!(ev[0].uris, ["memory://user/name"]);
    assert_eq!(ev[0].agent.as_deref(), Some("a1"));
    assert_eq!(ev[0].scope.as_deref(), Some("user"));
    assert_eq!(ev[1].query.as_deref(), Some("Ada"));
    assert_eq!(ev[1].store_id, "events");
    assert_eq!(ev[1].commit_id.as_deref(), Some(receipt.commit_id.as_str()));
    assert_eq!(ev[2].commit_id.as_deref(), Some(receipt.commit_id.as_str()));
    // Evidence never counts as conversation.
    assert_eq!(s.conversation_len(), 1);
}

fn forward_and_recall(dir: &std::path::Path) -> (String, String) {
    let mem = open(dir);
    let policy = MemoryPolicy {
        recall: Some(RecallPolicy::new(Scope::Agent, 2)),
        commit: Some(CommitPolicy::new(Scope::Agent, "answers")),
    };
    let input = Session::user_with("Where is the spare key?", Stamper::counter());
    let output = input.push(Chunk::assistant_text(
        "Under the blue flowerpot by the door.",
    ));
    let committed = policy
        .commit_on_forward(&input, &output, &mem, Some("helper"))
        .unwrap();
    let next = Session::user_with("spare key location?", Stamper::counter());
    let ready = policy
        .recall_and_inject(&next, &mem, Some("helper"))
        .unwrap();
    (
        serde_json::to_string(&committed.chunks()).unwrap(),
        serde_json::to_string(&ready.chunks()).unwrap(),
    )
}

#[test]
fn policy_runs_are_byte_identical_in_deterministic_mode() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let (ca, ra) = forward_and_recall(a.path());
    let (cb, rb) = forward_and_recall(b.path());
    assert_eq!(ca, cb);
    assert_eq!(ra, rb);
    assert!(ra.contains("flowerpot"), "{ra}");
    assert!(ra.contains("memory://agent/answers/00000000-0000-4000-8000-000000000001/1"));
}

#[test]
fn policy_selection_and_no_ops() {
    let dir = tempfile::tempdir().unwrap();
    let mem = open(dir.path());
    let input = Session::user_with("q1", Stamper::counter());
    let output = input
        .push(Chunk::assistant_text("a1 first"))
        .push(Chunk::tool_result("call_1", "clock", "12:00"))
        .push(Chunk::assistant_text("a1 final"));
    let mut policy = MemoryPolicy {
        recall: None,
        commit: Some(CommitPolicy {
            select: ChunkSelection::NewConversation,
            scope: Scope::Session,
            prefix: String::new(),
        }),
    };
    let s = policy
        .commit_on_forward(&input, &output, &mem, None)
        .unwrap();
    assert_eq!(
        memory_events(&s)[0].uris.len(),
        3,
        "only what the forward added"
    );
    policy.commit = Some(CommitPolicy {
        select: ChunkSelection::LastAssistant,
        scope: Scope::Session,
        prefix: "last".into(),
    });
    let s = policy
        .commit_on_forward(&input, &output, &mem, None)
        .unwrap();
    let ev = memory_events(&s);
    assert_eq!(ev.len(), 1);
    let uri: MemoryUri = ev[0].uris[0].parse().unwrap();
    assert_eq!(
        rath_memory::Memory::read(&mem, &uri).unwrap().text,
        "a1 final"
    );
    // Nothing new: no commit, no event.
    let s = policy
        .commit_on_forward(&output, &output, &mem, None)
        .unwrap();
    assert!(memory_events(&s).is_empty());
    // No recall policy: unchanged. Recall with no hits: an event, but nothing injected.
    let same = policy.recall_and_inject(&input, &mem, None).unwrap();
    assert_eq!(same.len(), input.len());
    policy.recall = Some(RecallPolicy {
        query: QuerySource::Fixed("nothing matches this".into()),
        ..RecallPolicy::new(Scope::User, 3)
    });
    let s = policy.recall_and_inject(&input, &mem, None).unwrap();
    let kinds: Vec<ChunkKind> = s.chunks().iter().map(Chunk::kind).collect();
    assert_eq!(kinds, [ChunkKind::User, ChunkKind::MemoryEvent]);
}
