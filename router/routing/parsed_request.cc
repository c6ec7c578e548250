#include "router/routing/parsed_request.h"

namespace kvgate::router {
namespace {

kvindex::Canonicalizer& ThreadCanonicalizer() {
  thread_local kvindex::Canonicalizer canonicalizer;
  return canonicalizer;
}

}  // namespace

ApiEndpoint EndpointOf(std::string_view path) {
  if (path == "/v1/chat/completions") return ApiEndpoint::kChatCompletions;
  if (path == "/v1/completions") return ApiEndpoint::kCompletions;
  return ApiEndpoint::kOther;
}

absl::Status ParseRequest(std::string_view body, size_t capacity, ApiEndpoint endpoint,
                          bool build_prompt, std::string_view session_header, ParsedRequest* out) {
  out->endpoint = endpoint;
  out->body = body;
  const kvindex::ApiKind api =
      endpoint == ApiEndpoint::kChatCompletions ? kvindex::ApiKind::kChatCompletions
      : endpoint == ApiEndpoint::kCompletions   ? kvindex::ApiKind::kCompletions
                                                : kvindex::ApiKind::kOther;
  absl::Status s = ThreadCanonicalizer().Parse(body, capacity, api, build_prompt, &out->json);
  out->session_key = session_header.empty() ? out->json.user : std::string(session_header);
  return s;
}

}  // namespace kvgate::router
