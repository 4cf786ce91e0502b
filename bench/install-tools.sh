#!/bin/sh
# The tools the network benchmarks use (docs/performance-lab-notes.md, "Network paths (issue 24)"):
#   wrk           compiled HTTP/1.1 load generator (bench_http.py, bench_cluster.py, bench_recovery.py)
#   h2load        compiled HTTP/2 load generator, package nghttp2-client (bench_grpc.py)
#   postgresql    Debian's PostgreSQL server, started by bench_eventsourcing.py in a temporary folder
#   psycopg       eventsourcing[postgres]'s driver (binary wheel) and its pool, into the project's venv
#   py-spy        sampling profiler for the node processes (--profile)
# Run as root from the repository's root: sh bench/install-tools.sh   (idempotent)
set -eu
VENV="${VENV:-.venv}"
need=""
command -v wrk >/dev/null 2>&1 || need="$need wrk"
command -v h2load >/dev/null 2>&1 || need="$need nghttp2-client"
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need="$need postgresql"
if [ -n "$need" ]; then
    apt-get update -qq
    # the package's own cluster is never started: the benchmark runs its own server (initdb, pg_ctl)
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need
fi
# the Python side: pyproject.toml's "bench" extra (psycopg, py-spy)
"$VENV/bin/pip" install -q -e '.[bench]'
echo "wrk: $(command -v wrk); h2load: $(command -v h2load); initdb: $(ls /usr/lib/postgresql/*/bin/initdb | tail -1); py-spy: $VENV/bin/py-spy"
