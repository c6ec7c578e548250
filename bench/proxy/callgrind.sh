#!/usr/bin/env bash
# Instructions kvgate executes per proxied request and per relayed SSE event, counted by
# callgrind (repeatable, unlike timings on a shared machine). kvgate runs under valgrind with
# collection switched on only around the measured load, so start-up and warm-up are excluded.
#   4k:  N non-streamed 4 KiB chat POSTs on one keep-alive connection (4 KiB replies)
#   sse: S streams of E events each; the figure divides by S x E (request costs included)
#   agentic: A non-streamed 400 KB coding-agent chat POSTs (tool calls, escaped listings)
# Usage: bench/proxy/callgrind.sh [N=2000] [S=20] [E=1000] [A=50]   (needs `make build`)
# Env: POLICY=kvaware (or round_robin), BIN=build, KVGATE=$BIN/kvgate (another build of the
# gateway to compare, e.g. an older commit's), PROXY=haproxy to count HAProxy instead (one
# thread, bench/proxy/haproxy.cfg.in), KEEP=DIR to keep the callgrind files (cg.4k, cg.sse,
# cg.agentic) for callgrind_annotate, EVENT_DELAY_MS=N to pace the SSE events N ms apart (each
# event then arrives as its own piece, as tokens do; without it they arrive in a few pieces),
# TOOLS=after to give the agentic body 16 function tools after its messages (OpenAI's SDKs).
# Health checks and engine scrapes are off, so the control thread adds nothing to the count.
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-2000}
S=${2:-20}
E=${3:-1000}
A=${4:-50}
POLICY=${POLICY:-kvaware}
BIN=${BIN:-build}
KVGATE=${KVGATE:-$BIN/kvgate}
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

"$BIN/kvgate-fake-upstream" --threads 1 >"$tmp/fake.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q port= "$tmp/fake.out" && break; sleep 0.05; done
UP=$(sed -n 's/port=//p' "$tmp/fake.out")

# load PORT KIND COUNT EVENTS: a keep-alive client that reads every response to its end.
load() {
  /usr/bin/python3 - "$@" <<'PY'
import http.client, json, os, sys
port, kind, count, events = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
stream = kind == "sse"
content = "a" * (4096 - 80)
messages = [{"role": "user", "content": content}]
if kind == "agentic":  # as bench/proxy/post.lua builds it
    listing = ('int main(int argc, char** argv) {\n\tif (argc < 2) {\n\t\tstd::cerr << '
               '"usage: tool FILE" << std::endl;\n\t\treturn 2;\n\t}\n\treturn Run(argv[1]);\n}\n')
    messages = [{"role": "system",
                 "content": "You are a coding agent. " + "Follow the repository conventions. " * 200}]
    turn = 0
    while len(json.dumps(messages)) < 400000:
        messages.append({"role": "user", "content": "Fix the failing test in src/file%d.cc" % turn})
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_%d" % turn, "type": "function", "function": {
                "name": "read_file", "arguments": json.dumps({"path": "src/file%d.cc" % turn})}}]})
        messages.append({"role": "tool", "tool_call_id": "call_%d" % turn, "content": listing * 40})
        turn += 1
request = {"model": "fake-model", "stream": stream, "messages": messages}
if kind == "agentic" and os.environ.get("TOOLS") == "after":  # OpenAI's SDKs: after messages
    schema = {"type": "object", "properties": {"command": {
        "type": "string", "description": "The command to run in the repository's shell. " * 20},
        "timeout": {"type": "number"}}, "required": ["command"]}
    request["tools"] = [{"type": "function", "function": {
        "name": "tool%d" % i, "description": "Use this tool to work on the repository. " * 40,
        "parameters": schema}} for i in range(16)]
body = json.dumps(request)
headers = {"Content-Type": "application/json",
           "x-fake-chunks": str(events if stream else 8),
           "x-fake-chunk-bytes": "0" if stream else "512",
           # EVENT_DELAY_MS paces a stream's events, each then its own piece, like tokens.
           "x-fake-delay-ms": os.environ.get("EVENT_DELAY_MS", "0") if stream else "0",
           # The same prompt every time: an engine would report it all cached.
           "x-fake-cached-tokens": str(len(body) // 4)}
conn = http.client.HTTPConnection("127.0.0.1", port)
for i in range(count):
    conn.request("POST", "/v1/chat/completions", body, headers)
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        sys.exit("status %d: %s" % (r.status, data[:200]))
PY
}

measure() {  # measure KIND COUNT EVENTS -> total instructions
  local kind=$1 count=$2 events=$3 port out
  port=$(free_port)
  out="$tmp/cg.$kind"
  cat >"$tmp/kvgate.yaml" <<YAML
listen: "127.0.0.1:$port"
threads: 1
log_level: warn
health_check: {enabled: false}
routing: {policy: $POLICY, engine_metrics_interval_ms: 0}
workers:
  - url: http://127.0.0.1:$UP
YAML
  if [ "${PROXY:-kvgate}" = haproxy ]; then
    mkdir -p "$tmp/haproxy"
    sed -e "s#@THREADS@#1#; s#@DIR@#$tmp/haproxy#g; s#@UPSTREAM_PORT@#$UP#; s#@PORT@#$port#" \
      -e "s#@OPTIONS@##" bench/proxy/haproxy.cfg.in >"$tmp/haproxy/haproxy.cfg"
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
      haproxy -f "$tmp/haproxy/haproxy.cfg" -db >"$tmp/haproxy.$kind.log" 2>&1 &
  else
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
      "$KVGATE" --config "$tmp/kvgate.yaml" >"$tmp/kvgate.$kind.log" 2>&1 &
  fi
  local vpid=$!
  pids+=("$vpid")
  for _ in $(seq 600); do curl -s -o /dev/null "127.0.0.1:$port/health" && break; sleep 0.1; done
  sleep 1
  load "$port" "$kind" 5 "$events"   # warm-up: pools, caches, lazily built state
  callgrind_control -i on "$vpid" >/dev/null
  load "$port" "$kind" "$count" "$events"
  callgrind_control -i off "$vpid" >/dev/null
  callgrind_control -d "$vpid" >/dev/null  # HAProxy is killed, not stopped: dump first
  kill -KILL "$vpid"
  wait "$vpid" 2>/dev/null || true
  [ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && cp "$out"* "$KEEP"/
  awk '/^totals:/ {s += $2} END {print s}' "$out"*
}

ir4k=$(measure 4k "$N" 8)
irsse=$(measure sse "$S" "$E")
irag=$(measure agentic "$A" 8)
echo "${PROXY:-kvgate} policy $POLICY"
echo "4k: $ir4k instructions for $N requests = $((ir4k / N)) per request"
echo "sse: $irsse instructions for $S streams x $E events = $((irsse / (S * E))) per event"
echo "agentic: $irag instructions for $A requests = $((irag / A)) per request"
