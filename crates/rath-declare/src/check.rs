//! The checks a set of declared workflows passes before anything runs: every name a flow
//! uses is an agent of its file or a declared workflow, every tool is a built-in one, every
//! approval names one of the agent's tools, and no workflow reaches itself.

use std::collections::BTreeMap;
use std::sync::Arc;

use rath_flow::ToolSet;

use crate::DeclareError;
use crate::spec::{Step, ToolRef, WorkflowSpec};

/// The names used by `step`, with their lines.
fn uses<'s>(step: &'s Step, out: &mut Vec<(&'s str, usize)>) {
    match step {
        Step::Use { name, line } => out.push((name, *line)),
        Step::Sequence { steps, .. }
        | Step::Parallel { steps, .. }
        | Step::Select { steps, .. } => {
            for s in steps {
                uses(s, out);
            }
        }
        Step::Loop { body, .. } => uses(body, out),
    }
}

/// The agents of `spec`: every tool is a built-in one (of `builtins`) or of an MCP server
/// the file declares, and every approval names one of the agent's tools.
fn check_agents(spec: &WorkflowSpec, builtins: &[String]) -> Result<(), DeclareError> {
    for (agent, a) in &spec.agents {
        for t in &a.tools {
            let line = a.lines.get(t).copied().unwrap_or(a.line);
            match ToolRef::of(t) {
                ToolRef::Builtin(b) if !builtins.iter().any(|n| n == b) => {
                    return Err(spec.error_at(
                        line,
                        format!(
                            "agent {agent:?}: unknown tool {t:?} (the built-in tools are \
                             {}; an MCP server's are mcp:SERVER or mcp:SERVER/TOOL)",
                            builtins.join(", ")
                        ),
                    ));
                }
                ToolRef::McpServer(server) | ToolRef::McpTool(server, _)
                    if !spec.mcp.contains_key(server) =>
                {
                    return Err(spec.error_at(
                        line,
                        format!(
                            "agent {agent:?}: tool {t:?} is of MCP server {server:?}, which \
                             this file does not declare ([mcp.{server}])"
                        ),
                    ));
                }
                ToolRef::McpTool(_, "") | ToolRef::McpServer("") => {
                    return Err(
                        spec.error_at(line, format!("agent {agent:?}: {t:?} names no tool"))
                    );
                }
                _ => {}
            }
        }
        for t in &a.approve {
            // An MCP tool given with its whole server is approved by its own name.
            let of_server = match ToolRef::of(t) {
                ToolRef::McpTool(server, _) => {
                    a.tools.iter().any(|u| *u == format!("mcp:{server}"))
                }
                _ => false,
            };
            if !a.tools.contains(t) && !of_server {
                return Err(spec.error_at(
                    a.lines.get(t).copied().unwrap_or(a.line),
                    format!("agent {agent:?}: approve names {t:?}, which is not one of its tools"),
                ));
            }
        }
    }
    Ok(())
}

/// Checks `all` (see the module docs).
pub(crate) fn check(all: &BTreeMap<String, Arc<WorkflowSpec>>) -> Result<(), DeclareError> {
    let builtins = ToolSet::builtins().names();
    // The workflows each one uses, with the line of the use.
    let mut edges: BTreeMap<&str, Vec<(&str, usize)>> = BTreeMap::new();
    for (name, spec) in all {
        check_agents(spec, &builtins)?;
        let mut used = Vec::new();
        uses(&spec.flow, &mut used);
        let mut others = Vec::new();
        for (u, line) in used {
            match (spec.agents.contains_key(u), all.contains_key(u)) {
                (true, true) if u != name.as_str() => {
                    return Err(spec.error_at(
                        line,
                        format!("{u:?} is both an agent of this file and a declared workflow"),
                    ));
                }
                (true, _) => {}
                (false, true) => {
                    others.push((all.get_key_value(u).map_or(u, |(k, _)| k.as_str()), line))
                }
                (false, false) => {
                    return Err(spec.error_at(
                        line,
                        format!("{u:?} is no agent of this file and no declared workflow"),
                    ));
                }
            }
        }
        edges.insert(name.as_str(), others);
    }
    // A use cycle: depth first from each workflow, in name order.
    let mut done: Vec<&str> = Vec::new();
    for start in edges.keys() {
        let mut path: Vec<&str> = Vec::new();
        if let Some((from, to, line)) = cycle(start, &edges, &mut path, &mut done) {
            let spec = &all[from];
            return Err(spec.error_at(
                line,
                format!(
                    "workflow {from:?} uses {to:?}, which reaches {from:?} again: {}",
                    path.join(" -> ")
                ),
            ));
        }
    }
    Ok(())
}

/// The use that closes a cycle reachable from `at`, if any: (user, used, line).
fn cycle<'a>(
    at: &'a str,
    edges: &BTreeMap<&'a str, Vec<(&'a str, usize)>>,
    path: &mut Vec<&'a str>,
    done: &mut Vec<&'a str>,
) -> Option<(&'a str, &'a str, usize)> {
    if done.contains(&at) {
        return None;
    }
    path.push(at);
    for &(next, line) in edges.get(at).map(Vec::as_slice).unwrap_or_default() {
        if path.contains(&next) {
            path.push(next);
            return Some((at, next, line));
        }
        if let Some(found) = cycle(next, edges, path, done) {
            return Some(found);
        }
    }
    path.pop();
    done.push(at);
    None
}
