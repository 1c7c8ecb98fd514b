//! One file, parsed: its workflow's declaration, with where each part is in the file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::{Spanned, Value};

use crate::DeclareError;

/// The most iterations a declared loop may ask for.
pub const MAX_LOOP: usize = 1000;

/// A declared workflow: what one file says.
#[derive(Clone, Debug)]
pub struct WorkflowSpec {
    /// Its name (the file's `name`, else its stem).
    pub name: String,
    /// What it is for.
    pub description: String,
    /// Its agents, by name.
    pub agents: BTreeMap<String, AgentSpec>,
    /// What runs.
    pub flow: Step,
    /// The MCP servers its agents take tools from, by name (`[mcp.NAME]`).
    pub mcp: BTreeMap<String, McpSpec>,
    /// The file it came from, and its text.
    pub file: PathBuf,
    /// The file's text (the workflow's definition).
    pub text: String,
    /// The line of its name (or 1).
    pub(crate) name_line: usize,
}

/// A declared MCP server: a program spawned over stdio or a streamable-HTTP endpoint.
#[derive(Clone, Debug)]
pub struct McpSpec {
    /// How to reach it (the `mcpServers` entry it amounts to).
    pub config: rath_mcp::ServerConfig,
    /// The line of its table.
    pub(crate) line: usize,
}

/// A tool an agent names: a built-in one, or an MCP server's (`mcp:SERVER` for all its
/// tools, `mcp:SERVER/TOOL` for one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolRef<'a> {
    /// A built-in tool.
    Builtin(&'a str),
    /// Every tool of an MCP server.
    McpServer(&'a str),
    /// One tool of an MCP server.
    McpTool(&'a str, &'a str),
}

impl<'a> ToolRef<'a> {
    /// What `name` refers to.
    pub fn of(name: &'a str) -> ToolRef<'a> {
        match name.strip_prefix("mcp:") {
            Some(rest) => match rest.split_once('/') {
                Some((server, tool)) => ToolRef::McpTool(server, tool),
                None => ToolRef::McpServer(rest),
            },
            None => ToolRef::Builtin(name),
        }
    }

    /// The name the model sees for a single tool (`None` for a whole server).
    pub fn tool_name(&self) -> Option<&'a str> {
        match self {
            ToolRef::Builtin(t) | ToolRef::McpTool(_, t) => Some(t),
            ToolRef::McpServer(_) => None,
        }
    }
}

/// A declared agent.
#[derive(Clone, Debug)]
pub struct AgentSpec {
    /// Its instructions (the system prompt).
    pub instructions: String,
    /// What it does, for a selector choosing among agents.
    pub description: Option<String>,
    /// The model name asked for (the provider comes from the environment).
    pub model: Option<String>,
    /// Tools it may call: built-in workspace tools by name, MCP servers' tools as
    /// `mcp:SERVER` or `mcp:SERVER/TOOL` (see [`ToolRef`]).
    pub tools: Vec<String>,
    /// Tools whose calls wait for a person's decision.
    pub approve: Vec<String>,
    /// How many tool rounds its loop may take.
    pub max_tool_rounds: Option<usize>,
    /// Lines of each tool and approval name, for errors.
    pub(crate) lines: BTreeMap<String, usize>,
    /// The line of the agent's table.
    pub(crate) line: usize,
}

/// A step of a flow.
#[derive(Clone, Debug)]
pub enum Step {
    /// An agent of the file, or another declared workflow.
    Use {
        /// The name used.
        name: String,
        /// Its line.
        line: usize,
    },
    /// Steps one after another.
    Sequence {
        /// Its name (default: the workflow's at the top, else `sequence`).
        name: Option<String>,
        /// The steps.
        steps: Vec<Step>,
    },
    /// Steps on forks of the same session, merged.
    Parallel {
        /// Its name.
        name: Option<String>,
        /// The branches.
        steps: Vec<Step>,
    },
    /// A model picks the next candidate until it says done.
    Select {
        /// Its name.
        name: Option<String>,
        /// The candidates.
        steps: Vec<Step>,
    },
    /// A step again, until its final text contains `until` or `max` times.
    Loop {
        /// Its name.
        name: Option<String>,
        /// The step.
        body: Box<Step>,
        /// The text that ends it.
        until: Option<String>,
        /// At most this many iterations.
        max: usize,
    },
}

impl WorkflowSpec {
    /// An error at `line` of this file.
    pub(crate) fn error_at(&self, line: usize, message: impl Into<String>) -> DeclareError {
        DeclareError::Invalid {
            file: self.file.clone(),
            line,
            message: message.into(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    name: Option<Spanned<String>>,
    #[serde(default)]
    description: String,
    flow: Option<Spanned<Value>>,
    #[serde(default)]
    agents: BTreeMap<String, Spanned<RawAgent>>,
    #[serde(default)]
    mcp: BTreeMap<String, Spanned<RawMcp>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMcp {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    timeout: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgent {
    instructions: String,
    description: Option<String>,
    model: Option<String>,
    #[serde(default)]
    tools: Vec<Spanned<String>>,
    #[serde(default)]
    approve: Vec<Spanned<String>>,
    max_tool_rounds: Option<usize>,
}

/// The line (from 1) of byte `at` of `text`.
fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Keys that hold credentials, which a workflow file never does.
const SECRET_KEYS: &[&str] = &[
    "api_key",
    "apikey",
    "key",
    "token",
    "secret",
    "password",
    "authorization",
    "openai_api_key",
    "anthropic_api_key",
];

/// True when `s` looks like a credential.
fn looks_secret(s: &str) -> bool {
    let t = s.trim();
    (t.starts_with("sk-") && t.len() >= 20)
        || t.starts_with("Bearer ")
        || t.starts_with("ghp_")
        || t.starts_with("xoxb-")
        || (t.starts_with("rath_") && t.len() == 69)
}

/// The first credential-like key or value in `value`, and the text to find it by.
fn find_secret(value: &Value) -> Option<(String, String)> {
    match value {
        Value::String(s) if looks_secret(s) => Some((
            "a credential-like value".to_owned(),
            s.chars().take(12).collect(),
        )),
        Value::Array(a) => a.iter().find_map(find_secret),
        Value::Table(t) => t.iter().find_map(|(k, v)| {
            if SECRET_KEYS.contains(&k.to_ascii_lowercase().as_str()) {
                Some((format!("a credential key {k:?}"), k.clone()))
            } else {
                find_secret(v)
            }
        }),
        _ => None,
    }
}

/// Parses file `file` whose text is `text`.
pub(crate) fn parse(file: &Path, text: &str) -> Result<WorkflowSpec, DeclareError> {
    let invalid = |line: usize, message: String| DeclareError::Invalid {
        file: file.to_owned(),
        line,
        message,
    };
    let table: toml::Table = toml::from_str(text).map_err(|e| {
        let line = e.span().map_or(1, |s| line_of(text, s.start));
        invalid(line, e.message().trim().to_owned())
    })?;
    if let Some((what, needle)) = find_secret(&Value::Table(table)) {
        let line = text.find(&needle).map_or(1, |at| line_of(text, at));
        return Err(invalid(
            line,
            format!(
                "{what}: a workflow file holds no credentials (models take theirs from the \
                 environment)"
            ),
        ));
    }
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let line = e.span().map_or(1, |s| line_of(text, s.start));
        invalid(line, e.message().trim().to_owned())
    })?;
    let (name, name_line) = match &raw.name {
        Some(n) => (n.get_ref().clone(), line_of(text, n.span().start)),
        None => (
            file.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            1,
        ),
    };
    if name.trim().is_empty() || name.len() > 128 {
        return Err(invalid(
            name_line,
            "a workflow's name is 1 to 128 characters".into(),
        ));
    }
    let agents = agents(file, text, &raw.agents)?;
    let mcp = mcp_servers(file, text, &raw.mcp)?;
    let flow = match &raw.flow {
        Some(flow) => {
            let from = flow.span().start;
            let at = |needle: &str| {
                text[from..]
                    .find(needle)
                    .map_or(line_of(text, from), |i| line_of(text, from + i))
            };
            step(flow.get_ref(), &at).map_err(|(line, m)| invalid(line, m))?
        }
        None if agents.len() == 1 => Step::Use {
            name: agents.keys().next().cloned().unwrap_or_default(),
            line: 1,
        },
        None => {
            return Err(invalid(
                1,
                format!(
                    "no flow: a file with {} agents says which runs (flow = ...)",
                    agents.len()
                ),
            ));
        }
    };
    Ok(WorkflowSpec {
        name,
        description: raw.description,
        agents,
        flow,
        mcp,
        file: file.to_owned(),
        text: text.to_owned(),
        name_line,
    })
}

/// The MCP servers of a file, each checked as far as can be without starting it: a
/// program that exists (a path to a file, or a name found on `PATH`), or an `http(s)` URL.
fn mcp_servers(
    file: &Path,
    text: &str,
    raw: &BTreeMap<String, Spanned<RawMcp>>,
) -> Result<BTreeMap<String, McpSpec>, DeclareError> {
    let mut out = BTreeMap::new();
    for (name, spanned) in raw {
        let line = line_of(text, spanned.span().start);
        let invalid = |message: String| DeclareError::Invalid {
            file: file.to_owned(),
            line,
            message: format!("MCP server {name:?}: {message}"),
        };
        let m = spanned.get_ref();
        let mut config = rath_mcp::ServerConfig::default();
        config.command = m.command.clone();
        config.args = m.args.clone();
        config.env = m.env.clone();
        config.cwd = m.cwd.clone();
        config.url = m.url.clone();
        config.timeout = m.timeout;
        match config.spec().map_err(|e| invalid(e.to_string()))? {
            rath_mcp::ServerSpec::Stdio(s) => {
                if find_program(&s.command, s.cwd.as_deref()).is_none() {
                    return Err(invalid(format!(
                        "program {:?} not found (neither a file nor on PATH)",
                        s.command
                    )));
                }
            }
            rath_mcp::ServerSpec::Http(h) => {
                if !(h.url.starts_with("http://") || h.url.starts_with("https://")) {
                    return Err(invalid(format!("url {:?} is not http(s)", h.url)));
                }
            }
            _ => return Err(invalid("an unknown transport".into())),
        }
        if m.timeout.is_some_and(|t| !(t.is_finite() && t > 0.0)) {
            return Err(invalid("timeout is a positive number of seconds".into()));
        }
        out.insert(name.clone(), McpSpec { config, line });
    }
    Ok(out)
}

/// Where program `command` is: itself when it names a path (relative to `cwd` when given),
/// else the first executable file of that name on `PATH`.
fn find_program(command: &str, cwd: Option<&Path>) -> Option<PathBuf> {
    let runnable = |p: &Path| p.metadata().is_ok_and(|m| m.is_file() && executable(&m));
    if command.contains('/') {
        let p = match cwd {
            Some(dir) if !Path::new(command).is_absolute() => dir.join(command),
            _ => PathBuf::from(command),
        };
        return runnable(&p).then_some(p);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(command))
        .find(|p| runnable(p))
}

#[cfg(unix)]
fn executable(m: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    m.permissions().mode() & 0o111 != 0
}

#[cfg(not(unix))]
fn executable(_: &std::fs::Metadata) -> bool {
    true
}

/// The agents of a file, with the lines of their tables and of the tool names they use.
fn agents(
    file: &Path,
    text: &str,
    raw: &BTreeMap<String, Spanned<RawAgent>>,
) -> Result<BTreeMap<String, AgentSpec>, DeclareError> {
    let invalid = |line: usize, message: String| DeclareError::Invalid {
        file: file.to_owned(),
        line,
        message,
    };
    let mut agents = BTreeMap::new();
    for (agent, spanned) in raw {
        let line = line_of(text, spanned.span().start);
        let a = spanned.get_ref();
        let mut lines = BTreeMap::new();
        for t in a.tools.iter().chain(&a.approve) {
            lines
                .entry(t.get_ref().clone())
                .or_insert_with(|| line_of(text, t.span().start));
        }
        if a.max_tool_rounds == Some(0) {
            return Err(invalid(
                line,
                format!("agent {agent:?}: max_tool_rounds is at least 1"),
            ));
        }
        agents.insert(
            agent.clone(),
            AgentSpec {
                instructions: a.instructions.clone(),
                description: a.description.clone(),
                model: a.model.clone(),
                tools: a.tools.iter().map(|t| t.get_ref().clone()).collect(),
                approve: a.approve.iter().map(|t| t.get_ref().clone()).collect(),
                max_tool_rounds: a.max_tool_rounds,
                lines,
                line,
            },
        );
    }
    Ok(agents)
}

/// A step from its TOML value; `at` finds the line of a needle in the flow.
fn step(v: &Value, at: &dyn Fn(&str) -> usize) -> Result<Step, (usize, String)> {
    let table = match v {
        Value::String(name) => {
            return Ok(Step::Use {
                name: name.clone(),
                line: at(&format!("\"{name}\"")),
            });
        }
        Value::Table(t) => t,
        other => {
            return Err((
                at(&other.to_string()),
                format!(
                    "a step is a name or a table ({{sequence|parallel|select = [...]}} or \
                     {{loop = step, until, max}}), not a {}",
                    other.type_str()
                ),
            ));
        }
    };
    let kinds: Vec<&str> = ["sequence", "parallel", "select", "loop"]
        .into_iter()
        .filter(|k| table.contains_key(*k))
        .collect();
    let first_key = table.keys().next().map_or("{", String::as_str);
    let here = at(first_key);
    let [kind] = kinds[..] else {
        return Err((
            here,
            "a step table has exactly one of sequence, parallel, select, loop".into(),
        ));
    };
    let allowed: &[&str] = if kind == "loop" {
        &["loop", "until", "max", "name"]
    } else {
        &[kind, "name"]
    };
    if let Some(k) = table.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err((at(k), format!("unknown key {k:?} in a {kind} step")));
    }
    let name = match table.get("name") {
        None => None,
        Some(Value::String(n)) if !n.trim().is_empty() => Some(n.clone()),
        Some(_) => return Err((at("name"), "a step's name is a non-empty string".into())),
    };
    if kind == "loop" {
        let body = step(&table["loop"], at)?;
        let until = match table.get("until") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err((at("until"), "until is a text".into())),
        };
        let max = match table.get("max") {
            Some(Value::Integer(n)) if (1..=MAX_LOOP as i64).contains(n) => *n as usize,
            None => return Err((here, "a loop says how many times at most (max = N)".into())),
            Some(_) => return Err((at("max"), format!("max is from 1 to {MAX_LOOP}"))),
        };
        return Ok(Step::Loop {
            name,
            body: Box::new(body),
            until,
            max,
        });
    }
    let Value::Array(items) = &table[kind] else {
        return Err((at(kind), format!("{kind} is a list of steps")));
    };
    if items.is_empty() {
        return Err((at(kind), format!("{kind} has no steps")));
    }
    let steps = items
        .iter()
        .map(|s| step(s, at))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(match kind {
        "sequence" => Step::Sequence { name, steps },
        "parallel" => Step::Parallel { name, steps },
        _ => Step::Select { name, steps },
    })
}
