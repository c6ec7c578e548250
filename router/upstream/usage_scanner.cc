#include "router/upstream/usage_scanner.h"

#include <algorithm>
#include <cstring>

namespace kvgate::router {
namespace {

constexpr std::string_view kCached = "\"cached_tokens\"";
constexpr std::string_view kPrompt = "\"prompt_tokens\"";

// Parses `: 123` after a key; false when the value is not (yet) a complete integer.
bool ReadValue(std::string_view text, size_t pos, int64_t* out) {
  while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t')) ++pos;
  if (pos >= text.size() || text[pos] != ':') return false;
  ++pos;
  while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t')) ++pos;
  int64_t v = 0;
  size_t digits = 0;
  while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9' && digits < 18) {
    v = v * 10 + (text[pos] - '0');
    ++pos;
    ++digits;
  }
  if (digits == 0 || pos >= text.size()) return false;  // value may continue in the next chunk
  *out = v;
  return true;
}

void FindAll(std::string_view text, std::string_view key, int64_t* out) {
  size_t pos = 0;
  while ((pos = text.find(key, pos)) != std::string_view::npos) {
    ReadValue(text, pos + key.size(), out);
    pos += key.size();
  }
}

}  // namespace

void UsageScanner::Feed(std::string_view chunk) {
  if (chunk.empty()) return;
  if (carry_size_ > 0) {
    // Keys straddling the previous piece and this one.
    char joined[2 * kCarry];
    const size_t head = std::min(chunk.size(), kCarry);
    std::memcpy(joined, carry_, carry_size_);
    std::memcpy(joined + carry_size_, chunk.data(), head);
    Scan(std::string_view(joined, carry_size_ + head));
  }
  Scan(chunk);
  carry_size_ = std::min(chunk.size(), kCarry);
  std::memcpy(carry_, chunk.data() + chunk.size() - carry_size_, carry_size_);
}

void UsageScanner::Scan(std::string_view text) {
  if (text.find("_tokens\"") == std::string_view::npos) return;
  FindAll(text, kCached, &cached_tokens_);
  FindAll(text, kPrompt, &prompt_tokens_);
}

}  // namespace kvgate::router
