#include "router/routing/parsed_request.h"

#include "config/config.h"
#include "kvindex/agent_chat.h"
#include "kvindex/prefix_reuse.h"

namespace kvgate::router {
namespace {

// 64 MiB in all: about 150 sessions of 400 KB; least recently used first.
constexpr size_t kPrefixReuseBytes = size_t{64} << 20;

kvindex::Canonicalizer& ThreadCanonicalizer() {
  thread_local kvindex::Canonicalizer canonicalizer(
      kvindex::CanonicalizeOptions{.reuse = &SharedPrefixReuse()});
  return canonicalizer;
}

kvindex::ApiKind ApiKindOf(ApiEndpoint endpoint) {
  switch (endpoint) {
    case ApiEndpoint::kChatCompletions:
      return kvindex::ApiKind::kChatCompletions;
    case ApiEndpoint::kCompletions:
      return kvindex::ApiKind::kCompletions;
    case ApiEndpoint::kMessages:
    case ApiEndpoint::kCountTokens:
      return kvindex::ApiKind::kMessages;
    case ApiEndpoint::kResponses:
      return kvindex::ApiKind::kResponses;
    case ApiEndpoint::kOther:
      break;
  }
  return kvindex::ApiKind::kOther;
}

// The session key from the first source present; `*source` names it.
std::string SessionKey(const kvindex::CanonicalRequest& json, const std::vector<std::string>& keys,
                       HeaderLookup header, std::string_view* source) {
  for (const std::string& key : keys) {
    std::string value;
    if (key == "metadata.user_id") {
      if (!json.metadata_user_id.empty()) value = kvindex::SessionIdOfUserId(json.metadata_user_id);
    } else if (key == "prompt_cache_key") {
      value = json.prompt_cache_key;
    } else if (key == "previous_response_id") {
      value = json.previous_response_id;
    } else if (key == "conversation") {
      value = json.conversation;
    } else if (key == "user") {
      value = json.user;
    } else {
      value = header(key);
    }
    if (!value.empty()) {
      *source = key;
      return value;
    }
  }
  *source = {};
  return {};
}

}  // namespace

kvindex::PrefixReuseCache& SharedPrefixReuse() {
  static kvindex::PrefixReuseCache reuse(kPrefixReuseBytes);
  return reuse;
}

ApiEndpoint EndpointOf(std::string_view path) {
  if (path == "/v1/chat/completions") return ApiEndpoint::kChatCompletions;
  if (path == "/v1/completions") return ApiEndpoint::kCompletions;
  if (path == "/v1/messages") return ApiEndpoint::kMessages;
  if (path == "/v1/messages/count_tokens") return ApiEndpoint::kCountTokens;
  if (path == "/v1/responses") return ApiEndpoint::kResponses;
  return ApiEndpoint::kOther;
}

std::string_view ApiName(ApiEndpoint endpoint) {
  switch (endpoint) {
    case ApiEndpoint::kChatCompletions:
      return "chat";
    case ApiEndpoint::kCompletions:
      return "completions";
    case ApiEndpoint::kMessages:
    case ApiEndpoint::kCountTokens:
      return "messages";
    case ApiEndpoint::kResponses:
      return "responses";
    case ApiEndpoint::kOther:
      break;
  }
  return "other";
}

absl::Status ParseRequest(std::string_view body, size_t capacity, ApiEndpoint endpoint,
                          bool build_prompt, const std::vector<std::string>& session_keys,
                          HeaderLookup header, ParsedRequest* out) {
  out->endpoint = endpoint;
  out->body = body;
  absl::Status s =
      ThreadCanonicalizer().Parse(body, capacity, ApiKindOf(endpoint), build_prompt, &out->json);
  out->session_key = SessionKey(out->json, session_keys, header, &out->session_source);
  return s;
}

absl::Status ParseRequest(std::string_view body, size_t capacity, ApiEndpoint endpoint,
                          bool build_prompt, std::string_view session_header, ParsedRequest* out) {
  static const std::vector<std::string> kDefault = config::RoutingConfig().session_keys;
  return ParseRequest(
      body, capacity, endpoint, build_prompt, kDefault,
      [session_header](std::string_view name) {
        return name == "x-session-id" ? session_header : std::string_view();
      },
      out);
}

}  // namespace kvgate::router
