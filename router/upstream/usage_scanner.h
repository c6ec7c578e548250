// File: router/upstream/usage_scanner.h
// Finds `usage` token counts in a relayed response without parsing it: fed the body chunk by
// chunk (JSON or SSE), it remembers the last "prompt_tokens" and "cached_tokens" values seen.
// Thread-compatible; one per response.
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
  void Scan(std::string_view text);

  // The tail of the previous chunk, so that a key split across two chunks is still found:
  // longer than a key, its colon, spaces and a 20-digit value.
  static constexpr size_t kCarry = 40;
  char carry_[kCarry];
  size_t carry_size_ = 0;
  int64_t cached_tokens_ = -1;
  int64_t prompt_tokens_ = -1;
};

}  // namespace kvgate::router
