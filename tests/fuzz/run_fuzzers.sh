#!/usr/bin/env bash
# Builds and runs every libFuzzer target for a bounded time.
#   tests/fuzz/run_fuzzers.sh [seconds-per-target]   (default 20)
# Needs clang++ (libFuzzer is clang-only, so this does not use the gcc CMake build): each target
# is compiled directly against the sources it fuzzes. Exits non-zero if a target crashes, leaks
# or trips a sanitizer; prints "skipped: clang++ not found" and exits 0 without clang.
# To add a target, append a line to TARGETS: "name|fuzzer source|library sources|pkg-config libs"
# and optionally "|max seconds" (a cap below seconds-per-target, which keeps `make test` short;
# FUZZ_LONG=1 ignores the caps for a long run).
set -euo pipefail

SECONDS_PER_TARGET="${1:-20}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CXX="${FUZZ_CXX:-clang++}"

if ! command -v "$CXX" >/dev/null 2>&1; then
  echo "skipped: clang++ not found"
  exit 0
fi

KVINDEX_SRCS="kvindex/canonical_escape.cc kvindex/canonical_prompt.cc kvindex/canonicalize.cc"
KVINDEX_SRCS+=" kvindex/canonicalize_completions.cc"
KVINDEX_SRCS+=" kvindex/canonicalize_reuse.cc kvindex/prefix_reuse.cc kvindex/block_hash.cc kvindex/agent_chat.cc"
KVINDEX_SRCS+=" kvindex/agent_messages.cc kvindex/agent_responses.cc kvindex/py_json.cc"
KVINDEX_SRCS+=" common/strings.cc"
# msgpuck is header-only in use; its tables come from the one MP_SOURCE translation unit.
KVEVENTS_SRCS="kvevents/event_decoder.cc common/msgpuck_impl.cc"
HTTP1_SRCS="net/http1.cc net/body_framing.cc common/strings.cc"
# (one line each: a TARGETS entry is read as one line)
TOKENIZER_SRCS="tokenizer/tokenizer.cc tokenizer/hf_tokenizer.cc tokenizer/hf_load.cc tokenizer/hf_text.cc"
TOKENIZER_SRCS+=" tokenizer/hf_split.cc tokenizer/hf_bpe.cc tokenizer/hf_word_cache.cc"
TOKENIZER_SRCS+=" tokenizer/incremental.cc"
TOKENIZER_SRCS+=" tokenizer/chat_template.cc tokenizer/jinja_lexer.cc tokenizer/jinja_parse.cc"
TOKENIZER_SRCS+=" tokenizer/jinja_eval.cc tokenizer/jinja_value.cc tokenizer/jinja_builtins.cc"
TOKENIZER_SRCS+=" tokenizer/jinja_memo.cc tokenizer/jinja_replay.cc"
TOKENIZER_SRCS+=" kvindex/canonical_prompt.cc common/strings.cc"
STORE_SRCS="store/wire.cc common/strings.cc"
PD_SRCS="router/pd/pd_bodies.cc common/strings.cc common/json_util.cc"
POLICY_SRCS="router/policies/policy_registry.cc router/policies/load_balancing_policies.cc"
POLICY_SRCS+=" router/policies/consistent_hash_policy.cc router/policies/cache_aware_policy.cc"
POLICY_SRCS+=" router/policies/cost_policy.cc router/policies/weighted_policy.cc"
POLICY_SRCS+=" router/policies/kvaware_policy.cc"
CONFIG_SRCS="router/config/loader.cc router/config/resolve.cc router/config/secret.cc"
CONFIG_SRCS+=" router/config/auth_section.cc router/config/discovery_section.cc"
CONFIG_SRCS+=" router/config/listener_section.cc router/config/routing_section.cc"
CONFIG_SRCS+=" router/config/upstream_section.cc router/config/workers_section.cc"
CONFIG_SRCS+=" router/config/cluster_section.cc kvindex/hybrid_groups.cc"
CONFIG_SRCS+=" common/cidr.cc common/logging.cc common/url.cc ${TOKENIZER_SRCS} ${PD_SRCS} ${POLICY_SRCS}"
TARGETS=(
  "http1|tests/fuzz/http1_fuzzer.cc|${HTTP1_SRCS}|absl_strings"
  "canonicalize|tests/fuzz/canonicalize_fuzzer.cc|${KVINDEX_SRCS}|simdjson fmt libxxhash absl_status absl_statusor absl_strings"
  "prefix_reuse|tests/fuzz/prefix_reuse_fuzzer.cc|${KVINDEX_SRCS}|simdjson fmt libxxhash absl_status absl_statusor absl_strings|20"
  "messages|tests/fuzz/messages_fuzzer.cc|${KVINDEX_SRCS}|simdjson fmt libxxhash absl_status absl_statusor absl_strings|20"
  "responses|tests/fuzz/responses_fuzzer.cc|${KVINDEX_SRCS}|simdjson fmt libxxhash absl_status absl_statusor absl_strings|20"
  "kv_event_decoder|tests/fuzz/kv_event_decoder_fuzzer.cc|${KVEVENTS_SRCS}|libxxhash absl_status absl_statusor absl_strings"
  "tokenizer|tests/fuzz/tokenizer_fuzzer.cc|${TOKENIZER_SRCS}|simdjson fmt oniguruma libutf8proc libxxhash absl_status absl_statusor absl_strings absl_hash absl_raw_hash_set|20"
  "store_request|tests/fuzz/store_request_fuzzer.cc|${STORE_SRCS}|fmt absl_status absl_statusor absl_strings|20"
  "store_auth|tests/fuzz/store_auth_fuzzer.cc|transfer/peer_auth.cc transfer/capability.cc transfer/types.cc common/strings.cc|libcrypto absl_status absl_statusor absl_strings|10"
  "pd_bodies|tests/fuzz/pd_bodies_fuzzer.cc|${PD_SRCS}|simdjson absl_status absl_statusor absl_strings|20"
  "request_path|tests/fuzz/request_path_fuzzer.cc|${HTTP1_SRCS} ${KVINDEX_SRCS}|simdjson fmt libxxhash absl_status absl_statusor absl_strings|20"
  "relay_framing|tests/fuzz/relay_framing_fuzzer.cc|${HTTP1_SRCS}|absl_strings|20"
  "usage_scanner|tests/fuzz/usage_scanner_fuzzer.cc|router/upstream/usage_scanner.cc||20"
  "cluster_frame|tests/fuzz/cluster_frame_fuzzer.cc|router/cluster/cluster_message.cc common/strings.cc|absl_status absl_statusor absl_strings|10"
  "config_loader|tests/fuzz/config_loader_fuzzer.cc|${CONFIG_SRCS}|yaml-cpp spdlog fmt simdjson oniguruma libutf8proc libxxhash absl_status absl_statusor absl_strings absl_hash absl_raw_hash_set absl_str_format_internal|20"
)

OUT="${FUZZ_OUT:-${ROOT}/build/fuzz}"
mkdir -p "$OUT"

# Builds target $1 (an index into TARGETS) into ${OUT}/<name>_fuzzer, its output in a log. A
# source listed twice (common/strings.cc through two lists) is compiled once.
build() {
  local name fuzzer srcs pkgs cap
  IFS='|' read -r name fuzzer srcs pkgs cap <<<"${TARGETS[$1]}"
  # shellcheck disable=SC2046,SC2086
  "$CXX" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$ROOT" "${ROOT}/${fuzzer}" $(for s in $srcs; do echo "${ROOT}/${s}"; done | sort -u) \
    $([[ -z "$pkgs" ]] || pkg-config --cflags --libs $pkgs) -o "${OUT}/${name}_fuzzer" \
    >"${OUT}/${name}.build.log" 2>&1
}

# The next target builds while this one runs: a fuzzer uses one core, the compiler the other.
status=0
if [[ -n "${FUZZ_ONLY:-}" ]]; then  # FUZZ_ONLY="a b": just those targets (a quick check).
  kept=()
  for t in "${TARGETS[@]}"; do [[ " ${FUZZ_ONLY} " == *" ${t%%|*} "* ]] && kept+=("$t"); done
  TARGETS=("${kept[@]}")
fi
build 0 &
pending=$!
for ((i = 0; i < ${#TARGETS[@]}; i++)); do
  IFS='|' read -r name fuzzer srcs pkgs cap <<<"${TARGETS[$i]}"
  seconds="$SECONDS_PER_TARGET"
  if [[ -n "${cap:-}" && "$cap" -lt "$seconds" && -z "${FUZZ_LONG:-}" ]]; then seconds="$cap"; fi
  bin="${OUT}/${name}_fuzzer"
  echo "== building ${name} fuzzer"
  built=0
  wait "$pending" || built=$?
  if ((i + 1 < ${#TARGETS[@]})); then
    build $((i + 1)) &
    pending=$!
  fi
  cat "${OUT}/${name}.build.log"
  if ((built != 0)); then
    echo "FAILED: ${name} fuzzer did not build"
    status=1
    continue
  fi
  corpus_seed="${ROOT}/tests/fuzz/corpus/${name}"
  work_corpus="${OUT}/${name}_corpus"
  mkdir -p "$work_corpus"
  dict=()
  if [[ -f "${ROOT}/tests/fuzz/${name}.dict" ]]; then
    dict=(-dict="${ROOT}/tests/fuzz/${name}.dict")
  fi
  echo "== running ${name} fuzzer for ${seconds}s"
  if ! (cd "$OUT" && "$bin" "${dict[@]}" -max_total_time="$seconds" \
        -max_len=65536 -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
        "$work_corpus" "$corpus_seed"); then
    echo "FAILED: ${name} fuzzer found a crash (artifacts in ${OUT})"
    status=1
  fi
done
exit "$status"
