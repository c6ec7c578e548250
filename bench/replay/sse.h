// File: bench/replay/sse.h
// Server-sent-event parsing of OpenAI streaming responses: splits a byte stream into `data:`
// payloads and extracts content text, usage and errors from each chunk. Thread-compatible; one
// per stream (SseSplitter) or per client (StreamEventParser).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace kvgate::replay {

/// Splits SSE bytes into events; calls `on_data` with the (joined) data of each event.
class SseSplitter {
 public:
  void Feed(std::string_view bytes, const std::function<void(std::string_view)>& on_data);
  /// Flushes a final event not terminated by a blank line.
  void Finish(const std::function<void(std::string_view)>& on_data);

 private:
  void ProcessLine(std::string_view line, const std::function<void(std::string_view)>& on_data);
  std::string pending_;  // Bytes of an incomplete line.
  std::string data_;     // Data lines of the current event.
  bool has_data_ = false;
};

/// What one streamed chunk carried.
struct StreamEvent {
  bool done = false;    // The "[DONE]" sentinel.
  bool token = false;   // Carried generated text (content, text or reasoning).
  std::string content;  // choices[0].delta.content or choices[0].text.
  bool usage = false;
  uint64_t prompt_tokens = 0;
  uint64_t completion_tokens = 0;
  uint64_t cached_tokens = 0;  // usage.prompt_tokens_details.cached_tokens
  uint64_t store_tokens = 0;   // ... .kv_store_tokens (kvgate-sim with a store): loaded from it
  std::string error;           // A top-level "error" object's message.
};

class StreamEventParser {
 public:
  StreamEventParser();
  ~StreamEventParser();
  /// Parses one `data:` payload; false when it is not JSON (the event is then ignored).
  bool Parse(std::string_view data, StreamEvent* event);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgate::replay
