// File: bench/replay/sse.h
// Server-sent-event parsing of streaming responses (OpenAI chat and completions, Anthropic
// Messages, OpenAI Responses): splits a byte stream into `data:` payloads and extracts content
// text, usage and errors from each event. Thread-compatible; one per stream (SseSplitter) or
// per client (StreamEventParser).
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

/// Which event shapes a stream carries.
enum class StreamDialect {
  kOpenAi,     // chat.completion.chunk / text_completion chunks, "[DONE]".
  kAnthropic,  // message_start, content_block_delta, message_delta, message_stop, error.
  kResponses,  // response.created, response.output_text.delta, response.completed, error.
};

/// StreamEvent::usage_fields bits: which counts the event's usage carried.
inline constexpr uint8_t kUsagePrompt = 1;
inline constexpr uint8_t kUsageCompletion = 2;
inline constexpr uint8_t kUsageCached = 4;
inline constexpr uint8_t kUsageStore = 8;
inline constexpr uint8_t kUsageAll = 15;
inline constexpr uint8_t kUsageEngineTtft = 16;  // not in kUsageAll: kvgate-sim's alone

/// What one streamed chunk carried.
struct StreamEvent {
  bool done = false;    // "[DONE]", message_stop, or the response's terminal event.
  bool token = false;   // Carried generated text (content, text or reasoning/thinking).
  std::string content;  // The text delta (choices[0].delta.content, choices[0].text, ...).
  bool usage = false;
  // The counts the usage carried. OpenAI's carry all of them; Anthropic's message_delta may
  // carry output_tokens only, leaving message_start's prompt counts in force.
  uint8_t usage_fields = 0;
  uint64_t prompt_tokens = 0;
  uint64_t completion_tokens = 0;
  uint64_t cached_tokens = 0;  // usage.prompt_tokens_details.cached_tokens
  uint64_t store_tokens = 0;   // ... .kv_store_tokens (kvgate-sim with a store): loaded from it
  double engine_ttft_s = -1;   // usage.kv_engine_ttft_s (kvgate-sim): TTFT by the engine's clock
  std::string error;           // An error event's or object's message.
  std::string response_id;     // Responses: response.id of response.created / completed.
};

class StreamEventParser {
 public:
  explicit StreamEventParser(StreamDialect dialect = StreamDialect::kOpenAi);
  ~StreamEventParser();
  /// Parses one `data:` payload; false when it is not JSON (the event is then ignored).
  bool Parse(std::string_view data, StreamEvent* event);

 private:
  bool ParseAgent(std::string_view data, StreamEvent* event);

  struct Impl;
  StreamDialect dialect_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgate::replay
