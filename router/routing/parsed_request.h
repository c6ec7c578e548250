// File: router/routing/parsed_request.h
// A request body as routing needs it, read in one simdjson pass by the canonicaliser
// (kvindex::Canonicalizer::Parse): model, stream, user, cache salt, the session key, the
// validation error, and — when a policy in force uses the prefix cache — the canonical prompt
// that the planner hashes into its block chain. Thread-safe (one canonicaliser per thread).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "kvindex/canonicalize.h"

namespace kvgate::router {

/// The OpenAI endpoints the gateway reads.
enum class ApiEndpoint : uint8_t { kChatCompletions, kCompletions, kOther };

/// kChatCompletions for "/v1/chat/completions", kCompletions for "/v1/completions".
ApiEndpoint EndpointOf(std::string_view path);

struct ParsedRequest {
  ApiEndpoint endpoint = ApiEndpoint::kOther;
  std::string_view body;           // as received (the proxy forwards it unchanged)
  kvindex::CanonicalRequest json;  // fields and, when built, the canonical prompt
  std::string session_key;         // x-session-id header, else the body's "user"

  const std::string& model() const { return json.model; }
  /// True when the canonical prompt was built (the planner can hash it).
  bool has_prompt() const { return !json.prompts.empty(); }
};

/// Parses `body`, which must be followed by `capacity - body.size()` readable bytes (simdjson
/// padding; copied otherwise). `build_prompt`: canonicalise the prompt too. `session_header`:
/// the x-session-id header value ("" when absent).
/// @return kInvalidArgument with a client-facing message for a body that is not one valid
///         JSON object or whose top-level fields have the wrong type (chat and completions;
///         the caller ignores it for other endpoints).
absl::Status ParseRequest(std::string_view body, size_t capacity, ApiEndpoint endpoint,
                          bool build_prompt, std::string_view session_header, ParsedRequest* out);

}  // namespace kvgate::router
