#!/usr/bin/env bash
# rath_pg_start VERSION CLUSTER PORT: bring a Debian PostgreSQL cluster online and wait
# until it answers, sourced by 60-postgres.sh and 62-postgres-faults.sh.
#
# A fresh CI machine starts the cluster while the test build keeps both cores and the disk
# busy, so crash recovery and the first checkpoint can outlast pg_ctl's default 60 s wait
# (one CI run lost every PostgreSQL test that way). The start waits up to 300 s; a start
# that pg_ctl gives up on may still come up, so readiness is polled for as long again;
# only then is it a failure, and the cluster's log tail is printed to say why.

rath_pg_start() {
  local version=$1 cluster=$2 port=$3 i
  if pg_lsclusters -h 2>/dev/null |
    awk -v v="$version" -v c="$cluster" '$1 == v && $2 == c && $4 == "online"' | grep -q .; then
    return 0
  fi
  if ! pg_ctlcluster "$version" "$cluster" start -- -t 300; then
    echo "pg-start: pg_ctlcluster $version $cluster start failed; waiting for it to come up" >&2
  fi
  for i in $(seq 1 300); do
    if pg_isready -q -h 127.0.0.1 -p "$port" 2>/dev/null; then
      [ "$i" = 1 ] || echo "pg-start: cluster $version/$cluster ready after ${i} s of polling"
      return 0
    fi
    sleep 1
  done
  echo "pg-start: cluster $version/$cluster on port $port did not come up; its log ends:" >&2
  tail -n 40 "/var/log/postgresql/postgresql-$version-$cluster.log" >&2 || true
  pg_lsclusters >&2 || true
  return 1
}
