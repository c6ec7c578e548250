#!/usr/bin/env bash
# Load and abuse measurements of issue 18 against a release kvgate (one gateway thread) in
# front of kvgate-fake-upstream, on loopback. One scenario per call:
#   slowloris [CONNS]   normal traffic's p50/p99 (wrk, 16 connections, 4 KiB chats) before and
#                       while CONNS (default 5000) connections trickle a head a byte a second
#                       (bench/abuse/idle_flood.py --trickle 1, over 10 source addresses)
#   keepalive [N]       N (default 1,000,000) small requests on 32 keep-alive connections:
#                       errors, req/s, gateway RSS before and after
#   bodies              a body at limits.max_body_bytes (relayed) and one byte over (413), timed
#   soak [SECONDS]      steady mixed traffic (streams and 4 KiB chats) for SECONDS (default
#                       900) with the gateway's RSS sampled every 30 s
#   idleflood [PER]     issue 27's finding D5 at the default connection limits (10,000 places,
#                       a reserve of 64, 1,000 per address): chats' p50/p99 (wrk, 16
#                       connections, 4 KiB chats, 20 s) and /health probes (10 a second, each a
#                       new connection) quiet, then while 11 addresses (127.0.0.2-12) hold PER
#                       (default 1000) idle connections each (bench/abuse/idle_flood.py;
#                       REOPEN=1: closed ones are opened again, up to 1,000 a second)
#   halftls [N]         issue 27: a TLS listener's memory per half-open handshake: gateway RSS
#                       before and while N (default 2000) connections from 4 addresses hold a
#                       handshake open — HELLO=none: TCP only, nothing sent; HELLO=partial: half
#                       a ClientHello; HELLO=big: a ClientHello header announcing 128 KiB
#                       (PLAIN=1: a plain listener, for comparison) — whether an HTTPS request
#                       is served meanwhile, and how long until the gateway closes them
#   wrongkeys [SECS]    a wrong-API-key flood (wrk, 16 connections, SECS default 10, one
#                       address): answers by status and the gateway's log lines a second
# Usage: bench/abuse/run.sh SCENARIO [ARG]   (needs `make build`; BIN=build by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build}
scenario=${1:?usage: run.sh slowloris|keepalive|bodies|soak|idleflood|halftls|wrongkeys [ARG]}
arg=${2:-}
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

for b in kvgate kvgate-fake-upstream; do
  [ -x "$BIN/$b" ] || { echo "no $BIN/$b: run make build (or set BIN)" >&2; exit 1; }
done

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
BASE=http://127.0.0.1  # https:// for halftls
metric() { curl -sk "$BASE:$PORT/metrics" | awk -v m="$1" '$1 == m {print $2}'; }

"$BIN/kvgate-fake-upstream" --threads 2 --chunks 8 ${FAKE_ARGS:-} >"$tmp/fake.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q port= "$tmp/fake.out" && break; sleep 0.05; done
UP=$(sed -n 's/port=//p' "$tmp/fake.out")
PORT=$(free_port)
LIMITS="{max_connections: 20000, max_body_bytes: 33554432}"
[ "$scenario" = idleflood ] && LIMITS="{}"  # the defaults are what the finding is about
AUTH="{}"
# One key (its SHA-256 below is of "right-key"): the flood presents others.
[ "$scenario" = wrongkeys ] &&
  AUTH="{api_keys: [{name: a, sha256: $(printf %s right-key | sha256sum | cut -d' ' -f1)}]}"
TLS="{}"
if [ "$scenario" = halftls ] && [ -z "${PLAIN:-}" ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
    -keyout "$tmp/key.pem" -out "$tmp/cert.pem" 2>/dev/null
  TLS="{cert_file: $tmp/cert.pem, key_file: $tmp/key.pem}"
  BASE=https://127.0.0.1
fi
cat >"$tmp/kvgate.yaml" <<EOF
listen: "127.0.0.1:$PORT"
threads: 1
log_level: warn
limits: $LIMITS
auth: $AUTH
tls: $TLS
routing: {policy: kvaware}
workers:
  - url: http://127.0.0.1:$UP
EOF
"$BIN/kvgate" --config "$tmp/kvgate.yaml" >"$tmp/kvgate.log" 2>&1 &
GW=$!
pids+=($GW)
for _ in $(seq 200); do curl -sk -o /dev/null "$BASE:$PORT/health" && break; sleep 0.05; done

# wrk_run SECONDS CONNS [env...] -> "req/s p50 p99 requests errors"
wrk_run() {
  local secs=$1 conns=$2
  shift 2
  env BODY_BYTES=4096 CHUNKS=8 CHUNK_BYTES=512 "$@" wrk -t1 -c"$conns" -d"${secs}s" --latency \
    -s bench/proxy/post.lua "http://127.0.0.1:$PORT/v1/chat/completions" >"$tmp/wrk.txt" 2>&1
  awk '/Requests\/sec/ {rps=$2} $1=="50%" {p50=$2} $1=="99%" {p99=$2}
       /requests in/ {n=$1} /Non-2xx|Socket errors/ {e=e $0 " "}
       END {printf "%s %s %s %s %s\n", rps, p50, p99, n, (e == "" ? "none" : e)}' "$tmp/wrk.txt"
}

case $scenario in
  slowloris)
    conns=${arg:-5000}
    echo "normal traffic alone (wrk 16 connections, 4 KiB chats, 20 s): $(wrk_run 20 16)"
    /usr/bin/python3 bench/abuse/idle_flood.py --port "$PORT" --trickle 1 --sources 10 \
      --per-source $((conns / 10)) --reopen --probe-interval 0 --report 5 \
      >"$tmp/slow.out" 2>&1 &
    pids+=($!)
    for _ in $(seq 120); do
      held=$(metric kvgate_http_connections)
      [ "${held%.*}" -ge "$conns" ] 2>/dev/null && break
      sleep 1
    done
    echo "slowloris connections open on the gateway: $(metric kvgate_http_connections), RSS $(rss_kib $GW) KiB"
    echo "normal traffic during (same wrk):                          $(wrk_run 20 16)"
    echo "slowloris connections open after: $(metric kvgate_http_connections); client: $(tail -1 "$tmp/slow.out")"
    echo "408s sent to trickling clients: $(curl -s "127.0.0.1:$PORT/metrics" | awk '/^kvgate_http_requests_total/ && /code="408"/ {s+=$2} END {print s+0}')"
    ;;
  keepalive)
    n=${arg:-1000000}
    before=$(rss_kib $GW)
    # Small requests: a 256-byte chat answered with 8 short events' worth of content.
    secs=10
    read -r rps _ _ _ _ < <(wrk_run 5 32 BODY_BYTES=256 CHUNK_BYTES=16)
    secs=$(/usr/bin/python3 -c "import math; print(math.ceil($n / max(float('$rps'), 1.0) * 1.05))")
    read -r rps p50 p99 total errs < <(wrk_run "$secs" 32 BODY_BYTES=256 CHUNK_BYTES=16)
    echo "requests: $total in ${secs} s on 32 keep-alive connections: $rps req/s, p50 $p50, p99 $p99, errors: $errs"
    echo "gateway RSS: $before KiB before, $(rss_kib $GW) KiB after"
    ;;
  bodies)
    limit=33554432
    for size in $limit $((limit + 1)); do
      /usr/bin/python3 - "$size" >"$tmp/body.json" <<'PY'
import sys
n = int(sys.argv[1])
head = '{"model":"fake-model","messages":[{"role":"user","content":"'
tail = '"}]}'
sys.stdout.write(head + "a" * (n - len(head) - len(tail)) + tail)
PY
      out=$(curl -s -o "$tmp/resp" -w "%{http_code} %{time_total}" -H 'content-type: application/json' \
        --data-binary @"$tmp/body.json" "127.0.0.1:$PORT/v1/chat/completions")
      echo "body of $size bytes: HTTP ${out% *} in ${out#* } s; $(head -c 120 "$tmp/resp")"
    done
    echo "gateway RSS after: $(rss_kib $GW) KiB"
    ;;
  soak)
    secs=${arg:-900}
    echo "| t (s) | gateway RSS (KiB) | requests so far |"
    echo "| --- | --- | --- |"
    # Two steady clients: 4 KiB chats and 20-event streams, each on 4 connections.
    env BODY_BYTES=4096 CHUNKS=8 CHUNK_BYTES=512 wrk -t1 -c4 -d"${secs}s" -s bench/proxy/post.lua \
      "http://127.0.0.1:$PORT/v1/chat/completions" >"$tmp/wrk1.txt" 2>&1 &
    pids+=($!)
    env BODY_BYTES=16384 STREAM=1 CHUNKS=20 CHUNK_BYTES=0 wrk -t1 -c4 -d"${secs}s" \
      -s bench/proxy/post.lua "http://127.0.0.1:$PORT/v1/chat/completions" >"$tmp/wrk2.txt" 2>&1 &
    pids+=($!)
    start=$(date +%s)
    while :; do
      t=$(( $(date +%s) - start ))
      reqs=$(curl -s "127.0.0.1:$PORT/metrics" | awk '/^kvgate_http_requests_total/ && /chat/ {s+=$2} END {print s+0}')
      echo "| $t | $(rss_kib $GW) | $reqs |"
      [ "$t" -ge "$secs" ] && break
      sleep 30
    done
    wait "${pids[-1]}" "${pids[-2]}" 2>/dev/null || true
    grep -h "requests in\|Non-2xx\|Socket errors" "$tmp/wrk1.txt" "$tmp/wrk2.txt" || true
    ;;
  idleflood)
    per=${arg:-1000}
    flood() {
      /usr/bin/python3 bench/abuse/idle_flood.py --port "$PORT" --report 5 "$@"
    }
    flood --sources 0 --duration 20 >"$tmp/quiet.out" 2>&1 &
    pids+=($!)
    echo "quiet: chats $(wrk_run 20 16); probes: $(tail -1 "$tmp/quiet.out")"
    flood --per-source "$per" ${REOPEN:+--reopen} >"$tmp/flood.out" 2>&1 &
    pids+=($!)
    for _ in $(seq 60); do  # until the flood holds its connections (or a minute passed)
      held=$(tail -1 "$tmp/flood.out" | sed -n 's/^held=\([0-9]*\).*/\1/p')
      [ "${held:-0}" -ge $((11 * per * 9 / 10)) ] && break
      sleep 1
    done
    echo "flood ramp-up: $(tail -1 "$tmp/flood.out")"
    echo "during the flood: chats $(wrk_run 20 16)"
    echo "flood at the end: $(tail -1 "$tmp/flood.out") (probe counts include the ramp-up above)"
    echo "gateway: $(metric kvgate_http_connections) connections open, $(metric kvgate_http_idle_connections_reaped_total) idle ones reaped, RSS $(rss_kib $GW) KiB"
    ;;
  halftls)
    n=${arg:-2000}
    hello=${HELLO:-none}
    before=$(rss_kib $GW)
    start=$(date +%s)
    /usr/bin/python3 bench/abuse/idle_flood.py --port "$PORT" --sources 4 --per-source $((n / 4)) \
      --probe-interval 0 --report 0.5 --hello "$hello" >"$tmp/flood.out" 2>&1 &
    pids+=($!)
    for _ in $(seq 120); do  # until the gateway holds them all (or a minute passed)
      open=$(metric kvgate_http_connections)
      [ "${open%.*}" -gt "$n" ] 2>/dev/null && break
      sleep 0.5
    done
    sleep 2  # let the gateway read what they sent
    during=$(rss_kib $GW)
    echo "HELLO=$hello${PLAIN:+ (plain listener)}: $(tail -1 "$tmp/flood.out")"
    echo "gateway: $(metric kvgate_http_connections) connections open; RSS $before KiB before, $during KiB during: $(( (during - before) * 1024 / n )) bytes per connection"
    echo "a request meanwhile (from 127.0.0.20): HTTP $(curl -sk -o /dev/null -w '%{http_code}' --interface 127.0.0.20 "$BASE:$PORT/health")"
    for _ in $(seq 240); do  # until the gateway closed them (or two minutes passed)
      closed=$(tail -1 "$tmp/flood.out" | sed -n 's/.*closed_by_server=\([0-9]*\).*/\1/p')
      [ "${closed:-0}" -ge "$n" ] && break
      sleep 0.5
    done
    echo "closed by the gateway: ${closed:-0} of $n, $(( $(date +%s) - start )) s after they opened"
    ;;
  wrongkeys)
    secs=${arg:-10}
    before=$(wc -l <"$tmp/kvgate.log")
    wrk -t1 -c16 -d"${secs}s" -H 'Authorization: Bearer wrong-key' \
      "http://127.0.0.1:$PORT/v1/models" >"$tmp/wrk.txt" 2>&1
    lines=$(( $(wc -l <"$tmp/kvgate.log") - before ))
    echo "wrong-key flood: $(awk '/requests in/ {print $1}' "$tmp/wrk.txt") requests in ${secs} s ($(awk '/Requests\/sec/ {print $2}' "$tmp/wrk.txt") req/s)"
    curl -s "127.0.0.1:$PORT/metrics" | grep '^kvgate_auth_failures_total' || true
    echo "gateway log: $lines lines in ${secs} s ($(( lines / secs )) a second); last: $(tail -1 "$tmp/kvgate.log")"
    echo "the right key meanwhile from 127.0.0.2: HTTP $(curl -s -o /dev/null -w '%{http_code}' --interface 127.0.0.2 -H 'Authorization: Bearer right-key' "127.0.0.1:$PORT/v1/models")"
    ;;
  *) echo "unknown scenario $scenario" >&2; exit 2 ;;
esac
