#!/usr/bin/env bash
# Proxy overhead benchmark: wrk against (a) the fake worker directly, (b) nginx with upstream
# keepalive, (c) kvgate; 1 and 2 proxy threads; a 4 KiB non-streamed chat request and a streamed
# 100-event response. Prints a markdown table and kvgate's router-overhead histogram quantiles.
# Usage: bench/proxy/run.sh [seconds-per-run] (needs `make build`).
set -euo pipefail
cd "$(dirname "$0")/../.."
DUR=${1:-10}
CONNS=${CONNS:-64}
BIN=build
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

"$BIN/kvgate-fake-upstream" --threads 2 --chunks 8 >"$tmp/fake.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q port= "$tmp/fake.out" && break; sleep 0.05; done
UP=$(sed -n 's/port=//p' "$tmp/fake.out")

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# wrk_run NAME PORT THREADS STREAM CHUNKS -> "req/s p50 p99"
wrk_run() {
  local port=$2 threads=$3
  STREAM=$4 CHUNKS=$5 BODY_BYTES=4096 wrk -t"$threads" -c"$CONNS" -d"${DUR}s" --latency \
    -s bench/proxy/post.lua "http://127.0.0.1:$port/v1/chat/completions" >"$tmp/wrk.txt" 2>&1
  local rps p50 p99 errs
  rps=$(awk '/Requests\/sec/ {print $2}' "$tmp/wrk.txt")
  p50=$(awk '$1=="50%" {print $2}' "$tmp/wrk.txt")
  p99=$(awk '$1=="99%" {print $2}' "$tmp/wrk.txt")
  errs=$(awk '/Non-2xx|Socket errors/ {printf "%s ", $0}' "$tmp/wrk.txt")
  echo "$rps $p50 $p99 ${errs:-}"
}

# Router-overhead quantiles from kvgate's histogram (linear interpolation inside buckets).
overhead() {
  curl -s "127.0.0.1:$1/metrics" | /usr/bin/python3 -c '
import sys, re
b = []
for line in sys.stdin:
    m = re.match(r"kvgate_router_overhead_seconds_bucket\{le=\"([^\"]+)\"\} (\S+)", line)
    if m: b.append((float("inf") if m.group(1) == "+Inf" else float(m.group(1)), float(m.group(2))))
total = b[-1][1] if b else 0
def q(p):
    target, prev_le, prev_c = p * total, 0.0, 0.0
    for le, c in b:
        if c >= target:
            if le == float("inf"): return prev_le
            return prev_le + (le - prev_le) * ((target - prev_c) / max(c - prev_c, 1e-9))
        prev_le, prev_c = le, c
    return 0
print("%.1f %.1f %d" % (q(0.5) * 1e6, q(0.99) * 1e6, total))'
}

echo "| threads | target | 4 KiB chat req/s | p50 | p99 | streamed 100-event req/s | TTLB p50 | TTLB p99 |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for T in 1 2; do
  read -r a_rps a50 a99 aerr < <(wrk_run direct "$UP" "$T" 0 8)
  read -r as_rps as50 as99 aserr < <(wrk_run direct "$UP" "$T" 1 100)
  echo "| $T | fake worker directly | $a_rps | $a50 | $a99 | $as_rps | $as50 | $as99 |"

  NP=$(free_port)
  mkdir -p "$tmp/nginx"
  sed -e "s#@WORKERS@#$T#; s#@DIR@#$tmp/nginx#g; s#@UPSTREAM_PORT@#$UP#; s#@PORT@#$NP#" \
    bench/proxy/nginx.conf.in >"$tmp/nginx/nginx.conf"
  nginx -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" -g 'daemon off;' 2>"$tmp/nginx.err" &
  npid=$!
  for _ in $(seq 100); do curl -s -o /dev/null "127.0.0.1:$NP/health" && break; sleep 0.05; done
  read -r n_rps n50 n99 nerr < <(wrk_run nginx "$NP" "$T" 0 8)
  read -r ns_rps ns50 ns99 nserr < <(wrk_run nginx "$NP" "$T" 1 100)
  kill "$npid"; wait "$npid" 2>/dev/null || true
  echo "| $T | nginx (keepalive upstream) | $n_rps | $n50 | $n99 | $ns_rps | $ns50 | $ns99 |"

  KP=$(free_port)
  "$BIN/kvgate" --listen "127.0.0.1:$KP" --worker "http://127.0.0.1:$UP" --threads "$T" \
    --log-level warn >"$tmp/kvgate.log" 2>&1 &
  kpid=$!
  for _ in $(seq 100); do curl -s -o /dev/null "127.0.0.1:$KP/health" && break; sleep 0.05; done
  read -r k_rps k50 k99 kerr < <(wrk_run kvgate "$KP" "$T" 0 8)
  read -r o50 o99 on < <(overhead "$KP")
  read -r ks_rps ks50 ks99 kserr < <(wrk_run kvgate "$KP" "$T" 1 100)
  kill "$kpid"; wait "$kpid" 2>/dev/null || true
  echo "| $T | kvgate | $k_rps | $k50 | $k99 | $ks_rps | $ks50 | $ks99 |"
  echo "| $T | kvgate router overhead (4 KiB run, $on requests) | | p50 ${o50} us | p99 ${o99} us | | | |"
  for e in "$aerr" "$nerr" "$kerr" "$aserr" "$nserr" "$kserr"; do [ -n "$e" ] && echo "  errors: $e" >&2; done
done
