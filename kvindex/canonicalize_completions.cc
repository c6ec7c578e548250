// The completions API's `prompt` (kvindex/canonicalize.h): a string, a list of strings, a flat
// array of token ids, or a list of token arrays; one canonical prompt each.
#include "kvindex/canonicalize_impl.h"

namespace kvgate::kvindex {
using namespace walk;  // NOLINT(build/namespaces): the walk's helpers (canonicalize_impl.h)

absl::Status Canonicalizer::Impl::Tokens(od::array arr, std::vector<uint32_t>* tokens) {
  for (auto element : arr) {
    uint64_t id = 0;
    if (element.get_uint64().get(id) || id > UINT32_MAX) {
      return absl::InvalidArgumentError("token ids must be integers in [0, 2^32)");
    }
    tokens->push_back(static_cast<uint32_t>(id));
  }
  return absl::OkStatus();
}

absl::Status Canonicalizer::Impl::Completions(od::value v, CanonicalRequest* out) {
  od::json_type t;
  KVINDEX_STATUS_TRY(TypeOf(v, &t, "prompt"));
  if (t == od::json_type::string) {
    std::string_view s;
    KVINDEX_JSON_TRY(GetText(v, &s), "prompt");
    out->prompts.push_back({.kind = PromptKind::kText, .bytes = std::string(s)});
    return absl::OkStatus();
  }
  od::array arr;
  if (t != od::json_type::array || v.get_array().get(arr)) {
    return absl::InvalidArgumentError("'prompt' must be a string or an array");
  }
  bool token_mode = false;  // A flat array of token ids.
  bool list_mode = false;   // A list of prompts.
  for (auto element : arr) {
    od::value ev;
    KVINDEX_JSON_TRY(element.get(ev), "prompt[]");
    od::json_type et;
    KVINDEX_STATUS_TRY(TypeOf(ev, &et, "prompt[]"));
    if (et == od::json_type::number) {
      if (list_mode) {
        return absl::InvalidArgumentError("'prompt' mixes token ids and prompts");
      }
      if (!token_mode) {
        token_mode = true;
        out->prompts.push_back({.kind = PromptKind::kTokens});
      }
      uint64_t id = 0;
      if (ev.get_uint64().get(id) || id > UINT32_MAX) {
        return absl::InvalidArgumentError("token ids must be integers in [0, 2^32)");
      }
      out->prompts.back().tokens.push_back(static_cast<uint32_t>(id));
      continue;
    }
    if (token_mode) {
      return absl::InvalidArgumentError("'prompt' mixes token ids and prompts");
    }
    list_mode = true;
    if (et == od::json_type::string) {
      std::string_view s;
      KVINDEX_JSON_TRY(GetText(ev, &s), "prompt[]");
      out->prompts.push_back({.kind = PromptKind::kText, .bytes = std::string(s)});
    } else if (et == od::json_type::array) {
      od::array tokens;
      KVINDEX_JSON_TRY(ev.get_array().get(tokens), "prompt[]");
      out->prompts.push_back({.kind = PromptKind::kTokens});
      KVINDEX_STATUS_TRY(Tokens(tokens, &out->prompts.back().tokens));
    } else {
      return absl::InvalidArgumentError("'prompt' elements must be strings or token arrays");
    }
  }
  return absl::OkStatus();
}

}  // namespace kvgate::kvindex
