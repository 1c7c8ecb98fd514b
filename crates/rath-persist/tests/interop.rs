//! Acceptance 1: the Python OpenRath 1.3.0 files are read in place, the lineage export of the
//! loaded sessions is byte-identical, and the same operations written by us give the same
//! bytes.

mod common;

use std::path::Path;

use common::{interop_dir, interop_sessions, write_interop_like};
use rath_persist::{
    LineageRow, Store, export_jsonl_string, load_file, parse_lineage_jsonl, summarize_file,
};
use rath_session::{ChunkKind, LineageKind, SessionId, Usage};

fn id(n: u32) -> SessionId {
    SessionId::from(format!("00000000-0000-4000-8000-{n:012}"))
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn every_interop_file_loads_in_place() {
    let dir = interop_dir();
    let store = Store::at(dir.join("openrath_home/sessions"));
    let kinds: Vec<Vec<ChunkKind>> = (1..=7)
        .map(|n| {
            let l = store.load(&id(n)).expect("load");
            assert!(l.closed, "{n} closed");
            assert!(!l.torn_line_skipped);
            l.session.chunks().iter().map(|c| c.kind()).collect()
        })
        .collect();
    assert_eq!(kinds[4].len(), 4);
    assert_eq!(kinds[5].len(), 5);
    let loop_a = store.load(&id(5)).expect("loop_a");
    assert_eq!(loop_a.session.usage(), Some(Usage::new(110, 23)));
    assert_eq!(loop_a.session.lineage().parents, vec![id(3), id(1)]);
    assert_eq!(loop_a.final_chunk_count, Some(4));
    let detached = store.load(&id(7)).expect("detached");
    assert_eq!(detached.session.usage(), None);
    assert_eq!(detached.session.placement().backend(), Some("local"));
    assert_eq!(
        detached
            .session
            .placement()
            .spec()
            .and_then(|s| s.working_dir.as_deref()),
        Some("/workspace/demo")
    );

    let crash = load_file(&dir.join("crash/abandoned.jsonl.__partial__")).expect("crash");
    assert!(!crash.closed);
    assert_eq!(crash.session.len(), 1);
    assert_eq!(crash.session.lineage().kind, LineageKind::Unknown);
    assert_eq!(crash.session.lineage().operator, "implicit");

    let listed = store.list().expect("list");
    assert_eq!(listed.len(), 7);
    // created_at order: loop_a was written first by the loop's own writer.
    assert_eq!(listed[0].id, id(5));
    assert!(listed.iter().all(|s| s.closed && !s.crashed));
    let crash_summary =
        summarize_file(&dir.join("crash/abandoned.jsonl.__partial__")).expect("sum");
    assert!(crash_summary.crashed && !crash_summary.closed);

    for name in [
        "lineage_explicit.jsonl",
        "lineage_journal.jsonl",
        "lineage_journal_registry_default.jsonl",
    ] {
        let p = dir.join(name);
        let rows = parse_lineage_jsonl(&p, &read(&p)).expect("rows");
        assert!(!rows.is_empty());
        assert_eq!(export_jsonl_string(&rows), read(&p), "{name} round trip");
    }
}

#[test]
fn export_of_loaded_sessions_is_byte_identical() {
    let dir = interop_dir();
    let store = Store::at(dir.join("openrath_home/sessions"));
    let rows: Vec<LineageRow> = (1..=7)
        .map(|n| LineageRow::from_session(&store.load(&id(n)).expect("load").session))
        .collect();
    let text = export_jsonl_string(&rows);
    assert_eq!(text, read(&dir.join("lineage_explicit.jsonl")));
    assert_eq!(text, read(&dir.join("lineage_journal.jsonl")));

    // The same rows straight from the store directory (in created_at order).
    let mut from_dir = store.lineage_rows().expect("rows");
    from_dir.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(export_jsonl_string(&from_dir), text);
}

#[test]
fn same_operations_give_the_same_rows_and_bytes() {
    let sessions = interop_sessions();
    let rows: Vec<LineageRow> = sessions[..7].iter().map(LineageRow::from_session).collect();
    assert_eq!(
        export_jsonl_string(&rows),
        read(&interop_dir().join("lineage_explicit.jsonl"))
    );

    let tmp = tempfile::tempdir().expect("tmp");
    let (store_dir, crash_dir) = write_interop_like(tmp.path());
    let want = interop_dir();
    for n in 1..=7 {
        let name = format!("{}.jsonl", id(n));
        assert_eq!(
            read(&store_dir.join(&name)),
            read(&want.join("openrath_home/sessions").join(&name)),
            "{name}"
        );
    }
    assert_eq!(
        read(&crash_dir.join("abandoned.jsonl.__partial__")),
        read(&want.join("crash/abandoned.jsonl.__partial__"))
    );
}
