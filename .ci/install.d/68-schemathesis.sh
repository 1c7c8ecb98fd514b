#!/usr/bin/env bash
# schemathesis (PyPI), the OpenAPI fuzzer that rath-server's tests/schemathesis.rs runs
# against the server's own /openapi.json: a venv under /opt/rath-schemathesis-venv, pinned.
# Exports RATH_SCHEMATHESIS (its command). Idempotent: a second run only checks. Sourced by
# .ci/run with `set -euo pipefail`; on failure the variable stays unset and, under
# RATH_CI=1, that test fails instead of skipping.

rath_schemathesis_setup() {
  local venv="${RATH_SCHEMATHESIS_VENV:-/opt/rath-schemathesis-venv}"
  if ! "${venv}/bin/schemathesis" --version >/dev/null 2>&1; then
    python3 -m venv "$venv" >/dev/null 2>&1 || true
    "${venv}/bin/pip" install -q --disable-pip-version-check 'schemathesis==4.32.5' \
      >/dev/null 2>&1 || true
  fi
  if "${venv}/bin/schemathesis" --version >/dev/null 2>&1; then
    export RATH_SCHEMATHESIS="${venv}/bin/schemathesis"
  else
    echo "68-schemathesis: schemathesis unavailable; the server's fuzz test is skipped" >&2
    return 1
  fi
}
rath_schemathesis_setup || true
