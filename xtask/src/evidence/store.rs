//! `store_sharing`: the flagship run (engineering_team, offline, deterministic ids and clock)
//! in the JSONL directory it writes and in SQLite, side by side: sessions, chunk rows,
//! distinct chunks, rows and bytes per table. The SQLite store is filled by the lossless copy
//! (`rath store copy`), and copied back to JSONL to show nothing was lost.

use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, Result};
use rath_store_sql::admin::{self, StoreStats};
use serde_json::json;

use super::{Ctx, Packet, Report};

/// The `store_sharing` packet.
pub fn store_sharing() -> Packet {
    Packet {
        name: "store_sharing",
        about: "The flagship engineering_team run (offline, deterministic) stored in SQLite next to \
                the JSONL directory it writes: sessions, chunks stored, distinct chunks, rows and \
                bytes per table. A session stores only the chunks its parents' rows do not hold.",
        env: &[],
        build: build_store_sharing,
    }
}

fn python_available() -> bool {
    Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs the example into `home` (offline: no live provider variable reaches it).
fn run_flagship(home: &Path) -> Result<String> {
    let exe = super::provider::example_executable("engineering_team")?;
    let mut cmd = Command::new(&exe);
    cmd.arg("--deterministic")
        .env("OPENRATH_HOME", home)
        .env("RATH_PROVIDER", "offline")
        .current_dir(home);
    for var in [
        "OPENAI_BASE_URL",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OPENRATH_STORE",
        "OPENRATH_DETERMINISTIC",
    ] {
        cmd.env_remove(var);
    }
    let out = cmd.output().context("run the engineering_team example")?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    anyhow::ensure!(
        out.status.success(),
        "engineering_team failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(stdout)
}

fn table<'a>(s: &'a StoreStats, name: &str) -> Option<&'a admin::Table> {
    s.tables.iter().find(|t| t.name == name)
}

/// Every file of `a` byte-identical in `b` and no file more.
fn same_files(a: &Path, b: &Path) -> Result<(bool, String)> {
    let (fa, fb) = (super::list_files(a)?, super::list_files(b)?);
    if fa != fb {
        return Ok((false, format!("{} files vs {} files", fa.len(), fb.len())));
    }
    for f in &fa {
        if std::fs::read(a.join(f))? != std::fs::read(b.join(f))? {
            return Ok((false, format!("{f} differs")));
        }
    }
    Ok((true, format!("{} session files byte-identical", fa.len())))
}

/// The JSONL directory's records: lines by `record_type`, and the evidence chunks riding on
/// chunk and trailer records (`rath_ext.evidence`).
fn jsonl_records(dir: &Path) -> Result<serde_json::Value> {
    let mut by_type = std::collections::BTreeMap::<String, u64>::new();
    let mut evidence = 0u64;
    for f in super::list_files(dir)? {
        let text = std::fs::read_to_string(dir.join(&f))?;
        for line in text.lines() {
            let v: serde_json::Value =
                serde_json::from_str(line).with_context(|| format!("{f}: not JSON"))?;
            let kind = v["record_type"].as_str().unwrap_or("?").to_owned();
            *by_type.entry(kind).or_default() += 1;
            evidence += v["rath_ext"]["evidence"]
                .as_array()
                .map_or(0, |a| a.len() as u64);
        }
    }
    Ok(json!({"lines_by_record_type": by_type, "evidence_chunks_on_records": evidence}))
}

fn build_store_sharing(ctx: &mut Ctx) -> Result<Report> {
    let mut r = Report::new(
        &[
            "the flagship run stored in SQLite shares chunks between sessions: rath_segments \
             (a segment row per save or append, its new chunks' documents in one value) holds \
             at most half the chunks the JSONL directory writes, where that directory repeats \
             every chunk in every session file that holds it (conversation chunks as chunk \
             records, evidence riding on them)",
            "a session that starts with another's chunks (a fork, a loop round) points at it, a \
             merge at both its parents: rath_segments holds only the chunks each session adds, \
             in fewer rows than there are chunks",
            "the copy is lossless: copied back from SQLite to JSONL, every session file is \
             byte-identical to the run's, and the lineage rows of both stores are equal",
        ],
        &[
            "that each distinct chunk is stored once: sharing goes through lineage (a base, a \
             graft, a shared prefix of a parent's chunks), so a chunk equal to one of a session \
             that is not a parent is stored again",
            "PostgreSQL (same schema and code; crates/rath-store-sql/tests runs the sharing and \
             conformance tests on it) or growth over long runs (docs/benchmarks.md, store \
             section)",
            "bytes on disk: SQLite's page layout depends on its version, so the bytes here are \
             logical (the stored values' lengths, plus a fixed 128 bytes per session row and 24 \
             per segment row for the integer columns), not file sizes",
            "that the run itself wrote to SQLite: it writes the JSONL directory, and `rath store \
             copy`'s path (restore writes) fills SQLite; a run writing to SQLite directly \
             goes through the same save path",
        ],
    );
    if !python_available() {
        r.skip("python3 is not installed (the flagship's QA runs python3 -m unittest)");
        return Ok(r);
    }
    let home = ctx.tmp_dir("openrath_home")?;
    let stdout = run_flagship(&home)?;
    r.check(
        "the flagship run passes its QA tests",
        stdout.contains("PASSED (exit 0)"),
        stdout
            .lines()
            .find(|l| l.contains("QA test run"))
            .unwrap_or("no QA line")
            .to_owned(),
    );
    let sessions = home.join("sessions");
    let jsonl_url = sessions.to_string_lossy().into_owned();
    let db = ctx.tmp().join("store.sqlite");
    let sqlite_url = format!("sqlite://{}", db.display());
    let back = ctx.tmp_dir("back")?;
    let back_url = back.to_string_lossy().into_owned();
    let (jsonl, sqlite, copied, lineage_equal) = ctx.block_on(async {
        let jsonl = admin::stats(&jsonl_url).await?;
        let copied = admin::copy(&jsonl_url, &sqlite_url).await?;
        let sqlite = admin::stats(&sqlite_url).await?;
        admin::copy(&sqlite_url, &back_url).await?;
        let a = rath_store_sql::open_store(&jsonl_url)
            .await?
            .lineage_rows()
            .await?;
        let b = rath_store_sql::open_store(&sqlite_url)
            .await?
            .lineage_rows()
            .await?;
        Ok::<_, anyhow::Error>((jsonl, sqlite, copied.copied, a == b))
    })??;
    let records = jsonl_records(&sessions)?;
    let chunk_records = records["lines_by_record_type"]["chunk"]
        .as_u64()
        .unwrap_or(0);
    let riding = records["evidence_chunks_on_records"].as_u64().unwrap_or(0);
    r.check_eq(
        "JSONL holds every chunk of every session (chunk records + evidence on records)",
        chunk_records + riding,
        jsonl.chunks,
    );
    sharing_checks(&mut r, &jsonl, &sqlite, copied);
    let (same, detail) = same_files(&sessions, &back)?;
    r.check(
        "SQLite -> JSONL gives the run's session files byte-identical",
        same,
        detail,
    );
    r.check_eq(
        "lineage rows equal from JSONL and SQLite",
        lineage_equal,
        true,
    );
    write_artifacts(ctx, &jsonl, &sqlite, records)?;
    r.note(
        "Bytes are logical (see what this packet does not prove); the SQLite file itself is not \
         kept, as its page layout is SQLite's and may change with its version. The sessions' \
         headers hold the run's sandbox path (redacted in artifacts), so the byte counts \
         reproduce for a temp root of the same length (as in CI, whose system temp directory is the same).",
    );
    Ok(r)
}

fn sharing_checks(r: &mut Report, jsonl: &StoreStats, sqlite: &StoreStats, copied: usize) {
    r.check_eq("every session copied", copied as u64, jsonl.sessions);
    r.check_eq("sessions in SQLite", sqlite.sessions, jsonl.sessions);
    r.check_eq("chunks over all sessions", sqlite.chunks, jsonl.chunks);
    let stored = sqlite.distinct_chunks;
    r.check(
        "SQLite stores far fewer chunks than JSONL writes (at most half), and none lost \
         (at least the distinct ones)",
        stored * 2 <= jsonl.chunks && stored >= jsonl.distinct_chunks,
        format!(
            "rath_segments holds {stored} chunks; JSONL writes {} chunks, {} distinct",
            jsonl.chunks, jsonl.distinct_chunks
        ),
    );
    let segments = table(sqlite, "rath_segments").map_or(0, |t| t.rows);
    r.check(
        "segments hold only what each session adds (fewer rows than the chunks stored)",
        segments < stored,
        format!("rath_segments {segments} rows for {stored} chunks"),
    );
    let chunk_bytes = table(sqlite, "rath_segments").map_or(0, |t| t.bytes);
    let jsonl_bytes = jsonl.total_bytes();
    r.check(
        "SQLite's logical bytes are fewer than the JSONL files'",
        sqlite.total_bytes() < jsonl_bytes,
        format!(
            "SQLite {} B (chunks {chunk_bytes} B), JSONL {jsonl_bytes} B",
            sqlite.total_bytes()
        ),
    );
}

fn write_artifacts(
    ctx: &Ctx,
    jsonl: &StoreStats,
    sqlite: &StoreStats,
    records: serde_json::Value,
) -> Result<()> {
    let tables = |s: &StoreStats| {
        s.tables
            .iter()
            .map(|t| json!({"table": t.name, "rows": t.rows, "bytes": t.bytes}))
            .collect::<Vec<_>>()
    };
    let side = |s: &StoreStats| {
        json!({
            "sessions": s.sessions,
            "chunks": s.chunks,
            "distinct_chunks": s.distinct_chunks,
            "total_bytes": s.total_bytes(),
            "tables": tables(s),
        })
    };
    let ratio = |a: u64, b: u64| {
        if b == 0 {
            0.0
        } else {
            (a as f64 / b as f64 * 1000.0).round() / 1000.0
        }
    };
    ctx.write_json(
        "store_sharing.json",
        &json!({
            "run": "engineering_team --deterministic (offline, scripted agents)",
            "bytes": "logical: stored values' lengths (SQLite: + 128 per session row, 24 per \
                      segment row); JSONL: file bytes",
            "jsonl": side(jsonl),
            "jsonl_records": records,
            "sqlite": side(sqlite),
            "chunks_jsonl_over_sqlite_rows": ratio(jsonl.chunks, sqlite.distinct_chunks),
            "bytes_jsonl_over_sqlite": ratio(jsonl.total_bytes(), sqlite.total_bytes()),
        }),
    )?;
    let text = format!(
        "{}\n{}",
        ctx.redact(&jsonl.render()),
        ctx.redact(&sqlite.render())
    );
    ctx.write("stats.txt", text)
}
