#include "sim/agent_messages.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>

#include "common/strings.h"
#include "sim/agent_json.h"
#include "sim/tokens.h"

namespace kvgate::sim::agent {
namespace {

using kvindex::ApiKind;
namespace dom = simdjson::dom;

constexpr uint32_t kMaxThinkingTokens = 8;

// 32 hex digits (a uuid4 hex's length) derived from `seed`: thinking signatures.
std::string Hex32(std::string_view seed) {
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx",
                static_cast<unsigned long long>(XXH3_64bits_withSeed(seed.data(), seed.size(), 1)),
                static_cast<unsigned long long>(XXH3_64bits_withSeed(seed.data(), seed.size(), 2)));
  return buf;
}

// A message, whole or as Anthropic's SSE events (vLLM's anthropic/serving.py): an optional
// thinking block, then a text or a forced tool_use block.
class MessagesWriter : public AnswerWriter {
 public:
  MessagesWriter(const SimOptions& o, const AgentCall& call, std::string_view request_id,
                 uint32_t prompt_tokens, uint32_t max_tokens, uint64_t n)
      : model_(Json(o.model)),
        id_(common::StrCat("chatcmpl-", request_id)),
        tool_(call.tool_name),
        tool_id_(common::StrCat("toolu_sim_", n)),
        thinking_(call.thinking ? std::min(kMaxThinkingTokens, max_tokens / 4) : 0),
        prompt_(prompt_tokens),
        max_tokens_(max_tokens),
        signature_(Hex32(id_)) {}

  std::string Whole(absl::Span<const uint32_t> tokens, const UsageCounts& usage,
                    std::string_view kv_params) override {
    const size_t k = std::min<size_t>(thinking_, tokens.size());
    std::string content = "[";
    if (k > 0) {
      common::StrAppend(&content, R"({"type":"thinking","thinking":)", Json(TextOf(tokens, 0, k)),
                        R"(,"signature":")", signature_, "\"},");
    }
    const std::string rest = TextOf(tokens, k, tokens.size());
    if (!tool_.empty()) {
      common::StrAppend(&content, R"({"type":"tool_use","id":")", tool_id_, R"(","name":)",
                        Json(tool_), R"(,"input":{"text":)", Json(rest), "}}]");
    } else {
      common::StrAppend(&content, R"({"type":"text","text":)", Json(rest), "}]");
    }
    return common::StrCat(R"({"id":)", Json(id_),
                          R"(,"type":"message","role":"assistant","content":)", content,
                          R"(,"model":)", model_, R"(,"stop_reason":")", StopReason(usage),
                          R"(","usage":)", Usage(usage),
                          // A P/D prefill's KV, at the top level as vLLM returns it.
                          kv_params == "null" || kv_params.empty()
                              ? std::string()
                              : common::StrCat(R"(,"kv_transfer_params":)", kv_params),
                          "}");
  }

  void Begin(std::string* out) override {
    Sse("message_start",
        common::StrCat(R"({"type":"message_start","message":{"id":)", Json(id_),
                       R"(,"type":"message","role":"assistant","content":[],"model":)", model_,
                       R"(,"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":)",
                       prompt_, R"(,"output_tokens":0}}})"),
        out);
    Sse("ping", R"({"type":"ping"})", out);  // Anthropic's API sends one; vLLM does not.
  }

  void Token(uint32_t token, bool, std::string* out) override {
    const std::string text = JsonBody(TokenText(token));
    if (sent_ < thinking_) {
      if (sent_ == 0) Open(R"({"type":"thinking","thinking":""})", out);
      Delta(common::StrCat(R"({"type":"thinking_delta","thinking":")", text, "\"}"), out);
    } else if (tool_.empty()) {
      if (sent_ == thinking_) Open(R"({"type":"text","text":""})", out);
      Delta(common::StrCat(R"({"type":"text_delta","text":")", text, "\"}"), out);
    } else {
      std::string partial;
      if (sent_ == thinking_) {
        Open(common::StrCat(R"({"type":"tool_use","id":")", tool_id_, R"(","name":)", Json(tool_),
                            R"(,"input":{}})"),
             out);
        partial = "{\"text\": \"";
      }
      partial += text;
      Delta(common::StrCat(R"({"type":"input_json_delta","partial_json":)", Json(partial), "}"),
            out);
    }
    ++sent_;
  }

  void End(const UsageCounts& usage, std::string* out) override {
    if (open_ >= 0 && !tool_.empty() && sent_ > thinking_) {
      Delta(common::StrCat(R"({"type":"input_json_delta","partial_json":)", Json("\"}"), "}"), out);
    }
    Close(out);
    Sse("message_delta",
        common::StrCat(R"({"type":"message_delta","delta":{"stop_reason":")", StopReason(usage),
                       R"(","stop_sequence":null},"usage":)", Usage(usage), "}"),
        out);
    Sse("message_stop", R"({"type":"message_stop"})", out);
  }

 private:
  // vLLM's _build_anthropic_usage with prompt-token details: input_tokens is the uncached part.
  static std::string Usage(const UsageCounts& u) {
    return common::StrCat(
        "{\"input_tokens\":", u.prompt - std::min(u.prompt, u.cached),
        ",\"output_tokens\":", u.completion, ",\"cache_read_input_tokens\":", u.cached,
        ",\"cache_creation_input_tokens\":0",
        u.store ? common::StrCat(",\"kv_store_tokens\":", *u.store) : "", EngineTtftField(u), "}");
  }

  std::string_view StopReason(const UsageCounts& u) const {
    if (!tool_.empty()) return "tool_use";
    return u.completion >= max_tokens_ ? "max_tokens" : "end_turn";
  }

  void Open(std::string_view block, std::string* out) {
    Close(out);
    ++index_;
    open_ = index_;
    Sse("content_block_start",
        common::StrCat(R"({"type":"content_block_start","content_block":)", block, R"(,"index":)",
                       index_, "}"),
        out);
  }

  void Delta(std::string_view delta, std::string* out) {
    Sse("content_block_delta",
        common::StrCat(R"({"type":"content_block_delta","delta":)", delta, R"(,"index":)", index_,
                       "}"),
        out);
  }

  // A thinking block gets its signature before it stops.
  void Close(std::string* out) {
    if (open_ < 0) return;
    if (open_ == 0 && thinking_ > 0) {
      Delta(common::StrCat(R"({"type":"signature_delta","signature":")", signature_, "\"}"), out);
    }
    Sse("content_block_stop",
        common::StrCat(R"({"type":"content_block_stop","index":)", open_, "}"), out);
    open_ = -1;
  }

  const std::string model_;
  const std::string id_;
  const std::string tool_;
  const std::string tool_id_;
  const uint32_t thinking_;  // tokens in the thinking block
  const uint32_t prompt_;
  const uint32_t max_tokens_;
  const std::string signature_;
  uint32_t sent_ = 0;
  int index_ = -1;  // the last block opened
  int open_ = -1;   // the open block, -1 when none
};

}  // namespace

AgentCall ReadMessages(std::string_view body, bool count_only, const SimOptions& o,
                       kvindex::AgentChatConverter& converter, simdjson::dom::parser& json) {
  constexpr ErrorStyle kStyle = ErrorStyle::kAnthropic;
  AgentCall c;
  c.api = ApiKind::kMessages;
  kvindex::ConvertedChat chat;
  dom::object obj;
  if (absl::Status s = converter.Convert(body, ApiKind::kMessages, &chat); !s.ok()) {
    c.error = Bad(kStyle, common::Sv(s.message()));
    return c;
  }
  if (json.parse(body.data(), body.size()).get(obj)) {
    c.error = Bad(kStyle, "request body is not a JSON object");
    return c;
  }
  if (!chat.unsupported.empty()) {
    c.error = Bad(kStyle, chat.unsupported);
    return c;
  }
  if (chat.model.empty()) {
    c.error = Bad(kStyle, "model: a non-empty string is required");
    return c;
  }
  if (!count_only) {
    uint64_t max_tokens = 0;
    dom::element e;
    if (obj["max_tokens"].get(e) || e.is_null()) {
      c.error = Bad(kStyle, "max_tokens: Field required");
      return c;
    }
    if (e.get(max_tokens) || max_tokens == 0) {
      c.error = Bad(kStyle, "max_tokens: must be an integer greater than 0");
      return c;
    }
    c.max_tokens = static_cast<uint32_t>(std::min<uint64_t>(max_tokens, UINT32_MAX));
    bool b = false;
    if (!obj["stream"].get(b)) c.stream = b;
    dom::object thinking;
    if (!obj["thinking"].get(thinking)) {
      const std::string_view type = Str(thinking["type"]);
      if (type == "enabled") {
        uint64_t budget = 0;
        if (thinking["budget_tokens"].get(budget) || budget < 1024) {
          c.error = Bad(kStyle, "thinking.budget_tokens: must be an integer >= 1024");
          return c;
        }
        if (budget >= max_tokens) {
          c.error = Bad(kStyle, "thinking.budget_tokens: must be less than max_tokens");
          return c;
        }
        c.thinking = true;
      } else if (type == "adaptive") {
        c.thinking = true;
      } else if (type != "disabled") {
        c.error = Bad(kStyle, "thinking.type: expected 'enabled', 'disabled' or 'adaptive'");
        return c;
      }
    }
    dom::object choice;
    dom::array tools;
    if (!obj["tool_choice"].get(choice) && !obj["tools"].get(tools) && tools.size() > 0) {
      const std::string_view type = Str(choice["type"]);
      std::string_view name;
      if (type == "tool") {
        if (choice["name"].get(name) || name.empty()) {
          c.error = Bad(kStyle, "tool_choice.name is required when tool_choice.type is 'tool'");
          return c;
        }
        c.tool_name.assign(name);
      } else if (type == "any") {
        c.tool_name.assign(Str(tools.at(0)["name"]));
      }
    }
  }
  std::vector<std::string> prompt;
  if (o.convert_quirk == ConvertQuirk::kMessages) prompt.emplace_back(kQuirkMessage);
  prompt.insert(prompt.end(), std::make_move_iterator(chat.messages.begin()),
                std::make_move_iterator(chat.messages.end()));
  c.chat_body = kvindex::ChatBodyOf(chat.model, prompt, chat.tools);
  return c;
}

std::unique_ptr<AnswerWriter> NewMessagesWriter(const SimOptions& o, const AgentCall& call,
                                                std::string_view request_id, uint32_t prompt_tokens,
                                                uint32_t max_tokens, uint64_t n) {
  return std::make_unique<MessagesWriter>(o, call, request_id, prompt_tokens, max_tokens, n);
}

std::string CountTokensBody(uint32_t n) {
  return common::StrCat(R"({"input_tokens":)", n,
                        R"(,"context_management":{"original_input_tokens":)", n, "}}");
}

}  // namespace kvgate::sim::agent
