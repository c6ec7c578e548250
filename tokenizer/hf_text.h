// File: tokenizer/hf_text.h
// The text stages of a Hugging Face tokenizer.json pipeline, between the added-token split and
// the BPE model: normalizers (NFC/NFD/NFKC/NFKD, Replace, Prepend, Lowercase, Strip, Sequence)
// and pre-tokenizers (Split with the file's regex, ByteLevel, Metaspace, Digits, Whitespace,
// WhitespaceSplit, Sequence). Regexes run on Oniguruma, the engine the Rust library uses, so
// pieces split identically. Built once at load (hf_load.cc) and then immutable:
// every stage is thread-safe; each call brings its own buffers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvgate::tokenizer::hf {

/// One piece of a segment: [begin, end) of Pieces::buf. `origin0`: the piece starts at offset 0
/// of the original text (Metaspace's prepend_scheme "first" looks at it).
struct Piece {
  uint32_t begin = 0;
  uint32_t end = 0;
  bool origin0 = false;
};

/// A segment cut into pieces. Stages that only split rewrite `pieces`; stages that edit bytes
/// rewrite `buf` too.
struct Pieces {
  std::string buf;
  std::vector<Piece> pieces;
  std::string_view view(const Piece& p) const {
    return std::string_view(buf).substr(p.begin, p.end - p.begin);
  }
};

/// A compiled Oniguruma regex (UTF-8, Oniguruma syntax, as the Rust `onig` crate compiles).
/// Thread-safe: searches share the compiled program; each brings its own match region.
class Regex {
 public:
  /// @return kInvalidArgument naming Oniguruma's message for a pattern it rejects.
  static absl::StatusOr<std::shared_ptr<const Regex>> Compile(std::string_view pattern);
  /// Escapes `literal` so that it matches itself.
  static std::string Quote(std::string_view literal);
  ~Regex();
  Regex(const Regex&) = delete;
  const std::string& pattern() const { return pattern_; }
  Regex& operator=(const Regex&) = delete;

  /// Calls `f(begin, end)` for each non-overlapping match in `text`, left to right (after an
  /// empty match the search moves on one character, as the onig crate's iterator does).
  template <typename F>
  void ForEachMatch(std::string_view text, F&& f) const {
    using Fn = std::remove_reference_t<F>;
    Scan(
        text, [](size_t b, size_t e, void* arg) { (*static_cast<Fn*>(arg))(b, e); }, &f);
  }

 private:
  Regex() = default;
  // One onig_scan over the text (cheaper than a search per match).
  void Scan(std::string_view text, void (*cb)(size_t, size_t, void*), void* arg) const;
  void* regex_ = nullptr;  // OnigRegex (kept out of this header)
  std::string pattern_;
};

// ---- Normalizers ----------------------------------------------------------------------------

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  /// Normalises `text` into `*out` (cleared first).
  virtual absl::Status Normalize(std::string_view text, std::string* out) const = 0;
};

enum class UnicodeForm { kNfc, kNfd, kNfkc, kNfkd };
std::unique_ptr<Normalizer> MakeUnicodeNormalizer(UnicodeForm form);
/// Replace: every match of `pattern` becomes `content`.
std::unique_ptr<Normalizer> MakeReplaceNormalizer(std::shared_ptr<const Regex> pattern,
                                                  std::string content);
/// Prepend: `prefix` before any non-empty text.
/// Replace with a literal pattern (`{"String": ...}`), without a regex engine.
std::unique_ptr<Normalizer> MakeLiteralReplaceNormalizer(std::string pattern, std::string content);
std::unique_ptr<Normalizer> MakePrependNormalizer(std::string prefix);
std::unique_ptr<Normalizer> MakeLowercaseNormalizer();
std::unique_ptr<Normalizer> MakeStripNormalizer(bool left, bool right);
std::unique_ptr<Normalizer> MakeSequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> all);

// ---- Pre-tokenizers -------------------------------------------------------------------------

/// What happens to a match of a Split pattern (Hugging Face's SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  /// Rewrites `*p`; `scratch` is a buffer the stage may use (contents unspecified after).
  virtual void Apply(Pieces* p, Pieces* scratch) const = 0;
};

std::unique_ptr<PreTokenizer> MakeSplitPreTokenizer(std::shared_ptr<const Regex> pattern,
                                                    SplitBehavior behavior, bool invert);
/// ByteLevel. The BPE model of a byte-level tokenizer is keyed by raw bytes (the vocabulary is
/// decoded from the GPT-2 byte alphabet at load), so the byte-to-character mapping itself is a
/// no-op here; only `add_prefix_space` and `use_regex` (GPT-2's split) remain.
std::unique_ptr<PreTokenizer> MakeByteLevelPreTokenizer(bool add_prefix_space, bool use_regex,
                                                        std::shared_ptr<const Regex> gpt2);
enum class PrependScheme { kAlways, kFirst, kNever };
std::unique_ptr<PreTokenizer> MakeMetaspacePreTokenizer(std::string replacement,
                                                        PrependScheme scheme, bool split);
std::unique_ptr<PreTokenizer> MakeDigitsPreTokenizer(bool individual_digits);
std::unique_ptr<PreTokenizer> MakeSequencePreTokenizer(
    std::vector<std::unique_ptr<PreTokenizer>> all);

/// GPT-2's pre-tokenizer pattern (ByteLevel with use_regex, Whitespace uses its own).
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// ---- UTF-8 and the byte-level alphabet ------------------------------------------------------

/// Length of the UTF-8 sequence starting with `lead` (1 for a stray continuation byte).
inline size_t Utf8Len(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : lead < 0xF8 ? 4 : 1;
}
/// Where the character that ends just before `end` starts: back over continuation bytes, not
/// past `floor`.
inline size_t CharStartBefore(std::string_view s, size_t end, size_t floor = 0) {
  size_t b = end - 1;
  while (b > floor && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  return b;
}
/// Decodes the code point at `s[*i]` and advances `*i`; -1 for invalid UTF-8.
int32_t DecodeUtf8(std::string_view s, size_t* i);
void AppendUtf8(uint32_t cp, std::string* out);
bool IsValidUtf8(std::string_view s);
/// Rust's char::is_whitespace (the Unicode White_Space property).
bool IsUnicodeWhitespace(uint32_t cp);
/// Rust regex's \w: alphanumeric, marks and connector punctuation.
bool IsWordChar(uint32_t cp);
/// Rust's char::is_numeric (general categories Nd, Nl, No).
bool IsNumeric(uint32_t cp);

/// Decodes a string of GPT-2 byte-alphabet characters into the bytes they stand for.
/// @return false when a character is outside the alphabet.
bool DecodeByteLevel(std::string_view s, std::string* out);

}  // namespace kvgate::tokenizer::hf
