//! Ranking on a small fixed corpus: exact, rare and multi-term queries; scope isolation;
//! deletion; reopen and rebuild give the same answers.

use rath_memory::{HashEmbedder, LocalMemory, LocalOptions, Memory, MemoryUri, NewItem, Scope};
use std::sync::Arc;

const CORPUS: &[(&str, &str)] = &[
    ("kettle", "Descale the kettle every month with citric acid."),
    (
        "coffee",
        "The coffee grinder is set to fine for espresso; coarse for the french press.",
    ),
    (
        "tea",
        "Green tea steeps at 80 degrees for two minutes; black tea at 95 degrees.",
    ),
    (
        "plants",
        "Water the fern twice a week and the cactus once a month.",
    ),
    (
        "bins",
        "The recycling bins go out on Tuesday night; the garden waste bin every other week.",
    ),
    (
        "wifi",
        "The guest wifi password is on the fridge; the router is in the hallway cupboard.",
    ),
    (
        "car",
        "The car needs an oil change every ten thousand kilometres; tyres checked monthly.",
    ),
    (
        "boiler",
        "The boiler pressure should read between one and two bar; topping up uses the filling loop.",
    ),
    (
        "zebra",
        "A zebra crossing is outside the school; slow down near it.",
    ),
    (
        "week",
        "Every week: water, bins, the week plan, and a weekly review of the week.",
    ),
];

fn uri(scope: Scope, p: &str) -> MemoryUri {
    MemoryUri::new(scope, format!("house/{p}")).unwrap()
}

fn load(dir: &std::path::Path, options: LocalOptions) -> LocalMemory {
    let mem = LocalMemory::open_at(dir, "ranking", options).unwrap();
    let items = CORPUS
        .iter()
        .map(|(p, t)| NewItem::new(uri(Scope::Resources, p), *t))
        .collect();
    mem.commit("c1", items).unwrap();
    mem
}

fn top(mem: &LocalMemory, q: &str, scope: Option<Scope>, k: usize) -> Vec<String> {
    mem.recall(q, scope, k)
        .unwrap()
        .into_iter()
        .map(|h| h.uri.path().trim_start_matches("house/").to_owned())
        .collect()
}

#[test]
fn exact_term_ranks_its_item_first() {
    let dir = tempfile::tempdir().unwrap();
    let mem = load(dir.path(), LocalOptions::default());
    assert_eq!(top(&mem, "kettle", None, 3), ["kettle"]);
    assert_eq!(
        top(&mem, "ESPRESSO?", Some(Scope::Resources), 3),
        ["coffee"]
    );
    assert_eq!(top(&mem, "router", None, 3)[0], "wifi");
    assert!(top(&mem, "nonexistentword", None, 3).is_empty());
}

#[test]
fn rare_term_beats_common_terms() {
    let dir = tempfile::tempdir().unwrap();
    let mem = load(dir.path(), LocalOptions::default());
    // "week" is everywhere (and repeated in one item); "cactus" is in one item only.
    let hits = top(&mem, "week cactus", None, 3);
    assert_eq!(hits[0], "plants");
    // A single common term still prefers the item that repeats it.
    assert_eq!(top(&mem, "week", None, 1), ["week"]);
}

#[test]
fn multi_term_query_prefers_items_matching_more_terms() {
    let dir = tempfile::tempdir().unwrap();
    let mem = load(dir.path(), LocalOptions::default());
    let hits = top(&mem, "boiler pressure bar", None, 3);
    assert_eq!(hits[0], "boiler");
    let hits = top(&mem, "tea degrees minutes", None, 3);
    assert_eq!(hits[0], "tea");
    let hits = top(&mem, "oil tyres monthly", None, 3);
    assert_eq!(hits[0], "car");
    // Ties in score are ordered by address, so results are reproducible.
    assert_eq!(top(&mem, "monthly", None, 5), top(&mem, "monthly", None, 5));
}

#[test]
fn scopes_isolate() {
    let dir = tempfile::tempdir().unwrap();
    let mem = load(dir.path(), LocalOptions::default());
    mem.write(NewItem::new(
        uri(Scope::User, "pref"),
        "the user likes the kettle whistle",
    ))
    .unwrap();
    mem.write(NewItem::new(
        uri(Scope::Agent, "note"),
        "agent note about the kettle",
    ))
    .unwrap();
    assert_eq!(top(&mem, "kettle", Some(Scope::User), 5), ["pref"]);
    assert_eq!(top(&mem, "kettle", Some(Scope::Agent), 5), ["note"]);
    assert_eq!(
        top(&mem, "kettle", Some(Scope::Session), 5),
        Vec::<String>::new()
    );
    assert_eq!(top(&mem, "kettle", Some(Scope::Resources), 5), ["kettle"]);
    assert_eq!(top(&mem, "kettle", None, 5).len(), 3);
    assert_eq!(
        mem.list(Some(Scope::User)).unwrap(),
        [uri(Scope::User, "pref")]
    );
    assert_eq!(mem.list(None).unwrap().len(), CORPUS.len() + 2);
}

#[test]
fn deleting_removes_from_recall_now_and_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mem = load(dir.path(), LocalOptions::default());
    let kettle = uri(Scope::Resources, "kettle");
    assert!(mem.delete(&kettle).unwrap());
    assert!(!mem.delete(&kettle).unwrap());
    assert!(top(&mem, "kettle", None, 3).is_empty());
    assert!(matches!(
        mem.read(&kettle),
        Err(rath_memory::MemoryError::NotFound(_))
    ));
    drop(mem);
    let mem = LocalMemory::open_at(dir.path(), "ranking", LocalOptions::default()).unwrap();
    assert!(top(&mem, "kettle", None, 3).is_empty());
    assert_eq!(mem.len(), CORPUS.len() - 1);
    // Compaction drops the tombstone and keeps the answers.
    let before = top(&mem, "week water", None, 5);
    mem.compact().unwrap();
    assert_eq!(mem.dead_slots(), 0);
    assert_eq!(top(&mem, "week water", None, 5), before);
    assert!(top(&mem, "kettle", None, 3).is_empty());
}

#[test]
fn replacing_an_item_updates_recall_and_commit_id() {
    let dir = tempfile::tempdir().unwrap();
    let mem = load(dir.path(), LocalOptions::default());
    let kettle = uri(Scope::Resources, "kettle");
    mem.commit(
        "c2",
        vec![NewItem::new(
            kettle.clone(),
            "The kettle was replaced; no descaling.",
        )],
    )
    .unwrap();
    assert!(top(&mem, "citric", None, 3).is_empty());
    let hits = mem.recall("kettle", None, 3).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].commit_id.as_deref(), Some("c2"));
    assert_eq!(mem.dead_slots(), 1);
}

#[test]
fn reopen_and_rebuild_give_identical_results() {
    let dir = tempfile::tempdir().unwrap();
    let mem = load(dir.path(), LocalOptions::default());
    let queries = ["week", "kettle month", "the", "bins tuesday garden"];
    let before: Vec<_> = queries
        .iter()
        .map(|q| mem.recall(q, None, 5).unwrap())
        .collect();
    mem.rebuild_index().unwrap();
    let rebuilt: Vec<_> = queries
        .iter()
        .map(|q| mem.recall(q, None, 5).unwrap())
        .collect();
    assert_eq!(before, rebuilt);
    drop(mem);
    let mem = LocalMemory::open_at(dir.path(), "ranking", LocalOptions::default()).unwrap();
    let reopened: Vec<_> = queries
        .iter()
        .map(|q| mem.recall(q, None, 5).unwrap())
        .collect();
    assert_eq!(before, reopened);
}

#[test]
fn a_second_open_of_one_store_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _mem = load(dir.path(), LocalOptions::default());
    let brief = LocalOptions::default().lock_wait(std::time::Duration::from_millis(50));
    let err = LocalMemory::open_at(dir.path(), "ranking", brief).unwrap_err();
    assert!(
        matches!(err, rath_memory::MemoryError::Locked { waited_ms, .. } if waited_ms >= 50),
        "{err}"
    );
}

#[test]
fn hybrid_recall_finds_lexical_and_vector_matches() {
    let dir = tempfile::tempdir().unwrap();
    let options = LocalOptions::default().embedder(Arc::new(HashEmbedder::new(256)));
    let mem = load(dir.path(), options.clone());
    assert_eq!(top(&mem, "kettle", None, 1), ["kettle"]);
    assert_eq!(top(&mem, "boiler pressure bar", None, 1), ["boiler"]);
    let a = mem.recall("tea degrees", None, 3).unwrap();
    drop(mem);
    let mem = LocalMemory::open_at(dir.path(), "ranking", options).unwrap();
    assert_eq!(mem.recall("tea degrees", None, 3).unwrap(), a);
}

#[test]
fn the_log_is_human_readable_jsonl() {
    let dir = tempfile::tempdir().unwrap();
    let mem = load(dir.path(), LocalOptions::default());
    mem.delete(&uri(Scope::Resources, "zebra")).unwrap();
    let log = std::fs::read_to_string(dir.path().join("items.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["op"], "commit");
    assert_eq!(lines[0]["commit_id"], "c1");
    assert_eq!(
        lines[0]["items"][0]["uri"],
        "memory://resources/house/kettle"
    );
    assert_eq!(lines[1]["op"], "delete");
}
