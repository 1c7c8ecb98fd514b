//! The symlink-swap race: a command inside the sandbox keeps swapping the workspace entry `d`
//! between a real directory and symlinks (absolute and relative) to a host-only directory,
//! while the host dispatches reads, writes, listings and existence checks of `d/...` through
//! the file tools. No read may return the host file, no listing may show the host directory,
//! and no write may land in it. Runs for `RACE_SECS` per backend (`local`, and `isolated`
//! where bubblewrap runs; under `RATH_CI=1` a missing bubblewrap fails).

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{isolated_or_skip, open, root_of, run};
use rath_backend::local::LocalBackend;
use rath_backend::{Backend, CodePayload, Output, Payload};

const RACE_SECS: u64 = 10;
const SECRET: &str = "HOST-ONLY-SECRET-0b7e";
const MARKER: &str = "host_only_marker";

/// What the host side saw.
#[derive(Default, Debug)]
struct Tally {
    attempts: u64,
    reads_ok: u64,
    writes_ok: u64,
    refused: u64,
    escapes: Vec<String>,
}

fn swapper(abs: &str, rel: Option<&str>, secs: u64) -> String {
    let rel = rel.map_or("None".to_owned(), |r| format!("{r:?}"));
    format!(
        r#"import os, time
os.mkdir('real')
with open('real/host_secret.txt', 'w') as f:
    f.write('inside')
os.symlink({abs:?}, 'abs')
links = ['abs']
if {rel} is not None:
    os.symlink({rel}, 'rel')
    links.append('rel')
end = time.monotonic() + {secs}
swaps = 0
aside = 0
def swap(name):
    global swaps, aside
    try:
        os.rename(name, 'd')
    except OSError:
        # The host created `d` (a write's missing parent) meanwhile: move it aside.
        aside += 1
        try:
            os.rename('d', 'aside%d' % aside)
        except OSError:
            pass
        return
    os.rename('d', name)
    swaps += 1
while time.monotonic() < end:
    for link in links:
        swap('real')
        swap(link)
print(swaps)
"#
    )
}

async fn hammer(
    b: Arc<dyn Backend>,
    h: rath_session::SandboxHandle,
    done: Arc<AtomicBool>,
    lane: u64,
) -> Tally {
    let mut t = Tally::default();
    let mut i = 0u64;
    while !done.load(Ordering::SeqCst) {
        i += 1;
        t.attempts += 1;
        let p = match i % 5 {
            0 => Payload::read("d/host_secret.txt"),
            1 => Payload::write("d/host_secret.txt", "overwritten"),
            2 => Payload::write(format!("d/new_{lane}_{}.txt", i % 64), "x"),
            3 => Payload::list("d"),
            _ => Payload::exists(format!("d/{MARKER}")),
        };
        match run(&b, &h, p.clone()).await {
            Ok(Output::FileContent(c)) => {
                if String::from_utf8_lossy(&c).contains(SECRET) {
                    t.escapes
                        .push(format!("{} returned the host secret", p.summary()));
                }
                t.reads_ok += 1;
            }
            Ok(Output::Listing(entries)) => {
                if entries.iter().any(|e| e.name == MARKER) {
                    t.escapes.push("list d showed the host directory".into());
                }
            }
            Ok(Output::Exists(true)) => {
                t.escapes
                    .push(format!("exists d/{MARKER} saw the host directory"));
            }
            Ok(Output::FileWritten { .. }) => t.writes_ok += 1,
            Ok(_) => {}
            Err(_) => t.refused += 1,
        }
    }
    t
}

async fn race(b: Arc<dyn Backend>) {
    let host = tempfile::Builder::new()
        .prefix("rath-host-only-")
        .tempdir()
        .unwrap();
    let host_dir = std::fs::canonicalize(host.path()).unwrap();
    std::fs::write(host_dir.join("host_secret.txt"), SECRET).unwrap();
    std::fs::write(host_dir.join(MARKER), "").unwrap();
    let h = open(&b).await;
    let root = root_of(&h);
    // A relative link too, when both live in the same parent (the usual temp dir).
    let rel = (root.parent() == host_dir.parent())
        .then(|| format!("../{}", host_dir.file_name().unwrap().to_string_lossy()));
    let code = swapper(&host_dir.to_string_lossy(), rel.as_deref(), RACE_SECS);
    let done = Arc::new(AtomicBool::new(false));
    let swap = {
        let (b, h, done) = (b.clone(), h.clone(), done.clone());
        tokio::spawn(async move {
            let out = run(&b, &h, Payload::Code(CodePayload::python(code))).await;
            done.store(true, Ordering::SeqCst);
            out
        })
    };
    // Let the swapper set up before hammering.
    for _ in 0..200 {
        if root.join("abs").exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let lanes: Vec<_> = (0..2)
        .map(|lane| tokio::spawn(hammer(b.clone(), h.clone(), done.clone(), lane)))
        .collect();
    let mut total = Tally::default();
    for lane in lanes {
        let t = lane.await.unwrap();
        total.attempts += t.attempts;
        total.reads_ok += t.reads_ok;
        total.writes_ok += t.writes_ok;
        total.refused += t.refused;
        total.escapes.extend(t.escapes);
    }
    let swaps = match swap.await.unwrap() {
        Ok(Output::Code(o)) => {
            assert!(o.error.is_none(), "swapper failed: {o:?}");
            o.stdout.trim().parse::<u64>().expect("swap count")
        }
        other => panic!("swapper: {other:?}"),
    };
    eprintln!(
        "{}: {swaps} swaps, {} host dispatches ({} reads ok, {} writes ok, {} refused), {} escapes",
        b.name(),
        total.attempts,
        total.reads_ok,
        total.writes_ok,
        total.refused,
        total.escapes.len()
    );
    assert!(
        total.escapes.is_empty(),
        "{}: {:?}",
        b.name(),
        total.escapes
    );
    let left: BTreeSet<String> = std::fs::read_dir(&host_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        left,
        BTreeSet::from(["host_secret.txt".to_owned(), MARKER.to_owned()]),
        "{}: a write landed in the host directory",
        b.name()
    );
    assert_eq!(
        std::fs::read_to_string(host_dir.join("host_secret.txt")).unwrap(),
        SECRET
    );
    // The race was real: the swapper swapped, and the host saw `d` both as the real
    // directory (reads and writes that worked) and as something refused.
    assert!(swaps >= 1000, "{}: only {swaps} swaps", b.name());
    assert!(total.attempts >= 1000, "{}: {total:?}", b.name());
    assert!(
        total.reads_ok > 0 && total.writes_ok > 0 && total.refused > 0,
        "{}: {total:?}",
        b.name()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn local_file_tools_survive_a_symlink_swap_race() {
    race(Arc::new(LocalBackend::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn isolated_file_tools_survive_a_symlink_swap_race() {
    let Some(b) = isolated_or_skip("isolated") else {
        return;
    };
    race(b).await;
}
