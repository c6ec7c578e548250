// File: router/upstream/usage_scanner.h
// Finds `usage` token counts in a relayed response without parsing it: fed the body chunk by
// chunk (JSON or SSE), it remembers the last value of each count key seen and, on request, the
// first "id" string (an OpenAI Responses response's id, which pins it to its worker). Each API
// names its counts differently (its Dialect): OpenAI chat and completions `prompt_tokens` and
// `cached_tokens`; Anthropic Messages `input_tokens` (vLLM: the uncached rest once the cache
// fields are there), `cache_read_input_tokens` and `cache_creation_input_tokens`; Responses
// `input_tokens` (all of the prompt) and `cached_tokens`; the output as `completion_tokens`
// (OpenAI) or `output_tokens` (Anthropic, Responses). A key may be cut anywhere, and its
// value may follow after any amount of blank space: the results are the same however the body
// is cut into chunks (checked by the usage_scanner fuzzer). Thread-compatible; one per response.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvgate::router {

class UsageScanner {
 public:
  enum class Dialect : uint8_t { kOpenAi, kAnthropic, kResponses };

  /// `capture_id`: also keep the first "id" string value.
  explicit UsageScanner(Dialect dialect = Dialect::kOpenAi, bool capture_id = false)
      : dialect_(dialect), capture_id_(capture_id) {}

  void Feed(std::string_view chunk);

  /// The prompt's cached tokens and its size, as the dialect reports them; -1 until the
  /// response reported them.
  int64_t cached_tokens() const;
  int64_t prompt_tokens() const;
  /// The tokens the response generated; -1 until the response reported them.
  int64_t output_tokens() const;
  /// With capture_id: the first "id" value (letters, digits, '_', '-', '.', ':'; at most
  /// kMaxIdBytes), "" when none came whole.
  const std::string& response_id() const { return id_; }

  static constexpr size_t kMaxIdBytes = 256;

 private:
  enum Key : uint8_t {
    kPrompt,
    kCached,
    kInput,
    kCacheRead,
    kCacheCreation,
    kCompletion,
    kOutput,
    kId,
    kNumKeys
  };
  // Reading `key ws* ':' ws* value` after a key, which a chunk may end in the middle of: digits
  // for a count, a quoted string for the id.
  struct ValueState {
    enum class Phase : uint8_t {
      kIdle,
      kBeforeColon,
      kBeforeValue,
      kDigits,
      kString
    } phase = Phase::kIdle;
    Key key = kPrompt;
    int64_t value = 0;
    int digits = 0;
  };
  // Runs `s` over `chunk` from `pos`: a complete value is stored; one the chunk ends in
  // becomes the pending state.
  void Run(ValueState s, std::string_view chunk, size_t pos);
  // Calls on_key(key, end) for each wanted key `text` holds at the quote `at` (`end` just past
  // it); with `counts` false only the id.
  template <typename OnKey>
  void KeysAt(std::string_view text, size_t at, bool counts, OnKey&& on_key) const;
  // Whether `key` ends at `end` in `chunk`, its first bytes in the carry when it began before
  // the chunk.
  bool EndsWithKey(std::string_view chunk, size_t end, std::string_view key) const;
  // Keeps the chunk's last bytes in carry_ (a key cut at the next chunk's start).
  void KeepCarry(std::string_view chunk);
  bool Wanted(Key key) const { return key != kId || (capture_id_ && !id_done_); }

  // The last bytes fed, one fewer than the longest key: a key cut between chunks is found whole.
  static constexpr size_t kCarry = 28;
  Dialect dialect_;
  bool capture_id_;
  bool id_done_ = false;
  char carry_[kCarry];
  size_t carry_size_ = 0;
  ValueState pending_;
  int64_t counts_[kId] = {-1, -1, -1, -1, -1, -1, -1};
  std::string id_;       // the id once whole
  std::string partial_;  // the id while it is being read
};

}  // namespace kvgate::router
