//! `cargo xtask bench --server`: the agent server against Python OpenRath 2.0's server in
//! one sitting (issue 21), load from a second process on loopback:
//!
//! - GET of a stored session of 100 chunks at 1, 16 and 64 connections (`wrk`, installed
//!   with apt-get when missing and root);
//! - create-and-wait of a run of a one-turn scripted agent at 1, 16 and 64 connections (a
//!   closed-loop client: this binary re-run as a child, [`child_main`]); ours uses its wait
//!   endpoint, the peer (no such endpoint) is polled every 5 ms;
//! - resident memory of our server with 10^4 idle sessions and 1,000 open SSE streams (the
//!   server in a process of its own, [`memory_main`]; the streams held by a client child).
//!
//! [`measure`] returns [`ServerResults`], [`render`] makes a markdown section of it,
//! [`goal_rows`] one row per goal of the issue, and [`run`] writes `docs/bench-server.md`.
//! Ours runs in this process (a tokio runtime of two threads) on SQLite files; theirs is
//! `../shared/peers/openrath_runtime_bench.py --serve --steps 1` (OpenRath 2.0's
//! `AgentServer` under uvicorn, SQLite). Both answer with a key in `Authorization: Bearer`.

use std::fmt::Write as _;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use rath_session::{Chunk, Session, Stamper};
use serde_json::Value;

/// Connection counts measured.
const CONNECTIONS: [usize; 3] = [1, 16, 64];

/// One load measurement at one connection count (wrk's, or the closed-loop client's).
#[derive(Clone, Debug)]
pub struct Load {
    /// Concurrent connections.
    pub connections: usize,
    /// Requests (GET) or completed runs (create-and-wait) per second.
    pub rps: f64,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 99th percentile latency, ms.
    pub p99_ms: f64,
    /// Bytes read per request (GET only; 0 elsewhere).
    pub bytes_per_request: f64,
    /// Non-2xx answers, socket errors and runs that did not succeed.
    pub errors: u64,
}

/// Ours and the peer at one connection count.
#[derive(Clone, Debug)]
pub struct Point {
    /// Concurrent connections.
    pub connections: usize,
    /// rath-server.
    pub ours: Load,
    /// Python OpenRath 2.0's server.
    pub peer: Load,
}

/// Resident memory of our server process.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Memory {
    /// Sessions created in a fresh store.
    pub sessions: usize,
    /// Resident bytes with the empty store.
    pub empty_rss: u64,
    /// Resident bytes with `sessions` stored.
    pub sessions_rss: u64,
    /// Event streams asked for.
    pub streams: usize,
    /// Event streams open when measured (each had its first event).
    pub streams_open: usize,
    /// Resident bytes before the streams opened.
    pub streams_before_rss: u64,
    /// Resident bytes with the streams open.
    pub streams_rss: u64,
    /// Server CPU seconds per second while the streams were open and idle.
    pub streams_idle_cpu: f64,
}

impl Memory {
    /// Resident bytes per stored session over the empty store.
    pub fn per_session(&self) -> f64 {
        self.sessions_rss.saturating_sub(self.empty_rss) as f64 / self.sessions.max(1) as f64
    }
    /// Resident bytes per open event stream.
    pub fn per_stream(&self) -> f64 {
        self.streams_rss.saturating_sub(self.streams_before_rss) as f64
            / self.streams_open.max(1) as f64
    }
}

/// Everything one sitting of `bench --server` measured.
#[derive(Clone, Debug)]
pub struct ServerResults {
    /// The quick variant (2 s per point, 10^3 sessions, 100 streams).
    pub quick: bool,
    /// Seconds per load point.
    pub secs: u64,
    /// Cores of the machine.
    pub cores: usize,
    /// `/proc/loadavg` after the sitting.
    pub load_avg: String,
    /// The peer's OpenRath version.
    pub openrath: String,
    /// The peer's uvicorn version.
    pub uvicorn: String,
    /// GET of a 100-chunk session at each connection count.
    pub get: Vec<Point>,
    /// Create-and-wait of a one-turn run at each connection count.
    pub create_wait: Vec<Point>,
    /// Our server's resident memory.
    pub memory: Memory,
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
        .context("running wrk")?;
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
        .args(["--serve", &port.to_string(), "--steps", "1"])
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

/// The one-turn scripted agent of the create-and-wait workload.
const ONE_TURN: &str = "one-turn v1: one agent, one scripted text reply";

/// Our server, started in this process.
struct Ours {
    base: String,
    session_url: String,
    key: String,
    stop: rath_flow::CancellationToken,
}

/// Our server on SQLite files in `dir` (`workers` embedded worker loops polling every
/// 5 ms; with none, the default 50 ms poll of waits and streams) with
/// one stored session of 100 chunks owned by tenant `bench` when `seed`.
async fn start_ours(dir: &Path, workers: usize, seed: bool) -> Result<Ours> {
    let store = format!("sqlite:{}", dir.join("sessions.db").display());
    let runs = format!("sqlite:{}", dir.join("runs.db").display());
    let registry =
        rath_runtime::bundled::registry(&rath_runtime::bundled::BundledOptions::default())
            .register("one-turn", ONE_TURN, || {
                let model = rath_provider::ScriptedProvider::new(vec![
                    rath_provider::ScriptedResponse::text("done"),
                ]);
                let agent = rath_flow::Agent::new("agent", "Answer.", model);
                Ok(std::sync::Arc::new(agent) as rath_flow::SharedWorkflow)
            });
    let config = rath_server::ServerConfig {
        workers,
        poll: if workers > 0 {
            Duration::from_millis(5)
        } else {
            rath_server::ServerConfig::default().poll
        },
        ..rath_server::ServerConfig::default()
    };
    let server = rath_server::Server::connect(&store, &runs, registry, config).await?;
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
    if seed {
        let sessions = rath_store_sql::open_store(&store).await?;
        sessions.save(&session).await?;
        server
            .db()
            .own_session("bench", session.id().as_str())
            .await?;
    }
    let key = server
        .db()
        .create_key("bench", false, "bench")
        .await?
        .secret;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let stop = server.shutdown_token();
    tokio::spawn(server.serve(listener));
    Ok(Ours {
        base: format!("http://{addr}"),
        session_url: format!("http://{addr}/v1/sessions/{}?limit=100", session.id()),
        key,
        stop,
    })
}

/// `wrk` on PATH, installed with apt-get when missing and this is root (issue 24).
fn ensure_wrk() -> Result<()> {
    let found = Command::new("wrk")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if found {
        return Ok(());
    }
    if unsafe { libc::geteuid() } != 0 {
        bail!("wrk is not on PATH: install the Debian package `wrk` (apt-get install -y wrk)");
    }
    eprintln!("xtask bench --server: wrk is missing; apt-get install -y wrk");
    let ok = Command::new("apt-get")
        .args(["install", "-y", "wrk"])
        .stdin(Stdio::null())
        .status()
        .context("running apt-get install -y wrk")?
        .success();
    if !ok {
        bail!("apt-get install -y wrk failed: install the Debian package `wrk`");
    }
    Ok(())
}

/// Raises this process's open-file limit to its hard limit.
fn raise_nofile() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// Resident bytes of this process.
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// CPU seconds (user + system) this process used so far.
fn cpu_secs() -> f64 {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills a valid rusage struct.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 * 1e-6;
    t(u.ru_utime) + t(u.ru_stime)
}

// ------------------------------------------------------------------ the client child

/// The environment variable that makes `xtask` the load client (a JSON [`ClientSpec`]).
const CLIENT_ENV: &str = "RATH_BENCH_SERVER_CLIENT";

/// What the client child does.
#[derive(serde::Serialize, serde::Deserialize)]
struct ClientSpec {
    /// `ours` / `peer` (create-and-wait), `sessions` (create sessions), `streams`.
    mode: String,
    /// `127.0.0.1:port`.
    addr: String,
    /// The Authorization header value.
    auth: String,
    connections: usize,
    secs: f64,
    /// Peer: one session per connection. Sessions / streams: how many.
    sessions: Vec<String>,
    count: usize,
}

/// One HTTP/1.1 connection with keep-alive (Content-Length or chunked answers).
struct Conn {
    r: BufReader<TcpStream>,
    host: String,
    auth: String,
}

impl Conn {
    fn open(addr: &str, auth: &str) -> Result<Conn> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        Ok(Conn {
            r: BufReader::new(s),
            host: addr.to_owned(),
            auth: auth.to_owned(),
        })
    }

    fn send(&mut self, method: &str, path: &str, body: Option<&str>) -> Result<()> {
        let b = body.unwrap_or("");
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
            self.host,
            self.auth,
            b.len()
        );
        self.r.get_mut().write_all(req.as_bytes())?;
        Ok(())
    }

    /// Status and headers (lower-cased names).
    fn head(&mut self) -> Result<(u16, Vec<(String, String)>)> {
        let mut line = String::new();
        self.r.read_line(&mut line)?;
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("bad status line {line:?}"))?;
        let mut headers = Vec::new();
        loop {
            line.clear();
            if self.r.read_line(&mut line)? == 0 {
                bail!("connection closed in headers");
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
            }
        }
        Ok((status, headers))
    }

    fn call(&mut self, method: &str, path: &str, body: Option<&str>) -> Result<(u16, Value)> {
        self.send(method, path, body)?;
        let (status, headers) = self.head()?;
        let get = |k: &str| {
            headers
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.as_str())
        };
        let mut buf = Vec::new();
        if let Some(n) = get("content-length") {
            buf.resize(n.parse()?, 0);
            self.r.read_exact(&mut buf)?;
        } else if get("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
            let mut line = String::new();
            loop {
                line.clear();
                self.r.read_line(&mut line)?;
                let n = usize::from_str_radix(line.trim(), 16)?;
                let mut chunk = vec![0; n + 2];
                self.r.read_exact(&mut chunk)?;
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
        } else {
            bail!("an answer with neither Content-Length nor chunks");
        }
        Ok((status, serde_json::from_slice(&buf).unwrap_or(Value::Null)))
    }
}

/// One create-and-wait of ours: create, then our wait endpoint. True when it succeeded.
fn ours_run(c: &mut Conn) -> Result<bool> {
    let (s, v) = c.call(
        "POST",
        "/v1/runs",
        Some(r#"{"workflow":"one-turn","input":"hello"}"#),
    )?;
    if s != 201 {
        return Ok(false);
    }
    let id = v["id"].as_str().context("no run id")?.to_owned();
    let (s, v) = c.call("POST", &format!("/v1/runs/{id}/wait"), None)?;
    Ok(s == 200 && v["run"]["status"] == "succeeded")
}

/// One create-and-wait of the peer's: create on the connection's session, then poll the
/// run every 5 ms (it has no wait endpoint).
fn peer_run(c: &mut Conn, session: &str) -> Result<bool> {
    let (s, v) = c.call(
        "POST",
        &format!("/v1/sessions/{session}/runs"),
        Some(r#"{"assistant_id":"bench","state":{}}"#),
    )?;
    if s != 201 {
        return Ok(false);
    }
    let id = v["id"].as_str().context("no run id")?.to_owned();
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let (s, v) = c.call("GET", &format!("/v1/runs/{id}"), None)?;
        let status = v["status"].as_str().unwrap_or("");
        if s != 200 || matches!(status, "failed" | "cancelled" | "timed_out") {
            return Ok(false);
        }
        if status == "succeeded" {
            return Ok(true);
        }
        if Instant::now() > until {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// Closed loop: each connection creates and waits runs back to back for `secs`.
fn client_runs(spec: &ClientSpec) -> Result<Value> {
    let stop = Instant::now() + Duration::from_secs_f64(spec.secs);
    let start = Instant::now();
    let handles: Vec<_> = (0..spec.connections)
        .map(|i| {
            let addr = spec.addr.clone();
            let auth = spec.auth.clone();
            let mode = spec.mode.clone();
            let session = spec.sessions.get(i).cloned().unwrap_or_default();
            std::thread::spawn(move || -> Result<(Vec<f64>, u64)> {
                let mut c = Conn::open(&addr, &auth)?;
                let (mut lat, mut errors) = (Vec::new(), 0);
                while Instant::now() < stop {
                    let t = Instant::now();
                    let ok = if mode == "ours" {
                        ours_run(&mut c)
                    } else {
                        peer_run(&mut c, &session)
                    };
                    match ok {
                        Ok(true) => lat.push(t.elapsed().as_secs_f64() * 1e3),
                        Ok(false) => errors += 1,
                        Err(_) => {
                            errors += 1;
                            c = Conn::open(&addr, &auth)?;
                        }
                    }
                }
                Ok((lat, errors))
            })
        })
        .collect();
    let (mut lat, mut errors) = (Vec::new(), 0);
    for h in handles {
        let (l, e) = h
            .join()
            .map_err(|_| anyhow::anyhow!("a client thread panicked"))??;
        lat.extend(l);
        errors += e;
    }
    let secs = start.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    Ok(serde_json::json!({
        "runs": lat.len(), "secs": secs, "errors": errors,
        "p50_ms": percentile(&lat, 0.5), "p99_ms": percentile(&lat, 0.99),
    }))
}

/// Creates `count` sessions with `connections` connections.
fn client_sessions(spec: &ClientSpec) -> Result<Value> {
    let per = spec.count.div_ceil(spec.connections.max(1));
    let handles: Vec<_> = (0..spec.connections)
        .map(|i| {
            let (addr, auth) = (spec.addr.clone(), spec.auth.clone());
            let n = per.min(spec.count.saturating_sub(i * per));
            std::thread::spawn(move || -> Result<u64> {
                let mut c = Conn::open(&addr, &auth)?;
                let mut errors = 0;
                for k in 0..n {
                    let body = format!(r#"{{"input":"idle session {i}-{k}"}}"#);
                    if c.call("POST", "/v1/sessions", Some(&body))?.0 != 201 {
                        errors += 1;
                    }
                }
                Ok(errors)
            })
        })
        .collect();
    let mut errors = 0;
    for h in handles {
        errors += h
            .join()
            .map_err(|_| anyhow::anyhow!("a client thread panicked"))??;
    }
    Ok(serde_json::json!({"errors": errors}))
}

/// Creates `count` runs (no worker takes them: they stay queued), says `created`, waits
/// for a line on stdin, opens one event stream per run and reads its first event, says
/// `open <n>`, and holds them until stdin closes.
fn client_streams(spec: &ClientSpec) -> Result<Value> {
    raise_nofile();
    let mut c = Conn::open(&spec.addr, &spec.auth)?;
    let mut ids = Vec::new();
    for _ in 0..spec.count {
        let (s, v) = c.call(
            "POST",
            "/v1/runs",
            Some(r#"{"workflow":"one-turn","input":"held"}"#),
        )?;
        if s == 201 {
            ids.push(v["id"].as_str().unwrap_or_default().to_owned());
        }
    }
    println!("created {}", ids.len());
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    let mut open = Vec::new();
    for id in &ids {
        let Ok(mut c) = Conn::open(&spec.addr, &spec.auth) else {
            continue;
        };
        if c.send("GET", &format!("/v1/runs/{id}/events"), None)
            .is_err()
        {
            continue;
        }
        let Ok((200, _)) = c.head() else { continue };
        // The first event (the run's `queued` status) ends with a blank line.
        let mut got = String::new();
        let mut ok = false;
        while c.r.read_line(&mut got).unwrap_or(0) > 0 {
            if got.ends_with("\n\n") && got.contains("data:") {
                ok = true;
                break;
            }
        }
        if ok {
            open.push(c);
        }
    }
    println!("open {}", open.len());
    line.clear();
    let _ = std::io::stdin().read_line(&mut line);
    drop(open);
    Ok(serde_json::json!({"open": 0}))
}

/// Set to `<connections>[:<seconds>[:<repeats>]]` to measure only our create-and-wait
/// load at that many connections (no peer, no page): what a profiler attaches to.
pub const PROFILE_ENV: &str = "RATH_BENCH_SERVER_PROFILE";

/// When [`PROFILE_ENV`] is set: our create-and-wait points, printed to stderr.
pub fn profile_main() -> Option<std::process::ExitCode> {
    let spec = std::env::var(PROFILE_ENV).ok()?;
    let mut it = spec.split(':');
    let connections: usize = it.next().and_then(|s| s.parse().ok()).unwrap_or(16);
    let secs: f64 = it.next().and_then(|s| s.parse().ok()).unwrap_or(5.0);
    let reps: usize = it.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    let go = || -> Result<()> {
        let tmp = tempfile::Builder::new()
            .prefix("rath-bench-server")
            .tempdir()?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .on_thread_park(crate::alloc::on_park)
            .worker_threads(2)
            .enable_all()
            .build()?;
        let ours = rt.block_on(start_ours(tmp.path(), 2, false))?;
        for _ in 0..reps {
            let load = run_load(&ClientSpec {
                mode: "ours".into(),
                addr: addr_of(&ours.base),
                auth: format!("Bearer {}", ours.key),
                connections,
                secs,
                sessions: Vec::new(),
                count: 0,
            })?;
            eprintln!(
                "create-and-wait c={connections}: {:.0} runs/s p50 {:.2} ms p99 {:.2} ms errors {}",
                load.rps, load.p50_ms, load.p99_ms, load.errors
            );
        }
        ours.stop.cancel();
        Ok(())
    };
    Some(crate::bench::child_exit("bench profile", go()))
}

/// When this process is the bench's load client, its exit code.
pub fn child_main() -> Option<std::process::ExitCode> {
    let spec = std::env::var(CLIENT_ENV).ok()?;
    let go = || -> Result<Value> {
        let spec: ClientSpec = serde_json::from_str(&spec)?;
        match spec.mode.as_str() {
            "ours" | "peer" => client_runs(&spec),
            "sessions" => client_sessions(&spec),
            "streams" => client_streams(&spec),
            other => bail!("unknown client mode {other}"),
        }
    };
    Some(crate::bench::child_exit(
        "bench client",
        go().map(|v| println!("{v}")),
    ))
}

fn client(spec: &ClientSpec) -> Result<Child> {
    Command::new(std::env::current_exe()?)
        .env(CLIENT_ENV, serde_json::to_string(spec)?)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting the bench client")
}

/// Runs a client child to its end; its last stdout line as JSON.
fn client_done(spec: &ClientSpec) -> Result<Value> {
    let out = client(spec)?.wait_with_output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("the bench client failed: {text}");
    }
    Ok(serde_json::from_str(text.lines().last().unwrap_or(""))?)
}

fn addr_of(url: &str) -> String {
    url.trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or("")
        .to_owned()
}

fn run_load(spec: &ClientSpec) -> Result<Load> {
    let v = client_done(spec)?;
    let n = v["runs"].as_f64().unwrap_or(0.0);
    Ok(Load {
        connections: spec.connections,
        rps: n / v["secs"].as_f64().unwrap_or(1.0).max(1e-9),
        p50_ms: v["p50_ms"].as_f64().unwrap_or(0.0),
        p99_ms: v["p99_ms"].as_f64().unwrap_or(0.0),
        bytes_per_request: 0.0,
        errors: v["errors"].as_u64().unwrap_or(0),
    })
}

/// Set (to `<sessions>:<streams>`) in the child process [`memory`] measures.
const MEMORY_ENV: &str = "RATH_BENCH_SERVER_MEMORY";

/// Memory of a fresh server of ours, no workers: empty, with `sessions` created, then with
/// `streams` open event streams. The server runs in a child process of its own, so the
/// loads measured before leave nothing in the heap it is read from, and with mimalloc told
/// to return freed pages at once (`MIMALLOC_PURGE_DELAY=0`), so its resident size is what
/// the server holds, not what the allocator keeps cached for later.
fn memory(sessions: usize, streams: usize) -> Result<Memory> {
    let out = Command::new(std::env::current_exe()?)
        .env(MEMORY_ENV, format!("{sessions}:{streams}"))
        .env("MIMALLOC_PURGE_DELAY", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .context("starting the memory bench's server process")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("the memory bench's server process failed: {text}");
    }
    Ok(serde_json::from_str(text.lines().last().unwrap_or(""))?)
}

/// When this process is [`memory`]'s server process, its exit code (the measure, as JSON
/// on stdout).
pub fn memory_main() -> Option<std::process::ExitCode> {
    let spec = std::env::var(MEMORY_ENV).ok()?;
    let go = || -> Result<Memory> {
        let (sessions, streams) = spec
            .split_once(':')
            .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
            .with_context(|| format!("{MEMORY_ENV}={spec:?} is not <sessions>:<streams>"))?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .on_thread_park(crate::alloc::on_park)
            .worker_threads(2)
            .enable_all()
            .build()?;
        measure_memory(&rt, sessions, streams)
    };
    Some(crate::bench::child_exit(
        "bench memory",
        go().and_then(|m| {
            println!("{}", serde_json::to_string(&m)?);
            Ok(())
        }),
    ))
}

/// [`memory`], in the server's process.
fn measure_memory(rt: &tokio::runtime::Runtime, sessions: usize, streams: usize) -> Result<Memory> {
    raise_nofile();
    let dir = tempfile::Builder::new()
        .prefix("rath-bench-mem")
        .tempdir()?;
    let ours = rt.block_on(start_ours(dir.path(), 0, false))?;
    let spec = |mode: &str, count: usize| ClientSpec {
        mode: mode.into(),
        addr: addr_of(&ours.base),
        auth: format!("Bearer {}", ours.key),
        connections: 8,
        secs: 0.0,
        sessions: Vec::new(),
        count,
    };
    // Warm: one of each request the measure makes.
    client_done(&spec("sessions", 8))?;
    std::thread::sleep(Duration::from_millis(300));
    let empty_rss = rss();
    client_done(&spec("sessions", sessions))?;
    std::thread::sleep(Duration::from_millis(300));
    let sessions_rss = rss();
    let mut child = client(&spec("streams", streams))?;
    let mut out = BufReader::new(child.stdout.take().context("client stdout")?);
    let mut stdin = child.stdin.take().context("client stdin")?;
    let mut line = String::new();
    out.read_line(&mut line)?;
    std::thread::sleep(Duration::from_millis(300));
    let streams_before_rss = rss();
    writeln!(stdin, "go")?;
    line.clear();
    out.read_line(&mut line)?;
    let streams_open = line
        .trim()
        .strip_prefix("open ")
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("the streams client said {line:?}"))?;
    std::thread::sleep(Duration::from_millis(500));
    let streams_rss = rss();
    let (c0, t0) = (cpu_secs(), Instant::now());
    std::thread::sleep(Duration::from_secs(3));
    let streams_idle_cpu = (cpu_secs() - c0) / t0.elapsed().as_secs_f64();
    drop(stdin);
    let _ = child.wait();
    ours.stop.cancel();
    Ok(Memory {
        sessions,
        empty_rss,
        sessions_rss,
        streams,
        streams_open,
        streams_before_rss,
        streams_rss,
        streams_idle_cpu,
    })
}

/// Measures every server workload, ours and the peer's, in one sitting.
pub fn measure(quick: bool) -> Result<ServerResults> {
    ensure_wrk()?;
    let secs = if quick { 2 } else { 10 };
    let tmp = tempfile::Builder::new()
        .prefix("rath-bench-server")
        .tempdir()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .on_thread_park(crate::alloc::on_park)
        .worker_threads(2)
        .enable_all()
        .build()?;
    // The GET server has no workers (nothing polls the queue while it is measured).
    let ours = rt.block_on(start_ours(tmp.path(), 0, true))?;
    let (peer, info) = start_peer(tmp.path())?;
    let peer_url = info["get_session"]["url"]
        .as_str()
        .context("peer serve-info has no get_session.url")?
        .to_owned();
    let peer_auth = info["headers"]["Authorization"]
        .as_str()
        .context("peer serve-info has no Authorization header")?
        .to_owned();
    let pool: Vec<String> = info["run_sessions"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let auth = format!("Bearer {}", ours.key);
    let script = tmp.path().join("first-error.lua");
    std::fs::write(&script, FIRST_ERROR_LUA)?;
    let mut get = Vec::new();
    for c in CONNECTIONS {
        // Theirs first, then ours, at each connection count.
        let peer = wrk(&peer_url, &peer_auth, c, secs, &script)?;
        let ours = wrk(&ours.session_url, &auth, c, secs, &script)?;
        eprintln!(
            "xtask bench --server: GET c={c}: ours {:.0} req/s p99 {:.2} ms, peer {:.0} req/s p99 {:.2} ms",
            ours.rps, ours.p99_ms, peer.rps, peer.p99_ms
        );
        get.push(Point {
            connections: c,
            ours,
            peer,
        });
    }
    ours.stop.cancel();
    let runs_dir = tmp.path().join("runs");
    std::fs::create_dir_all(&runs_dir)?;
    let ours = rt.block_on(start_ours(&runs_dir, 2, false))?;
    let auth = format!("Bearer {}", ours.key);
    let mut create_wait = Vec::new();
    for c in CONNECTIONS {
        let spec = |mode: &str, addr: String, auth: &str| ClientSpec {
            mode: mode.into(),
            addr,
            auth: auth.to_owned(),
            connections: c,
            secs: secs as f64,
            sessions: pool.clone(),
            count: 0,
        };
        let peer = run_load(&spec("peer", addr_of(&peer_url), &peer_auth))?;
        let ours = run_load(&spec("ours", addr_of(&ours.base), &auth))?;
        eprintln!(
            "xtask bench --server: create-and-wait c={c}: ours {:.0} runs/s p99 {:.2} ms, peer {:.0} runs/s p99 {:.2} ms",
            ours.rps, ours.p99_ms, peer.rps, peer.p99_ms
        );
        create_wait.push(Point {
            connections: c,
            ours,
            peer,
        });
    }
    drop(peer);
    ours.stop.cancel();
    let (sessions, streams) = if quick { (1_000, 100) } else { (10_000, 1_000) };
    let memory = memory(sessions, streams)?;
    eprintln!(
        "xtask bench --server: memory: {:.0} B per session, {:.0} B per stream ({} open)",
        memory.per_session(),
        memory.per_stream(),
        memory.streams_open
    );
    Ok(ServerResults {
        quick,
        secs,
        cores: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        load_avg: std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
            .to_owned(),
        openrath: info["versions"]["openrath"]
            .as_str()
            .unwrap_or("?")
            .to_owned(),
        uvicorn: info["versions"]["uvicorn"]
            .as_str()
            .unwrap_or("?")
            .to_owned(),
        get,
        create_wait,
        memory,
    })
}

/// The detail page `docs/bench-server.md` of results `r` (the same tables as the server
/// section of `docs/benchmarks.md`, which writes it beside itself).
pub fn page(r: &ServerResults) -> String {
    format!(
        "# Agent server benchmarks (issue 21)\n\n{}\nReproduce: `cargo run --release -p xtask -- bench --server` \
         (RATH_OPENRATH_PYTHON: a venv with `openrath[postgres,server]==2.0.0`; `wrk` from Debian, \
         installed by the bench when missing).\n",
        render(r)
    )
}

/// Runs the workload and writes the page.
pub fn run(out: &Path, quick: bool) -> Result<()> {
    let r = measure(quick)?;
    if let Some(d) = out.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(out, page(&r)).with_context(|| format!("writing {}", out.display()))?;
    eprintln!("xtask bench --server: wrote {}", out.display());
    Ok(())
}

fn at64(points: &[Point]) -> Option<&Point> {
    points.iter().find(|p| p.connections == 64)
}

/// One row per goal of issue 21's benchmarks (the lead's summary, issue 24, reads them).
pub(crate) fn goal_rows(r: &ServerResults) -> Vec<crate::bench::GoalRow> {
    let row = |goal: &str, measured: String, met: Option<bool>, why: Option<String>| {
        crate::bench::GoalRow {
            workload: "server".into(),
            goal: goal.into(),
            measured,
            met,
            why,
        }
    };
    let mut rows = Vec::new();
    match at64(&r.get) {
        Some(p) => {
            let ratio = p.ours.rps / p.peer.rps.max(1e-9);
            rows.push(row(
                "GET a 100-chunk session, req/s vs Python OpenRath at 64 connections (≥ 10×)",
                format!("{ratio:.1}×"),
                Some(ratio >= 10.0),
                (ratio < 10.0).then(|| "below 10×: see the GET table".to_owned()),
            ));
            let met = p.ours.p99_ms <= 10.0;
            rows.push(row(
                "GET a 100-chunk session, p99 at 64 connections (≤ 10 ms)",
                format!("{:.2} ms", p.ours.p99_ms),
                Some(met),
                (!met).then(|| {
                    format!(
                        "at {:.0} req/s on 2 cores shared with wrk, 64 connections wait {:.1} ms each by \
                         Little's law; a cached GET is one coalesced revision read and a copy of \
                         the rendered bytes, so what is left is queueing for the cores (see the \
                         latency chart and the load average)",
                        p.ours.rps,
                        64.0 / p.ours.rps.max(1e-9) * 1e3
                    )
                }),
            ));
        }
        None => rows.push(row(
            "GET a 100-chunk session at 64 connections",
            "not measured".into(),
            None,
            None,
        )),
    }
    // create-and-wait and memory have no goal: their figures are in the section's tables,
    // not in the page's summary of goals.
    rows
}

fn table(md: &mut String, points: &[Point], unit: &str, bytes: bool) {
    let b = if bytes { " ours bytes/req |" } else { "" };
    let pb = if bytes { " peer bytes/req |" } else { "" };
    let _ = writeln!(
        md,
        "| connections | ours {unit} | ours p50 ms | ours p99 ms |{b} peer {unit} | peer p50 ms | peer p99 ms |{pb} ratio |"
    );
    let cols = if bytes { 10 } else { 8 };
    let _ = writeln!(md, "|{}", "---|".repeat(cols));
    for p in points {
        let (o, t) = (&p.ours, &p.peer);
        let ob = if bytes {
            format!(" {:.0} |", o.bytes_per_request)
        } else {
            String::new()
        };
        let tb = if bytes {
            format!(" {:.0} |", t.bytes_per_request)
        } else {
            String::new()
        };
        let _ = writeln!(
            md,
            "| {} | {:.0} | {:.2} | {:.2} |{ob} {:.0} | {:.2} | {:.2} |{tb} {:.1}× |",
            o.connections,
            o.rps,
            o.p50_ms,
            o.p99_ms,
            t.rps,
            t.p50_ms,
            t.p99_ms,
            o.rps / t.rps.max(1e-9)
        );
    }
}

/// The results as a markdown section (`###` headings and lower).
pub fn render(r: &ServerResults) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "Generated by `cargo xtask bench --server`{}, both servers in one sitting on {} cores \
         (load average after: {}), load from a second process on loopback ({} s per point). \
         Ours: rath-server on SQLite, in the bench process (a tokio runtime of two threads; for \
         the runs, two embedded worker loops polling the queue every 5 ms). Peer: Python OpenRath {} `AgentServer` \
         under uvicorn {} on SQLite (`../shared/peers/openrath_runtime_bench.py --serve \
         --steps 1`, its embedded worker).\n",
        if r.quick { " --quick" } else { "" },
        r.cores,
        r.load_avg,
        r.secs,
        r.openrath,
        r.uvicorn
    );
    let _ = writeln!(md, "### GET a session of 100 chunks\n");
    let _ = writeln!(
        md,
        "`wrk --latency`. Ours: `GET /v1/sessions/{{id}}?limit=100` (header, lineage, usage, all \
         100 chunks), served from the render cache after one read of the session's revision. \
         Peer: `GET /v1/sessions/{{id}}` of a session whose run state holds 100 chunk rows. \
         Bytes per request: wrk's transfer over its request count.\n"
    );
    table(&mut md, &r.get, "req/s", true);
    if let Some(p) = at64(&r.get) {
        let ratio = p.ours.rps / p.peer.rps.max(1e-9);
        let _ = writeln!(
            md,
            "\nGoal at 64 connections: ≥ 10× the peer's requests/s ({ratio:.1}×: {}) and p99 ≤ \
             10 ms ({:.2} ms: {}).\n",
            if ratio >= 10.0 { "met" } else { "missed" },
            p.ours.p99_ms,
            if p.ours.p99_ms <= 10.0 {
                "met"
            } else {
                "missed"
            }
        );
    }
    let _ = writeln!(
        md,
        "### Create and wait for a run of a one-turn scripted agent\n"
    );
    let _ = writeln!(
        md,
        "A closed-loop client (a child process of xtask, one keep-alive connection per \
         client). Ours: `POST /v1/runs` of `one-turn` (one agent, one scripted text reply), \
         then `POST /v1/runs/{{id}}/wait`. Peer: it has no create-and-wait endpoint, so \
         `POST /v1/sessions/{{sid}}/runs` on the connection's own session (one active run per \
         session) of its one-step workflow, then `GET /v1/runs/{{id}}` every 5 ms until \
         `succeeded`. Rate: completed runs per second; latency: create to final answer.\n"
    );
    table(&mut md, &r.create_wait, "runs/s", false);
    let m = &r.memory;
    let _ = writeln!(md, "\n### Memory of the server process\n");
    let _ = writeln!(
        md,
        "A fresh server of ours on empty SQLite files, no workers, default 50 ms poll (an \
         idle stream reads the run's events every 0.5 s without a notification), in a process of \
         its own started for this measure (resident bytes of that process, `VmRSS`; mimalloc \
         told to return freed pages at once, `MIMALLOC_PURGE_DELAY=0`, so the figure is what \
         the server holds rather than what the allocator caches). Sessions: {} created through \
         `POST /v1/sessions` by a client process, then idle. Streams: {} runs queued (no \
         worker takes them), then one `GET /v1/runs/{{id}}/events` per run from a client \
         process, each held open after its first event.\n",
        m.sessions, m.streams
    );
    let mib = |b: u64| b as f64 / 1048576.0;
    let _ = writeln!(md, "| measure | value |\n|---|---|");
    let _ = writeln!(
        md,
        "| resident, empty store | {:.1} MiB |",
        mib(m.empty_rss)
    );
    let _ = writeln!(
        md,
        "| resident, {} sessions | {:.1} MiB |",
        m.sessions,
        mib(m.sessions_rss)
    );
    let _ = writeln!(md, "| per idle session | {:.0} B |", m.per_session());
    let _ = writeln!(
        md,
        "| resident, {} streams open (of {}) | {:.1} MiB (before: {:.1} MiB) |",
        m.streams_open,
        m.streams,
        mib(m.streams_rss),
        mib(m.streams_before_rss)
    );
    let _ = writeln!(md, "| per open stream | {:.0} B |", m.per_stream());
    let _ = writeln!(
        md,
        "| server CPU with the streams open and idle | {:.0}% of a core |",
        m.streams_idle_cpu * 100.0
    );
    let errors: u64 = r
        .get
        .iter()
        .chain(&r.create_wait)
        .map(|p| p.ours.errors + p.peer.errors)
        .sum();
    let _ = writeln!(
        md,
        "\nNon-2xx answers, socket errors and runs that did not succeed, over every point: {errors}."
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
