# rath-otel: a real Arize Phoenix (PyPI arize-phoenix) on loopback, so the OpenTelemetry test
# (crates/openrath/tests/otel_phoenix.rs) can send the engineering_team run's spans to it and
# read them back through Phoenix's REST API. Installs into a venv under /opt (idempotent: a
# second run reuses it), starts `phoenix serve` offline in the background with its own working
# directory, and exports RATH_PHOENIX_URL once it answers /healthz. Sourced by .ci/run with
# `set -euo pipefail`; a failure here leaves the variable unset, and under RATH_CI=1 the test
# then fails rather than skips.

rath_phoenix_setup() {
  local venv="${RATH_PHOENIX_VENV:-/opt/rath-phoenix-venv}"
  local port="${RATH_PHOENIX_PORT:-6006}"
  local grpc_port="${RATH_PHOENIX_GRPC_PORT:-4317}"
  local url="http://127.0.0.1:${port}"
  local work="${RATH_PHOENIX_WORKDIR:-/tmp/rath-phoenix}"
  local log="${work}/phoenix.log"

  if curl -fsS "${url}/healthz" >/dev/null 2>&1; then
    export RATH_PHOENIX_URL="$url"
    return 0
  fi
  if ! "${venv}/bin/python" -c 'import phoenix' >/dev/null 2>&1; then
    python3 -m venv "$venv" || return 1
    "${venv}/bin/pip" install -q --disable-pip-version-check 'arize-phoenix==20.26.1' || return 1
  fi
  mkdir -p "$work"
  # Offline: no telemetry, no update checks; loopback only.
  PHOENIX_WORKING_DIR="$work" PHOENIX_HOST=127.0.0.1 PHOENIX_PORT="$port" \
    PHOENIX_GRPC_PORT="$grpc_port" PHOENIX_TELEMETRY_ENABLED=false DO_NOT_TRACK=1 \
    nohup "${venv}/bin/phoenix" serve >"$log" 2>&1 &

  local waited=0
  until curl -fsS "${url}/healthz" >/dev/null 2>&1; do
    if [ "$waited" -ge 90 ]; then
      echo "70-phoenix: Phoenix did not answer within 90s; see $log" >&2
      return 1
    fi
    sleep 1
    waited=$((waited + 1))
  done
  echo "70-phoenix: Phoenix up at ${url} after ${waited}s"
  export RATH_PHOENIX_URL="$url"
}

if ! rath_phoenix_setup; then
  echo "70-phoenix: Phoenix unavailable; the Phoenix test will skip (fail under RATH_CI=1)" >&2
fi
