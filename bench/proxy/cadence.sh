#!/usr/bin/env bash
# Token cadence through each proxy (issue 31): kvgate-fake-upstream streams EVENTS events paced
# DELAY_MS apart, and bench/proxy/cadence.py records the gaps at which the client received
# them. A proxy may stream faster by holding pieces back (HAProxy 2.6 without
# `option http-no-delay` sends them with MSG_MORE): this shows what that costs each token.
# Usage: bench/proxy/cadence.sh [streams] [events] [delay-ms]   (needs `make build`)
# Env: TARGETS="direct haproxy haproxy-nodelay nginx kvgate", BIN=build, POLICY=kvaware.
set -euo pipefail
cd "$(dirname "$0")/../.."
STREAMS=${1:-5}
EVENTS=${2:-40}
DELAY=${3:-10}
TARGETS=${TARGETS:-"direct haproxy haproxy-nodelay nginx kvgate"}
POLICY=${POLICY:-kvaware}
BIN=${BIN:-build}
# shellcheck source=bench/proxy/targets.sh
source bench/proxy/targets.sh
start_fake_upstream
echo "| target | $STREAMS streams of $EVENTS events, ${DELAY} ms apart: gaps as received |"
echo "| --- | --- |"
for name in $TARGETS; do
  start_target "$name" 1
  echo "| $name | $(/usr/bin/python3 bench/proxy/cadence.py "$TPORT" "$STREAMS" "$EVENTS" "$DELAY") |"
  stop_target
done
