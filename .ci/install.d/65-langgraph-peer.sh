#!/usr/bin/env bash
# The LangGraph peer of the store benchmark (../shared/peers/langgraph_checkpoint_bench.py):
# a venv with LangGraph and its official Postgres checkpointer, the versions the peers README
# measured with, under /opt/rath-langgraph-venv. Exports RATH_LANGGRAPH_PYTHON (the venv's
# python), read by `cargo xtask bench store` to run the peer in the same sitting as our store.
# Idempotent: a second run only checks. Sourced by .ci/run with `set -euo pipefail`; a failure
# here only leaves the peer side of that bench unmeasured (it says so).

rath_langgraph_setup() {
  local venv="${RATH_LANGGRAPH_VENV:-/opt/rath-langgraph-venv}"
  local probe='import langgraph, langgraph.checkpoint.postgres, psycopg, psycopg_pool'
  if ! "${venv}/bin/python" -c "$probe" >/dev/null 2>&1; then
    python3 -m venv "$venv" >/dev/null 2>&1 || true
    "${venv}/bin/pip" install -q --disable-pip-version-check \
      'langgraph==1.2.*' 'langgraph-checkpoint-postgres==3.2.*' 'psycopg[binary]' psycopg-pool \
      >/dev/null 2>&1 || true
  fi
  if "${venv}/bin/python" -c "$probe" >/dev/null 2>&1; then
    export RATH_LANGGRAPH_PYTHON="${venv}/bin/python"
  else
    echo "65-langgraph-peer: LangGraph venv unavailable; the peer side of the store bench is skipped" >&2
    return 1
  fi
}
rath_langgraph_setup || true
