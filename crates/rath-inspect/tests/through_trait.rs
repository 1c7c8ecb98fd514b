//! A `StoreView` over a `SessionStore` trait object shows what the file-by-file view of the
//! same JSONL directory shows: listing, lineage, transcripts, diff, verify and the viewer.
//! (The SQL stores are read the same way; `crates/rath-cli/tests/store.rs` runs `rath` on
//! them.)

use std::sync::Arc;

use rath_inspect::{LineageFormat, Page, StoreView};
use rath_persist::{SessionStore, Store};
use rath_session::{Chunk, Session, Stamper, Usage};

fn store_with_sessions(dir: &std::path::Path) -> Vec<Session> {
    let root = Session::user_with("How many words in 'a b c'?", Stamper::counter());
    let a = root
        .fork()
        .push(Chunk::assistant_text("three"))
        .with_usage(Some("counter"), Usage::new(10, 2));
    let b = root.fork().push(Chunk::note("test", "evidence"));
    let merged = a.merge(&b).expect("merge");
    let store = Store::at(dir);
    for s in [&root, &a, &b, &merged] {
        store.save(s).expect("save");
    }
    vec![root, a, b, merged]
}

#[test]
fn the_trait_view_shows_what_the_file_view_shows() {
    let tmp = tempfile::tempdir().expect("tmp");
    let sessions = store_with_sessions(tmp.path());
    let files = StoreView::open(tmp.path()).expect("open");
    let store: Arc<dyn SessionStore> = Arc::new(Store::at(tmp.path()));
    let traits = StoreView::from_store(store).expect("view");
    assert!(traits.store().is_some() && files.store().is_none());

    let (a, b) = (files.sessions().expect("a"), traits.sessions().expect("b"));
    assert_eq!(a.rows.len(), 4);
    let key = |r: &rath_inspect::SessionRow| {
        (
            r.id.clone(),
            r.operator.clone(),
            r.kind.clone(),
            r.chunks,
            r.evidence,
            r.status,
            r.usage,
        )
    };
    assert_eq!(
        a.rows.iter().map(key).collect::<Vec<_>>(),
        b.rows.iter().map(key).collect::<Vec<_>>()
    );
    for f in [
        LineageFormat::Jsonl,
        LineageFormat::Tree,
        LineageFormat::Dot,
    ] {
        assert_eq!(
            files.lineage().expect("l").render(f),
            traits.lineage().expect("l").render(f)
        );
    }
    let merged = sessions[3].id();
    let id = traits.resolve(merged.as_str()).expect("resolve");
    assert_eq!(
        traits.resolve(&merged.as_str()[30..]).expect("by suffix"),
        id
    );
    assert_eq!(&id, merged);
    let ta = files.transcript_page(&id, Page::default()).expect("t");
    let tb = traits.transcript_page(&id, Page::default()).expect("t");
    assert_eq!(ta.chunks, tb.chunks);
    assert_eq!(tb.chunks.len(), sessions[3].len());
    let d = traits
        .diff(sessions[1].id(), sessions[2].id())
        .expect("diff");
    assert_eq!(d.common_prefix, 1);
    let v = traits.verify().expect("verify");
    assert!(v.is_clean() && v.files.len() == 4, "{}", v.render());
    let page = rath_inspect::view::render_store(&traits, Default::default()).expect("page");
    assert_eq!(page.matches("<g class=\"node").count(), 4);
    // An unknown id names the store.
    let err = traits.resolve("nope").expect_err("unknown");
    assert!(err.to_string().contains("jsonl:"), "{err}");
}

#[tokio::test(flavor = "current_thread")]
async fn the_trait_view_works_inside_a_runtime() {
    let tmp = tempfile::tempdir().expect("tmp");
    store_with_sessions(tmp.path());
    let store: Arc<dyn SessionStore> = Arc::new(Store::at(tmp.path()));
    let view = StoreView::from_store(store).expect("view");
    assert_eq!(view.sessions().expect("listing").rows.len(), 4);
}
