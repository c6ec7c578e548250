#include "kvindex/hf_split.h"

#include <oniguruma.h>

#include <array>
#include <memory>
#include <mutex>
#include <vector>

#include "kvindex/hf_text.h"

namespace kvgate::kvindex::hf {
namespace {

constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwenPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

enum Class : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

// Each code point's class as Oniguruma's \p{L}, \p{N} and \s see it: the BMP in a table built
// once (~65K one-character matches, tens of milliseconds), the rest asked when met.
class Classes {
 public:
  Classes()
      : letter_(*Regex::Compile(R"(\p{L})")),
        number_(*Regex::Compile(R"(\p{N})")),
        space_(*Regex::Compile(R"(\s)")) {
    for (uint32_t cp = 0; cp < 0x10000; ++cp) {
      bmp_[cp] = cp >= 0xD800 && cp < 0xE000 ? kOther : Ask(cp);
    }
  }
  Class Of(uint32_t cp) const { return cp < 0x10000 ? static_cast<Class>(bmp_[cp]) : Ask(cp); }

 private:
  static bool Whole(const Regex& re, const std::string& s) {
    bool whole = false;
    re.ForEachMatch(s, [&](size_t b, size_t e) { whole |= b == 0 && e == s.size(); });
    return whole;
  }
  Class Ask(uint32_t cp) const {
    std::string s;
    AppendUtf8(cp, &s);
    if (Whole(*letter_, s)) return kLetter;
    if (Whole(*number_, s)) return kNumber;
    if (Whole(*space_, s)) return kSpace;
    return kOther;
  }
  std::shared_ptr<const Regex> letter_, number_, space_;
  std::array<uint8_t, 0x10000> bmp_{};
};

const Classes& TheClasses() {
  static const Classes* c = new Classes();  // never destroyed: used until exit
  return *c;
}

struct Char {
  uint32_t cp;
  size_t len;
  Class cls;
};

inline Char At(std::string_view t, size_t i) {
  const unsigned char c = static_cast<unsigned char>(t[i]);
  if (c < 0x80) {
    static const auto table = [] {
      std::array<uint8_t, 128> a{};
      for (uint32_t k = 0; k < 128; ++k) a[k] = TheClasses().Of(k);
      return a;
    }();
    return {c, 1, static_cast<Class>(table[c])};
  }
  size_t j = i;
  const int32_t cp = DecodeUtf8(t, &j);
  if (cp < 0) return {0xFFFD, j - i, kOther};
  return {static_cast<uint32_t>(cp), j - i, TheClasses().Of(static_cast<uint32_t>(cp))};
}

inline bool IsNewline(uint32_t cp) { return cp == '\r' || cp == '\n'; }

// (?i) letters of the contractions: ASCII either case, and U+017F (long s) for s.
inline bool Fold(std::string_view t, size_t i, char lower, size_t* len) {
  if (i >= t.size()) return false;
  const unsigned char c = static_cast<unsigned char>(t[i]);
  if (c == static_cast<unsigned char>(lower) || c == static_cast<unsigned char>(lower - 32)) {
    *len = 1;
    return true;
  }
  if (lower == 's' && c == 0xC5 && i + 1 < t.size() &&
      static_cast<unsigned char>(t[i + 1]) == 0xBF) {
    *len = 2;
    return true;
  }
  return false;
}

}  // namespace

const FastSplit* FastSplit::For(std::string_view pattern) {
  static const FastSplit llama(3), qwen(1);
  if (pattern == kLlama3Pattern) return &llama;
  if (pattern == kQwenPattern) return &qwen;
  return nullptr;
}

size_t FastSplit::MatchAt(std::string_view t, size_t i) const {
  const size_t n = t.size();
  const Char c = At(t, i);
  // 1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (c.cp == '\'') {
    size_t a = 0, b = 0;
    for (char one : {'s', 't'}) {
      if (Fold(t, i + 1, one, &a)) return 1 + a;
    }
    for (const char* two : {"re", "ve"}) {
      if (Fold(t, i + 1, two[0], &a) && Fold(t, i + 1 + a, two[1], &b)) return 1 + a + b;
    }
    if (Fold(t, i + 1, 'm', &a)) return 1 + a;
    if (Fold(t, i + 1, 'l', &a) && Fold(t, i + 1 + a, 'l', &b)) return 1 + a + b;
    if (Fold(t, i + 1, 'd', &a)) return 1 + a;
  }
  auto letters_from = [&](size_t k) {
    while (k < n) {
      const Char x = At(t, k);
      if (x.cls != kLetter) break;
      k += x.len;
    }
    return k;
  };
  // 2. [^\r\n\p{L}\p{N}]?\p{L}+
  if (c.cls == kLetter) return letters_from(i + c.len) - i;
  if (c.cls != kNumber && !IsNewline(c.cp) && i + c.len < n && At(t, i + c.len).cls == kLetter) {
    return letters_from(i + c.len) - i;
  }
  // 3. \p{N}{1,max}
  if (c.cls == kNumber) {
    size_t k = i + c.len;
    for (int d = 1; d < max_digits_ && k < n; ++d) {
      const Char x = At(t, k);
      if (x.cls != kNumber) break;
      k += x.len;
    }
    return k - i;
  }
  // 4. ' '?[^\s\p{L}\p{N}]+[\r\n]*
  auto others_then_newlines = [&](size_t k) {
    while (k < n) {
      const Char x = At(t, k);
      if (x.cls != kOther) break;
      k += x.len;
    }
    while (k < n && IsNewline(static_cast<unsigned char>(t[k]))) ++k;
    return k;
  };
  if (c.cls == kOther) return others_then_newlines(i + c.len) - i;
  if (c.cp == ' ' && i + 1 < n && At(t, i + 1).cls == kOther)
    return others_then_newlines(i + 1) - i;
  // c is whitespace. Its maximal run, and the end of its last newline.
  size_t j = i, last_newline_end = 0;
  while (j < n) {
    const Char x = At(t, j);
    if (x.cls != kSpace) break;
    j += x.len;
    if (IsNewline(x.cp)) last_newline_end = j;
  }
  // 5. \s*[\r\n]+
  if (last_newline_end != 0) return last_newline_end - i;
  // 6. \s+(?!\S), 7. \s+
  if (j == n) return j - i;
  if (j - i > c.len) {
    // Back off the run's last character.
    size_t k = j - 1;
    while (k > i && (static_cast<unsigned char>(t[k]) & 0xC0) == 0x80) --k;
    return k - i;
  }
  return j - i;
}

}  // namespace kvgate::kvindex::hf
