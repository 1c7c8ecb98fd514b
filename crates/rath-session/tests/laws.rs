//! Property tests of the session algebra: lineage laws, usage laws, the strict merge rule and
//! serde round trips.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use proptest::prelude::*;
use rath_session::*;

#[derive(Debug)]
struct TestLease {
    id: String,
    live: AtomicBool,
}

impl SandboxLease for TestLease {
    fn handle_id(&self) -> &str {
        &self.id
    }
    fn backend(&self) -> &str {
        "local"
    }
    fn is_live(&self) -> bool {
        self.live.load(Ordering::SeqCst)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn lease(id: &str, live: bool) -> SandboxHandle {
    SandboxHandle::from_arc(Arc::new(TestLease {
        id: id.to_owned(),
        live: AtomicBool::new(live),
    }))
}

fn arb_text() -> impl Strategy<Value = String> {
    "[a-z \\n\"'{}é😀]{0,12}"
}

fn arb_chunk() -> impl Strategy<Value = Chunk> {
    prop_oneof![
        arb_text().prop_map(Chunk::system),
        arb_text().prop_map(Chunk::user),
        (
            proptest::option::of(arb_text()),
            proptest::option::of(prop::collection::vec(
                (arb_text(), arb_text(), arb_text()),
                0..3
            ))
        )
            .prop_map(|(c, calls)| Chunk::assistant(
                c,
                calls.map(|v| v
                    .into_iter()
                    .map(|(i, n, a)| ToolCall::function(i, n, a))
                    .collect())
            )),
        (arb_text(), arb_text(), arb_text()).prop_map(|(i, n, c)| Chunk::tool_result(i, n, c)),
        (arb_text(), arb_text()).prop_map(|(a, t)| Chunk::note(a, t)),
        (arb_text(), any::<bool>(), 0u64..100).prop_map(|(n, lossy, rows)| Chunk::new(
            ChunkBody::CompressionRecord(CompressionRecord {
                compressor: n,
                lossy,
                dropped: vec![DroppedChunk {
                    index: rows,
                    kind: "user".into(),
                    sha256: "00".into()
                }],
                rows_out: rows,
            })
        )),
        (arb_text(), prop::collection::vec(arb_text(), 0..3)).prop_map(|(r, cands)| Chunk::new(
            ChunkBody::RouteDecision(RouteDecision {
                selector: "sel".into(),
                choice: cands.first().cloned(),
                candidates: cands,
                reason: r,
                decided_by: "function".into(),
            })
        )),
        (arb_text(), 0u32..1000).prop_map(|(q, s)| Chunk::new(ChunkBody::MemoryEvent(
            MemoryEvent {
                operation: "recall".into(),
                store_id: "s".into(),
                query: Some(q),
                hits: vec![MemoryHit {
                    id: "i".into(),
                    uri: "memory://user/a".into(),
                    score: f64::from(s) / 8.0,
                    snippet: "x".into(),
                    commit_id: None
                }],
                ..Default::default()
            }
        ))),
        (arb_text(), 0i64..3).prop_map(|(t, code)| Chunk::new(ChunkBody::ToolEvidence(
            ToolEvidence {
                tool_call_id: "c".into(),
                tool: t,
                exit_code: Some(code),
                outcome: "ok".into(),
                elapsed_ms: 0.5,
                ..Default::default()
            }
        ))),
    ]
}

fn arb_session() -> impl Strategy<Value = Session> {
    (
        prop::collection::vec(arb_chunk(), 0..20),
        proptest::option::of((0u64..1000, 0u64..1000)),
    )
        .prop_map(|(chunks, usage)| {
            let s = Session::empty_with(Stamper::counter()).extend(chunks);
            match usage {
                Some((p, c)) => s.with_usage(Some("agent"), Usage::new(p, c)),
                None => s,
            }
        })
}

proptest! {
    #[test]
    fn fork_law(s in arb_session()) {
        let f = s.fork();
        prop_assert_ne!(f.id(), s.id());
        prop_assert_eq!(&f.lineage().parents, &vec![s.id().clone()]);
        prop_assert_eq!(f.lineage().kind.clone(), LineageKind::OpFork);
        prop_assert_eq!(&*f.lineage().operator, "Session.fork");
        prop_assert!(f.shares_chunks_with(&s));
        prop_assert_eq!(f.usage(), None);
        prop_assert!(f.agent_usage().is_empty());
    }

    #[test]
    fn detach_law(s in arb_session()) {
        let d = s.detach();
        prop_assert!(d.lineage().parents.is_empty());
        prop_assert_eq!(d.lineage().kind.clone(), LineageKind::OpDetach);
        prop_assert!(d.shares_chunks_with(&s));
        prop_assert_eq!(d.usage(), None);
    }

    #[test]
    fn merge_law(a in arb_session(), b in arb_session()) {
        let m = a.merge(&b).expect("unplaced sessions merge");
        prop_assert_eq!(&m.lineage().parents, &vec![a.id().clone(), b.id().clone()]);
        prop_assert_eq!(m.lineage().kind.clone(), LineageKind::OpMerge);
        prop_assert_eq!(m.len(), a.len() + b.len());
        let expected: Vec<Chunk> = a.chunks().iter().chain(b.chunks().iter()).cloned().collect();
        prop_assert_eq!(m.chunks().iter().cloned().collect::<Vec<_>>(), expected);
        prop_assert_eq!(m.usage(), sum_optional(a.usage(), b.usage()));
        let agent_sum = a.agent_usage().get("agent").copied().unwrap_or_default()
            + b.agent_usage().get("agent").copied().unwrap_or_default();
        prop_assert_eq!(m.agent_usage().get("agent").copied().unwrap_or_default(), agent_sum);
    }

    #[test]
    fn shared_prefix_merge_keeps_prefix_once(base in arb_session(), xa in prop::collection::vec(arb_chunk(), 0..5), xb in prop::collection::vec(arb_chunk(), 0..5)) {
        let a = base.fork().extend(xa.clone());
        let b = base.fork().extend(xb.clone());
        let m = a.merge_with(&b, MergeStrategy::SharedPrefix).expect("merge");
        prop_assert_eq!(m.len(), base.len() + xa.len() + xb.len());
        for (i, c) in m.chunks().iter().enumerate() {
            if i < base.len() {
                prop_assert_eq!(c.branch(), None);
            } else if i < base.len() + xa.len() {
                prop_assert_eq!(c.branch(), Some(a.id().as_str()));
            } else {
                prop_assert_eq!(c.branch(), Some(b.id().as_str()));
            }
        }
    }

    #[test]
    fn merge_all_agrees_with_merge_with_and_sums_n_ways(
        base in arb_session(),
        xs in prop::collection::vec(prop::collection::vec(arb_chunk(), 0..4), 2..5),
        usage in prop::collection::vec((0u64..50, 0u64..50), 5),
    ) {
        let forks: Vec<Session> = xs.iter().zip(&usage).map(|(x, &(p, c))| {
            base.fork().extend(x.clone()).with_usage(Some("agent"), Usage::new(p, c))
        }).collect();
        let m = Session::merge_all(&forks).expect("unplaced forks merge");
        prop_assert_eq!(&m.lineage().parents, &forks.iter().map(|f| f.id().clone()).collect::<Vec<_>>());
        prop_assert_eq!(m.lineage().kind.clone(), LineageKind::OpMerge);
        let total = forks.iter().fold(None, |acc, f| sum_optional(acc, f.usage()));
        prop_assert_eq!(m.usage(), total);
        prop_assert_eq!(m.agent_usage().get("agent").copied(), total);
        let suffixes: usize = xs.iter().map(Vec::len).sum();
        let p = base.len();
        prop_assert_eq!(m.len(), p + suffixes);
        let mut i = p;
        for (f, x) in forks.iter().zip(&xs) {
            for _ in x {
                prop_assert_eq!(m.chunks()[i].branch(), Some(f.id().as_str()));
                i += 1;
            }
        }
        if forks.len() == 2 {
            let pair = forks[0].merge_with(&forks[1], MergeStrategy::SharedPrefix).expect("merge");
            prop_assert_eq!(pair.chunks().iter().cloned().collect::<Vec<_>>(), m.chunks().iter().cloned().collect::<Vec<_>>());
            prop_assert_eq!(pair.usage(), m.usage());
        }
    }

    #[test]
    fn session_serde_round_trip(s in arb_session()) {
        let json = serde_json::to_string(&s).expect("serialise");
        let back: Session = serde_json::from_str(&json).expect("deserialise");
        prop_assert_eq!(serde_json::to_string(&back).expect("serialise"), json);
        prop_assert_eq!(back.chunks().iter().cloned().collect::<Vec<_>>(), s.chunks().iter().cloned().collect::<Vec<_>>());
    }

    #[test]
    fn chunk_serde_round_trip(c in arb_chunk()) {
        let v = serde_json::to_value(&c).expect("serialise");
        let back: Chunk = serde_json::from_value(v.clone()).expect("deserialise");
        prop_assert_eq!(&back, &c);
        prop_assert_eq!(serde_json::to_value(&back).expect("serialise"), v);
    }

    #[test]
    fn merge_rule_every_combination(
        left_backend in proptest::option::of(prop_oneof![Just("local"), Just("isolated")]),
        right_backend in proptest::option::of(prop_oneof![Just("local"), Just("isolated")]),
        left_bound in 0u8..3,   // 0 unbound, 1 handle h1, 2 handle h2
        right_bound in 0u8..3,
        left_live in any::<bool>(),
        right_live in any::<bool>(),
    ) {
        let place = |backend: Option<&str>, bound: u8, live: bool| {
            let s = Session::user_with("q", Stamper::counter());
            let s = match backend { Some(b) => s.to(b), None => s };
            match bound {
                0 => s,
                1 => s.with_handle(lease("h1", live)),
                _ => s.with_handle(lease("h2", live)),
            }
        };
        let a = place(left_backend, left_bound, left_live);
        let b = place(right_backend, right_bound, right_live);
        let allowed = match (left_bound, right_bound) {
            (0, 0) => left_backend == right_backend,
            (x, y) if x != 0 && y != 0 => x == y && left_live && right_live,
            _ => false,
        };
        let result = a.merge(&b);
        prop_assert_eq!(Session::merge_all(&[a.clone(), b.clone()]).is_ok(), result.is_ok());
        prop_assert_eq!(result.is_ok(), allowed, "{:?}", result.as_ref().err());
        if let Err(SessionError::MergeRefused { left_id, right_id, .. }) = &result {
            prop_assert_eq!(left_id.as_str(), a.id().as_str());
            prop_assert_eq!(right_id.as_str(), b.id().as_str());
        }
    }
}

#[test]
fn forks_share_one_handle_slot_and_merge_keeps_it() {
    let root = Session::user_with("q", Stamper::counter()).to("local");
    let a = root.fork();
    let b = root.fork();
    // Unbound, same backend: merge allowed.
    assert!(a.merge(&b).is_ok());
    // Binding through one fork's slot binds them all.
    let h = a.placement().slot().bind(lease("h-shared", true));
    assert_eq!(
        b.placement().handle().map(SandboxHandle::id),
        Some("h-shared")
    );
    assert_eq!(root.placement().handle_id(), Some("h-shared"));
    let m = a.merge(&b).expect("same live handle");
    assert_eq!(m.placement().handle_id(), Some("h-shared"));
    drop(h);
    // A session placed anew has its own slot: refused against the bound one.
    let other = root.to("local").with_handle(lease("h-other", true));
    let err = m.merge(&other).expect_err("different handles");
    let text = err.to_string();
    assert!(
        text.contains("h-shared") && text.contains("h-other"),
        "{text}"
    );
}

#[test]
fn error_names_both_sides() {
    let a = Session::user_with("q", Stamper::counter()).to("local");
    let b = Session::user_with("q", Stamper::counter()).to("isolated");
    let err = a.merge(&b).expect_err("different backends").to_string();
    assert!(err.contains("unbound, backend local"), "{err}");
    assert!(err.contains("unbound, backend isolated"), "{err}");
}

#[test]
fn constructors_stamp_like_openrath() {
    let st = Stamper::counter();
    let agent = Session::system_with("You are a careful assistant.", st.clone());
    let root = Session::user_with("How many words?", st.clone())
        .to_with("local", SandboxSpec::working_dir("/workspace/demo"));
    assert_eq!(agent.id().as_str(), "00000000-0000-4000-8000-000000000001");
    assert_eq!(agent.lineage().operator, "create_system_session");
    assert_eq!(agent.lineage().kind, LineageKind::LeafSystem);
    assert_eq!(
        serde_json::to_string(&agent.lineage().extras).unwrap(),
        r#"[["source","create_system_session"]]"#
    );
    assert_eq!(root.lineage().operator, "Session.create");
    assert_eq!(root.lineage().kind, LineageKind::LeafUser);
    assert_eq!(
        serde_json::to_string(root.placement().spec().unwrap()).unwrap(),
        r#"{"image":null,"entrypoint":null,"env":null,"timeout_seconds":null,"working_dir":"/workspace/demo"}"#
    );
    let e = Session::empty_with(st);
    assert!(e.is_empty());
    assert_eq!(e.lineage().kind, LineageKind::OpCreate);
}

#[test]
fn conversation_view_maps_roles_and_skips_evidence() {
    let s = Session::system_with("sys", Stamper::counter())
        .push(Chunk::user("u"))
        .push(Chunk::assistant(
            None,
            Some(vec![ToolCall::function(
                "c1",
                "word_count",
                "{\"text\": \"a b\"}",
            )]),
        ))
        .push(Chunk::new(ChunkBody::ToolEvidence(ToolEvidence {
            tool_call_id: "c1".into(),
            tool: "word_count".into(),
            outcome: "ok".into(),
            ..Default::default()
        })))
        .push(Chunk::tool_result("c1", "word_count", "{\"words\": 2}"))
        .push(Chunk::assistant_text("two"));
    let msgs = s.messages();
    let roles: Vec<Role> = msgs.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        vec![
            Role::System,
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Assistant
        ]
    );
    assert_eq!(
        serde_json::to_string(&msgs[3]).unwrap(),
        r#"{"role":"tool","content":"{\"words\": 2}","tool_call_id":"c1"}"#
    );
    assert_eq!(s.conversation_len(), 5);
    assert_eq!(s.evidence().count(), 1);
    assert!(s.unanswered_tool_calls().is_empty());
}

#[test]
fn pending_work_round_trips() {
    let call = ToolCall::function("c9", "run_shell_command", "{\"cmd\": \"rm -rf build\"}");
    let s = Session::user_with("clean up", Stamper::counter())
        .push(Chunk::assistant(None, Some(vec![call.clone()])))
        .with_pending(PendingCall {
            call: call.clone(),
            agent: Some("ops".into()),
            reason: "require_approval".into(),
        });
    assert_eq!(s.unanswered_tool_calls(), vec![call.clone()]);
    let json = serde_json::to_string(&s).unwrap();
    let back: Session = serde_json::from_str(&json).unwrap();
    assert_eq!(back.pending().len(), 1);
    let (taken, rest) = back.take_pending("c9").unwrap();
    assert_eq!(taken.call, call);
    assert!(rest.pending().is_empty());
    assert!(matches!(
        rest.take_pending("nope"),
        Err(SessionError::PendingNotFound { .. })
    ));
}

#[test]
fn deterministic_mode_is_byte_identical() {
    let run = || {
        let st = Stamper::counter();
        let root = Session::user_with("q", st).to("local");
        let a = root
            .fork()
            .push(Chunk::assistant_text("x"))
            .with_usage(Some("a"), Usage::new(1, 2));
        let b = root.fork();
        let m = a
            .merge_with(&b, MergeStrategy::SharedPrefix)
            .unwrap()
            .detach();
        serde_json::to_string(&[&root, &a, &b, &m]).unwrap()
    };
    assert_eq!(run(), run());
}

#[test]
fn slice_is_bounds_checked() {
    let s = Session::user_with("q", Stamper::counter()).push(Chunk::user("r"));
    assert_eq!(s.slice(0..2).unwrap().len(), 2);
    assert!(matches!(
        s.slice(1..3),
        Err(SessionError::RangeOutOfBounds { .. })
    ));
}

#[derive(Debug, Clone)]
enum ListOp {
    Push,
    AppendFresh(u8),
    AppendSelf,
    SplitKeepLeft(u16),
    SplitKeepRight(u16),
    Slice(u16, u16),
}

fn arb_list_op() -> impl Strategy<Value = ListOp> {
    prop_oneof![
        4 => Just(ListOp::Push),
        2 => (0u8..150).prop_map(ListOp::AppendFresh),
        1 => Just(ListOp::AppendSelf),
        1 => any::<u16>().prop_map(ListOp::SplitKeepLeft),
        1 => any::<u16>().prop_map(ListOp::SplitKeepRight),
        1 => (any::<u16>(), any::<u16>()).prop_map(|(a, b)| ListOp::Slice(a, b)),
    ]
}

proptest! {
    /// ChunkList behaves exactly like a Vec under every operation sequence.
    #[test]
    fn chunk_list_matches_a_vec_model(ops in prop::collection::vec(arb_list_op(), 0..60)) {
        let mut list = ChunkList::new();
        let mut model: Vec<Chunk> = Vec::new();
        let mut next = 0u32;
        let fresh = |n: usize, next: &mut u32| -> Vec<Chunk> {
            (0..n).map(|_| { *next += 1; Chunk::user(next.to_string()) }).collect()
        };
        for op in ops {
            let snapshot = list.clone();
            let snapshot_model = model.clone();
            match op {
                ListOp::Push => {
                    let c = fresh(1, &mut next).remove(0);
                    list.push_back(c.clone());
                    model.push(c);
                }
                ListOp::AppendFresh(n) => {
                    let cs = fresh(usize::from(n), &mut next);
                    list.append(cs.iter().cloned().collect());
                    model.extend(cs);
                }
                ListOp::AppendSelf => {
                    list.append(list.clone());
                    model.extend(model.clone());
                }
                ListOp::SplitKeepLeft(at) => {
                    let at = usize::from(at) % (model.len() + 1);
                    let _ = list.split_off(at);
                    model.truncate(at);
                }
                ListOp::SplitKeepRight(at) => {
                    let at = usize::from(at) % (model.len() + 1);
                    list = list.split_off(at);
                    model = model.split_off(at);
                }
                ListOp::Slice(a, b) => {
                    let (mut a, mut b) = (usize::from(a) % (model.len() + 1), usize::from(b) % (model.len() + 1));
                    if a > b { std::mem::swap(&mut a, &mut b); }
                    list = list.range(a..b);
                    model = model[a..b].to_vec();
                }
            }
            // persistence: the value before the operation is untouched
            prop_assert_eq!(snapshot.iter().cloned().collect::<Vec<_>>(), snapshot_model);
            prop_assert_eq!(list.len(), model.len());
            prop_assert_eq!(list.iter().cloned().collect::<Vec<_>>(), model.clone());
            prop_assert_eq!(list.iter().rev().cloned().collect::<Vec<_>>(), model.iter().rev().cloned().collect::<Vec<_>>());
            if let Some(i) = model.len().checked_sub(1) {
                prop_assert_eq!(list.get(i / 2), model.get(i / 2));
            }
        }
    }
}
