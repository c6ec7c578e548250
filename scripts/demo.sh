#!/usr/bin/env bash
# `make demo`: kvgate in front of two simulated workers (the test suite's fake upstream until
# kvgate-sim lands), a streamed chat completion through it, and what the gateway saw.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build
tmp=$(mktemp -d)
cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

start_fake() {
  "$BIN/kvgate-fake-upstream" --chunks 12 --delay-ms 120 --model demo-model >"$tmp/$1.out" 2>&1 &
  for _ in $(seq 100); do grep -q port= "$tmp/$1.out" && break; sleep 0.05; done
  sed -n 's/port=//p' "$tmp/$1.out"
}
p1=$(start_fake w1)
p2=$(start_fake w2)
"$BIN/kvgate" --listen 127.0.0.1:0 --worker "http://127.0.0.1:$p1" --worker "http://127.0.0.1:$p2" \
  --threads 2 --policy least_request >"$tmp/gw.log" 2>&1 &
for _ in $(seq 100); do grep -q "listening on" "$tmp/gw.log" && break; sleep 0.05; done
gw=$(sed -n 's/.*listening on [^ ]*:\([0-9]*\) .*/\1/p' "$tmp/gw.log")

echo "== kvgate on 127.0.0.1:$gw in front of 2 workers (:$p1, :$p2)"
echo "== GET /ready -> $(curl -s "127.0.0.1:$gw/ready")"
echo "== GET /v1/models -> $(curl -s "127.0.0.1:$gw/v1/models")"
echo
echo "== POST /v1/chat/completions (stream=true): each SSE event is relayed the moment the worker"
echo "   sends it (the worker waits 120 ms between events; watch the arrival times)"
start=$(date +%s.%N)
curl -sN -D "$tmp/headers" "127.0.0.1:$gw/v1/chat/completions" \
  -H 'content-type: application/json' \
  -d '{"model":"demo-model","messages":[{"role":"user","content":"Say hello"}],"stream":true,"stream_options":{"include_usage":true}}' |
  while IFS= read -r line; do
    [ -z "$line" ] && continue
    printf '  +%6.0f ms  %s\n' "$(echo "($(date +%s.%N) - $start) * 1000" | bc)" "${line:0:96}"
  done
echo
grep -i -E "x-kvgate-worker|x-request-id" "$tmp/headers" | sed 's/^/  /'
echo
echo "== Failure handling: worker :$p1 is stopped; requests are retried on :$p2"
kill %1 2>/dev/null || true
for i in 1 2 3; do
  code=$(curl -s -o /dev/null -w '%{http_code} via %header{x-kvgate-worker}' "127.0.0.1:$gw/v1/chat/completions" \
    -H 'content-type: application/json' -d '{"model":"demo-model","messages":[{"role":"user","content":"hi"}]}')
  echo "  request $i -> $code"
done
echo
echo "== Malformed JSON gets an OpenAI-style error:"
echo "  $(curl -s "127.0.0.1:$gw/v1/chat/completions" -d '{"model":')"
echo
echo "== A few of kvgate's Prometheus metrics (GET /metrics):"
curl -s "127.0.0.1:$gw/metrics" | grep -E '^kvgate_(http_requests_total|upstream_retries_total|router_overhead_seconds_(count|sum))' | sed 's/^/  /'
echo
echo "Demo done. Try it yourself: build/kvgate --listen 127.0.0.1:8000 --worker http://YOUR-VLLM:8000"
