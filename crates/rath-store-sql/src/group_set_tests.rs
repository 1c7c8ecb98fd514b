//! The set path of the group committer against the one-after-another group: the same
//! batches in the same order give the same results and the very same rows (keys included),
//! on SQLite and on PostgreSQL. The batches mix what the set path does (appends, forks with
//! and without a remembered base, a detach, a merge, fenced appends) with what makes it stop
//! and hand a batch to the one-by-one path (a fork of a session appended or created earlier
//! in the group, a second session with the chunks of one created in it), and a group with a
//! conflict and a stale fence (the whole group is then done again batch by batch).

use rath_persist::{Fence, PersistError, SessionStore, Write, WriteBatch, WriteReport};
use rath_session::{Chunk, Session, SessionId, StampSource, Stamper, Timestamp};

/// A stamper whose clock stands still (a batch done twice, once in the failed group and
/// once on its own, stamps the same times either way).
#[derive(Debug)]
struct Still(Stamper);

impl StampSource for Still {
    fn next_id(&self) -> SessionId {
        self.0.next_id()
    }
    fn next_token(&self, prefix: &str) -> String {
        self.0.next_token(prefix)
    }
    fn now(&self) -> Timestamp {
        Timestamp::from_unix_micros(1_767_225_600_000_000)
    }
    fn is_deterministic(&self) -> bool {
        true
    }
}

fn still(s: Session, seed: u64) -> Session {
    // Ids it mints (forks, detaches) come from a seed of its own.
    s.with_stamper(Stamper::new(Still(Stamper::seeded(seed + 1_000_000))))
}

fn grow(s: &Session, text: &str) -> Session {
    s.push(Chunk::assistant_text(text.to_owned()))
}

/// One write of a group: the session, the stored length it expects (none: a save), its
/// fence.
type Job = (Session, Option<usize>, Option<Fence>);

/// The sessions stored first (one by one), then three groups of writes; built afresh for each
/// store (a session's stamper is its own).
fn work() -> (Vec<Session>, Vec<Vec<Job>>) {
    let base = base_sessions();
    let first = first_group(&base);
    let second = second_group(&base);
    let third = third_group(&base);
    (base, vec![stilled(first), stilled(second), stilled(third)])
}

/// The sessions stored before the groups: forty of three chunks each, then three that hold
/// the very same chunks.
fn base_sessions() -> Vec<Session> {
    (0..40u64)
        .map(|i| {
            let s = Session::user_with(format!("task {i}"), Stamper::seeded(100 + i));
            still(
                s.push(Chunk::assistant_text(format!("reply {i}")))
                    .push(Chunk::user(format!("more {i}"))),
                100 + i,
            )
        })
        .chain((0..3u64).map(|k| {
            // Three sessions holding the very same chunks (ids of their own).
            let s = Session::user_with("twin", Stamper::seeded(900 + k));
            still(s.push(Chunk::assistant_text("twin reply")), 900 + k)
        }))
        .collect()
}

/// The first group: every kind of write the set path does, and those that make it hand a
/// batch to the one-by-one path.
fn first_group(base: &[Session]) -> Vec<Job> {
    let f35 = grow(&base[35].fork(), "fork of 35");
    let merged = base[3].merge(&base[4]).expect("merge");
    let fresh = Session::user_with("fresh", Stamper::seeded(7)).push(Chunk::assistant_text("hi"));
    vec![
        // An append.
        (grow(&base[0], "append 0"), Some(3), None),
        // A fork whose parent the store remembers, and one whose parent it forgot.
        (f35.clone(), Some(0), None),
        (grow(&base[1].fork(), "fork of 1"), Some(0), None),
        // A fork of the session the first job appends to: done on its own.
        (grow(&base[0].fork(), "fork of 0"), Some(0), None),
        // A detach (the chunks of a stored session), a merge (its second half is a stored
        // parent), a fenced append, a session of its own.
        (base[2].detach(), Some(0), None),
        (merged, Some(0), None),
        (
            grow(&base[5], "append 5"),
            Some(3),
            Some(Fence::new("run-5", 3)),
        ),
        (fresh, Some(0), None),
        // A fork of a session this group creates, a second detach of the same chunks as one
        // this group creates: each on its own.
        (grow(&f35.fork(), "fork of the fork"), Some(0), None),
        (base[2].detach(), Some(0), None),
        // Appends to a parent forked earlier in the group, and one fenced on a key of its own.
        (
            grow(&base[35], "append 35"),
            Some(3),
            Some(Fence::new("run-35", 1)),
        ),
        (grow(&base[36], "append 36"), Some(3), None),
        (grow(&base[37].fork(), "fork of 37"), Some(0), None),
        (
            grow(&grow(&base[38], "append 38"), "and more"),
            Some(3),
            None,
        ),
        // Saves: a new fork, a session stored already (the very same: a no-op).
        (grow(&base[12].fork(), "saved fork of 12"), None, None),
        (base[13].clone(), None, None),
        // A new session with the chunks the three twins hold: it shares the first twin's.
        (
            Session::user_with("twin", Stamper::seeded(950))
                .push(Chunk::assistant_text("twin reply")),
            Some(0),
            None,
        ),
    ]
}

/// The second group: a stale length and a stale fence among good writes.
fn second_group(base: &[Session]) -> Vec<Job> {
    vec![
        (grow(&base[6], "append 6"), Some(3), None),
        // A stale length: the group fails and is done batch by batch.
        (grow(&base[7], "append 7"), Some(2), None),
        (grow(&base[8].fork(), "fork of 8"), Some(0), None),
        // A token below the one the first group left for its key.
        (
            grow(&base[9], "append 9"),
            Some(3),
            Some(Fence::new("run-5", 2)),
        ),
        (grow(&base[10], "append 10"), Some(3), None),
        (base[14].clone(), None, None),
    ]
}

/// The third group: a save of a stored session's id with other chunks, refused as
/// existing.
fn third_group(base: &[Session]) -> Vec<Job> {
    vec![
        (grow(&base[15], "append 15"), Some(3), None),
        (grow(&base[16], "not the stored one"), None, None),
        (grow(&base[17].fork(), "saved fork of 17"), None, None),
    ]
}

/// `jobs` with each session's clock stopped, the `i`th minting ids from a seed of its own.
fn stilled(jobs: Vec<Job>) -> Vec<Job> {
    jobs.into_iter()
        .enumerate()
        .map(|(i, (s, n, f))| (still(s, 500 + i as u64), n, f))
        .collect()
}

/// What a group's results say, without the store's name.
fn outcome(r: &Result<Vec<WriteReport>, PersistError>) -> String {
    match r {
        Ok(reports) => format!("ok {reports:?}"),
        Err(PersistError::Conflict {
            expected, found, ..
        }) => format!("conflict {expected} {found:?}"),
        Err(PersistError::Fenced { token, current, .. }) => format!("fenced {token} {current}"),
        Err(PersistError::Exists { .. }) => "exists".to_owned(),
        Err(e) => format!("error {e}"),
    }
}

fn batches(jobs: &[Job]) -> Vec<WriteBatch<'_>> {
    jobs.iter()
        .map(|(s, n, f)| {
            let b = WriteBatch::new().with(match n {
                Some(n) => Write::Append {
                    session: s,
                    expected_len: *n,
                },
                None => Write::Save(s),
            });
            match f {
                Some(f) => b.fenced(f.clone()),
                None => b,
            }
        })
        .collect()
}

/// Stores `work()` in `store` with or without the set path: the groups' outcomes, then the
/// rows.
macro_rules! run_work {
    ($store:expr, $set:expr) => {{
        let store = $store;
        let (base, groups) = work();
        for s in &base {
            store.save(s).await.expect("save");
        }
        let mut out = Vec::new();
        for g in &groups {
            for r in store.group_now(&batches(g), $set).await {
                out.push(outcome(&r));
            }
        }
        for s in groups.iter().flatten().map(|(s, _, _)| s) {
            let stored = store.load(s.id()).await;
            out.push(format!(
                "{} loads {}",
                s.id(),
                stored.map_or(0, |l| l.session.len())
            ));
        }
        out.extend(store.dump().await);
        out
    }};
}

fn compare(set: &[String], plain: &[String]) {
    assert_eq!(set.len(), plain.len(), "as many results and rows");
    for (a, b) in set.iter().zip(plain) {
        assert_eq!(a, b, "the set path and one after another differ");
    }
    // The groups came out as planned: all 17 of the first done, 4 of 6 of the second after
    // the group failed, 2 of 3 of the third.
    let oks = set.iter().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(oks, 17 + 4 + 2, "{set:#?}");
    assert!(set.iter().any(|l| l.contains("unchanged: true")));
    assert!(set.iter().any(|l| l == "exists"), "{set:#?}");
    assert!(set.iter().any(|l| l.starts_with("conflict 2 Some(3)")));
    assert!(set.iter().any(|l| l.starts_with("fenced 2 3")));
}

#[tokio::test]
async fn set_path_writes_what_one_after_another_writes_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let set = crate::SqliteStore::open(dir.path().join("set.db"))
        .await
        .expect("open");
    let plain = crate::SqliteStore::open(dir.path().join("plain.db"))
        .await
        .expect("open");
    let before = crate::SqliteStore::set_done();
    let a = run_work!(&set, true);
    assert!(
        // 16: the twin's save among them (a session whose chunks several stored sessions
        // hold takes the lowest key's in the group as one by one).
        crate::SqliteStore::set_done() - before >= 16,
        "the set path did most batches: {} {a:#?}",
        crate::SqliteStore::set_done() - before
    );
    let b = run_work!(&plain, false);
    compare(&a, &b);
}

#[tokio::test]
async fn set_path_writes_what_one_after_another_writes_on_postgres() {
    let Ok(url) = std::env::var("RATH_TEST_POSTGRES_URL") else {
        assert!(
            std::env::var("RATH_CI").as_deref() != Ok("1"),
            "RATH_TEST_POSTGRES_URL is unset under RATH_CI=1"
        );
        eprintln!("skipped: RATH_TEST_POSTGRES_URL is unset (no PostgreSQL to test against)");
        return;
    };
    let tag = format!("group_set_{}", std::process::id());
    let (s1, s2) = (format!("{tag}_a"), format!("{tag}_b"));
    let set = crate::PgStore::connect_in(&url, Some(&s1))
        .await
        .expect("connect");
    let plain = crate::PgStore::connect_in(&url, Some(&s2))
        .await
        .expect("connect");
    let before = crate::PgStore::set_done();
    let a = run_work!(&set, true);
    assert!(
        crate::PgStore::set_done() - before >= 10,
        "the set path did most batches: {}",
        crate::PgStore::set_done() - before
    );
    let b = run_work!(&plain, false);
    let admin = sqlx::PgPool::connect(&url).await.expect("connect");
    for s in [&s1, &s2] {
        let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {s} CASCADE"))
            .execute(&admin)
            .await;
    }
    compare(&a, &b);
}
