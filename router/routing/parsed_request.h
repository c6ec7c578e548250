// File: router/routing/parsed_request.h
// A request body as routing needs it, read in one simdjson pass by the canonicaliser
// (kvindex::Canonicalizer::Parse): model, stream, user, cache salt, the session key, the
// validation error, and — when a policy in force uses the prefix cache — the canonical prompt
// that the planner hashes into its block chain. Chat completions, completions and the agents'
// own APIs (Anthropic Messages, OpenAI Responses: converted to chat as vLLM converts them, so a
// conversation hashes alike through any of them). Thread-safe (one canonicaliser per thread).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "kvindex/canonicalize.h"
#include "kvindex/prefix_reuse.h"

namespace kvgate::router {

/// What every gateway thread's canonicaliser keeps of long chat bodies for their sessions' next
/// turns (kvindex/prefix_reuse.h): one per process.
kvindex::PrefixReuseCache& SharedPrefixReuse();

/// The endpoints the gateway reads.
enum class ApiEndpoint : uint8_t {
  kChatCompletions,  // /v1/chat/completions
  kCompletions,      // /v1/completions
  kMessages,         // /v1/messages (Anthropic)
  kCountTokens,      // /v1/messages/count_tokens: routed as messages, nothing learned
  kResponses,        // /v1/responses (OpenAI Responses)
  kOther,
};

/// The endpoint of a normalised path (without its query).
ApiEndpoint EndpointOf(std::string_view path);
/// The API family, for the `api` metric label and logs: chat, completions, messages,
/// responses, other.
std::string_view ApiName(ApiEndpoint endpoint);
/// True for the endpoints whose errors take Anthropic's shape.
inline bool IsAnthropicPath(std::string_view path) { return path.starts_with("/v1/messages"); }

struct ParsedRequest {
  ApiEndpoint endpoint = ApiEndpoint::kOther;
  std::string_view body;            // as received (the proxy forwards it unchanged)
  kvindex::CanonicalRequest json;   // fields and, when built, the canonical prompt
  std::string session_key;          // from the first routing.session_keys source present
  std::string_view session_source;  // that source ("x-session-id", "metadata.user_id", ...)

  const std::string& model() const { return json.model; }
  /// True when the canonical prompt was built (the planner can hash it).
  bool has_prompt() const { return !json.prompts.empty(); }
};

/// A request header's value by (lower-case) name, "" when absent.
using HeaderLookup = absl::FunctionRef<std::string_view(std::string_view name)>;

/// Parses `body`, which must be followed by `capacity - body.size()` readable bytes (simdjson
/// padding; copied otherwise). `build_prompt`: canonicalise the prompt too. `session_keys`
/// (routing.session_keys): where the session key may come from, in order; header names are
/// looked up with `header`.
/// @return kInvalidArgument with a client-facing message for a body that is not one valid
///         JSON object or whose top-level fields have the wrong type (the caller ignores it
///         for kOther endpoints).
absl::Status ParseRequest(std::string_view body, size_t capacity, ApiEndpoint endpoint,
                          bool build_prompt, const std::vector<std::string>& session_keys,
                          HeaderLookup header, ParsedRequest* out);

/// As above with the default sources and one header: `session_header` is x-session-id's value.
absl::Status ParseRequest(std::string_view body, size_t capacity, ApiEndpoint endpoint,
                          bool build_prompt, std::string_view session_header, ParsedRequest* out);

}  // namespace kvgate::router
