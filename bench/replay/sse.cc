#include "bench/replay/sse.h"

#include "simdjson.h"

namespace kvgate::replay {
namespace od = simdjson::ondemand;

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
};

StreamEventParser::StreamEventParser() : impl_(std::make_unique<Impl>()) {}
StreamEventParser::~StreamEventParser() = default;

namespace {

uint64_t U64(od::value v) {
  uint64_t x = 0;
  if (v.get_uint64().get(x)) return 0;
  return x;
}

}  // namespace

bool StreamEventParser::Parse(std::string_view data, StreamEvent* event) {
  *event = StreamEvent();
  if (data == "[DONE]") {
    event->done = true;
    return true;
  }
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
      for (auto uf : usage) {
        std::string_view ukey;
        od::value uv;
        if (uf.unescaped_key().get(ukey) || uf.value().get(uv)) return false;
        if (ukey == "prompt_tokens") {
          event->prompt_tokens = U64(uv);
        } else if (ukey == "completion_tokens") {
          event->completion_tokens = U64(uv);
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

}  // namespace kvgate::replay
