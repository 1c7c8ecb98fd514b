//! `rath serve` as a process under the adversarial pass's load (issue 47, items 1 and 7): a
//! run whose input is 250,000 empty messages, then `history` calls with `limit: 1`, one and
//! then four at once. A call answers 31 MiB while its resident peak stays within
//! [`HISTORY_MIB`] of the idle server's (it took 1.7 GB), and once idle the server gives back
//! what the load took (it kept 4.5 GB for 30 s): its resident memory falls to within
//! [`SETTLED_MIB`] of what it was before the load.

use std::io::{BufRead as _, BufReader};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const MESSAGES: usize = 250_000;

/// How far above its resident memory before the load an idle server may settle, MiB: its
/// caches (SQLite's pages, the stores' remembered sessions) and the allocator's retained
/// pages. Without giving memory back it stayed about 200 MiB above.
const SETTLED_MIB: f64 = 100.0;

/// How far above the idle server's resident memory one `history` call may peak, MiB.
const HISTORY_MIB: f64 = 50.0;

/// `field` (`VmRSS:`, `VmHWM:`) of process `pid`, MiB.
fn status_mib(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Resident memory of process `pid` now, MiB.
fn rss_mib(pid: u32) -> Option<f64> {
    status_mib(pid, "VmRSS:")
}

/// Starts process `pid`'s resident peak (`VmHWM`) again from its resident memory now.
fn reset_peak(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// Waits until process `pid` holds at most `limit` MiB; what it holds then, and how long
/// that took. The wait is a guard of minutes against memory never given back, not a
/// measurement.
fn settle(pid: u32, limit: f64, what: &str) -> (f64, Duration) {
    let since = Instant::now();
    loop {
        let now = rss_mib(pid).unwrap();
        if now <= limit {
            return (now, since.elapsed());
        }
        assert!(
            since.elapsed() < Duration::from_secs(120),
            "{what}: an idle server still holds {now:.0} MiB (at most {limit:.0} expected)"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[path = "common/run.rs"]
mod run;
#[path = "common/served.rs"]
mod served;
use run::rath;
use served::{serve, served_at};

/// POSTs `body` and reads the answer in pieces: its status and size, and the answer itself
/// when `keep`.
fn post(addr: &str, path: &str, key: &str, body: &Value, keep: bool) -> (u16, usize, Vec<u8>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut r = reqwest::Client::new()
            .post(format!("http://{addr}{path}"))
            .bearer_auth(key)
            .json(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let (mut size, mut kept) = (0, Vec::new());
        while let Some(b) = r.chunk().await.unwrap() {
            size += b.len();
            if keep {
                kept.extend_from_slice(&b);
            }
        }
        (status, size, kept)
    })
}

/// Kills the server if the test fails before it stops it.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn an_idle_server_gives_back_what_a_large_history_took() {
    if rss_mib(std::process::id()).is_none() {
        rath_testkit::skip("serve memory: needs Linux /proc/<pid>/status");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let runs = format!("sqlite:{}", dir.path().join("runs.db").display());
    let (code, out, err) = rath(&["keys", "create", "--runs", &runs, "--tenant", "t"]);
    assert_eq!(code, 0, "{err}");
    let key = out.lines().next().unwrap().to_owned();
    let mut child = Killed(serve(dir.path(), &[]));
    let pid = child.0.id();
    let mut lines = BufReader::new(child.0.stderr.take().unwrap()).lines();
    let addr = served_at(&mut lines);
    // Drain the server's log so it never blocks on a full pipe.
    let logs = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());

    let (status, _, thread) = post(&addr, "/threads", &key, &json!({}), true);
    assert_eq!(status, 200);
    let thread: Value = serde_json::from_slice(&thread).unwrap();
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    let before = rss_mib(pid).unwrap();
    eprintln!("serve memory: {before:.0} MiB before the load; running {MESSAGES} messages");
    if !reset_peak(pid) {
        rath_testkit::skip("serve memory: cannot reset the server's peak (clear_refs)");
        return;
    }
    let input = json!({"assistant_id": "team", "input": {"messages": vec![""; MESSAGES]}});
    let (status, _, _) = post(
        &addr,
        &format!("/threads/{tid}/runs/wait"),
        &key,
        &input,
        false,
    );
    assert_eq!(status, 200);
    let run_peak = status_mib(pid, "VmHWM:").unwrap();
    eprintln!("serve memory: the run peaked at {run_peak:.0} MiB");
    let (idle, after_run) = settle(pid, before + SETTLED_MIB, "after the run");

    // One call, read whole: every message of the run, and the answer.
    assert!(reset_peak(pid));
    let idle = idle.max(rss_mib(pid).unwrap());
    let path = format!("/threads/{tid}/history");
    let (status, size, answer) = post(&addr, &path, &key, &json!({"limit": 1}), true);
    assert_eq!(status, 200);
    let one_peak = status_mib(pid, "VmHWM:").unwrap();
    let states: Value = serde_json::from_slice(&answer).unwrap();
    let messages = states[0]["values"]["messages"].as_array().unwrap().len();
    assert!(
        messages > MESSAGES,
        "the input and the team's turns: {messages}"
    );
    drop((answer, states));
    assert!(
        one_peak - idle < HISTORY_MIB,
        "one history call of {:.1} MiB peaked {:.0} MiB above the idle server",
        size as f64 / 1048576.0,
        one_peak - idle
    );

    // Four at once, then idle again.
    assert!(reset_peak(pid));
    let calls: Vec<_> = (0..4)
        .map(|_| {
            let (addr, key, path) = (addr.clone(), key.clone(), path.clone());
            std::thread::spawn(move || post(&addr, &path, &key, &json!({"limit": 1}), false))
        })
        .collect();
    for c in calls {
        let (status, n, _) = c.join().unwrap();
        assert_eq!((status, n), (200, size));
    }
    let four_peak = status_mib(pid, "VmHWM:").unwrap();
    let (settled, after_four) = settle(pid, before + SETTLED_MIB, "after four histories");
    println!(
        "rss before the load {before:.0} MiB; the run peaked at {run_peak:.0} MiB, idle \
         {idle:.0} MiB {:.1} s after it; one history of {:.1} MiB peaked {:.0} MiB above \
         that, four at once {:.0} MiB above; idle {settled:.0} MiB {:.1} s after them",
        after_run.as_secs_f64(),
        size as f64 / 1048576.0,
        one_peak - idle,
        four_peak - idle,
        after_four.as_secs_f64()
    );
    // SAFETY: kill(2) on a child we spawned and have not reaped; no memory effects.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let status = child.0.wait().unwrap();
    assert!(status.success(), "{status:?}: {:?}", logs.join().unwrap());
}
