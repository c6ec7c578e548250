// File: tokenizer/hf_split.h
// Hand-compiled forms of the pre-tokenizer regexes of Llama 3 and Qwen 2.5/3 (the cl100k-style
// pattern, with \p{N}{1,3} or \p{N}) and of DeepSeek V3's three splits (\p{N}{1,3}, a CJK/kana
// run, and its letters/marks/punctuation pattern), which Oniguruma runs at ~15 MB/s or less:
// these matchers give the same matches at several times that. Their character classes (\p{L},
// \p{N}, \s, \p{M}, \p{P}, \p{S}) come from Oniguruma itself, so both agree on every code
// point; tests (and the tokenizer fuzzer) compare the two. Stateless after a one-time table
// build: thread-safe.
#pragma once

#include <cstddef>
#include <string_view>

namespace kvgate::tokenizer::hf {

class FastSplit {
 public:
  /// The matcher for `pattern`, or nullptr when it is not one this file compiles.
  static const FastSplit* For(std::string_view pattern);

  /// Calls `f(begin, end)` for each match of the pattern in `text`, as Oniguruma would (none
  /// of these patterns matches the empty string).
  template <typename F>
  void ForEachMatch(std::string_view text, F&& f) const {
    size_t i = 0;
    while (i < text.size()) {
      const size_t n = MatchAt(text, i);
      if (n == 0) {  // no match starts here: on to the next character
        ++i;
        while (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) ++i;
        continue;
      }
      f(i, i + n);
      i += n;
    }
  }

  /// The length of the match starting at `i`, 0 when none does (the Llama 3 / Qwen pattern's
  /// alternatives cover everything: never 0 there).
  size_t MatchAt(std::string_view text, size_t i) const;

 private:
  enum Kind { kCl100k, kDigits, kCjk, kDeepSeek };
  FastSplit(Kind kind, int max_digits) : kind_(kind), max_digits_(max_digits) {}
  size_t Cl100kAt(std::string_view text, size_t i) const;
  size_t DeepSeekAt(std::string_view text, size_t i) const;
  Kind kind_;
  int max_digits_;
};

}  // namespace kvgate::tokenizer::hf
