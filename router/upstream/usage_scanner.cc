#include "router/upstream/usage_scanner.h"

#include <algorithm>
#include <cstring>

namespace kvgate::router {
namespace {

constexpr std::string_view kKeys[] = {"\"prompt_tokens\"",
                                      "\"cached_tokens\"",
                                      "\"input_tokens\"",
                                      "\"cache_read_input_tokens\"",
                                      "\"cache_creation_input_tokens\"",
                                      "\"completion_tokens\"",
                                      "\"output_tokens\"",
                                      "\"id\""};
constexpr int kMaxDigits = 18;  // a value stops there (no int64 overflow)
// How every count key ends.
constexpr std::string_view kCountSuffix = "_tokens\"";

bool IsBlank(char c) { return c == ' ' || c == '\t'; }
bool IsIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.' || c == ':';
}

}  // namespace

int64_t UsageScanner::cached_tokens() const {
  switch (dialect_) {
    case Dialect::kOpenAi:
    case Dialect::kResponses:
      return counts_[kCached];
    case Dialect::kAnthropic:
      return counts_[kCacheRead];
  }
  return -1;
}

int64_t UsageScanner::output_tokens() const {
  return counts_[dialect_ == Dialect::kOpenAi ? kCompletion : kOutput];
}

int64_t UsageScanner::prompt_tokens() const {
  switch (dialect_) {
    case Dialect::kOpenAi:
      return counts_[kPrompt];
    case Dialect::kResponses:
      return counts_[kInput];
    case Dialect::kAnthropic:
      // With the cache fields, input_tokens is what was neither read nor written to the cache.
      if (counts_[kInput] < 0 || counts_[kCacheRead] < 0) return counts_[kInput];
      return counts_[kInput] + counts_[kCacheRead] + std::max<int64_t>(0, counts_[kCacheCreation]);
  }
  return -1;
}

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
        s.phase = Phase::kBeforeValue;
        continue;
      case Phase::kBeforeValue:
        if (IsBlank(c)) continue;
        if (s.key == kId) {
          if (c != '"') return;
          partial_.clear();
          s.phase = Phase::kString;
          continue;
        }
        if (c < '0' || c > '9') return;  // null, a string, an object: not a count
        s.phase = Phase::kDigits;
        [[fallthrough]];
      case Phase::kDigits:
        if (c >= '0' && c <= '9' && s.digits < kMaxDigits) {
          s.value = s.value * 10 + (c - '0');
          ++s.digits;
          continue;
        }
        counts_[s.key] = s.value;  // a byte after the digits: the number is whole
        return;
      case Phase::kString:
        if (c == '"') {
          if (!partial_.empty() && !id_done_) {
            id_ = partial_;
            id_done_ = true;
          }
          return;
        }
        if (!IsIdChar(c) || partial_.size() >= kMaxIdBytes) return;  // not an id kvgate keeps
        partial_.push_back(c);
        continue;
    }
  }
  pending_ = s;  // the chunk ended mid-value: the next one goes on with it
}

template <typename OnKey>
void UsageScanner::KeysAt(std::string_view text, size_t at, bool counts, OnKey&& on_key) const {
  if (at + 1 >= text.size()) return;
  const char first = text[at + 1];
  // No key starts otherwise.
  if (first != 'p' && first != 'c' && first != 'i' && first != 'o') return;
  for (int k = 0; k < kNumKeys; ++k) {
    const Key key = static_cast<Key>(k);
    const std::string_view name = kKeys[k];
    if (name[1] != first || (key != kId && !counts) || !Wanted(key)) continue;
    if (text.compare(at, name.size(), name) == 0) on_key(key, at + name.size());
  }
}

void UsageScanner::Feed(std::string_view chunk) {
  if (chunk.empty()) return;
  using Phase = ValueState::Phase;
  // In stream order: the value the last chunk ended in, keys that straddle the cut, then keys
  // inside this chunk (per key, in order; the keys fill different values).
  if (pending_.phase != Phase::kIdle) {
    const ValueState s = pending_;
    pending_ = {};
    Run(s, chunk, 0);
  }
  const auto start = [](Key key) { return ValueState{ValueState::Phase::kBeforeColon, key, 0, 0}; };
  // Each quote is tried as the start of a key: a first-letter test, and a compare only where
  // it matches (a search per key cost an SSE event ~1,900 instructions). Overlapping
  // occurrences count (`"prompt_tokens"prompt_tokens"`), as in any window.
  if (Wanted(kId)) {
    if (carry_size_ > 0) {
      char joined[2 * kCarry];
      const size_t head = std::min(chunk.size(), kCarry);
      std::memcpy(joined, carry_, carry_size_);
      std::memcpy(joined + carry_size_, chunk.data(), head);
      const std::string_view text(joined, carry_size_ + head);
      for (size_t at = text.find('"'); at < carry_size_; at = text.find('"', at + 1)) {
        KeysAt(text, at, /*counts=*/true, [&](Key key, size_t end) {
          // A key ending inside the carry was found when that chunk was fed.
          if (end > carry_size_) Run(start(key), chunk, end - carry_size_);
        });
      }
    }
    const bool counts = chunk.find(kCountSuffix) != std::string_view::npos;
    for (size_t at = chunk.find('"'); at != std::string_view::npos; at = chunk.find('"', at + 1)) {
      KeysAt(chunk, at, counts, [&](Key key, size_t end) { Run(start(key), chunk, end); });
    }
  } else {
    // Without the id every key ends in `_tokens"`: the keys are found from where that suffix
    // is, not from every quote of the text (a 4 KiB answer has ~40 quotes and ~3 counts). The
    // same keys in the same order: one key at most ends at a given byte. A key may begin in
    // the carry; only a suffix cut by this chunk's start needs the carry joined to it.
    const auto key_ending_at = [&](size_t end) {
      for (int k = 0; k < kId; ++k) {
        if (EndsWithKey(chunk, end, kKeys[k])) {
          Run(start(static_cast<Key>(k)), chunk, end);
          return;
        }
      }
    };
    // A suffix cut by this chunk's start begins with the last '_' of the carry's last 7 bytes.
    for (size_t cut = 1; cut < kCountSuffix.size() && cut <= carry_size_; ++cut) {
      if (carry_[carry_size_ - cut] != '_') continue;
      const size_t rest = kCountSuffix.size() - cut;  // the suffix's bytes in this chunk
      if (std::string_view(carry_ + carry_size_ - cut, cut) == kCountSuffix.substr(0, cut) &&
          chunk.substr(0, rest) == kCountSuffix.substr(cut)) {
        key_ending_at(rest);
      }
      break;
    }
    for (size_t at = chunk.find(kCountSuffix); at != std::string_view::npos;
         at = chunk.find(kCountSuffix, at + 1)) {
      key_ending_at(at + kCountSuffix.size());
    }
  }
  KeepCarry(chunk);
}

bool UsageScanner::EndsWithKey(std::string_view chunk, size_t end, std::string_view key) const {
  if (key.size() <= end) return chunk.compare(end - key.size(), key.size(), key) == 0;
  // The key's first bytes were fed before: they are the carry's last.
  const size_t before = key.size() - end;
  return before <= carry_size_ && chunk.compare(0, end, key.substr(before)) == 0 &&
         std::memcmp(carry_ + carry_size_ - before, key.data(), before) == 0;
}

void UsageScanner::KeepCarry(std::string_view chunk) {
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
