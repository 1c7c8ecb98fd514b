#!/usr/bin/env bash
# A second, private PostgreSQL 15 cluster for rath-store-sql's fault tests
# (crates/rath-store-sql/tests/faults.rs): they restart it in the middle of a write and fill
# a small tablespace until PostgreSQL runs out of space, neither of which may disturb the
# shared `15 main` cluster every other test uses (60-postgres.sh).
#
# - cluster `15 rathfaults` on port 5444, the role `root` (password `rath`), database `test`;
# - the tablespace `rath_small` on a 24 MB tmpfs mounted (this part needs root) at
#   /var/lib/postgresql/rath_small and owned by postgres: a real "No space left on device"
#   from the kernel, while WAL and the catalog stay on the cluster's own disk;
# - exports RATH_TEST_PG_FAULTS_URL, RATH_TEST_PG_FAULTS_CLUSTER (`15 rathfaults`, the
#   arguments of `pg_ctlcluster` that restart it) and RATH_TEST_PG_SMALL_TABLESPACE.
#
# Idempotent: a second run only checks (and remounts the tmpfs after a reboot). Sourced by
# .ci/run with `set -euo pipefail`; on failure the variables stay unset and, under
# RATH_CI=1, the fault tests fail (they may not skip).

# shellcheck source=../lib/pg-start.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/pg-start.sh"

rath_postgres_faults_setup() {
  local version=15 cluster=rathfaults port=5444
  local small=/var/lib/postgresql/rath_small
  if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    echo "62-postgres-faults: PostgreSQL 15 is not installed (60-postgres.sh)" >&2
    return 1
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "62-postgres-faults: needs root (a tmpfs mount and a second cluster)" >&2
    return 1
  fi
  if ! pg_lsclusters -h 2>/dev/null | awk -v c="$cluster" '$1 == "15" && $2 == c' | grep -q .; then
    pg_createcluster "$version" "$cluster" --port "$port" >/dev/null || return 1
  fi
  mkdir -p "$small"
  if ! mountpoint -q "$small"; then
    mount -t tmpfs -o size=24m,mode=0700 tmpfs "$small" || return 1
  fi
  chown postgres:postgres "$small"
  chmod 0700 "$small"
  rath_pg_start "$version" "$cluster" "$port" || return 1
  local i psql="psql -p $port -qAt"
  for i in $(seq 1 30); do
    su postgres -c "$psql -c 'select 1'" >/dev/null 2>&1 && break
    sleep 1
  done
  su postgres -c "$psql -c \"select 1 from pg_roles where rolname = 'root'\"" | grep -q 1 ||
    su postgres -c "$psql -c \"CREATE ROLE root LOGIN SUPERUSER PASSWORD 'rath'\"" >/dev/null
  su postgres -c "$psql -c \"select 1 from pg_database where datname = 'test'\"" | grep -q 1 ||
    su postgres -c "createdb -p $port -O root test"
  # A tablespace whose directory went away with a previous tmpfs (a reboot) is dropped first.
  if su postgres -c "$psql -c \"select 1 from pg_tablespace where spcname = 'rath_small'\"" |
    grep -q 1 && ! compgen -G "$small/PG_${version}_*" >/dev/null; then
    su postgres -c "$psql -d test -c 'DROP TABLESPACE rath_small'" >/dev/null || return 1
  fi
  su postgres -c "$psql -c \"select 1 from pg_tablespace where spcname = 'rath_small'\"" | grep -q 1 ||
    su postgres -c "$psql -c \"CREATE TABLESPACE rath_small OWNER root LOCATION '$small'\"" >/dev/null ||
    return 1
  export RATH_TEST_PG_FAULTS_URL="postgresql://root:rath@127.0.0.1:$port/test"
  export RATH_TEST_PG_FAULTS_CLUSTER="$version $cluster"
  export RATH_TEST_PG_SMALL_TABLESPACE=rath_small
  echo "62-postgres-faults: cluster $version/$cluster up on port $port, tablespace rath_small (24 MB tmpfs)"
}

rath_postgres_faults_setup ||
  echo "62-postgres-faults: setup failed; the PostgreSQL fault tests will fail under RATH_CI=1" >&2
