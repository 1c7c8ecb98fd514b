#!/usr/bin/env bash
# PostgreSQL 15 from Debian for rath-store-sql's tests (and the peer benches): starts the
# `15 main` cluster, creates the role `root` (password `rath`) and the database `test`, the
# ones ../shared/peers/README.md assumes, and exports RATH_TEST_POSTGRES_URL, the URL the
# tests read. Idempotent: a second run only checks. Sourced by .ci/run with
# `set -euo pipefail`; on failure the variable stays unset and, under RATH_CI=1, the
# PostgreSQL tests fail (they may not skip).

# shellcheck source=../lib/pg-start.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/pg-start.sh"

# TLS on, as Debian's package sets it up when the snake-oil certificate exists (made here if
# it does not): rath-store-sql's tls test connects with `sslmode=require`, and the durable
# bench reports that both sides speak TLS. Left as it is when no certificate can be made
# (the tls test then fails under RATH_CI=1, saying the server has ssl off).
rath_postgres_tls() {
  local key=/etc/ssl/private/ssl-cert-snakeoil.key cert=/etc/ssl/certs/ssl-cert-snakeoil.pem
  [ "$(su postgres -c "psql -qAtc 'show ssl'" 2>/dev/null)" = on ] && return 0
  if [ ! -f "$key" ] && command -v make-ssl-cert >/dev/null 2>&1; then
    make-ssl-cert generate-default-snakeoil >/dev/null 2>&1 || true
  fi
  if [ ! -f "$key" ] && command -v openssl >/dev/null 2>&1; then
    # No snake-oil certificate to be had: a self-signed one in the cluster's directory.
    local dir
    dir=$(su postgres -c "psql -qAtc 'show data_directory'" 2>/dev/null)
    if [ -n "$dir" ] && openssl req -new -x509 -days 3650 -nodes -subj /CN=localhost \
      -keyout "$dir/rath-tls.key" -out "$dir/rath-tls.crt" >/dev/null 2>&1; then
      chown postgres: "$dir/rath-tls.key" "$dir/rath-tls.crt"
      chmod 600 "$dir/rath-tls.key"
      key="$dir/rath-tls.key" cert="$dir/rath-tls.crt"
    fi
  fi
  if [ -f "$key" ] && [ -f "$cert" ]; then
    su postgres -c "psql -q -c \"ALTER SYSTEM SET ssl_cert_file = '$cert'\" \
      -c \"ALTER SYSTEM SET ssl_key_file = '$key'\" -c 'ALTER SYSTEM SET ssl = on' \
      -c 'SELECT pg_reload_conf()'" >/dev/null 2>&1 || true
    sleep 1
  fi
  echo "60-postgres: ssl $(su postgres -c "psql -qAtc 'show ssl'" 2>/dev/null)"
}

rath_postgres_setup() {
  local url="postgresql://root:rath@127.0.0.1:5432/test"
  if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >/dev/null 2>&1 || true
    fi
  fi
  if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    echo "60-postgres: PostgreSQL 15 is not installed; its tests will not run" >&2
    return 1
  fi
  if ! pg_lsclusters -h 2>/dev/null | awk '$1 == "15" && $2 == "main"' | grep -q .; then
    pg_createcluster 15 main >/dev/null 2>&1 || true
  fi
  rath_pg_start 15 main 5432 || return 1
  local i
  for i in $(seq 1 30); do
    su postgres -c "psql -qAtc 'select 1'" >/dev/null 2>&1 && break
    sleep 1
  done
  rath_postgres_tls
  su postgres -c "psql -qAtc \"select 1 from pg_roles where rolname = 'root'\"" | grep -q 1 ||
    su postgres -c "psql -qc \"CREATE ROLE root LOGIN SUPERUSER PASSWORD 'rath'\"" >/dev/null
  su postgres -c "psql -qAtc \"select 1 from pg_database where datname = 'test'\"" | grep -q 1 ||
    su postgres -c "createdb -O root test"
  export RATH_TEST_POSTGRES_URL="$url"
  echo "60-postgres: PostgreSQL 15 up, RATH_TEST_POSTGRES_URL set"
}

rath_postgres_setup || echo "60-postgres: setup failed; PostgreSQL tests will fail under RATH_CI=1" >&2
