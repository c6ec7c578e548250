// File: sim/agent_api.h
// The agents' APIs of kvgate-sim, as vLLM serves them: Anthropic Messages (/v1/messages,
// /v1/messages/count_tokens) and OpenAI Responses (/v1/responses, and the responses a worker
// stores). A request is converted to chat by kvgate's own converter (kvindex/agent_chat.h);
// the worker (worker_server.cc) tokenises that chat body and runs it as a chat completion, and
// an answer writer renders the engine's tokens in the API's shape (docs/simulator.md lists every
// event and field). This header is what the worker sees; each API lives in its own file pair
// (agent_messages.h, agent_responses.h). Thread-compatible: one AgentApi per worker, io thread
// only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"
#include "common/strings.h"
#include "kvindex/agent_chat.h"
#include "sim/cli.h"
#include "sim/response_store.h"
#include "simdjson.h"

namespace kvgate::sim {

/// What a generation reports in its usage.
struct UsageCounts {
  uint32_t prompt = 0;
  uint32_t completion = 0;
  uint32_t cached = 0;
  std::optional<uint32_t> store;  // --store only: of `cached`, the tokens loaded from the store
  double engine_ttft_s = -1;      // --engine-ttft-usage only: Pending::engine_ttft_s
};

/// kvgate-sim's own usage field `kv_engine_ttft_s` (with its leading comma; "" without
/// --engine-ttft-usage or before the first token): the TTFT by the engine's clock, so that a
/// replay can tell routing from the testbed's own delays (hops, and this process's one thread
/// running late on a busy machine).
inline std::string EngineTtftField(const UsageCounts& u) {
  return u.engine_ttft_s < 0 ? std::string()
                             : common::StrCat(",\"kv_engine_ttft_s\":", u.engine_ttft_s);
}

/// Renders one API's answer from the engine's output tokens; the worker's completion path,
/// shared by every API (worker_server.cc), drives it.
class AnswerWriter {
 public:
  virtual ~AnswerWriter() = default;
  /// The non-streamed body; `kv_params` is the P/D kv_transfer_params JSON ("null": none).
  virtual std::string Whole(absl::Span<const uint32_t> tokens, const UsageCounts& usage,
                            std::string_view kv_params) = 0;
  /// Streamed: the events before the first token.
  virtual void Begin(std::string* out) = 0;
  /// Streamed: one output token; `last` when it is the request's final one.
  virtual void Token(uint32_t token, bool last, std::string* out) = 0;
  /// Streamed: the events after the last token.
  virtual void End(const UsageCounts& usage, std::string* out) = 0;
};

enum class ErrorStyle { kOpenAi, kAnthropic };

/// An error body. kOpenAi: common::OpenAiErrorBody with `openai_type` ("BadRequestError", ...)
/// and the status as the code, as the chat path answers. kAnthropic:
/// {"type":"error","error":{"type":T,"message":M}}, T from the status (invalid_request_error,
/// not_found_error, api_error, overloaded_error).
std::string ErrorBody(ErrorStyle style, int status, std::string_view message,
                      std::string_view openai_type);

/// One whole HTTP answer with a JSON body.
struct HttpAnswer {
  int status = 200;
  std::string body;
};

/// The fields of a Responses request echoed in its response object, as JSON text.
struct ResponsesEcho {
  std::string instructions = "null", metadata = "null", parallel_tool_calls = "true",
              temperature = "1.0", tool_choice = "\"auto\"", tools = "[]", top_p = "1.0",
              max_tool_calls = "null", reasoning = "null", service_tier = "\"auto\"", text = "null",
              top_logprobs = "0", truncation = "\"disabled\"", user = "null";
};

/// An agent API request, read and converted: what the server runs.
struct AgentCall {
  kvindex::ApiKind api = kvindex::ApiKind::kMessages;
  std::optional<HttpAnswer> error;  // set: answer this instead
  std::string chat_body;            // the chat-completions body the prompt is tokenised from
  bool stream = false;
  std::optional<uint32_t> max_tokens;  // unset: --default-max-tokens
  bool thinking = false;               // Messages: the answer starts with a thinking block
  std::string tool_name;  // non-empty: the answer is a call of this tool (forced tool_choice)
  // Responses only (what is stored: StoredResponse).
  std::string response_id;
  bool store = true;
  std::string previous_response_id;
  ResponsesEcho echo;
  std::shared_ptr<const StoredTurn> previous;            // the turn of previous_response_id
  std::vector<std::string> input;                        // the new non-system chat messages
  std::vector<std::string> input_items, input_item_ids;  // when stored
};

/// One worker's agent APIs: reads requests, makes their answer writers, and keeps the
/// worker's stored responses.
class AgentApi {
 public:
  explicit AgentApi(const SimOptions& options);
  ~AgentApi();
  AgentApi(const AgentApi&) = delete;
  AgentApi& operator=(const AgentApi&) = delete;

  /// A /v1/messages body (`count_only`: /v1/messages/count_tokens, which needs no max_tokens).
  AgentCall Messages(std::string_view body, bool count_only);
  /// A /v1/responses body; the response is "resp_" + `request_id`.
  AgentCall Responses(std::string_view body, std::string_view request_id);

  /// The writer of a call; `prompt_tokens` and `max_tokens` are the engine request's, `n` the
  /// worker's request number.
  std::unique_ptr<AnswerWriter> Writer(AgentCall call, std::string_view request_id,
                                       uint32_t prompt_tokens, uint32_t max_tokens, uint64_t n);

  /// count_tokens' answer for a prompt of `n` tokens.
  static std::string CountTokensBody(uint32_t n);

  /// GET and DELETE /v1/responses/{id}, POST /v1/responses/{id}/cancel and GET
  /// /v1/responses/{id}/input_items (`path` without the query); nullopt for any other request.
  std::optional<HttpAnswer> Stored(std::string_view method, std::string_view path,
                                   std::string_view query);

  ResponseStore& store() { return store_; }

 private:
  const SimOptions& o_;
  kvindex::AgentChatConverter converter_;
  simdjson::dom::parser json_;
  ResponseStore store_;
};

}  // namespace kvgate::sim
