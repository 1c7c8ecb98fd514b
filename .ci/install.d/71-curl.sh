#!/usr/bin/env bash
# curl (Debian): docs/getting-started.md calls the server with it, and
# crates/rath-cli/tests/getting_started.rs runs that page as written. Idempotent: a second
# run only checks. Sourced by .ci/run with `set -euo pipefail`.

rath_curl_setup() {
  if command -v curl >/dev/null 2>&1; then
    return 0
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl >/dev/null 2>&1 || true
  fi
  command -v curl >/dev/null 2>&1 || {
    echo "71-curl: curl unavailable; the getting-started test will fail under RATH_CI" >&2
    return 1
  }
}
rath_curl_setup || true
