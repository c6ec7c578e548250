#include "sim/request_parser.h"

#include <string_view>

#include "common/status_macros.h"
#include "common/strings.h"
#include "sim/tokens.h"

namespace kvgate::sim {

absl::Status RequestParser::Parse(const std::string& body, kvindex::ApiKind api,
                                  ParsedRequest* out) {
  out->api = api;
  simdjson::dom::element doc;
  simdjson::dom::object obj;
  if (json_.parse(body).get(doc) || doc.get(obj)) {
    return absl::InvalidArgumentError("request body is not a JSON object");
  }
  bool b = false;
  if (!obj["stream"].get(b)) out->stream = b;
  simdjson::dom::object so;
  if (!obj["stream_options"].get(so) && !so["include_usage"].get(b)) out->include_usage = b;
  std::string_view model;
  if (!obj["model"].get(model)) out->model = std::string(model);
  out->max_tokens = o_.default_max_tokens;
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    simdjson::dom::element e;
    if (obj[key].get(e) || e.is_null()) continue;
    uint64_t v = 0;
    if (e.get(v) || v == 0 || v > o_.profile.max_model_len) {
      return absl::InvalidArgumentError(common::StrCat(key, " must be a positive integer"));
    }
    out->max_tokens = static_cast<uint32_t>(v);
  }
  KVGATE_RETURN_IF_ERROR(canonicalizer_.Canonicalize(body, api, &canonical_));
  if (canonical_.prompts.size() != 1) {
    return absl::InvalidArgumentError("kvgate-sim serves exactly one prompt per request");
  }
  const kvindex::CanonicalPrompt& p = canonical_.prompts[0];
  out->prompt.clear();
  if (p.kind == kvindex::PromptKind::kTokens) {
    out->prompt = p.tokens;
  } else {
    AppendBytesToTokens4(p.Text(), &out->prompt);
  }
  if (out->prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  return absl::OkStatus();
}

}  // namespace kvgate::sim
