#include "router/http/exchange.h"

namespace kvgate::router {

namespace {
constexpr std::string_view kNames[kNumEndpointLabels] = {"/v1/chat/completions",
                                                         "/v1/completions",
                                                         "/v1/embeddings",
                                                         "/v1/models",
                                                         "/v1/tokenize",
                                                         "/v1/detokenize",
                                                         "/v1/responses",
                                                         "/v1/messages",
                                                         "/v1/messages/count_tokens",
                                                         "/health",
                                                         "/ready",
                                                         "/metrics",
                                                         "/v1/other",
                                                         "other"};
}  // namespace

EndpointLabel EndpointLabelOf(std::string_view path) {
  for (int i = 0; i < static_cast<int>(EndpointLabel::kV1Other); ++i) {
    if (path == kNames[i]) return static_cast<EndpointLabel>(i);
  }
  return path.starts_with("/v1/") ? EndpointLabel::kV1Other : EndpointLabel::kOther;
}

std::string_view EndpointLabelName(EndpointLabel label) { return kNames[static_cast<int>(label)]; }

std::string_view EndpointLabelApi(EndpointLabel label) {
  switch (label) {
    case EndpointLabel::kChatCompletions:
      return "chat";
    case EndpointLabel::kCompletions:
      return "completions";
    case EndpointLabel::kMessages:
    case EndpointLabel::kCountTokens:
      return "messages";
    case EndpointLabel::kResponses:
      return "responses";
    default:
      return "other";
  }
}

}  // namespace kvgate::router
