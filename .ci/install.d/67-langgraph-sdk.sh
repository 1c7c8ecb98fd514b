#!/usr/bin/env bash
# The LangGraph client of the server's compatibility test (crates/rath-server/tests/langgraph.rs
# runs tests/langgraph/flow.py with it): a venv with the official Python SDK, langgraph-sdk
# 0.4.14 (the version ../shared/langgraph-api/PROTOCOL.md was recorded with), under
# /opt/rath-langgraph-sdk-venv. Exports RATH_LANGGRAPH_SDK_PYTHON (the venv's python).
# Idempotent: a second run only checks. Sourced by .ci/run with `set -euo pipefail`; when the
# install fails the variable stays unset and the test fails under RATH_CI=1, saying why.

rath_langgraph_sdk_setup() {
  local venv="${RATH_LANGGRAPH_SDK_VENV:-/opt/rath-langgraph-sdk-venv}"
  local probe='import importlib.metadata as m, sys, langgraph_sdk; sys.exit(m.version("langgraph-sdk") != "0.4.14")'
  if ! "${venv}/bin/python" -c "$probe" >/dev/null 2>&1; then
    python3 -m venv "$venv" >/dev/null 2>&1 || true
    "${venv}/bin/pip" install -q --disable-pip-version-check --no-cache-dir \
      'langgraph-sdk==0.4.14' >/dev/null 2>&1 || true
  fi
  if "${venv}/bin/python" -c "$probe" >/dev/null 2>&1; then
    export RATH_LANGGRAPH_SDK_PYTHON="${venv}/bin/python"
  else
    echo "67-langgraph-sdk: langgraph-sdk 0.4.14 unavailable; the LangGraph client test fails under RATH_CI=1" >&2
    return 1
  fi
}
rath_langgraph_sdk_setup || true
