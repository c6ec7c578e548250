// File: router/upstream/usage_scanner.h
// Finds `usage` token counts in a relayed response without parsing it: fed the body chunk by
// chunk (JSON or SSE), it remembers the last "prompt_tokens" and "cached_tokens" values seen.
// A key may be cut anywhere, and its value may follow after any amount of blank space: the
// counts are the same however the body is cut into chunks (checked by the usage_scanner
// fuzzer). Thread-compatible; one per response.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvgate::router {

class UsageScanner {
 public:
  void Feed(std::string_view chunk);

  /// -1 until the response reported the field.
  int64_t cached_tokens() const { return cached_tokens_; }
  int64_t prompt_tokens() const { return prompt_tokens_; }

 private:
  // Reading `key ws* ':' ws* digits` after a key, which a chunk may end in the middle of.
  struct ValueState {
    enum class Phase : uint8_t { kIdle, kBeforeColon, kBeforeDigits, kDigits } phase = Phase::kIdle;
    int64_t* target = nullptr;
    int64_t value = 0;
    int digits = 0;
  };
  // Runs `s` over `chunk` from `pos`: a complete value is stored in its target; one the chunk
  // ends in becomes the pending state.
  void Run(ValueState s, std::string_view chunk, size_t pos);

  // The last bytes fed, one fewer than a key: a key cut between chunks is found whole.
  static constexpr size_t kCarry = 14;
  char carry_[kCarry];
  size_t carry_size_ = 0;
  ValueState pending_;
  int64_t cached_tokens_ = -1;
  int64_t prompt_tokens_ = -1;
};

}  // namespace kvgate::router
