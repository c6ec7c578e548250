#!/usr/bin/env bash
# Proxy overhead benchmark: wrk against (a) the fake worker directly, (b) nginx and (c) HAProxy
# with upstream keep-alive, (d) kvgate; 1 and 2 proxy threads; three requests:
#   4k      a 4 KiB non-streamed chat POST answered with ~4 KiB of content
#   sse     a streamed answer of 100 SSE events (~150 bytes each)
#   agentic a 400 KB coding-agent chat POST (tool calls and escaped source listings)
#   chat90k, agentic1m  the same at 90 KB and 1 MB (~287K tokens, the longest real session)
#   agentictools  the 400 KB turn with 16 function tools (~48 KB) after the messages, the
#           order OpenAI's SDKs write
#   msg90k, msg400k  the same turn as Claude Code sends it to /v1/messages (system blocks, 48 KB
#           of tools, thinking, tool_use / tool_result blocks), 90 KB and 400 KB
# Prints a markdown table, then kvgate's own router-overhead quantiles per request kind.
# A target named NAME-tls (nginx-tls, haproxy-tls, kvgate-tls) serves HTTPS with a P-256
# certificate made for the run; wrk keeps its connections, so this is TLS's steady-state cost
# (record encryption), not handshakes.
# Usage: bench/proxy/run.sh [seconds-per-run]   (needs `make build`)
# Env: THREADS="1 2", TARGETS="direct nginx haproxy kvgate", KINDS="4k sse agentic",
#      CONNS=32, POLICY=kvaware, KVGATE_ARGS="..." (extra kvgate flags).
set -euo pipefail
cd "$(dirname "$0")/../.."
DUR=${1:-10}
CONNS=${CONNS:-32}
THREADS=${THREADS:-"1 2"}
TARGETS=${TARGETS:-"direct nginx haproxy kvgate"}
KINDS=${KINDS:-"4k sse agentic"}
POLICY=${POLICY:-kvaware}
BIN=${BIN:-build}
# shellcheck source=bench/proxy/targets.sh
source bench/proxy/targets.sh

# The certificate for the -tls targets (haproxy wants chain and key in one file).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=localhost \
  -addext subjectAltName=IP:127.0.0.1 -keyout "$tmp/key.pem" -out "$tmp/cert.pem" 2>/dev/null
cat "$tmp/cert.pem" "$tmp/key.pem" >"$tmp/both.pem"
start_fake_upstream

# wrk_run PORT THREADS KIND -> "req/s p50 p99 errors"
wrk_run() {
  local port=$1 threads=$2 kind=$3
  request_kind "$kind" 0
  # shellcheck disable=SC2086
  env $KIND_ENV wrk -t"$threads" -c"$CONNS" -d"${DUR}s" --latency -s bench/proxy/post.lua \
    "$TSCHEME://127.0.0.1:$port$KIND_PATH" >"$tmp/wrk.txt" 2>&1
  local rps p50 p99 errs
  rps=$(awk '/Requests\/sec/ {print $2}' "$tmp/wrk.txt")
  p50=$(awk '$1=="50%" {print $2}' "$tmp/wrk.txt")
  p99=$(awk '$1=="99%" {print $2}' "$tmp/wrk.txt")
  errs=$(awk '/Non-2xx|Socket errors/ {printf "%s ", $0}' "$tmp/wrk.txt")
  echo "$rps $p50 $p99 ${errs:-}"
}

header="| threads | target |"; sep="| --- | --- |"
for k in $KINDS; do header+=" $k req/s | p50 | p99 |"; sep+=" --- | --- | --- |"; done
echo "$header"; echo "$sep"
overheads=()
for T in $THREADS; do
  for name in $TARGETS; do
    start_target "$name" "$T"
    row="| $T | $name |"
    for k in $KINDS; do
      read -r rps p50 p99 errs < <(wrk_run "$TPORT" "$T" "$k")
      row+=" $rps | $p50 | $p99 |"
      if [ -n "${errs:-}" ]; then
        echo "  $name $k errors: $errs" >&2
        case ${name%-tls} in
          nginx) grep -v "buffered to a temporary" "$tmp/nginx/error.log" | tail -3 >&2 || true ;;
          haproxy) tail -3 "$tmp/haproxy.log" >&2 || true ;;
          kvgate) tail -3 "$tmp/kvgate.log" >&2 || true ;;
        esac
      fi
      if [ "${name%-tls}" = kvgate ]; then
        # The histogram is cumulative: restart kvgate per kind so each row is its own.
        read -r o50 o99 on < <(overhead "$TPORT")
        overheads+=("| $T | $name $k | $on | ${o50} us | ${o99} us |")
        stop_target; start_target "$name" "$T"
      fi
    done
    stop_target
    echo "$row"
  done
done
if [ ${#overheads[@]} -gt 0 ]; then
  echo
  echo "| threads | request | kvgate requests | router overhead p50 | p99 |"
  echo "| --- | --- | --- | --- | --- |"
  printf '%s\n' "${overheads[@]}"
fi
