#include "bench/replay/sse.h"

#include "simdjson.h"

namespace kvgate::replay {
namespace od = simdjson::ondemand;
namespace dom = simdjson::dom;

void SseSplitter::Feed(std::string_view bytes,
                       const std::function<void(std::string_view)>& on_data) {
  pending_.append(bytes.data(), bytes.size());
  size_t start = 0;
  for (;;) {
    const size_t nl = pending_.find('\n', start);
    if (nl == std::string::npos) break;
    std::string_view line(pending_.data() + start, nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    ProcessLine(line, on_data);
    start = nl + 1;
  }
  pending_.erase(0, start);
}

void SseSplitter::Finish(const std::function<void(std::string_view)>& on_data) {
  if (!pending_.empty()) {
    std::string line = std::move(pending_);
    pending_.clear();
    ProcessLine(line, on_data);
  }
  ProcessLine("", on_data);
}

void SseSplitter::ProcessLine(std::string_view line,
                              const std::function<void(std::string_view)>& on_data) {
  if (line.empty()) {
    if (has_data_) on_data(data_);
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line.substr(0, 5) != "data:") return;  // Comments, event:, id:, retry:.
  line.remove_prefix(5);
  if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
  if (has_data_) data_.push_back('\n');
  data_.append(line.data(), line.size());
  has_data_ = true;
}

struct StreamEventParser::Impl {
  od::parser parser;
  simdjson::padded_string buffer;
  dom::parser dom;  // Agent events: small, and keyed by "type" wherever it sits.
};

StreamEventParser::StreamEventParser(StreamDialect dialect)
    : dialect_(dialect), impl_(std::make_unique<Impl>()) {}
StreamEventParser::~StreamEventParser() = default;

namespace {

uint64_t U64(od::value v) {
  uint64_t x = 0;
  if (v.get_uint64().get(x)) return 0;
  return x;
}

// Sets `*out` to o[key] when that is a non-negative integer.
bool Count(dom::object o, std::string_view key, uint64_t* out) {
  uint64_t x = 0;
  if (o[key].get_uint64().get(x)) return false;
  *out = x;
  return true;
}

// Keeps usage.kv_engine_ttft_s when it is a non-negative number (`error` false).
void SetEngineTtft(bool error, double x, StreamEvent* event) {
  if (error || x < 0) return;
  event->engine_ttft_s = x;
  event->usage_fields |= kUsageEngineTtft;
}

void EngineTtft(dom::object u, StreamEvent* event) {
  double x = 0;
  const bool error = u["kv_engine_ttft_s"].get_double().get(x) != simdjson::SUCCESS;
  SetEngineTtft(error, x, event);
}

// Anthropic: the prompt is the uncached input plus what was read from and written to the cache.
void AnthropicUsage(dom::object u, StreamEvent* event) {
  uint64_t input = 0, read = 0, creation = 0;
  const bool has_input = Count(u, "input_tokens", &input);
  const bool has_read = Count(u, "cache_read_input_tokens", &read);
  const bool has_creation = Count(u, "cache_creation_input_tokens", &creation);
  uint8_t fields = 0;
  if (has_input || has_read || has_creation) {
    event->prompt_tokens = input + read + creation;
    fields |= kUsagePrompt;
  }
  if (has_read) {
    event->cached_tokens = read;
    fields |= kUsageCached;
  }
  if (Count(u, "output_tokens", &event->completion_tokens)) fields |= kUsageCompletion;
  if (Count(u, "kv_store_tokens", &event->store_tokens)) fields |= kUsageStore;
  event->usage = fields != 0;
  event->usage_fields = fields;
  EngineTtft(u, event);
}

void ResponsesUsage(dom::object u, StreamEvent* event) {
  uint8_t fields = 0;
  if (Count(u, "input_tokens", &event->prompt_tokens)) fields |= kUsagePrompt;
  if (Count(u, "output_tokens", &event->completion_tokens)) fields |= kUsageCompletion;
  dom::object details;
  if (!u["input_tokens_details"].get(details)) {
    if (Count(details, "cached_tokens", &event->cached_tokens)) fields |= kUsageCached;
    if (Count(details, "kv_store_tokens", &event->store_tokens)) fields |= kUsageStore;
  }
  event->usage = true;
  event->usage_fields = fields;
  EngineTtft(u, event);
}

// Appends the string o[key] to the event's content; true when it was a non-empty string.
bool Delta(dom::object o, std::string_view key, StreamEvent* event, bool keep) {
  std::string_view text;
  if (o[key].get(text) || text.empty()) return false;
  if (keep) event->content.append(text.data(), text.size());
  event->token = true;
  return true;
}

}  // namespace

bool StreamEventParser::Parse(std::string_view data, StreamEvent* event) {
  *event = StreamEvent();
  if (data == "[DONE]") {
    event->done = true;
    return true;
  }
  if (dialect_ != StreamDialect::kOpenAi) return ParseAgent(data, event);
  impl_->buffer = simdjson::padded_string(data);
  od::document doc;
  if (impl_->parser.iterate(impl_->buffer).get(doc)) return false;
  od::object obj;
  if (doc.get_object().get(obj)) return false;
  for (auto field : obj) {
    std::string_view key;
    od::value value;
    if (field.unescaped_key().get(key) || field.value().get(value)) return false;
    if (key == "choices") {
      od::array choices;
      if (value.get_array().get(choices)) continue;
      for (auto choice : choices) {
        od::object c;
        if (choice.get_object().get(c)) break;
        for (auto cf : c) {
          std::string_view ckey;
          od::value cv;
          if (cf.unescaped_key().get(ckey) || cf.value().get(cv)) return false;
          std::string_view text;
          if (ckey == "text") {
            if (!cv.get_string().get(text) && !text.empty()) {
              event->content.append(text.data(), text.size());
              event->token = true;
            }
          } else if (ckey == "delta") {
            od::object delta;
            if (cv.get_object().get(delta)) continue;
            for (auto df : delta) {
              std::string_view dkey;
              od::value dv;
              if (df.unescaped_key().get(dkey) || df.value().get(dv)) return false;
              if (dv.get_string().get(text) || text.empty()) continue;
              if (dkey == "content") {
                event->content.append(text.data(), text.size());
                event->token = true;
              } else if (dkey == "reasoning_content" || dkey == "reasoning") {
                event->token = true;
              }
            }
          }
        }
        break;  // Only choices[0].
      }
    } else if (key == "usage") {
      od::object usage;
      if (value.get_object().get(usage)) continue;  // "usage": null
      event->usage = true;
      event->usage_fields = kUsageAll;
      for (auto uf : usage) {
        std::string_view ukey;
        od::value uv;
        if (uf.unescaped_key().get(ukey) || uf.value().get(uv)) return false;
        if (ukey == "prompt_tokens") {
          event->prompt_tokens = U64(uv);
        } else if (ukey == "completion_tokens") {
          event->completion_tokens = U64(uv);
        } else if (ukey == "kv_engine_ttft_s") {
          double x = 0;
          const bool error = uv.get_double().get(x) != simdjson::SUCCESS;
          SetEngineTtft(error, x, event);
        } else if (ukey == "prompt_tokens_details") {
          od::object details;
          if (uv.get_object().get(details)) continue;
          for (auto pf : details) {
            std::string_view pkey;
            od::value pv;
            if (pf.unescaped_key().get(pkey) || pf.value().get(pv)) return false;
            if (pkey == "cached_tokens") event->cached_tokens = U64(pv);
            if (pkey == "kv_store_tokens") event->store_tokens = U64(pv);
          }
        }
      }
    } else if (key == "error") {
      od::object err;
      event->error = "error event";
      if (value.get_object().get(err)) continue;
      for (auto ef : err) {
        std::string_view ekey;
        od::value ev;
        if (ef.unescaped_key().get(ekey) || ef.value().get(ev)) return false;
        std::string_view msg;
        if (ekey == "message" && !ev.get_string().get(msg)) event->error = std::string(msg);
      }
    }
  }
  return true;
}

bool StreamEventParser::ParseAgent(std::string_view data, StreamEvent* event) {
  dom::element doc;
  if (impl_->dom.parse(data.data(), data.size()).get(doc)) return false;
  dom::object obj;
  if (doc.get_object().get(obj)) return false;
  std::string_view type;
  if (obj["type"].get(type)) type = {};
  // Anthropic {"type":"error","error":{...}}, OpenAI {"error":{...}}, Responses' error event
  // {"type":"error","message":...}.
  dom::element err;
  const bool has_error = !obj["error"].get(err) && !err.is_null();
  if (type == "error" || has_error) {
    std::string_view message;
    if ((has_error && !err["message"].get(message)) || !obj["message"].get(message)) {
      event->error = std::string(message);
    } else {
      event->error = "error event";
    }
    return true;
  }
  if (dialect_ == StreamDialect::kAnthropic) {
    dom::object part;
    if (type == "content_block_delta") {
      if (obj["delta"].get(part)) return true;
      std::string_view kind;
      if (part["type"].get(kind)) return true;
      if (kind == "text_delta") Delta(part, "text", event, /*keep=*/true);
      if (kind == "thinking_delta") Delta(part, "thinking", event, /*keep=*/false);
    } else if (type == "message_start") {
      if (!obj.at_pointer("/message/usage").get(part)) AnthropicUsage(part, event);
    } else if (type == "message_delta") {
      if (!obj["usage"].get(part)) AnthropicUsage(part, event);
    } else if (type == "message_stop") {
      event->done = true;
    }
    return true;
  }
  if (type == "response.output_text.delta") {
    Delta(obj, "delta", event, /*keep=*/true);
    return true;
  }
  if (type == "response.reasoning_text.delta" || type == "response.reasoning_summary_text.delta") {
    Delta(obj, "delta", event, /*keep=*/false);
    return true;
  }
  if (type.substr(0, 9) != "response.") return true;
  dom::object response;
  if (obj["response"].get(response)) return true;
  std::string_view id;
  if (!response["id"].get(id)) event->response_id = std::string(id);
  // "incomplete" is how a response that reached max_output_tokens ends: a success.
  if (type == "response.completed" || type == "response.incomplete") {
    dom::object usage;
    if (!response["usage"].get(usage)) ResponsesUsage(usage, event);
    event->done = true;
  } else if (type == "response.failed") {
    std::string_view message;
    event->error = response.at_pointer("/error/message").get(message)
                       ? std::string("response failed")
                       : std::string(message);
    event->done = true;
  }
  return true;
}

}  // namespace kvgate::replay
