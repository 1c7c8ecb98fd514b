//! `cargo xtask bench --server`: the agent server against Python OpenRath 2.0's server in
//! one sitting (issue 21): requests per second and latency percentiles of a session GET at
//! 1, 16 and 64 connections, load from `wrk` in a second process on loopback. Writes
//! `docs/bench-server.md`.
//!
//! Ours: rath-server in this process (a tokio runtime with two worker threads, one embedded
//! worker loop), on SQLite files, serving `GET /v1/sessions/{id}?limit=100` of a stored
//! session of 100 chunks (header, lineage, usage and all 100 chunks in the answer). Theirs:
//! `../shared/peers/openrath_runtime_bench.py --serve` (OpenRath 2.0's `AgentServer` under
//! uvicorn, SQLite), serving its `GET /v1/sessions/{id}` of a session whose run state holds
//! 100 chunk rows (what "a session of 100 chunks" is there; see the peers README). Both
//! answer with a key in `Authorization: Bearer`.

use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use rath_session::{Chunk, Session, Stamper};
use serde_json::Value;

/// Connection counts measured.
const CONNECTIONS: [usize; 3] = [1, 16, 64];

/// One wrk measurement.
#[derive(Clone, Debug)]
struct Load {
    connections: usize,
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    bytes_per_request: f64,
    errors: u64,
}

/// Kills the peer server however the bench ends.
struct Peer(Child);

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `"453.00us"` / `"1.23ms"` / `"2.00s"` → milliseconds.
fn wrk_ms(text: &str) -> Option<f64> {
    let t = text.trim();
    let (num, scale) = if let Some(v) = t.strip_suffix("us") {
        (v, 1e-3)
    } else if let Some(v) = t.strip_suffix("ms") {
        (v, 1.0)
    } else if let Some(v) = t.strip_suffix('s') {
        (v, 1e3)
    } else {
        return None;
    };
    num.parse::<f64>().ok().map(|v| v * scale)
}

/// `"12.34MB"` → bytes.
fn wrk_bytes(text: &str) -> Option<f64> {
    let t = text.trim();
    for (suffix, scale) in [
        ("GB", 1e9_f64),
        ("MB", 1048576.0),
        ("KB", 1024.0),
        ("B", 1.0),
    ] {
        if let Some(v) = t.strip_suffix(suffix) {
            return v.parse::<f64>().ok().map(|v| v * scale);
        }
    }
    None
}

fn parse_wrk(out: &str, connections: usize) -> Result<Load> {
    let mut rps = None;
    let mut transfer = None;
    let (mut p50, mut p99) = (None, None);
    let mut errors = 0;
    for line in out.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Requests/sec:", v] => rps = v.parse::<f64>().ok(),
            ["Transfer/sec:", v] => transfer = wrk_bytes(v),
            ["50%", v] => p50 = wrk_ms(v),
            ["99%", v] => p99 = wrk_ms(v),
            ["Non-2xx", "or", "3xx", "responses:", n] => errors += n.parse::<u64>().unwrap_or(0),
            ["Socket", "errors:", rest @ ..] => {
                errors += rest
                    .iter()
                    .filter_map(|w| w.trim_end_matches(',').parse::<u64>().ok())
                    .sum::<u64>()
            }
            _ => {}
        }
    }
    let rps = rps.context("wrk printed no Requests/sec")?;
    Ok(Load {
        connections,
        rps,
        p50_ms: p50.context("wrk printed no 50% latency")?,
        p99_ms: p99.context("wrk printed no 99% latency")?,
        bytes_per_request: transfer.map(|t| t / rps).unwrap_or(0.0),
        errors,
    })
}

/// A wrk script that prints the first answer of each thread that is not a 200 (status and
/// the start of its body), so an error rate comes with its cause.
const FIRST_ERROR_LUA: &str = r#"
local seen = false
response = function(status, headers, body)
  if status ~= 200 and not seen then
    seen = true
    io.write("first-error ", status, " ", string.sub(string.gsub(body, "%s+", " "), 1, 200), "\n")
  end
end
"#;

/// `wrk` at `connections` connections for `secs` against `url` with `auth`.
fn wrk(url: &str, auth: &str, connections: usize, secs: u64, script: &Path) -> Result<Load> {
    let threads = connections.clamp(1, 2);
    let out = Command::new("wrk")
        .args(["-t", &threads.to_string(), "-c", &connections.to_string()])
        .args(["-d", &format!("{secs}s"), "--latency"])
        .arg("-s")
        .arg(script)
        .args(["-H", &format!("Authorization: {auth}")])
        .arg(url)
        .stdin(Stdio::null())
        .output()
        .context("running wrk (apt-get install wrk)")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!("wrk failed: {text}{}", String::from_utf8_lossy(&out.stderr));
    }
    for line in text.lines().filter(|l| l.starts_with("first-error ")) {
        eprintln!("xtask bench --server: {url} c={connections}: {line}");
    }
    parse_wrk(&text, connections)
}

/// Starts the Python peer server; its serve-info JSON.
fn start_peer(dir: &Path) -> Result<(Peer, Value)> {
    let py = std::env::var_os("RATH_OPENRATH_PYTHON")
        .context("RATH_OPENRATH_PYTHON is not set (a venv with openrath[postgres]==2.0.0; see .ci/install.d/30-persist-python.sh)")?;
    let script = xtask::workspace_root().join("../shared/peers/openrath_runtime_bench.py");
    let info = dir.join("peer-info.json");
    let port = free_port()?;
    let child = Command::new(py)
        .arg(&script)
        .args(["--serve", &port.to_string()])
        .arg("--serve-info")
        .arg(&info)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the peer server")?;
    let peer = Peer(child);
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        // The peer writes its serve-info before uvicorn listens: wait for both.
        if let Ok(text) = std::fs::read_to_string(&info)
            && let Ok(v) = serde_json::from_str::<Value>(&text)
            && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        {
            return Ok((peer, v));
        }
        if Instant::now() > until {
            bail!("the peer server wrote no serve-info in 60 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Our server on SQLite files in `dir` with one stored session of 100 chunks owned by
/// tenant `bench`; the session's URL, the key, and the stop token.
async fn start_ours(dir: &Path) -> Result<(String, String, rath_flow::CancellationToken)> {
    let store = format!("sqlite:{}", dir.join("sessions.db").display());
    let runs = format!("sqlite:{}", dir.join("runs.db").display());
    let registry =
        rath_runtime::bundled::registry(&rath_runtime::bundled::BundledOptions::default());
    let server = rath_server::Server::connect(
        &store,
        &runs,
        registry,
        rath_server::ServerConfig::default(),
    )
    .await?;
    let mut session = Session::user_with("a session of 100 chunks", Stamper::seeded(7));
    for i in 1..100 {
        let text = format!(
            "chunk {i}: {}",
            "the quick brown fox jumps over the lazy dog ".repeat(2)
        );
        session = if i % 2 == 1 {
            session.push(Chunk::assistant_text(text))
        } else {
            session.push(Chunk::user(text))
        };
    }
    let sessions = rath_store_sql::open_store(&store).await?;
    sessions.save(&session).await?;
    server
        .db()
        .own_session("bench", session.id().as_str())
        .await?;
    let key = server
        .db()
        .create_key("bench", false, "bench")
        .await?
        .secret;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let stop = server.shutdown_token();
    tokio::spawn(server.serve(listener));
    Ok((
        format!("http://{addr}/v1/sessions/{}?limit=100", session.id()),
        key,
        stop,
    ))
}

/// Runs the workload and writes the page.
pub fn run(out: &Path, quick: bool) -> Result<()> {
    let secs = if quick { 2 } else { 10 };
    let tmp = tempfile::Builder::new()
        .prefix("rath-bench-server")
        .tempdir()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (url, key, stop) = rt.block_on(start_ours(tmp.path()))?;
    let (peer, info) = start_peer(tmp.path())?;
    let peer_url = info["get_session"]["url"]
        .as_str()
        .context("peer serve-info has no get_session.url")?
        .to_owned();
    let peer_auth = info["headers"]["Authorization"]
        .as_str()
        .context("peer serve-info has no Authorization header")?
        .to_owned();
    let auth = format!("Bearer {key}");
    let script = tmp.path().join("first-error.lua");
    std::fs::write(&script, FIRST_ERROR_LUA)?;
    let mut rows = Vec::new();
    for c in CONNECTIONS {
        // Theirs first, then ours, at each connection count.
        let theirs = wrk(&peer_url, &peer_auth, c, secs, &script)?;
        eprintln!(
            "xtask bench --server: peer c={c} {:.0} req/s p99 {:.2} ms",
            theirs.rps, theirs.p99_ms
        );
        let ours = wrk(&url, &auth, c, secs, &script)?;
        eprintln!(
            "xtask bench --server: ours c={c} {:.0} req/s p99 {:.2} ms",
            ours.rps, ours.p99_ms
        );
        rows.push((ours, theirs));
    }
    drop(peer);
    stop.cancel();
    let page = render(&rows, &info, secs);
    if let Some(d) = out.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(out, page).with_context(|| format!("writing {}", out.display()))?;
    eprintln!("xtask bench --server: wrote {}", out.display());
    Ok(())
}

fn render(rows: &[(Load, Load)], info: &Value, secs: u64) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# Agent server benchmarks (issue 21)\n");
    let _ = writeln!(
        md,
        "Generated by `cargo xtask bench --server`, both servers in one sitting on {} cores, \
         load from `wrk` ({secs} s per point, `--latency`) in a second process on loopback. \
         Ours: rath-server on SQLite, `GET /v1/sessions/{{id}}?limit=100` of a stored session \
         of 100 chunks (header, lineage, usage, all chunks). Peer: Python OpenRath {} \
         `AgentServer` under uvicorn {} on SQLite (`../shared/peers/openrath_runtime_bench.py \
         --serve`), `GET /v1/sessions/{{id}}` of a session whose run state holds 100 chunk \
         rows. Bytes per request are wrk's transfer over its request count.\n",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        info["versions"]["openrath"].as_str().unwrap_or("?"),
        info["versions"]["uvicorn"].as_str().unwrap_or("?"),
    );
    let _ = writeln!(md, "## GET a session\n");
    let _ = writeln!(
        md,
        "| connections | ours req/s | ours p50 ms | ours p99 ms | ours bytes/req | peer req/s | peer p50 ms | peer p99 ms | peer bytes/req | req/s ratio |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|");
    for (o, t) in rows {
        let _ = writeln!(
            md,
            "| {} | {:.0} | {:.2} | {:.2} | {:.0} | {:.0} | {:.2} | {:.2} | {:.0} | {:.1}× |",
            o.connections,
            o.rps,
            o.p50_ms,
            o.p99_ms,
            o.bytes_per_request,
            t.rps,
            t.p50_ms,
            t.p99_ms,
            t.bytes_per_request,
            o.rps / t.rps.max(1e-9)
        );
    }
    if let Some((o, t)) = rows.iter().find(|(o, _)| o.connections == 64) {
        let ratio = o.rps / t.rps.max(1e-9);
        let _ = writeln!(
            md,
            "\nGoal at 64 connections: ≥ 10× the peer's requests/s ({:.1}×: {}) and p99 ≤ 10 ms \
             ({:.2} ms: {}).",
            ratio,
            if ratio >= 10.0 { "met" } else { "missed" },
            o.p99_ms,
            if o.p99_ms <= 10.0 { "met" } else { "missed" }
        );
    }
    let errors: u64 = rows.iter().map(|(o, t)| o.errors + t.errors).sum();
    let _ = writeln!(
        md,
        "\nNon-2xx answers and socket errors over every point: {errors}.\n\nNot measured here \
         yet: create-and-wait of a run, and resident memory with 10⁴ sessions and 1,000 open \
         event streams.\n\nReproduce: `cargo run --release -p xtask -- bench --server` \
         (RATH_OPENRATH_PYTHON: a venv with `openrath[postgres]==2.0.0`; `wrk` from Debian)."
    );
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrk_output_is_read() {
        let out = "Running 2s test @ http://127.0.0.1:1/x\n  2 threads and 16 connections\n  Thread Stats   Avg      Stdev     Max   +/- Stdev\n    Latency   612.45us  201.10us   5.01ms   88.00%\n  Latency Distribution\n     50%  580.00us\n     75%  690.00us\n     90%  800.00us\n     99%    1.52ms\n  51234 requests in 2.00s, 612.34MB read\n  Non-2xx or 3xx responses: 3\nRequests/sec:  25617.00\nTransfer/sec:    306.17MB\n";
        let l = parse_wrk(out, 16).unwrap();
        assert_eq!(l.rps, 25617.0);
        assert!((l.p50_ms - 0.58).abs() < 1e-9);
        assert!((l.p99_ms - 1.52).abs() < 1e-9);
        assert_eq!(l.errors, 3);
        assert!((l.bytes_per_request - 306.17 * 1048576.0 / 25617.0).abs() < 1e-6);
    }
}
