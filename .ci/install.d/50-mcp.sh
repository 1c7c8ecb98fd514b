#!/usr/bin/env bash
# Real MCP servers for rath-mcp's integration tests and its `mcp_tools` example:
# - @modelcontextprotocol/server-everything (node, stdio: `mcp-server-everything stdio`)
#   installed under /opt/rath-mcp-node;
# - mcp-server-time (python, stdio: `python -m mcp_server_time`) in the venv /opt/rath-mcp-venv.
# Exports RATH_MCP_EVERYTHING and RATH_MCP_TIME_PYTHON. Idempotent: a second run only checks.
# Sourced by .ci/run with `set -euo pipefail`; a failure here only leaves those tests skipped.

rath_mcp_setup() {
  local node_dir="${RATH_MCP_NODE_DIR:-/opt/rath-mcp-node}"
  local venv="${RATH_MCP_VENV:-/opt/rath-mcp-venv}"
  local ok=0

  local bin="${node_dir}/node_modules/.bin/mcp-server-everything"
  if [ ! -x "$bin" ] && command -v npm >/dev/null 2>&1; then
    mkdir -p "$node_dir"
    npm install --prefix "$node_dir" --silent --no-audit --no-fund \
      @modelcontextprotocol/server-everything >/dev/null 2>&1 || true
  fi
  if [ -x "$bin" ]; then
    export RATH_MCP_EVERYTHING="$bin"
  else
    echo "50-mcp: server-everything unavailable; its tests will skip" >&2
    ok=1
  fi

  if [ ! -x "${venv}/bin/python" ]; then
    python3 -m venv "$venv" >/dev/null 2>&1 || true
  fi
  if [ -x "${venv}/bin/python" ] && ! "${venv}/bin/python" -c 'import mcp_server_time' >/dev/null 2>&1; then
    "${venv}/bin/pip" install -q --disable-pip-version-check mcp-server-time >/dev/null 2>&1 || true
  fi
  if [ -x "${venv}/bin/python" ] && "${venv}/bin/python" -c 'import mcp_server_time' >/dev/null 2>&1; then
    export RATH_MCP_TIME_PYTHON="${venv}/bin/python"
  else
    echo "50-mcp: mcp-server-time unavailable; its tests will skip" >&2
    ok=1
  fi
  return "$ok"
}

rath_mcp_setup || true
