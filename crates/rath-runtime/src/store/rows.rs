//! Reading runs back from the run store's rows.

use sqlx::Row;

use super::*;

/// A subquery of the strings in the JSON array `$1` (a list of run ids).
pub(super) fn json_ids(pg: bool) -> &'static str {
    if pg {
        "SELECT json_array_elements_text($1::json)"
    } else {
        "SELECT value FROM json_each($1)"
    }
}

pub(super) const RUN_COLS: &str = "id, workflow, definition_hash, input_session, options, status, attempts, failures, resume_session, segment, output_session, detail, submitted_ms, not_before_ms, deadline_ms";

pub(super) fn run_from<R: Row>(r: &R) -> Result<Run, RuntimeError>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<String>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<i64>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    let options: String = r.try_get("options")?;
    let status: String = r.try_get("status")?;
    Ok(Run {
        id: RunId(r.try_get("id")?),
        workflow: r.try_get("workflow")?,
        definition_hash: r.try_get("definition_hash")?,
        input_session: r.try_get("input_session")?,
        options: serde_json::from_str(&options).map_err(|e| corrupt("run options", e))?,
        status: status.parse()?,
        attempts: r.try_get("attempts")?,
        failures: r.try_get("failures")?,
        resume_session: r.try_get("resume_session")?,
        segment: r.try_get("segment")?,
        output_session: r.try_get("output_session")?,
        detail: r.try_get("detail")?,
        submitted_ms: r.try_get("submitted_ms")?,
        not_before_ms: r.try_get("not_before_ms")?,
        deadline_ms: r.try_get("deadline_ms")?,
    })
}

/// A run from its row as JSON (`row_to_json` of the [`RUN_COLS`] columns).
pub(super) fn run_from_json(v: &serde_json::Value) -> Result<Run, RuntimeError> {
    let text = |k: &str| {
        v.get(k)
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    };
    let int = |k: &str| v.get(k).and_then(serde_json::Value::as_i64);
    let need = |k: &str| corrupt("claimed run", format!("no {k}"));
    let options = text("options").ok_or_else(|| need("options"))?;
    let status = text("status").ok_or_else(|| need("status"))?;
    Ok(Run {
        id: RunId(text("id").ok_or_else(|| need("id"))?),
        workflow: text("workflow").ok_or_else(|| need("workflow"))?,
        definition_hash: text("definition_hash").ok_or_else(|| need("definition_hash"))?,
        input_session: text("input_session").ok_or_else(|| need("input_session"))?,
        options: serde_json::from_str(&options).map_err(|e| corrupt("run options", e))?,
        status: status.parse()?,
        attempts: int("attempts").ok_or_else(|| need("attempts"))?,
        failures: int("failures").ok_or_else(|| need("failures"))?,
        resume_session: text("resume_session"),
        segment: int("segment").ok_or_else(|| need("segment"))?,
        output_session: text("output_session"),
        detail: text("detail"),
        submitted_ms: int("submitted_ms").ok_or_else(|| need("submitted_ms"))?,
        not_before_ms: int("not_before_ms").ok_or_else(|| need("not_before_ms"))?,
        deadline_ms: int("deadline_ms"),
    })
}
