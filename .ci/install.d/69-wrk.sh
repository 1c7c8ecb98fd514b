#!/usr/bin/env bash
# wrk (Debian), the HTTP load generator `cargo xtask bench` drives against rath-server and
# Python OpenRath's server from a second process (the server workload of issues 21 and 24,
# run by the quick smoke phase of .ci/run). Idempotent: a second run only checks. Sourced by
# .ci/run with `set -euo pipefail`; on failure the bench installs it itself or says why.

rath_wrk_setup() {
  if command -v wrk >/dev/null 2>&1; then
    return 0
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null 2>&1 || true
  fi
  command -v wrk >/dev/null 2>&1 || {
    echo "69-wrk: wrk unavailable; the server benchmark will say so" >&2
    return 1
  }
}
rath_wrk_setup || true
