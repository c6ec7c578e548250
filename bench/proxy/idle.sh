#!/usr/bin/env bash
# Memory each proxy holds per idle keep-alive client connection (bench/proxy/idle_memory.py):
# N connections, each having completed one `GET /health`, then left open; the growth of the
# proxy's resident memory (all its processes) divided by N. One proxy thread each, started as
# bench/proxy/run.sh starts them; kvgate with no per-client connection limit (all N come from
# 127.0.0.1). ROUNDS interleaved rounds.
# Usage: bench/proxy/idle.sh [N=3000]   (needs `make build`)
# Env: TARGETS="nginx haproxy kvgate", ROUNDS=2, BIN=build, KVGATE_BEFORE (a kvgate-before
# target's binary, for an A/B in one run).
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-3000}
TARGETS=${TARGETS:-"nginx haproxy kvgate"}
ROUNDS=${ROUNDS:-2}
POLICY=${POLICY:-kvaware}
BIN=${BIN:-build}
# shellcheck source=bench/proxy/targets.sh
source bench/proxy/targets.sh
ulimit -n "$(ulimit -Hn)"  # HAProxy wants 8,014 descriptors for its maxconn 4000
printf 'limits:\n  max_connections: %d\n  max_connections_per_client: 0\n' $((N + 100)) >"$tmp/kvgate.yaml"
KVGATE_ARGS="--config $tmp/kvgate.yaml ${KVGATE_ARGS:-}"
start_fake_upstream

echo "| round | target | idle connections | bytes each |"
echo "| --- | --- | --- | --- |"
for round in $(seq "$ROUNDS"); do
  for name in $TARGETS; do
    start_target "$name" 1
    # nginx's master and its worker; the others are one process.
    all=$TPID
    for child in $(pgrep -P "$TPID" || true); do all="$all,$child"; done
    line=$(/usr/bin/python3 bench/proxy/idle_memory.py "$TPORT" "$N" "$all")
    echo "| $round | $name | $N | $(echo "$line" | sed -n 's/.* \([0-9]*\) bytes each/\1/p') |"
    stop_target
  done
done
