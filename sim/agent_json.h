// File: sim/agent_json.h
// The JSON and SSE text helpers that agent_messages.cc and agent_responses.cc share: both write
// their answers by hand, byte for byte as vLLM serialises them, so neither goes through a DOM.
// Internal to the agent API files (namespace agent). Stateless; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/types/span.h"
#include "common/json_util.h"
#include "common/strings.h"
#include "sim/agent_api.h"
#include "sim/tokens.h"
#include "simdjson.h"

namespace kvgate::sim::agent {

/// --convert-quirk's extra message: the prompt no longer matches kvgate's conversion.
inline constexpr std::string_view kQuirkMessage =
    R"({"role":"system","content":"kvgate-sim converts this API differently"})";

/// `s` as a JSON string, quotes included.
inline std::string Json(std::string_view s) {
  std::string out;
  common::AppendJsonString(out, s);
  return out;
}

/// The inside of Json(s), without the quotes.
inline std::string JsonBody(std::string_view s) {
  std::string out = Json(s);
  return out.substr(1, out.size() - 2);
}

inline std::string Raw(simdjson::dom::element e) { return simdjson::minify(e); }

/// The string at `r`, or "" when it is absent or not a string.
inline std::string_view Str(simdjson::simdjson_result<simdjson::dom::element> r) {
  std::string_view s;
  return r.get(s) ? std::string_view() : s;
}

/// A 400 in the API's error shape.
inline HttpAnswer Bad(ErrorStyle style, std::string_view message) {
  return {400, ErrorBody(style, 400, message, "BadRequestError")};
}

/// One named SSE event, as both APIs frame them.
inline void Sse(std::string_view event, std::string_view data, std::string* out) {
  common::StrAppend(out, "event: ", event, "\ndata: ", data, "\n\n");
}

/// The text of tokens [begin, end).
inline std::string TextOf(absl::Span<const uint32_t> tokens, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end && i < tokens.size(); ++i) out += TokenText(tokens[i]);
  return out;
}

}  // namespace kvgate::sim::agent
