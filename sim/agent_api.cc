#include "sim/agent_api.h"

#include <string>
#include <utility>

#include "common/json_util.h"
#include "common/strings.h"
#include "sim/agent_json.h"
#include "sim/agent_messages.h"
#include "sim/agent_responses.h"

namespace kvgate::sim {

std::string ErrorBody(ErrorStyle style, int status, std::string_view message,
                      std::string_view openai_type) {
  if (style == ErrorStyle::kOpenAi) {
    return common::OpenAiErrorBody(message, openai_type, std::to_string(status));
  }
  const char* type = status == 400   ? "invalid_request_error"
                     : status == 404 ? "not_found_error"
                     : status == 503 ? "overloaded_error"
                                     : "api_error";
  return common::StrCat(R"({"type":"error","error":{"type":")", type, R"(","message":)",
                        agent::Json(message), "}}");
}

AgentApi::AgentApi(const SimOptions& options)
    : o_(options), store_(options.responses_store_entries) {}
AgentApi::~AgentApi() = default;

AgentCall AgentApi::Messages(std::string_view body, bool count_only) {
  return agent::ReadMessages(body, count_only, o_, converter_, json_);
}

AgentCall AgentApi::Responses(std::string_view body, std::string_view request_id) {
  return agent::ReadResponses(body, request_id, o_, converter_, json_, store_);
}

std::unique_ptr<AnswerWriter> AgentApi::Writer(AgentCall call, std::string_view request_id,
                                               uint32_t prompt_tokens, uint32_t max_tokens,
                                               uint64_t n) {
  if (call.api == kvindex::ApiKind::kMessages) {
    return agent::NewMessagesWriter(o_, call, request_id, prompt_tokens, max_tokens, n);
  }
  return agent::NewResponsesWriter(o_, std::move(call), &store_, max_tokens);
}

std::string AgentApi::CountTokensBody(uint32_t n) { return agent::CountTokensBody(n); }

std::optional<HttpAnswer> AgentApi::Stored(std::string_view method, std::string_view path,
                                           std::string_view query) {
  return agent::StoredEndpoint(store_, method, path, query);
}

}  // namespace kvgate::sim
