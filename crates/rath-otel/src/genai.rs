//! Attribute sets shared by the live observer and the store export.

use rath_session::{CompressionRecord, ModelCall, RouteDecision, Session, ToolEvidence, Usage};
use serde_json::Value as Json;

use crate::conv::*;
use crate::span::{Attributes, Event, Value};

/// The GenAI `gen_ai.provider.name` for an openrath provider name: the well-known values
/// for the OpenAI-compatible and Anthropic providers, the provider's own name otherwise.
pub fn provider_name(raw: &str) -> String {
    if raw.starts_with("openai") {
        "openai".to_owned()
    } else if raw.starts_with("anthropic") {
        "anthropic".to_owned()
    } else {
        raw.to_owned()
    }
}

/// Usage figures as `gen_ai.usage.*`.
pub(crate) fn set_usage(a: &mut Attributes, u: &Usage) {
    a.set(GEN_AI_USAGE_INPUT_TOKENS, u.prompt_tokens);
    a.set(GEN_AI_USAGE_OUTPUT_TOKENS, u.completion_tokens);
}

/// Cache figures from a `model_call`'s `detail`, where the provider recorded them.
pub(crate) fn set_cache(a: &mut Attributes, detail: &std::collections::BTreeMap<String, Json>) {
    let pick = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| detail.get(*n).and_then(Json::as_u64))
    };
    if let Some(n) = pick(&["cache_read_input_tokens", "cache_read_tokens"]) {
        a.set(GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, n);
    }
    if let Some(n) = pick(&["cache_creation_input_tokens", "cache_creation_tokens"]) {
        a.set(GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, n);
    }
}

/// A `chat` span's attributes from a stored `model_call`.
pub(crate) fn chat_attributes(m: &ModelCall, conversation: &str) -> Attributes {
    let mut a = Attributes::default();
    a.set(GEN_AI_OPERATION_NAME, OP_CHAT);
    a.set(GEN_AI_PROVIDER_NAME, provider_name(&m.provider));
    if let Some(model) = &m.model {
        a.set(GEN_AI_REQUEST_MODEL, model);
        a.set(GEN_AI_RESPONSE_MODEL, model);
    }
    a.set(GEN_AI_RESPONSE_ID, &m.request_id);
    if let Some(agent) = &m.agent {
        a.set(GEN_AI_AGENT_NAME, agent);
    }
    a.set(GEN_AI_CONVERSATION_ID, conversation);
    if let Some(f) = &m.finish_reason {
        a.set(GEN_AI_RESPONSE_FINISH_REASONS, vec![f.clone()]);
    }
    if let Some(u) = &m.usage {
        set_usage(&mut a, u);
    }
    set_cache(&mut a, &m.detail);
    a
}

/// The span name of a model call.
pub(crate) fn chat_name(model: Option<&str>) -> String {
    match model {
        Some(m) if !m.is_empty() => format!("{OP_CHAT} {m}"),
        _ => OP_CHAT.to_owned(),
    }
}

/// An `execute_tool` span's attributes from stored tool evidence.
pub(crate) fn tool_attributes(
    e: &ToolEvidence,
    agent: Option<&str>,
    conversation: &str,
) -> Attributes {
    let mut a = Attributes::default();
    a.set(GEN_AI_OPERATION_NAME, OP_EXECUTE_TOOL);
    a.set(GEN_AI_TOOL_NAME, &e.tool);
    a.set(GEN_AI_TOOL_CALL_ID, &e.tool_call_id);
    a.set(GEN_AI_TOOL_TYPE, "function");
    if let Some(agent) = agent {
        a.set(GEN_AI_AGENT_NAME, agent);
    }
    a.set(GEN_AI_CONVERSATION_ID, conversation);
    a.set(RATH_TOOL_OUTCOME, &e.outcome);
    if e.outcome != "ok" {
        a.set(ERROR_TYPE, &e.outcome);
    }
    if let Some(b) = &e.backend {
        a.set(RATH_TOOL_BACKEND, b);
    }
    if let Some(code) = e.exit_code {
        a.set(RATH_TOOL_EXIT_CODE, code);
    }
    a
}

/// The session's id, operator, kind and parents.
pub(crate) fn set_lineage(a: &mut Attributes, s: &Session) {
    let l = s.lineage();
    a.set(RATH_SESSION_ID, s.id().as_str());
    a.set(RATH_LINEAGE_OPERATOR, l.operator.as_ref());
    a.set(RATH_LINEAGE_KIND, l.kind.as_str());
    let parents: Vec<String> = l.parents.iter().map(|p| p.as_str().to_owned()).collect();
    if !parents.is_empty() {
        a.set(RATH_LINEAGE_PARENTS, parents);
    }
}

/// A selector's decision as a span event.
pub(crate) fn route_event(r: &RouteDecision, at: i64) -> Event {
    let mut a = Attributes::default();
    a.set(RATH_ROUTE_SELECTOR, &r.selector);
    a.set(
        RATH_ROUTE_CHOICE,
        r.choice.clone().unwrap_or_else(|| "done".to_owned()),
    );
    a.set(RATH_ROUTE_REASON, &r.reason);
    a.set(RATH_ROUTE_DECIDED_BY, &r.decided_by);
    a.set(RATH_ROUTE_CANDIDATES, r.candidates.clone());
    Event {
        name: EVENT_ROUTE_DECISION.to_owned(),
        time_unix_micros: at,
        attributes: a,
    }
}

/// A compression record as a span event.
pub(crate) fn compression_event(c: &CompressionRecord, session: &Session, at: i64) -> Event {
    let mut a = Attributes::default();
    a.set(RATH_COMPRESSION_COMPRESSOR, &c.compressor);
    a.set(RATH_COMPRESSION_LOSSY, c.lossy);
    a.set(RATH_COMPRESSION_DROPPED, c.dropped.len() as u64);
    a.set(RATH_COMPRESSION_ROWS_OUT, c.rows_out);
    a.set(RATH_SESSION_ID, session.id().as_str());
    Event {
        name: EVENT_COMPRESSION.to_owned(),
        time_unix_micros: at,
        attributes: a,
    }
}

/// `true` when `value` (an environment variable's value) opts in to message content.
pub fn capture_opted_in(value: Option<&str>) -> bool {
    value.is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// A value as JSON text, for opt-in content attributes.
pub(crate) fn json_text(v: &impl serde::Serialize) -> Value {
    Value::Str(serde_json::to_string(v).unwrap_or_default())
}
