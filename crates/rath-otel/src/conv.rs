//! The attribute, span and event names this crate emits: the OpenTelemetry GenAI semantic
//! conventions (agent, model and tool spans; `gen_ai.*`), `error.type`, the database
//! conventions' `db.*` names on the runtime's store spans, and the `rath.*` names for what
//! the conventions have no word for (the session's lineage, runs, leases, workers).
//!
//! ```
//! use rath_otel::conv;
//! assert!(conv::GENAI_ATTRIBUTES.contains(&conv::GEN_AI_CONVERSATION_ID));
//! assert!(conv::is_known_attribute("rath.session.id"));
//! assert!(!conv::is_known_attribute("gen_ai.system"));
//! ```

/// `gen_ai.operation.name`: `invoke_workflow`, `invoke_agent`, `chat`, `execute_tool`.
pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
/// `gen_ai.provider.name`: the provider (`openai`, `anthropic`, or openrath's provider name).
pub const GEN_AI_PROVIDER_NAME: &str = "gen_ai.provider.name";
/// `gen_ai.request.model`: the model asked for.
pub const GEN_AI_REQUEST_MODEL: &str = "gen_ai.request.model";
/// `gen_ai.request.max_tokens`.
pub const GEN_AI_REQUEST_MAX_TOKENS: &str = "gen_ai.request.max_tokens";
/// `gen_ai.request.temperature`.
pub const GEN_AI_REQUEST_TEMPERATURE: &str = "gen_ai.request.temperature";
/// `gen_ai.response.model`: the model that answered.
pub const GEN_AI_RESPONSE_MODEL: &str = "gen_ai.response.model";
/// `gen_ai.response.id`: the request id openrath gave the call.
pub const GEN_AI_RESPONSE_ID: &str = "gen_ai.response.id";
/// `gen_ai.response.finish_reasons`: a string array.
pub const GEN_AI_RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
/// `gen_ai.usage.input_tokens`.
pub const GEN_AI_USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
/// `gen_ai.usage.output_tokens`.
pub const GEN_AI_USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
/// `gen_ai.usage.cache_read.input_tokens` (when the provider reports it).
pub const GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
/// `gen_ai.usage.cache_creation.input_tokens` (when the provider reports it).
pub const GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: &str =
    "gen_ai.usage.cache_creation.input_tokens";
/// `gen_ai.agent.name`.
pub const GEN_AI_AGENT_NAME: &str = "gen_ai.agent.name";
/// `gen_ai.agent.description`.
pub const GEN_AI_AGENT_DESCRIPTION: &str = "gen_ai.agent.description";
/// `gen_ai.workflow.name`: the workflow an `invoke_workflow` span runs.
pub const GEN_AI_WORKFLOW_NAME: &str = "gen_ai.workflow.name";
/// `gen_ai.tool.name`.
pub const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
/// `gen_ai.tool.call.id`.
pub const GEN_AI_TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
/// `gen_ai.tool.type`: `function` for every openrath tool.
pub const GEN_AI_TOOL_TYPE: &str = "gen_ai.tool.type";
/// `gen_ai.tool.call.arguments` (opt-in content).
pub const GEN_AI_TOOL_CALL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
/// `gen_ai.tool.call.result` (opt-in content).
pub const GEN_AI_TOOL_CALL_RESULT: &str = "gen_ai.tool.call.result";
/// `gen_ai.conversation.id`: the session's lineage root.
pub const GEN_AI_CONVERSATION_ID: &str = "gen_ai.conversation.id";
/// `gen_ai.input.messages` (opt-in content, JSON).
pub const GEN_AI_INPUT_MESSAGES: &str = "gen_ai.input.messages";
/// `gen_ai.output.messages` (opt-in content, JSON).
pub const GEN_AI_OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
/// `error.type`: the error's kind.
pub const ERROR_TYPE: &str = "error.type";

/// `rath.session.id`: the session a span stands for.
pub const RATH_SESSION_ID: &str = "rath.session.id";
/// `rath.lineage.operator`: the operation that made the session.
pub const RATH_LINEAGE_OPERATOR: &str = "rath.lineage.operator";
/// `rath.lineage.kind`: the session's lineage kind (`op_fork`, `op_merge`, ...).
pub const RATH_LINEAGE_KIND: &str = "rath.lineage.kind";
/// `rath.lineage.parents`: the parent session ids, in operator order (string array).
pub const RATH_LINEAGE_PARENTS: &str = "rath.lineage.parents";
/// `rath.usage.total_tokens`: the tokens a session's agents spent in all.
pub const RATH_USAGE_TOTAL_TOKENS: &str = "rath.usage.total_tokens";
/// `rath.tool.outcome`: `ok` or the tool error kind.
pub const RATH_TOOL_OUTCOME: &str = "rath.tool.outcome";
/// `rath.tool.backend`: the sandbox backend a tool ran on.
pub const RATH_TOOL_BACKEND: &str = "rath.tool.backend";
/// `rath.tool.exit_code`: a shell tool's exit code.
pub const RATH_TOOL_EXIT_CODE: &str = "rath.tool.exit_code";
/// `rath.link.role` on a span link: `parent` (a fork's source) or `merge_parent`.
pub const RATH_LINK_ROLE: &str = "rath.link.role";
/// `rath.link.index` on a span link: the parent's position in the lineage.
pub const RATH_LINK_INDEX: &str = "rath.link.index";

/// `db.system.name` on a store span: `sqlite` or `postgresql` (database conventions).
pub const DB_SYSTEM_NAME: &str = "db.system.name";
/// `db.operation.name` on a store span: `write`, `load`, `claim`, `heartbeat`, `finish`, ...
pub const DB_OPERATION_NAME: &str = "db.operation.name";
/// `db.collection.name` on a store span: the table (`rath_sessions`, `rt_runs`, ...).
pub const DB_COLLECTION_NAME: &str = "db.collection.name";
/// `db.operation.batch.size`: the writes of a batch of two or more.
pub const DB_OPERATION_BATCH_SIZE: &str = "db.operation.batch.size";

/// `rath.store.kind` on a session-store span: `jsonl`, `sqlite` or `postgresql`.
pub const RATH_STORE_KIND: &str = "rath.store.kind";
/// `rath.store.writes`: the writes of a batch.
pub const RATH_STORE_WRITES: &str = "rath.store.writes";
/// `rath.store.fence_token`: the fencing token a batch was checked against.
pub const RATH_STORE_FENCE_TOKEN: &str = "rath.store.fence_token";
/// `rath.store.chunks_written`: chunk documents a write stored (shared chunks are not).
pub const RATH_STORE_CHUNKS_WRITTEN: &str = "rath.store.chunks_written";
/// `rath.store.chunks`: chunks a load read.
pub const RATH_STORE_CHUNKS: &str = "rath.store.chunks";
/// `rath.worker.name`: the worker (as named in leases).
pub const RATH_WORKER_NAME: &str = "rath.worker.name";
/// `rath.run.id`: the durable run.
pub const RATH_RUN_ID: &str = "rath.run.id";
/// `rath.run.workflow`: the registered workflow the run runs.
pub const RATH_RUN_WORKFLOW: &str = "rath.run.workflow";
/// `rath.run.segment`: the run's segment (one more after each approval).
pub const RATH_RUN_SEGMENT: &str = "rath.run.segment";
/// `rath.run.attempt`: the claims of the run so far, this one included.
pub const RATH_RUN_ATTEMPT: &str = "rath.run.attempt";
/// `rath.run.status`: the status a release moves the run to.
pub const RATH_RUN_STATUS: &str = "rath.run.status";
/// `rath.run.outcome`: where a claim ended (the run's new status, or `fenced`).
pub const RATH_RUN_OUTCOME: &str = "rath.run.outcome";
/// `rath.lease.token`: the lease's fencing token.
pub const RATH_LEASE_TOKEN: &str = "rath.lease.token";
/// `rath.lease.ms`: the lease length asked for.
pub const RATH_LEASE_MS: &str = "rath.lease.ms";
/// `rath.claim.outcome`: `claimed` or `empty`.
pub const RATH_CLAIM_OUTCOME: &str = "rath.claim.outcome";
/// `rath.heartbeat.outcome`: `renewed`, `fenced` or `error`.
pub const RATH_HEARTBEAT_OUTCOME: &str = "rath.heartbeat.outcome";

/// Event `rath.route_decision`: a selector's decision.
pub const EVENT_ROUTE_DECISION: &str = "rath.route_decision";
/// Event `rath.compression`: a compressor's record of what it dropped.
pub const EVENT_COMPRESSION: &str = "rath.compression";
/// Event attribute `rath.route.selector`.
pub const RATH_ROUTE_SELECTOR: &str = "rath.route.selector";
/// Event attribute `rath.route.choice` (`done` when the selector finished).
pub const RATH_ROUTE_CHOICE: &str = "rath.route.choice";
/// Event attribute `rath.route.reason`.
pub const RATH_ROUTE_REASON: &str = "rath.route.reason";
/// Event attribute `rath.route.decided_by` (`function` or `model:<name>`).
pub const RATH_ROUTE_DECIDED_BY: &str = "rath.route.decided_by";
/// Event attribute `rath.route.candidates` (string array).
pub const RATH_ROUTE_CANDIDATES: &str = "rath.route.candidates";
/// Event attribute `rath.compression.compressor`.
pub const RATH_COMPRESSION_COMPRESSOR: &str = "rath.compression.compressor";
/// Event attribute `rath.compression.lossy`.
pub const RATH_COMPRESSION_LOSSY: &str = "rath.compression.lossy";
/// Event attribute `rath.compression.dropped`: how many chunks were dropped.
pub const RATH_COMPRESSION_DROPPED: &str = "rath.compression.dropped";
/// Event attribute `rath.compression.rows_out`.
pub const RATH_COMPRESSION_ROWS_OUT: &str = "rath.compression.rows_out";

/// Operation `invoke_workflow`.
pub const OP_INVOKE_WORKFLOW: &str = "invoke_workflow";
/// Operation `invoke_agent`.
pub const OP_INVOKE_AGENT: &str = "invoke_agent";
/// Operation `chat`.
pub const OP_CHAT: &str = "chat";
/// Operation `execute_tool`.
pub const OP_EXECUTE_TOOL: &str = "execute_tool";

/// The GenAI semantic-convention attribute names this crate may emit (checked against the
/// conventions' registry: agent spans, inference spans, execute-tool spans).
pub const GENAI_ATTRIBUTES: &[&str] = &[
    GEN_AI_OPERATION_NAME,
    GEN_AI_PROVIDER_NAME,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_REQUEST_MAX_TOKENS,
    GEN_AI_REQUEST_TEMPERATURE,
    GEN_AI_RESPONSE_MODEL,
    GEN_AI_RESPONSE_ID,
    GEN_AI_RESPONSE_FINISH_REASONS,
    GEN_AI_USAGE_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
    GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
    GEN_AI_AGENT_NAME,
    GEN_AI_AGENT_DESCRIPTION,
    GEN_AI_WORKFLOW_NAME,
    GEN_AI_TOOL_NAME,
    GEN_AI_TOOL_CALL_ID,
    GEN_AI_TOOL_TYPE,
    GEN_AI_TOOL_CALL_ARGUMENTS,
    GEN_AI_TOOL_CALL_RESULT,
    GEN_AI_CONVERSATION_ID,
    GEN_AI_INPUT_MESSAGES,
    GEN_AI_OUTPUT_MESSAGES,
    ERROR_TYPE,
];

/// The `rath.*` names this crate may emit on spans, events and links.
pub const RATH_ATTRIBUTES: &[&str] = &[
    RATH_SESSION_ID,
    RATH_LINEAGE_OPERATOR,
    RATH_LINEAGE_KIND,
    RATH_LINEAGE_PARENTS,
    RATH_USAGE_TOTAL_TOKENS,
    RATH_TOOL_OUTCOME,
    RATH_TOOL_BACKEND,
    RATH_TOOL_EXIT_CODE,
    RATH_LINK_ROLE,
    RATH_LINK_INDEX,
    RATH_ROUTE_SELECTOR,
    RATH_ROUTE_CHOICE,
    RATH_ROUTE_REASON,
    RATH_ROUTE_DECIDED_BY,
    RATH_ROUTE_CANDIDATES,
    RATH_COMPRESSION_COMPRESSOR,
    RATH_COMPRESSION_LOSSY,
    RATH_COMPRESSION_DROPPED,
    RATH_COMPRESSION_ROWS_OUT,
];

/// The names on the runtime's own `tracing` spans (session and run stores, the worker;
/// written by those crates, which sit below this one, and listed here so the tests check
/// every exported name): the database conventions' `db.*` names where they apply, `rath.*`
/// for the rest (and `gen_ai.conversation.id`, `rath.session.id`, `error.type` from the
/// lists above).
pub const RUNTIME_ATTRIBUTES: &[&str] = &[
    DB_SYSTEM_NAME,
    DB_OPERATION_NAME,
    DB_COLLECTION_NAME,
    DB_OPERATION_BATCH_SIZE,
    RATH_STORE_KIND,
    RATH_STORE_WRITES,
    RATH_STORE_FENCE_TOKEN,
    RATH_STORE_CHUNKS_WRITTEN,
    RATH_STORE_CHUNKS,
    RATH_WORKER_NAME,
    RATH_RUN_ID,
    RATH_RUN_WORKFLOW,
    RATH_RUN_SEGMENT,
    RATH_RUN_ATTEMPT,
    RATH_RUN_STATUS,
    RATH_RUN_OUTCOME,
    RATH_LEASE_TOKEN,
    RATH_LEASE_MS,
    RATH_CLAIM_OUTCOME,
    RATH_HEARTBEAT_OUTCOME,
];

/// True for a name in [`GENAI_ATTRIBUTES`], [`RATH_ATTRIBUTES`] or [`RUNTIME_ATTRIBUTES`].
pub fn is_known_attribute(name: &str) -> bool {
    GENAI_ATTRIBUTES.contains(&name)
        || RATH_ATTRIBUTES.contains(&name)
        || RUNTIME_ATTRIBUTES.contains(&name)
}

/// `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`: `true` opts in to message content.
pub const CAPTURE_CONTENT_VAR: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";
