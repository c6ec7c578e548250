#include "sim/chat_writer.h"

#include <chrono>

#include "common/json_util.h"
#include "common/strings.h"
#include "sim/tokens.h"

namespace kvgate::sim {
namespace {

// With a store (--store), prompt_tokens_details also says how many of the cached tokens were
// loaded from it (`kv_store_tokens`, kvgate-sim's own field: vLLM reports them only in its
// external prefix-cache metrics), so that a replay can count them per request; and with
// --engine-ttft-usage the engine's own TTFT (EngineTtftField).
std::string UsageJson(const UsageCounts& u) {
  return common::StrCat("{\"prompt_tokens\":", u.prompt,
                        ",\"total_tokens\":", u.prompt + u.completion,
                        ",\"completion_tokens\":", u.completion,
                        ",\"prompt_tokens_details\":{\"cached_tokens\":", u.cached,
                        u.store ? common::StrCat(",\"kv_store_tokens\":", *u.store) : "", "}",
                        EngineTtftField(u), "}");
}

}  // namespace

ChatWriter::ChatWriter(bool chat, std::string_view request_id, std::string_view model,
                       bool include_usage)
    : chat_(chat),
      id_(common::StrCat(chat ? "chatcmpl-" : "cmpl-", request_id)),
      created_(std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count()),
      include_usage_(include_usage) {
  common::AppendJsonString(model_, model);
  common::StrAppend(&prefix_, "{\"id\":\"", id_, "\",\"object\":\"",
                    chat ? "chat.completion.chunk" : "text_completion", "\",\"created\":", created_,
                    ",\"model\":", model_);
}

std::string ChatWriter::Whole(absl::Span<const uint32_t> tokens, const UsageCounts& usage,
                              std::string_view kv_params) {
  std::string text;
  for (uint32_t t : tokens) text += TokenText(t);
  std::string body = common::StrCat(
      "{\"id\":\"", id_, "\",\"object\":\"", chat_ ? "chat.completion" : "text_completion",
      "\",\"created\":", created_, ",\"model\":", model_, ",\"choices\":[{\"index\":0,");
  if (chat_) {
    body += "\"message\":{\"role\":\"assistant\",\"content\":";
    common::AppendJsonString(body, text);
    body += ",\"tool_calls\":[]},";
  } else {
    body += "\"text\":";
    common::AppendJsonString(body, text);
    body += ",";
  }
  common::StrAppend(&body, "\"logprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null}],",
                    "\"usage\":", UsageJson(usage),
                    ",\"prompt_logprobs\":null,\"kv_transfer_params\":", kv_params, "}");
  return body;
}

void ChatWriter::Begin(std::string* out) {
  if (!chat_) return;
  common::StrAppend(out, "data: ", prefix_,
                    ",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
                    "\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n");
}

void ChatWriter::Token(uint32_t token, bool last, std::string* out) {
  const char* fin = last ? "\"length\"" : "null";
  const std::string text = TokenText(token);
  if (chat_) {
    common::StrAppend(out, "data: ", prefix_,
                      ",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"", text,
                      "\"},\"logprobs\":null,\"finish_reason\":", fin,
                      last ? ",\"stop_reason\":null" : "", "}]}\n\n");
  } else {
    common::StrAppend(out, "data: ", prefix_, ",\"choices\":[{\"index\":0,\"text\":\"", text,
                      "\",\"logprobs\":null,\"finish_reason\":", fin,
                      ",\"stop_reason\":null}]}\n\n");
  }
}

void ChatWriter::End(const UsageCounts& usage, std::string* out) {
  if (include_usage_) {
    common::StrAppend(out, "data: ", prefix_, ",\"choices\":[],\"usage\":", UsageJson(usage),
                      "}\n\n");
  }
  *out += "data: [DONE]\n\n";
}

}  // namespace kvgate::sim
