//! Tools: what a model can call, with schemas, validation and sandbox access.
//!
//! ```
//! use rath_flow::{ToolContext, ToolError, ToolSet, typed_tool};
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct WordCountArgs {
//!     text: String,
//! }
//!
//! #[derive(Serialize)]
//! struct WordCount {
//!     words: usize,
//! }
//!
//! let wc = typed_tool(
//!     "word_count",
//!     "Count whitespace-separated words.",
//!     |_cx: ToolContext, args: WordCountArgs| async move {
//!         Ok::<_, ToolError>(WordCount { words: args.text.split_whitespace().count() })
//!     },
//! )
//! .parallel_safe(true);
//! let tools = ToolSet::builtins().with(wc)?;
//! assert_eq!(tools.len(), 7);
//! // A second tool of the same name is refused.
//! assert!(tools.clone().with(rath_flow::builtin::RunShellCommand).is_err());
//! # Ok::<(), rath_flow::FlowError>(())
//! ```
//!
//! The model sees [`ToolSchema`]s (name, description, JSON Schema), never Rust types. Typed
//! tools derive their schema from a `schemars` struct; every call's arguments are validated
//! against the schema with `jsonschema` before the tool runs. Side effects go through
//! [`ToolContext::dispatch`], which opens the session's sandbox lazily and records evidence.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rath_backend::{BackendRegistry, DispatchEvidence, Output, Payload};
/// The one tool-failure type (defined in `rath-backend`, so backends and tools share it):
/// `{kind, message, detail}`, rendered as `{"ok": false, "error_kind": ..., "message": ...}`.
pub use rath_backend::{ToolError, ToolErrorKind};
use rath_provider::ToolSchema;
use rath_session::{SandboxHandle, Session, ToolEvidence};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::FlowError;

/// Renders `value` as Python's `json.dumps(value, ensure_ascii=False)` would (`", "` and
/// `": "` separators): the one format every tool result content in this crate uses.
///
/// ```
/// #[derive(serde::Serialize)]
/// struct R { words: u32, unique_lowercase: u32 }
/// assert_eq!(rath_flow::py_json(&R { words: 4, unique_lowercase: 4 }),
///            r#"{"words": 4, "unique_lowercase": 4}"#);
/// ```
pub fn py_json<T: Serialize + ?Sized>(value: &T) -> String {
    rath_session::json::to_string(value).unwrap_or_else(|e| {
        ToolError::exception(format!("tool result could not be serialised: {e}")).to_content()
    })
}

/// What a tool returned: the text of its `tool_result` chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolOutput {
    /// The result content (usually JSON in Python's layout).
    pub content: String,
}

impl ToolOutput {
    /// A result serialised with [`py_json`] (field order is kept for structs).
    pub fn json<T: Serialize + ?Sized>(value: &T) -> Self {
        Self {
            content: py_json(value),
        }
    }

    /// A plain-text result.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: text.into(),
        }
    }
}

#[derive(Debug)]
struct ContextInner {
    session: Session,
    backends: Arc<BackendRegistry>,
    agent: Option<String>,
    call_id: String,
    evidence: Mutex<Vec<DispatchEvidence>>,
    recorded: Mutex<Option<ToolEvidence>>,
}

/// What a running tool call can see: the session it runs in (as of the round that requested
/// it), the backends that open its sandbox, the agent and the call id. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ToolContext(Arc<ContextInner>);

impl ToolContext {
    /// A context for call `call_id` on `session`.
    pub fn new(
        session: Session,
        backends: Arc<BackendRegistry>,
        agent: Option<String>,
        call_id: impl Into<String>,
    ) -> Self {
        Self(Arc::new(ContextInner {
            session,
            backends,
            agent,
            call_id: call_id.into(),
            evidence: Mutex::new(Vec::new()),
            recorded: Mutex::new(None),
        }))
    }

    /// The session the call runs in.
    pub fn session(&self) -> &Session {
        &self.0.session
    }

    /// The agent whose loop made the call.
    pub fn agent(&self) -> Option<&str> {
        self.0.agent.as_deref()
    }

    /// The tool call id.
    pub fn call_id(&self) -> &str {
        &self.0.call_id
    }

    /// The backend registry.
    pub fn backends(&self) -> &BackendRegistry {
        &self.0.backends
    }

    /// The session's sandbox, opened from its placement on first use and shared with every
    /// fork of the session.
    pub async fn sandbox(&self) -> Result<SandboxHandle, ToolError> {
        self.0
            .backends
            .sandbox_for(&self.0.session)
            .await
            .map_err(|e| e.to_failure())
    }

    /// Runs `payload` in the session's sandbox and keeps the dispatch evidence for the
    /// call's `tool_evidence` chunk.
    pub async fn dispatch(&self, payload: &Payload) -> Result<Output, ToolError> {
        let handle = self.sandbox().await?;
        let done = self
            .0
            .backends
            .dispatch(&handle, payload, self.0.session.stamper())
            .await;
        if let Ok(mut ev) = self.0.evidence.lock() {
            ev.push(done.evidence.clone());
        }
        done.outcome
    }

    /// Evidence of the dispatches made so far.
    pub fn dispatch_evidence(&self) -> Vec<DispatchEvidence> {
        self.0
            .evidence
            .lock()
            .map(|e| e.clone())
            .unwrap_or_default()
    }

    /// Records the call's own evidence (for tools that do not go through a sandbox, such as
    /// MCP servers: server, transport, protocol version, timing). The loop prefers it over
    /// dispatch evidence for the call's `tool_evidence` chunk and fills in `tool_call_id`,
    /// `tool`, `outcome` and `elapsed_ms`. A later record replaces an earlier one.
    pub fn record_evidence(&self, evidence: ToolEvidence) {
        if let Ok(mut slot) = self.0.recorded.lock() {
            *slot = Some(evidence);
        }
    }

    /// The evidence recorded with [`ToolContext::record_evidence`], if any.
    pub fn recorded_evidence(&self) -> Option<ToolEvidence> {
        self.0.recorded.lock().ok().and_then(|e| e.clone())
    }
}

/// A function the model can call.
///
/// Implement it directly for full control, or use [`typed_tool`] / [`RawTool`].
#[async_trait]
pub trait Tool: Send + Sync {
    /// The function name the model calls.
    fn name(&self) -> &str;
    /// What the tool does, for the model.
    fn description(&self) -> &str;
    /// JSON Schema of the arguments object.
    fn parameters(&self) -> &Value;
    /// True when calls may run concurrently with other parallel-safe calls of one round.
    fn parallel_safe(&self) -> bool {
        false
    }
    /// Calls with the same key never run at the same time (e.g. the path a write touches).
    fn resource_key(&self, args: &Value) -> Option<String> {
        let _ = args;
        None
    }
    /// This tool's timeout; the loop's default applies when `None`.
    fn timeout(&self) -> Option<Duration> {
        None
    }
    /// True when running a call twice with the same arguments does no more than running it
    /// once (a lookup, a read, a write keyed by an idempotency key the tool hands on). A
    /// durable run that finds a call of a tool dispatched but unanswered after a crash runs
    /// it again when it is idempotent, and otherwise stops for review: it cannot know
    /// whether the effect happened. Not idempotent by default.
    fn idempotent(&self) -> bool {
        false
    }
    /// Runs the call with validated arguments.
    async fn call(&self, cx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError>;
}

/// The schema of `T` as a tool parameter object: `schemars` output without the root
/// `$schema` and `title` keys (which models do not need).
///
/// ```
/// #[derive(schemars::JsonSchema)]
/// #[allow(dead_code)]
/// struct Args { text: String }
/// let s = rath_flow::parameters_for::<Args>();
/// assert_eq!(s, serde_json::json!({
///     "type": "object",
///     "properties": {"text": {"type": "string"}},
///     "required": ["text"]
/// }));
/// ```
pub fn parameters_for<T: JsonSchema>() -> Value {
    let mut v = schemars::schema_for!(T).to_value();
    if let Value::Object(map) = &mut v {
        map.remove("$schema");
        map.remove("title");
    }
    v
}

/// A tool from a closure over typed arguments; see [`typed_tool`].
pub struct TypedTool<A, F> {
    name: String,
    description: String,
    parameters: Value,
    parallel_safe: bool,
    idempotent: bool,
    resource_arg: Option<String>,
    timeout: Option<Duration>,
    f: F,
    _args: PhantomData<fn(A)>,
}

impl<A, F> fmt::Debug for TypedTool<A, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedTool")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A tool whose arguments are the `schemars` struct `A` and whose result `R` is serialised
/// with [`py_json`]. The closure gets a [`ToolContext`] and the deserialised arguments.
pub fn typed_tool<A, R, F, Fut>(
    name: impl Into<String>,
    description: impl Into<String>,
    f: F,
) -> TypedTool<A, F>
where
    A: DeserializeOwned + JsonSchema + Send + 'static,
    R: Serialize,
    F: Fn(ToolContext, A) -> Fut + Send + Sync,
    Fut: Future<Output = Result<R, ToolError>> + Send,
{
    TypedTool {
        name: name.into(),
        description: description.into(),
        parameters: parameters_for::<A>(),
        parallel_safe: false,
        idempotent: false,
        resource_arg: None,
        timeout: None,
        f,
        _args: PhantomData,
    }
}

impl<A, F> TypedTool<A, F> {
    /// Declares the tool parallel-safe (or not).
    pub fn parallel_safe(mut self, yes: bool) -> Self {
        self.parallel_safe = yes;
        self
    }

    /// Declares the tool idempotent (or not): see [`Tool::idempotent`].
    pub fn idempotent(mut self, yes: bool) -> Self {
        self.idempotent = yes;
        self
    }

    /// Uses the string argument `arg` as the resource key (calls on one key never overlap).
    pub fn resource_arg(mut self, arg: impl Into<String>) -> Self {
        self.resource_arg = Some(arg.into());
        self
    }

    /// Sets this tool's timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Replaces the derived schema (e.g. to add descriptions).
    pub fn with_parameters(mut self, parameters: Value) -> Self {
        self.parameters = parameters;
        self
    }
}

#[async_trait]
impl<A, R, F, Fut> Tool for TypedTool<A, F>
where
    A: DeserializeOwned + Send + 'static,
    R: Serialize,
    F: Fn(ToolContext, A) -> Fut + Send + Sync,
    Fut: Future<Output = Result<R, ToolError>> + Send,
{
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn parameters(&self) -> &Value {
        &self.parameters
    }
    fn parallel_safe(&self) -> bool {
        self.parallel_safe
    }
    fn idempotent(&self) -> bool {
        self.idempotent
    }
    fn resource_key(&self, args: &Value) -> Option<String> {
        let arg = self.resource_arg.as_ref()?;
        args.get(arg).map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    }
    fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
    async fn call(&self, cx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let typed: A = serde_json::from_value(args)
            .map_err(|e| ToolError::invalid_arguments(format!("arguments do not fit: {e}")))?;
        let out = (self.f)(cx.clone(), typed).await?;
        Ok(ToolOutput::json(&out))
    }
}

/// The boxed closure behind a [`RawTool`].
pub type RawToolFn = dyn Fn(ToolContext, Value) -> futures::future::BoxFuture<'static, Result<ToolOutput, ToolError>>
    + Send
    + Sync;

/// A tool with a hand-written schema over raw JSON arguments.
///
/// ```
/// use rath_flow::{RawTool, ToolOutput};
/// use serde_json::json;
///
/// let echo = RawTool::new("echo", "Echo the arguments.", json!({"type": "object"}), |_cx, args| {
///     Box::pin(async move { Ok(ToolOutput::json(&args)) })
/// })
/// .parallel_safe(true);
/// # let _ = echo;
/// ```
pub struct RawTool {
    name: String,
    description: String,
    parameters: Value,
    parallel_safe: bool,
    idempotent: bool,
    timeout: Option<Duration>,
    f: Box<RawToolFn>,
}

impl fmt::Debug for RawTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawTool")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl RawTool {
    /// A tool named `name` with `parameters` as its schema.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
        f: impl Fn(
            ToolContext,
            Value,
        ) -> futures::future::BoxFuture<'static, Result<ToolOutput, ToolError>>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            parameters,
            parallel_safe: false,
            idempotent: false,
            timeout: None,
            f: Box::new(f),
        }
    }

    /// Declares the tool parallel-safe (or not).
    pub fn parallel_safe(mut self, yes: bool) -> Self {
        self.parallel_safe = yes;
        self
    }

    /// Declares the tool idempotent (or not): see [`Tool::idempotent`].
    pub fn idempotent(mut self, yes: bool) -> Self {
        self.idempotent = yes;
        self
    }

    /// Sets this tool's timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

#[async_trait]
impl Tool for RawTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn parameters(&self) -> &Value {
        &self.parameters
    }
    fn parallel_safe(&self) -> bool {
        self.parallel_safe
    }
    fn idempotent(&self) -> bool {
        self.idempotent
    }
    fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
    async fn call(&self, cx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        (self.f)(cx.clone(), args).await
    }
}

/// Schemas compiled so far in this process, by their JSON text, at most
/// [`COMPILED_MAX`]: an agent built per run (a durable worker constructs its workflow on
/// every claim) would otherwise compile the same tool schemas each time, which costs more
/// than the rest of building it.
static COMPILED: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<String, Arc<jsonschema::Validator>>>,
> = std::sync::LazyLock::new(Default::default);

/// How many distinct schemas [`COMPILED`] keeps (past that, schemas are compiled each time).
const COMPILED_MAX: usize = 1024;

/// The validator of `schema`, compiled once per process (see [`COMPILED`]).
fn compiled(schema: &Value) -> Result<Arc<jsonschema::Validator>, String> {
    let key = schema.to_string();
    let cache = || COMPILED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(v) = cache().get(&key) {
        return Ok(v.clone());
    }
    let v = Arc::new(jsonschema::validator_for(schema).map_err(|e| e.to_string())?);
    let mut c = cache();
    if c.len() < COMPILED_MAX {
        c.insert(key, v.clone());
    }
    Ok(v)
}

/// A registered tool and its compiled argument validator.
#[derive(Clone)]
pub(crate) struct Registered {
    pub(crate) tool: Arc<dyn Tool>,
    validator: Arc<jsonschema::Validator>,
    /// True when the schema accepts any object (skip validation on the hot path).
    trivial: bool,
}

/// The tools an agent offers: built-ins and user tools, names unique, sorted by name.
#[derive(Clone, Default)]
pub struct ToolSet {
    tools: BTreeMap<String, Registered>,
    schemas: Arc<Vec<ToolSchema>>,
}

impl fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl ToolSet {
    /// No tools.
    pub fn new() -> Self {
        Self::default()
    }

    /// The set with `tool` added; a name clash is an error.
    pub fn with(mut self, tool: impl Tool + 'static) -> Result<Self, FlowError> {
        self.add(Arc::new(tool))?;
        Ok(self)
    }

    /// Adds a shared tool; a name clash is an error.
    pub fn add(&mut self, tool: Arc<dyn Tool>) -> Result<(), FlowError> {
        let name = tool.name().to_owned();
        if self.tools.contains_key(&name) {
            return Err(FlowError::ToolNameClash { name });
        }
        let validator = compiled(tool.parameters()).map_err(|e| FlowError::InvalidTool {
            name: name.clone(),
            message: format!("parameter schema does not compile: {e}"),
        })?;
        let trivial = is_trivial_schema(tool.parameters());
        self.tools.insert(
            name,
            Registered {
                tool,
                validator,
                trivial,
            },
        );
        self.rebuild_schemas();
        Ok(())
    }

    /// Both sets together; a name in both is an error.
    pub fn merge(mut self, other: &ToolSet) -> Result<Self, FlowError> {
        for r in other.tools.values() {
            self.add(r.tool.clone())?;
        }
        Ok(self)
    }

    /// The set without `name` (e.g. to drop a built-in before adding your own).
    pub fn without(mut self, name: &str) -> Self {
        self.tools.remove(name);
        self.rebuild_schemas();
        self
    }

    fn rebuild_schemas(&mut self) {
        self.schemas = Arc::new(
            self.tools
                .values()
                .map(|r| {
                    ToolSchema::new(
                        r.tool.name(),
                        r.tool.description(),
                        r.tool.parameters().clone(),
                    )
                })
                .collect(),
        );
    }

    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name).map(|r| &r.tool)
    }

    pub(crate) fn registered(&self, name: &str) -> Option<&Registered> {
        self.tools.get(name)
    }

    /// Names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.tools.keys().cloned().collect()
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The schemas the model sees, sorted by name (as OpenRath sends them).
    pub fn schemas(&self) -> Vec<ToolSchema> {
        self.schemas.as_ref().clone()
    }

    /// Validates `args` against the schema of tool `name`: `Err(message)` lists the problems.
    pub fn validate(&self, name: &str, args: &Value) -> Result<(), String> {
        let Some(r) = self.tools.get(name) else {
            return Err(format!("unknown tool {name:?}"));
        };
        r.validate(args)
    }
}

impl Registered {
    pub(crate) fn validate(&self, args: &Value) -> Result<(), String> {
        if self.trivial {
            return if args.is_object() {
                Ok(())
            } else {
                Err("arguments must be a JSON object".to_owned())
            };
        }
        let problems: Vec<String> = self
            .validator
            .iter_errors(args)
            .take(5)
            .map(|e| {
                let path = e.instance_path().to_string();
                if path.is_empty() {
                    e.to_string()
                } else {
                    format!("{path}: {e}")
                }
            })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}

/// `{"type":"object"}` with nothing else constrains only the top-level type.
fn is_trivial_schema(schema: &Value) -> bool {
    match schema {
        Value::Object(m) => {
            m.len() == 1 && m.get("type").and_then(Value::as_str) == Some("object") || m.is_empty()
        }
        Value::Bool(true) => true,
        _ => false,
    }
}
