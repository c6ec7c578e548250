#!/usr/bin/env bash
# System calls per request of each proxy (issue 31), one proxy thread, wrk -t1 -c32, for each
# request kind (KINDS, as bench/proxy/run.sh names them: 4k, sse, chat90k, msg90k, msg400k,
# agentic (400 KB chat), agentictools (the same with tools after the messages), agentic1m (1 MB
# chat, ~287K tokens)), against two upstream kinds:
#   static  nginx answering every POST with a 4 KiB chat.completion JSON and Content-Length, in
#           one write: how vLLM answers a non-streamed request
#   fake    kvgate-fake-upstream (chunked, 8 chunks of 512 bytes; two threads)
# For each upstream and proxy, in interleaved rounds: req/s and p99 of a plain run, then a run
# under `strace -c -f` of the proxy alone giving its system calls per request (total and the
# four most frequent); for kvgate also its router overhead (p50, p99 of
# kvgate_router_overhead_seconds over the plain run). The direct row has no proxy: its req/s
# shows the load generator and the upstream are not the bottleneck. The static upstream cannot
# stream, so `sse` and `ssepaced` (100 events 10 ms apart: what a stream of tokens costs, not how
# fast a proxy drains a flood) run against the fake one only. For `sse`, see also
# bench/proxy/cadence.sh: HAProxy without `option http-no-delay` (target haproxy-nodelay) holds
# a stream's pieces back.
# Usage: bench/proxy/syscalls.sh [seconds-per-run]   (needs `make build`)
# Env: ROUNDS=2, KINDS="4k", UPSTREAMS="static fake",
#      TARGETS="direct haproxy nginx kvgate" (also haproxy-nodelay), POLICY=kvaware,
#      KVGATE_BEFORE=path/to/another/kvgate (target kvgate-before: an A/B in the same run),
#      CONNS=32 (wrk's connections; CONNS=1 shows one request's cost without the others').
set -euo pipefail
cd "$(dirname "$0")/../.."
DUR=${1:-5}
ROUNDS=${ROUNDS:-2}
KINDS=${KINDS:-4k}
UPSTREAMS=${UPSTREAMS:-"static fake"}
TARGETS=${TARGETS:-"direct haproxy nginx kvgate"}
POLICY=${POLICY:-kvaware}
BIN=${BIN:-build}
# shellcheck source=bench/proxy/targets.sh
source bench/proxy/targets.sh


# wrk_run PORT SECONDS KIND -> "requests req/s p99"
wrk_run() {
  request_kind "$3" 512
  # shellcheck disable=SC2086
  env $KIND_ENV wrk -t1 -c${CONNS:-32} -d"$2s" --latency \
    -s bench/proxy/post.lua "http://127.0.0.1:$1$KIND_PATH" >"$tmp/wrk.txt" 2>&1
  awk '/requests in/ {n=$1} /Requests\/sec/ {r=$2} $1=="99%" {p=$2} END {print n, r, p}' "$tmp/wrk.txt"
  [ -n "${KEEP_WRK:-}" ] && cat "$tmp/wrk.txt" >&2 || true
}

# The process ids strace follows: nginx's master forks its worker.
trace_pids() {
  local p=$1 kids
  kids=$(pgrep -P "$p" || true)
  echo "$p" $kids
}

echo "| round | upstream | request | target | req/s | p99 | router overhead p50 / p99 | syscalls / request | most frequent (per request) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for round in $(seq "$ROUNDS"); do
  for up in $UPSTREAMS; do
    if [ "$up" = fake ]; then start_fake_upstream; else start_static; fi
    for kind in $KINDS; do
      [ "$up" = static ] && [ "${kind#sse}" != "$kind" ] && continue
      for name in $TARGETS; do
        start_target "$name" 1
        wrk_run "$TPORT" 1 "$kind" >/dev/null  # warm: connections to the upstream open
        read -r _ rps p99 < <(wrk_run "$TPORT" "$DUR" "$kind")
        per="" top="" over=""
        if [ "${name#kvgate}" != "$name" ]; then
          read -r o50 o99 _ < <(overhead "$TPORT")
          over="$o50 / $o99 us"
        fi
        if [ -n "$TPID" ]; then
          args=()
          for p in $(trace_pids "$TPID"); do args+=(-p "$p"); done
          strace -f -c -o "$tmp/strace.txt" "${args[@]}" 2>/dev/null &
          spid=$!
          sleep 0.5
          read -r n _ _ < <(wrk_run "$TPORT" "$DUR" "$kind")
          kill -INT "$spid" 2>/dev/null || true
          wait "$spid" 2>/dev/null || true
          read -r per top < <(/usr/bin/python3 - "$tmp/strace.txt" "$n" <<'EOF'
import sys
rows, n = [], float(sys.argv[2])
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) >= 5 and f[0][0].isdigit() and f[-1] != "total":
        rows.append((int(f[3]), f[-1]))
total = sum(c for c, _ in rows)
top = sorted(rows, reverse=True)[:4]
print("%.2f" % (total / n), ", ".join("%s %.2f" % (s, c / n) for c, s in top))
EOF
)
        fi
        echo "| $round | $up | $kind | $name | $rps | $p99 | ${over:-} | ${per:-} | ${top:-} |"
        stop_target
      done
    done
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    pids=()
  done
done
