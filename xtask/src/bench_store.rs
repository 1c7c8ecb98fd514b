//! The store workload of `cargo xtask bench` (issue 19), also runnable alone with
//! `cargo xtask bench --only store`:
//!
//! 1. **Growth vs LangGraph.** `../shared/peers/langgraph_checkpoint_bench.py` runs
//!    LangGraph's Postgres checkpointer for a 500-turn conversation (default durability,
//!    `durability=exit`, the beta `DeltaChannel`); then, on the same PostgreSQL in the same
//!    sitting, our PostgreSQL store runs the same workload (`crates/rath-store-sql/benches/
//!    growth.rs`, built in release): one loop round per turn (the
//!    user message, then the assistant message, the very texts the peer's generator makes)
//!    appended to one session. A second variant keeps every turn addressable, as LangGraph's
//!    checkpoints are: each turn is a new session, a fork of the previous turn's plus its two
//!    chunks. Measured at turns 10, 100, 500: summed `pg_total_relation_size` of every table
//!    of the store's schema, rows, logical row bytes, and the median time of the last 10 turns.
//!    SQLite runs the same two variants (file bytes after a WAL checkpoint, `dbstat` pages).
//! 2. **Fork bytes.** A fork of a persisted session of 10³–10⁶ chunks, saved: the rows and
//!    logical bytes it adds per table (deterministic: counted, not sampled), on SQLite and
//!    PostgreSQL, next to the bytes the JSONL directory writes for the same fork.
//! 3. **Times** from divan (`crates/rath-store-sql/benches/store.rs`): load of a 10⁴-chunk
//!    session from JSONL, SQLite and PostgreSQL, and fork time at 10³–10⁶ chunks.
//!
//! PostgreSQL parts need `RATH_TEST_POSTGRES_URL`, the peer `RATH_LANGGRAPH_PYTHON` (the venv
//! `.ci/install.d/65-langgraph-peer.sh` makes); a part whose prerequisite is absent is shown
//! as not measured, with the reason. Schemas used: `rath_bench_langgraph` (the peer's) and
//! `rath_bench_store` (ours), dropped before and after.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::Value;

use crate::bench::{fmt_ns, run_divan};

/// The peer's schema.
const PEER_SCHEMA: &str = "rath_bench_langgraph";
/// Sizes of a run: turns and the turns measured, fork sizes.
#[derive(Clone, Debug)]
struct Plan {
    turns: u64,
    /// Turns measured (the curves' points).
    report_at: Vec<u64>,
    /// Turns shown in the tables.
    table_at: Vec<u64>,
    fork_sizes: Vec<usize>,
}

impl Plan {
    fn new(quick: bool) -> Self {
        if quick {
            Plan {
                turns: 100,
                report_at: vec![10, 25, 50, 75, 100],
                table_at: vec![10, 50, 100],
                fork_sizes: vec![1_000, 10_000, 100_000],
            }
        } else {
            Plan {
                turns: 500,
                report_at: vec![10, 50, 100, 200, 300, 400, 500],
                table_at: vec![10, 100, 500],
                fork_sizes: vec![1_000, 10_000, 100_000, 1_000_000],
            }
        }
    }
}

fn csv<T: ToString>(xs: &[T]) -> String {
    xs.iter().map(T::to_string).collect::<Vec<_>>().join(",")
}

/// One measured point of a growth series.
#[derive(Clone, Debug, Default)]
struct Point {
    turn: u64,
    bytes: u64,
    rows: u64,
    payload: u64,
    turn_ns: f64,
    /// SQLite only: page bytes by `dbstat` (when the build has it).
    pages: Option<u64>,
}

/// A growth series: who, how, and its points (or why it was not measured).
#[derive(Clone, Debug)]
struct Series {
    label: String,
    points: Vec<Point>,
    missing: Option<String>,
}

impl Series {
    fn missing(label: &str, why: impl std::fmt::Display) -> Self {
        Series {
            label: label.to_owned(),
            points: Vec::new(),
            missing: Some(why.to_string()),
        }
    }

    fn at(&self, turn: u64) -> Option<&Point> {
        self.points.iter().find(|p| p.turn == turn)
    }
}

// ------------------------------------------------------------------------------ the peer

/// Runs a growth script (`script` under `py`, with `--turns` and `--report-at` from the plan,
/// then `args`) and returns its `points`, each read by `point`.
fn run_growth_script(
    py: &Path,
    script: &Path,
    plan: &Plan,
    args: &[std::ffi::OsString],
    point: impl Fn(&Value) -> Point,
) -> Result<Vec<Point>> {
    let name = script.file_name().map_or_else(
        || script.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    if !script.exists() {
        bail!("{} not found", script.display());
    }
    eprintln!(
        "xtask bench: {name} {}",
        args.join(" ".as_ref()).to_string_lossy()
    );
    let out = Command::new(py)
        .arg(script)
        .args(["--turns", &plan.turns.to_string()])
        .args(["--report-at", &csv(&plan.report_at)])
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {name}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("{name} failed ({}):\n{text}", out.status);
    }
    let v: Value =
        serde_json::from_str(text.trim()).with_context(|| format!("{name} printed no JSON"))?;
    Ok(v["points"]
        .as_array()
        .ok_or_else(|| anyhow!("{name} printed no points"))?
        .iter()
        .map(point)
        .collect())
}

fn os_args(args: &[&str]) -> Vec<std::ffi::OsString> {
    args.iter().map(Into::into).collect()
}

fn run_peer(py: &Path, dsn: &str, plan: &Plan, extra: &[&str]) -> Result<Vec<Point>> {
    let script = xtask::shared_dir().join("peers/langgraph_checkpoint_bench.py");
    let mut args = os_args(&["--dsn", dsn, "--schema", PEER_SCHEMA]);
    args.extend(os_args(extra));
    run_growth_script(py, &script, plan, &args, |p| {
        let rows = p["rows"]
            .as_object()
            .map_or(0, |m| m.values().filter_map(Value::as_u64).sum());
        script_point(p, rows, p["payload_bytes"].as_u64().unwrap_or(0))
    })
}

fn peer_versions(py: &Path) -> String {
    let probe = "import importlib.metadata as m; print(' '.join(f'{n} {m.version(n)}' for n in \
                 ('langgraph', 'langgraph-checkpoint', 'langgraph-checkpoint-postgres')))";
    Command::new(py)
        .args(["-c", probe])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(
            || "versions unknown".to_owned(),
            |o| String::from_utf8_lossy(&o.stdout).trim().to_owned(),
        )
}

/// Python OpenRath's JSONL store on the same conversation (`xtask/py/openrath_jsonl_growth.py`,
/// under `RATH_OPENRATH_PYTHON`): the main line alone, and with a branch every 10 turns.
fn jsonl_peer_series(plan: &Plan) -> Vec<Series> {
    let variants: [(&str, &[&str]); 2] = [
        ("Python OpenRath 2.0, JSONL", &[]),
        (
            "Python OpenRath 2.0, JSONL, a branch every 10 turns",
            &["--fork-every", "10"],
        ),
    ];
    let Some(py) = env("RATH_OPENRATH_PYTHON") else {
        return variants
            .iter()
            .map(|v| {
                Series::missing(
                    v.0,
                    "RATH_OPENRATH_PYTHON is not set (.ci/install.d/30-persist-python.sh)",
                )
            })
            .collect();
    };
    variants
        .iter()
        .map(
            |(label, extra)| match run_jsonl_peer(Path::new(&py), plan, extra) {
                Ok(points) => Series {
                    label: (*label).to_owned(),
                    points,
                    missing: None,
                },
                Err(e) => Series::missing(label, format!("{e:#}")),
            },
        )
        .collect()
}

fn run_jsonl_peer(py: &Path, plan: &Plan, extra: &[&str]) -> Result<Vec<Point>> {
    let script = xtask::workspace_root().join("xtask/py/openrath_jsonl_growth.py");
    let dir = tempfile::tempdir().context("a directory for the JSONL peer")?;
    let mut args = vec!["--dir".into(), dir.path().join("sessions").into_os_string()];
    args.extend(os_args(extra));
    run_growth_script(py, &script, plan, &args, |p| {
        let files = p["files"].as_u64().unwrap_or(0);
        script_point(p, files, p["bytes"].as_u64().unwrap_or(0))
    })
}

/// A point of a peer script's growth curve (`turn`, `bytes`, `turn_ms_median`), with the
/// rows and logical bytes each script counts its own way.
fn script_point(p: &Value, rows: u64, payload: u64) -> Point {
    Point {
        turn: p["turn"].as_u64().unwrap_or(0),
        bytes: p["bytes"].as_u64().unwrap_or(0),
        rows,
        payload,
        turn_ns: p["turn_ms_median"].as_f64().unwrap_or(0.0) * 1e6,
        pages: None,
    }
}

// ------------------------------------------------------------------------------ ours

/// What saving one fork added: rows and logical bytes (summed over the tables).
#[derive(Clone, Copy, Debug, Default)]
struct ForkBytes {
    rows: u64,
    bytes: u64,
}

type ForkRow = (u64, ForkBytes, Option<ForkBytes>, ForkBytes);

fn series_label(store: &str, mode: &str) -> String {
    let store = if store == "postgres" {
        "PostgreSQL"
    } else {
        "SQLite"
    };
    let mode = match mode {
        "append" => "a loop round appended per turn",
        "fork_every_10" => "appended, a branch every 10 turns",
        _ => "a session per turn (fork + round)",
    };
    format!("openrath {store}, {mode}")
}

fn parse_point(p: &Value) -> Point {
    let u = |k: &str| p[k].as_u64().unwrap_or(0);
    Point {
        turn: u("turn"),
        bytes: u("bytes"),
        rows: u("rows"),
        payload: u("payload_bytes"),
        turn_ns: p["turn_ns_median"].as_f64().unwrap_or(0.0),
        pages: p["page_bytes"].as_u64(),
    }
}

fn parse_fork(v: &Value) -> Option<ForkBytes> {
    Some(ForkBytes {
        rows: v.get("rows")?.as_u64()?,
        bytes: v.get("bytes")?.as_u64()?,
    })
}

/// Our series on PostgreSQL and SQLite, the fork rows, and the raw message bytes.
type Growth = (Vec<Series>, Vec<Series>, Vec<ForkRow>, u64);

/// Runs `benches/growth.rs` (release) and splits its series by store.
fn run_growth(root: &Path, plan: &Plan) -> Result<Growth> {
    eprintln!("xtask bench: cargo bench -p rath-store-sql --bench growth");
    let out = crate::bench::bench_command(root, "rath-store-sql", "growth")
        .args(["--turns", &plan.turns.to_string()])
        .args(["--report-at", &csv(&plan.report_at)])
        .args(["--fork-sizes", &csv(&plan.fork_sizes)])
        .stderr(Stdio::inherit())
        .output()
        .context("running the growth bench")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("the growth bench failed ({}):\n{text}", out.status);
    }
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or("");
    let v: Value = serde_json::from_str(line).context("growth bench output is not JSON")?;
    let (mut pg, mut sqlite) = (Vec::new(), Vec::new());
    for s in v["series"].as_array().into_iter().flatten() {
        let store = s["store"].as_str().unwrap_or("");
        let label = series_label(store, s["mode"].as_str().unwrap_or(""));
        let series = match s["missing"].as_str() {
            Some(why) => Series::missing(&label, why),
            None => Series {
                label,
                points: s["points"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(parse_point)
                    .collect(),
                missing: None,
            },
        };
        if store == "postgres" {
            pg.push(series)
        } else {
            sqlite.push(series)
        }
    }
    let forks = v["forks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| {
            Some((
                f["chunks"].as_u64()?,
                parse_fork(&f["sqlite"])?,
                parse_fork(&f["postgres"]),
                parse_fork(&f["jsonl"])?,
            ))
        })
        .collect();
    Ok((
        pg,
        sqlite,
        forks,
        v["raw_message_bytes"].as_u64().unwrap_or(0),
    ))
}

// ------------------------------------------------------------------------------ running

/// Everything the store workload measured.
pub struct StoreResults {
    plan: Plan,
    raw_bytes: u64,
    peer_versions: String,
    pg: Vec<Series>,
    sqlite: Vec<Series>,
    /// Python OpenRath's JSONL store (rows: files).
    files: Vec<Series>,
    forks: Vec<ForkRow>,
    divan: Result<BTreeMap<String, f64>, String>,
    load_before: String,
    load_after: String,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn peer_series(plan: &Plan, pg_url: Option<&str>) -> (String, Vec<Series>) {
    let variants: [(&str, &[&str]); 4] = [
        ("LangGraph, default durability", &[]),
        ("LangGraph, durability=exit", &["--durability", "exit"]),
        ("LangGraph, DeltaChannel (beta)", &["--channel", "delta"]),
        (
            "LangGraph, default, a fork every 10 turns",
            &["--fork-every", "10"],
        ),
    ];
    let (py, url) = match (env("RATH_LANGGRAPH_PYTHON"), pg_url) {
        (Some(py), Some(url)) => (PathBuf::from(py), url),
        (_, url) => {
            let why = if url.is_none() {
                "RATH_TEST_POSTGRES_URL is not set"
            } else {
                "RATH_LANGGRAPH_PYTHON is not set (.ci/install.d/65-langgraph-peer.sh)"
            };
            let all = variants.iter().map(|v| Series::missing(v.0, why)).collect();
            return ("not run".to_owned(), all);
        }
    };
    let series = variants
        .iter()
        .map(|(label, extra)| match run_peer(&py, url, plan, extra) {
            Ok(points) => Series {
                label: (*label).to_owned(),
                points,
                missing: None,
            },
            Err(e) => Series::missing(label, format!("{e:#}")),
        })
        .collect();
    (peer_versions(&py), series)
}

/// Runs the store workload: the peer, then ours (growth and fork bytes), then the divan
/// benches, one after the other in this sitting.
pub fn run(root: &Path, quick: bool) -> Result<StoreResults> {
    let plan = Plan::new(quick);
    let load_before = crate::bench::loadavg();
    let pg_url = env("RATH_TEST_POSTGRES_URL");
    let (peer_versions, mut pg) = peer_series(&plan, pg_url.as_deref());
    let (ours_pg, sqlite, forks, raw_bytes) = run_growth(root, &plan)?;
    pg.extend(ours_pg);
    let files = jsonl_peer_series(&plan);
    let divan =
        run_divan(root, "rath-store-sql", "store", &[], quick).map_err(|e| format!("{e:#}"));
    Ok(StoreResults {
        plan,
        raw_bytes,
        peer_versions,
        pg,
        sqlite,
        files,
        forks,
        divan,
        load_before,
        load_after: crate::bench::loadavg(),
    })
}

// ------------------------------------------------------------------------------ the page

fn kb(b: u64) -> String {
    if b >= 1_000_000 {
        format!("{:.2} MB", b as f64 / 1e6)
    } else {
        format!("{:.1} kB", b as f64 / 1e3)
    }
}

fn growth_table(md: &mut String, series: &[Series], pages: bool, table_at: &[u64]) {
    let _ = writeln!(
        md,
        "| store | turn | bytes | rows | logical bytes |{} ms per turn (median of last 10) |",
        if pages { " dbstat page bytes |" } else { "" }
    );
    let _ = writeln!(
        md,
        "| --- | --- | --- | --- | --- |{} --- |",
        if pages { " --- |" } else { "" }
    );
    for s in series {
        if let Some(why) = &s.missing {
            let _ = writeln!(
                md,
                "| {} | — | not measured: {why} | | |{} |",
                s.label,
                if pages { " |" } else { "" }
            );
            continue;
        }
        for p in s.points.iter().filter(|p| table_at.contains(&p.turn)) {
            let page = match (pages, p.pages) {
                (false, _) => String::new(),
                (true, Some(b)) => format!(" {} |", kb(b)),
                (true, None) => " — |".to_owned(),
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} |{page} {:.2} |",
                s.label,
                p.turn,
                kb(p.bytes),
                p.rows,
                kb(p.payload),
                p.turn_ns / 1e6
            );
        }
    }
}

struct Goal {
    what: String,
    shown: String,
    met: Option<bool>,
}

fn goals(r: &StoreResults) -> Vec<Goal> {
    let last = r.plan.turns;
    let find = |label: &str| r.pg.iter().find(|s| s.label.starts_with(label));
    let ours = find("openrath PostgreSQL, a loop round").and_then(|s| s.at(last));
    let ours_bytes = ours.map(|p| p.bytes as f64);
    let mut out = Vec::new();
    for (label, goal) in [
        ("LangGraph, default durability", 50.0),
        ("LangGraph, DeltaChannel", 5.0),
    ] {
        let theirs = find(label).and_then(|s| s.at(last)).map(|p| p.bytes as f64);
        let ratio = theirs.zip(ours_bytes).map(|(t, o)| t / o);
        out.push(Goal {
            what: format!("{label} bytes ÷ ours, turn {last} (≥ {goal}×)"),
            shown: ratio.map_or("—".into(), |v| format!("{v:.1}×")),
            met: ratio.map(|v| v >= goal),
        });
    }
    let raw = r.raw_bytes as f64;
    let ratio = ours_bytes.map(|o| o / raw);
    out.push(Goal {
        what: format!(
            "ours ÷ raw message bytes ({}), turn {last} (≤ 3×)",
            kb(raw as u64)
        ),
        shown: ratio.map_or("—".into(), |v| format!("{v:.2}×")),
        met: ratio.map(|v| v <= 3.0),
    });
    let first = find("openrath PostgreSQL, a loop round").and_then(|s| s.at(10));
    let flat = first.zip(ours).map(|(a, b)| b.turn_ns / a.turn_ns);
    out.push(Goal {
        what: format!("ours, ms per turn at turn {last} ÷ at turn 10 (≤ 2×)"),
        shown: flat.map_or("—".into(), |v| format!("{v:.2}×")),
        met: flat.map(|v| v <= 2.0),
    });
    let load = |k: &str| r.divan.as_ref().ok().and_then(|m| m.get(k).copied());
    let jsonl = load("load_jsonl/10000");
    for (name, key) in [
        ("SQLite", "load_sqlite/10000"),
        ("PostgreSQL", "load_postgres/10000"),
    ] {
        let ratio = load(key).zip(jsonl).map(|(s, j)| s / j);
        out.push(Goal {
            what: format!("load of a 10⁴-chunk session, {name} ÷ JSONL (≤ 3×)"),
            shown: ratio.map_or("—".into(), |v| format!("{v:.2}×")),
            met: ratio.map(|v| v <= 3.0),
        });
    }
    out
}

/// The store goals for the page's summary (issue 24's table: bytes vs LangGraph and the raw
/// messages, per-turn flatness; issue 19's load goals).
pub(crate) fn goal_rows(r: &StoreResults) -> Vec<crate::bench::GoalRow> {
    goals(r)
        .into_iter()
        .map(|g| {
            let why = (g.met == Some(false)).then(|| miss_reason(&g.what).to_owned());
            crate::bench::GoalRow {
                workload: "store".to_owned(),
                goal: g.what,
                measured: g.shown,
                met: g.met,
                why,
            }
        })
        .collect()
}

/// Why a store goal is missed, from the profile of issue 19's work.
fn miss_reason(goal: &str) -> &'static str {
    if goal.contains("raw message bytes") {
        "each write is a segment row (a tuple header, an index entry, its documents deflated) \
         and the empty schema (the tables' heaps, free-space maps, TOAST tables and indexes) \
         is about 150 kB: see docs/formats.md, SQL stores"
    } else if goal.contains("load") {
        "a load reads a row per segment, inflates it and parses the documents in one pass; \
         a miss means many small segments (a session grown by many appends) or \
         a slow inflate"
    } else if goal.contains("per turn") {
        "the per-turn time grows with the session's index depth; see the table"
    } else {
        "see the table above"
    }
}

/// The store section of `docs/benchmarks.md`.
pub fn render(r: &StoreResults, quick: bool) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "## Session stores vs LangGraph's Postgres checkpointer (issue 19)\n\n\
         Generated by `cargo xtask bench{} --only store` (or the full run). Load average \
         before/after this workload: {} / {}. Peer: {}. A conversation of {} turns, one user \
         message (100 bytes) and one assistant message (200 bytes) per turn, the texts of the \
         peer's generator (`../shared/peers/langgraph_checkpoint_bench.py`); raw message bytes \
         {}. Both on the same PostgreSQL in this sitting; bytes are the summed \
         `pg_total_relation_size` of every table of the store's schema (heap, TOAST, indexes), \
         logical bytes the stored values (LangGraph: its `payload_bytes`, before compression; \
         ours: `pg_column_size` of the rows, whose segments hold deflated documents).\n",
        if quick { " --quick" } else { "" },
        r.load_before,
        r.load_after,
        r.peer_versions,
        r.plan.turns,
        kb(r.raw_bytes),
    );
    let _ = writeln!(
        md,
        "![store bytes vs turns]({CHART_FILE})\n\nEvery series at turns {}; the tables show \
         turns {}.\n",
        csv(&r.plan.report_at),
        csv(&r.plan.table_at)
    );
    growth_table(&mut md, &r.pg, false, &r.plan.table_at);
    let _ = writeln!(
        md,
        "\n### Goals\n\n| goal | measured | met |\n| --- | --- | --- |"
    );
    for g in goals(r) {
        let met = crate::bench::met_cell(g.met);
        let _ = writeln!(md, "| {} | {} | {met} |", g.what, g.shown);
    }
    let _ = writeln!(
        md,
        "\n### SQLite, same workload\n\nBytes: the file after `PRAGMA wal_checkpoint(TRUNCATE)`; \
         logical bytes: the stored values' lengths (`SqliteStore::table_stats`).\n"
    );
    growth_table(&mut md, &r.sqlite, true, &r.plan.table_at);
    render_files(&mut md, r);
    render_forks(&mut md, r);
    render_times(&mut md, r);
    md
}

fn render_files(md: &mut String, r: &StoreResults) {
    let _ = writeln!(
        md,
        "\n### Python OpenRath's JSONL store, same workload\n\nOne `SessionWriter` for the \
         thread, its two chunks written (and flushed) per turn; a branch is `Session.fork()` \
         plus one user message, written whole as a file of its own \
         (`xtask/py/openrath_jsonl_growth.py`). Bytes: every file of the store directory. \
         Time: the two `write_chunk` calls of a turn.\n\n\
         | store | turn | bytes | files | ÷ raw message bytes | ms per turn (median of last 10) |\n\
         | --- | --- | --- | --- | --- | --- |"
    );
    for s in &r.files {
        if let Some(why) = &s.missing {
            let _ = writeln!(md, "| {} | — | not measured: {why} | | | |", s.label);
            continue;
        }
        for p in s
            .points
            .iter()
            .filter(|p| r.plan.table_at.contains(&p.turn))
        {
            let raw = raw_bytes_until(p.turn) as f64;
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {:.2}× | {:.3} |",
                s.label,
                p.turn,
                kb(p.bytes),
                p.rows,
                p.bytes as f64 / raw,
                p.turn_ns / 1e6
            );
        }
    }
}

/// Raw message bytes of the first `turns` turns (100 + 200 per turn, the generator's sizes).
fn raw_bytes_until(turns: u64) -> u64 {
    turns * 300
}

/// Store bytes vs turns, every series of the workload (ours solid, the peers dashed), as SVG.
pub fn chart(r: &StoreResults) -> String {
    let mut series = Vec::new();
    let groups = [
        (&r.pg, " (PostgreSQL)"),
        (&r.sqlite, " (SQLite)"),
        (&r.files, ""),
    ];
    for (group, suffix) in groups {
        for s in group.iter().filter(|s| s.missing.is_none()) {
            let ours = s.label.starts_with("openrath");
            let label = if ours {
                s.label.clone()
            } else {
                format!("{}{suffix}", s.label)
            };
            let points = s
                .points
                .iter()
                .map(|p| (p.turn as f64, p.bytes as f64))
                .collect();
            let color = crate::chart::COLORS[series.len() % crate::chart::COLORS.len()];
            series.push(if ours {
                crate::chart::Series::solid(label, color, points)
            } else {
                crate::chart::Series::dashed(label, color, points)
            });
        }
    }
    series.push(crate::chart::Series::dashed(
        "raw message bytes",
        "#000000",
        r.plan
            .report_at
            .iter()
            .map(|t| (*t as f64, raw_bytes_until(*t) as f64))
            .collect(),
    ));
    crate::chart::render(&crate::chart::Chart {
        title: "Store bytes vs turns (solid: openrath; dashed: peers)",
        x_label: "turns (a checkpoint per turn)",
        y_label: "bytes on disk",
        x_log: false,
        y_log: true,
        y_unit: crate::chart::Unit::Bytes,
        series,
    })
}

/// File name of [`chart`]'s SVG, beside the page.
pub const CHART_FILE: &str = "bench-store-growth.svg";

fn render_forks(md: &mut String, r: &StoreResults) {
    let _ = writeln!(
        md,
        "\n### Fork of a persisted session: what it writes\n\nSaving `base.fork()` after `base` \
         (the rows of rath-persist's `persist` bench). Rows and logical bytes added, summed \
         over the tables, counted exactly (deterministic); JSONL writes the whole session \
         again.\n\n| chunks | SQLite rows / bytes | PostgreSQL rows / bytes | JSONL bytes |\n\
         | --- | --- | --- | --- |"
    );
    for (n, s, pg, j) in &r.forks {
        let pg = pg.map_or("not measured".to_owned(), |p| {
            format!("{} / {} B", p.rows, p.bytes)
        });
        let _ = writeln!(
            md,
            "| {n} | {} / {} B | {pg} | {} |",
            s.rows,
            s.bytes,
            kb(j.bytes)
        );
    }
}

fn render_times(md: &mut String, r: &StoreResults) {
    let _ = writeln!(
        md,
        "\n### Times (divan medians, `crates/rath-store-sql/benches/store.rs`)\n"
    );
    match &r.divan {
        Err(e) => {
            let _ = writeln!(md, "Not measured: {e}\n");
        }
        Ok(m) => {
            let _ = writeln!(md, "| bench | median |\n| --- | --- |");
            for (k, v) in m {
                let _ = writeln!(md, "| `{k}` | {} |", fmt_ns(*v));
            }
            if !m.keys().any(|k| k.starts_with("load_postgres")) {
                let _ = writeln!(
                    md,
                    "\nPostgreSQL benches not measured: RATH_TEST_POSTGRES_URL is not set."
                );
            }
        }
    }
}
