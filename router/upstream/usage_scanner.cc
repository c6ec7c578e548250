#include "router/upstream/usage_scanner.h"

#include <algorithm>
#include <cstring>

namespace kvgate::router {
namespace {

constexpr std::string_view kCached = "\"cached_tokens\"";
constexpr std::string_view kPrompt = "\"prompt_tokens\"";
static_assert(kCached.size() == kPrompt.size());
constexpr size_t kKeyBytes = kCached.size();
constexpr int kMaxDigits = 18;  // a value stops there (no int64 overflow)

bool IsBlank(char c) { return c == ' ' || c == '\t'; }

}  // namespace

void UsageScanner::Run(ValueState s, std::string_view chunk, size_t pos) {
  using Phase = ValueState::Phase;
  for (; pos < chunk.size(); ++pos) {
    const char c = chunk[pos];
    switch (s.phase) {
      case Phase::kIdle:
        return;
      case Phase::kBeforeColon:
        if (IsBlank(c)) continue;
        if (c != ':') return;
        s.phase = Phase::kBeforeDigits;
        continue;
      case Phase::kBeforeDigits:
        if (IsBlank(c)) continue;
        if (c < '0' || c > '9') return;  // null, a string, an object: not a count
        s.phase = Phase::kDigits;
        [[fallthrough]];
      case Phase::kDigits:
        if (c >= '0' && c <= '9' && s.digits < kMaxDigits) {
          s.value = s.value * 10 + (c - '0');
          ++s.digits;
          continue;
        }
        *s.target = s.value;  // a byte after the digits: the number is whole
        return;
    }
  }
  pending_ = s;  // the chunk ended mid-value: the next one goes on with it
}

void UsageScanner::Feed(std::string_view chunk) {
  if (chunk.empty()) return;
  using Phase = ValueState::Phase;
  // In stream order: the value the last chunk ended in, keys that straddle the cut, then keys
  // inside this chunk (per key, in order; the two keys fill different counts).
  if (pending_.phase != Phase::kIdle) {
    const ValueState s = pending_;
    pending_ = {};
    Run(s, chunk, 0);
  }
  const auto start = [this](std::string_view key) {
    return ValueState{ValueState::Phase::kBeforeColon,
                      key == kCached ? &cached_tokens_ : &prompt_tokens_, 0, 0};
  };
  if (carry_size_ > 0) {
    char joined[2 * kCarry];
    const size_t head = std::min(chunk.size(), kCarry);
    std::memcpy(joined, carry_, carry_size_);
    std::memcpy(joined + carry_size_, chunk.data(), head);
    const std::string_view text(joined, carry_size_ + head);
    for (std::string_view key : {kCached, kPrompt}) {
      for (size_t at = text.find(key); at != std::string_view::npos && at < carry_size_;
           at = text.find(key, at + 1)) {
        Run(start(key), chunk, at + kKeyBytes - carry_size_);
      }
    }
  }
  if (chunk.find("_tokens\"") != std::string_view::npos) {
    for (std::string_view key : {kCached, kPrompt}) {
      // Overlapping occurrences count (`"prompt_tokens"prompt_tokens"`), as in any window.
      for (size_t at = chunk.find(key); at != std::string_view::npos;
           at = chunk.find(key, at + 1)) {
        Run(start(key), chunk, at + kKeyBytes);
      }
    }
  }
  // The last kCarry bytes of everything fed so far.
  if (chunk.size() >= kCarry) {
    std::memcpy(carry_, chunk.data() + chunk.size() - kCarry, kCarry);
    carry_size_ = kCarry;
  } else {
    const size_t keep = std::min(carry_size_, kCarry - chunk.size());
    std::memmove(carry_, carry_ + carry_size_ - keep, keep);
    std::memcpy(carry_ + keep, chunk.data(), chunk.size());
    carry_size_ = keep + chunk.size();
  }
}

}  // namespace kvgate::router
