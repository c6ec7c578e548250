#include "tokenizer/hf_split.h"

#include <oniguruma.h>

#include <array>
#include <memory>
#include <mutex>
#include <vector>

#include "tokenizer/hf_text.h"

namespace kvgate::tokenizer::hf {
namespace {

constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwenPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// DeepSeek V3's three splits (a Sequence, in this order). Its CR and LF are the characters
// themselves in tokenizer.json, not escapes.
constexpr std::string_view kDigits3Pattern = "\\p{N}{1,3}";
constexpr std::string_view kCjkPattern = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+";
constexpr std::string_view kDeepSeekPattern =
    "[!\"#$%&'()*+,\\-./"
    ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
    "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";

// Unicode's general categories L, M, N, P, S are disjoint, and \s (White_Space) holds only
// Z* and Cc code points: one class per code point.
enum Class : uint8_t {
  kOther = 0,
  kLetter = 1,
  kNumber = 2,
  kSpace = 3,
  kMark = 4,
  kPunct = 5,
  kSymbol = 6
};
// [^\s\p{L}\p{N}] of the Llama 3 / Qwen pattern.
inline bool Rest(Class c) { return c != kLetter && c != kNumber && c != kSpace; }
inline bool LetterOrMark(Class c) { return c == kLetter || c == kMark; }
inline bool PunctOrSymbol(Class c) { return c == kPunct || c == kSymbol; }

// Each code point's class as Oniguruma's \p{L}, \p{N}, \s, \p{M}, \p{P} and \p{S} see it: the
// BMP in a table built once (one-character matches, tens of milliseconds), the rest asked when
// met.
class Classes {
 public:
  Classes()
      : letter_(*Regex::Compile(R"(\p{L})")),
        number_(*Regex::Compile(R"(\p{N})")),
        space_(*Regex::Compile(R"(\s)")),
        mark_(*Regex::Compile(R"(\p{M})")),
        punct_(*Regex::Compile(R"(\p{P})")),
        symbol_(*Regex::Compile(R"(\p{S})")) {
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
    if (Whole(*mark_, s)) return kMark;
    if (Whole(*punct_, s)) return kPunct;
    if (Whole(*symbol_, s)) return kSymbol;
    return kOther;
  }
  std::shared_ptr<const Regex> letter_, number_, space_, mark_, punct_, symbol_;
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

// A whitespace run at i (c its first character): \s*[\r\n]+|\s+(?!\S)|\s+, the tail both
// pattern families share.
size_t WhitespaceAt(std::string_view t, size_t i, const Char& c) {
  const size_t n = t.size();
  size_t j = i, last_newline_end = 0;
  while (j < n) {
    const Char x = At(t, j);
    if (x.cls != kSpace) break;
    j += x.len;
    if (IsNewline(x.cp)) last_newline_end = j;
  }
  // \s*[\r\n]+
  if (last_newline_end != 0) return last_newline_end - i;
  // \s+(?!\S), \s+
  if (j == n) return j - i;
  if (j - i > c.len) {
    // Back off the run's last character.
    size_t k = j - 1;
    while (k > i && (static_cast<unsigned char>(t[k]) & 0xC0) == 0x80) --k;
    return k - i;
  }
  return j - i;
}

inline bool AsciiAlpha(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'); }

inline bool AsciiPunct(uint32_t cp) {
  return (cp >= '!' && cp <= '/') || (cp >= ':' && cp <= '@') || (cp >= '[' && cp <= '`') ||
         (cp >= '{' && cp <= '~');
}

inline bool InCjk(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x3040 && cp <= 0x309F) ||
         (cp >= 0x30A0 && cp <= 0x30FF);
}

}  // namespace

const FastSplit* FastSplit::For(std::string_view pattern) {
  static const FastSplit llama(kCl100k, 3), qwen(kCl100k, 1), digits(kDigits, 3), cjk(kCjk, 0),
      deepseek(kDeepSeek, 0);
  if (pattern == kLlama3Pattern) return &llama;
  if (pattern == kQwenPattern) return &qwen;
  if (pattern == kDigits3Pattern) return &digits;
  if (pattern == kCjkPattern) return &cjk;
  if (pattern == kDeepSeekPattern) return &deepseek;
  return nullptr;
}

size_t FastSplit::MatchAt(std::string_view t, size_t i) const {
  switch (kind_) {
    case kCl100k:
      return Cl100kAt(t, i);
    case kDeepSeek:
      return DeepSeekAt(t, i);
    case kDigits: {
      const Char c = At(t, i);
      if (c.cls != kNumber) return 0;
      size_t k = i + c.len;
      for (int d = 1; d < max_digits_ && k < t.size(); ++d) {
        const Char x = At(t, k);
        if (x.cls != kNumber) break;
        k += x.len;
      }
      return k - i;
    }
    case kCjk: {
      size_t k = i;
      while (k < t.size()) {
        const Char x = At(t, k);
        if (!InCjk(x.cp)) break;
        k += x.len;
      }
      return k - i;
    }
  }
  return 0;
}

// [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|
// ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ : unlike the Llama 3 pattern it leaves
// characters unmatched (numbers, controls): 0 there.
size_t FastSplit::DeepSeekAt(std::string_view t, size_t i) const {
  const size_t n = t.size();
  const Char c = At(t, i);
  // 1. an ASCII punctuation character, then ASCII letters
  if (c.cp < 0x80 && AsciiPunct(c.cp) && i + 1 < n && AsciiAlpha(t[i + 1])) {
    size_t k = i + 2;
    while (k < n && AsciiAlpha(t[k])) ++k;
    return k - i;
  }
  auto letters_marks_from = [&](size_t k) {
    while (k < n) {
      const Char x = At(t, k);
      if (!LetterOrMark(x.cls)) break;
      k += x.len;
    }
    return k;
  };
  // 2. [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
  if (!IsNewline(c.cp) && c.cls != kLetter && !PunctOrSymbol(c.cls) && i + c.len < n) {
    const Char x = At(t, i + c.len);
    if (LetterOrMark(x.cls)) return letters_marks_from(i + c.len + x.len) - i;
  }
  if (LetterOrMark(c.cls)) return letters_marks_from(i + c.len) - i;
  // 3. ' '?[\p{P}\p{S}]+[\r\n]*
  auto symbols_then_newlines = [&](size_t k) {
    while (k < n) {
      const Char x = At(t, k);
      if (!PunctOrSymbol(x.cls)) break;
      k += x.len;
    }
    while (k < n && IsNewline(static_cast<unsigned char>(t[k]))) ++k;
    return k;
  };
  if (c.cp == ' ' && i + 1 < n && PunctOrSymbol(At(t, i + 1).cls)) {
    return symbols_then_newlines(i + 1) - i;
  }
  if (PunctOrSymbol(c.cls)) return symbols_then_newlines(i + c.len) - i;
  // 4-6. whitespace
  if (c.cls != kSpace) return 0;
  return WhitespaceAt(t, i, c);
}

size_t FastSplit::Cl100kAt(std::string_view t, size_t i) const {
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
      if (!Rest(x.cls)) break;
      k += x.len;
    }
    while (k < n && IsNewline(static_cast<unsigned char>(t[k]))) ++k;
    return k;
  };
  if (Rest(c.cls)) return others_then_newlines(i + c.len) - i;
  if (c.cp == ' ' && i + 1 < n && Rest(At(t, i + 1).cls)) return others_then_newlines(i + 1) - i;
  // c is whitespace.
  return WhitespaceAt(t, i, c);
}

}  // namespace kvgate::tokenizer::hf
