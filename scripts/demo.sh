#!/usr/bin/env bash
# `make demo`: what kvgate does, in about four minutes on 2 cores.
#  1. A streamed chat completion relayed event by event, a worker failure retried, an error body.
#  2. A real agentic workload (Claude Code sessions, bench/data/agentic) sent through
#     `POST /v1/messages` as Claude Code sends it, on 4 simulated vLLM workers, through
#     `round_robin` and through kvgate's `kvaware`, each without and with a kvgate-store.
# Environment: KVGATE_BIN_DIR (default build/, where `make build` links the release binaries) and
# KVGATE_DEMO_SECONDS (replay length per policy, default 40; CI runs a shorter demo on the debug
# build). Exits non-zero when the demo does not show what it claims.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${KVGATE_BIN_DIR:-build}
SECONDS_PER_POLICY=${KVGATE_DEMO_SECONDS:-40}
out=build/demo
mkdir -p "$out"
tmp=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

echo "== 1. Proxying: kvgate in front of two workers"
# Started in this shell (not in a $(...) subshell) so that their pids are known.
"$BIN/kvgate-fake-upstream" --chunks 12 --delay-ms 120 --model demo-model >"$tmp/w1.out" 2>&1 &
w1=$!
"$BIN/kvgate-fake-upstream" --chunks 12 --delay-ms 120 --model demo-model >"$tmp/w2.out" 2>&1 &
w2=$!
pids+=("$w1" "$w2")
for _ in $(seq 100); do grep -q port= "$tmp/w1.out" && grep -q port= "$tmp/w2.out" && break; sleep 0.05; done
p1=$(sed -n 's/port=//p' "$tmp/w1.out")
p2=$(sed -n 's/port=//p' "$tmp/w2.out")
"$BIN/kvgate" --listen 127.0.0.1:0 --worker "http://127.0.0.1:$p1" --worker "http://127.0.0.1:$p2" \
  --threads 2 --policy least_request >"$tmp/gw.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "listening on" "$tmp/gw.log" && break; sleep 0.05; done
gw=$(sed -n 's/.*listening on [^ ]*:\([0-9]*\) .*/\1/p' "$tmp/gw.log")
echo "   GET /ready -> $(curl -s "127.0.0.1:$gw/ready")"
echo "   POST /v1/chat/completions, stream=true: each SSE event leaves kvgate as soon as the worker"
echo "   sends it (the worker waits 120 ms between events):"
start=$(date +%s.%N)
curl -sN -D "$tmp/headers" "127.0.0.1:$gw/v1/chat/completions" -H 'content-type: application/json' \
  -d '{"model":"demo-model","messages":[{"role":"user","content":"Say hello"}],"stream":true}' |
  while IFS= read -r line; do
    [ -z "$line" ] && continue
    printf '   +%5.0f ms  %s\n' "$(echo "($(date +%s.%N) - $start) * 1000" | bc)" "${line:0:90}"
  done
grep -i "x-kvgate-worker" "$tmp/headers" | sed 's/^/   /'
kill "$w1" 2>/dev/null || true
wait "$w1" 2>/dev/null || true
echo "   Worker :$p1 stopped; requests are retried on :$p2:"
for i in 1 2 3; do
  code=$(curl -s -o /dev/null -w '%{http_code} via %header{x-kvgate-worker}' \
    "127.0.0.1:$gw/v1/chat/completions" -H 'content-type: application/json' \
    -d '{"model":"demo-model","messages":[{"role":"user","content":"hi"}]}')
  echo "     request $i -> $code"
done
echo "   Malformed JSON -> $(curl -s "127.0.0.1:$gw/v1/chat/completions" -d '{"model":')"
kill "${pids[@]}" 2>/dev/null || true
wait 2>/dev/null || true
pids=()

# The four Claude Code sessions ship with the repository (bench/data/README.md: source, licence).
data=bench/data
if ! ls "$data"/agentic/*.json >/dev/null 2>&1; then
  echo "demo: FAILED: no Claude Code traces in $data/agentic (see bench/data/README.md)" >&2
  exit 1
fi
echo
echo "== 2. Routing Claude Code sessions: 8 concurrent sessions, replaying 4 recorded Claude Code"
echo "   sessions ($data/agentic), sent as Claude Code sends them: POST /v1/messages"
echo "   (Anthropic Messages), system blocks that open with a per-session billing header, Claude"
echo "   Code's tools, a cache_control marker that moves to the newest block every turn, and"
echo "   tool_use/tool_result turns. kvgate drops the billing header, as vLLM does, and routes each"
echo "   request by its prompt prefix (tools + system prompt shared by every session, then the"
echo "   session's own history). Fleet: 4 simulated vLLM workers (kvgate-sim, 20x faster than real"
echo "   time, KV cache smaller than the working set), ${SECONDS_PER_POLICY} s of replay each through"
echo "   round_robin and kvaware, each without and with a kvgate-store beside the fleet (+store: a"
echo "   worker loads the KV it lacks from the store instead of recomputing it, as vLLM's"
echo "   MooncakeStoreConnector does). Progress every 5 s, and a line per run as it finishes:"
# bench/compare's tables go to $out/tables.md, its progress (stderr) to $out/compare.log and,
# one line per finished run, to the terminal.
if ! bench/compare --workers 4 --policies round_robin,kvaware --store --workloads agentic \
    --data "$data" --api messages --duration "$SECONDS_PER_POLICY" --conversations 8 \
    --gpu-blocks 8000 --bin-dir "$BIN" --out "$out/report.md" --plot "$out/report.png" \
    --summary-json "$out/summary.json" 2>&1 >"$out/tables.md" | tee "$out/compare.log" |
    sed -un -e 's|^compare: agentic / \([^ ]*\) (api [^)]*) \.\.\.$|   \1: started|p' \
      -e 's|^compare: agentic / \([^ :]*\): progress: |   \1: |p' \
      -e 's|^compare: agentic / \([^ ]*\) done (\([^,]*\), \([^)]*\)): |   [\2] \1, \3: |p' \
      -e 't' -e '/^compare: .*\(errors {\|!=\)/s/^/   /p'; then
  cat "$out/compare.log"
  echo "demo: FAILED: bench/compare did not finish (log: $out/compare.log)" >&2
  exit 1
fi
# Each replay reports every 5 s (kvgate-replay --progress lines): a silent run is a bug.
if [ "$SECONDS_PER_POLICY" -ge 10 ] && [ "$(grep -c ': progress: ' "$out/compare.log")" -lt 4 ]; then
  echo "demo: FAILED: the replays printed no progress (log: $out/compare.log)" >&2
  exit 1
fi
echo
sed -n '/^API:/,$p' "$out/tables.md" | sed '/^| policy/,$ {/^$/d}'
/usr/bin/python3 - "$out/summary.json" <<'PY'
import json, sys
rows = {r["policy"]: r for r in json.load(open(sys.argv[1]))["agentic"]}
rr, kv = rows["round_robin"], rows["kvaware"]
rrs, kvs = rows["round_robin+store"], rows["kvaware+store"]
print()
print(f"Verdict: kvaware served {kv['cached'] * 100:.0f}% of prompt tokens from cache vs "
      f"{rr['cached'] * 100:.0f}% for round_robin; mean TTFT {kv['ttft_mean']:.2f} s vs "
      f"{rr['ttft_mean']:.2f} s, p90 {kv['ttft_p90']:.2f} s vs {rr['ttft_p90']:.2f} s "
      f"(simulated seconds; a short run on a shared 2-core machine, so expect noise).")
for name, plain, stored in (("round_robin", rr, rrs), ("kvaware", kv, kvs)):
    saved = 1 - stored["recomputed"] / plain["recomputed"] if plain["recomputed"] else 0
    print(f"With the store, {name} recomputed {stored['recomputed']:,} prompt tokens instead of "
          f"{plain['recomputed']:,} ({saved * 100:.0f}% saved; {stored['store_cached'] * 100:.0f}% "
          f"of prompt tokens loaded from the store); mean TTFT {stored['ttft_mean']:.2f} s vs "
          f"{plain['ttft_mean']:.2f} s.")
# The demo's claims, checked: every run served requests, kvaware reused more of the cache
# than round_robin, the store saved round_robin recompute, and every run's report agreed with
# the simulators' own token counters.
for name, r in rows.items():
    if r["requests"] == 0 or r["errors"] > r["requests"] / 10:
        sys.exit(f"demo: FAILED: {name} served {r['requests']} requests with {r['errors']} errors")
    if not r["counters_match"]:
        sys.exit(f"demo: FAILED: {name}: the report's token counts differ from the simulators'")
if kv["cached"] <= rr["cached"]:
    sys.exit("demo: FAILED: kvaware did not reuse more of the KV cache than round_robin")
if rrs["store_cached"] <= 0 or rrs["recomputed"] >= rr["recomputed"]:
    sys.exit("demo: FAILED: the store did not save round_robin any recompute")
PY
echo "Full report: $out/report.md (plot: $out/report.png). All policies on all traces: bench/compare."
