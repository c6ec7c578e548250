#include "tokenizer/hf_text.h"

#include <oniguruma.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/strings.h"
#include "tokenizer/hf_split.h"

namespace kvgate::tokenizer::hf {

// ---- UTF-8 ----------------------------------------------------------------------------------

int32_t DecodeUtf8(std::string_view s, size_t* i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t k = *i;
  const unsigned char c = p[k];
  if (c < 0x80) {
    *i = k + 1;
    return c;
  }
  size_t len = c >= 0xF0 && c < 0xF5 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
  if (c >= 0xF5) len = 0;
  if (len == 0 || k + len > n) {
    *i = k + 1;
    return -1;
  }
  uint32_t cp = c & (0x7F >> len);
  for (size_t j = 1; j < len; ++j) {
    if ((p[k + j] & 0xC0) != 0x80) {
      *i = k + 1;
      return -1;
    }
    cp = cp << 6 | (p[k + j] & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
      (cp >= 0xD800 && cp <= 0xDFFF)) {
    *i = k + 1;
    return -1;
  }
  *i = k + len;
  return static_cast<int32_t>(cp);
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | cp >> 6));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | cp >> 12));
    out->push_back(static_cast<char>(0x80 | (cp >> 6 & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | cp >> 18));
    out->push_back(static_cast<char>(0x80 | (cp >> 12 & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp >> 6 & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII runs, eight bytes at a time.
    if (i + 8 <= s.size()) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if ((w & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    if (DecodeUtf8(s, &i) < 0) return false;
  }
  return true;
}

bool IsUnicodeWhitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

bool IsNumeric(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  const auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool IsWordChar(uint32_t cp) {
  if (cp < 0x80) {
    return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
           cp == '_';
  }
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes
// for U+0100 onwards, in byte order.
namespace {
struct ByteAlphabet {
  std::array<uint16_t, 256> byte_to_cp{};
  std::array<int16_t, 324> cp_to_byte{};
  ByteAlphabet() {
    cp_to_byte.fill(-1);
    uint16_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      byte_to_cp[b] = printable ? static_cast<uint16_t>(b) : next++;
      cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};
const ByteAlphabet& Alphabet() {
  static const ByteAlphabet a;
  return a;
}
}  // namespace

bool DecodeByteLevel(std::string_view s, std::string* out) {
  out->clear();
  const ByteAlphabet& a = Alphabet();
  size_t i = 0;
  while (i < s.size()) {
    const int32_t cp = DecodeUtf8(s, &i);
    if (cp < 0 || cp >= static_cast<int32_t>(a.cp_to_byte.size()) || a.cp_to_byte[cp] < 0) {
      return false;
    }
    out->push_back(static_cast<char>(a.cp_to_byte[cp]));
  }
  return true;
}

// ---- Regex ----------------------------------------------------------------------------------

namespace {
std::once_flag onig_once;

// One match region per thread, reused by every search.
OnigRegion* ThreadRegion() {
  struct Holder {
    OnigRegion* r = onig_region_new();
    ~Holder() { onig_region_free(r, 1); }
  };
  thread_local Holder h;
  return h.r;
}
}  // namespace

absl::StatusOr<std::shared_ptr<const Regex>> Regex::Compile(std::string_view pattern) {
  std::call_once(onig_once, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
  OnigRegex reg = nullptr;
  OnigErrorInfo info;
  const auto* p = reinterpret_cast<const OnigUChar*>(pattern.data());
  const int r = onig_new(&reg, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8,
                         ONIG_SYNTAX_DEFAULT, &info);
  if (r != ONIG_NORMAL) {
    OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(msg, r, &info);
    return absl::InvalidArgumentError(common::StrCat(
        "regex /", pattern, "/ does not compile: ", reinterpret_cast<const char*>(msg)));
  }
  std::shared_ptr<Regex> out(new Regex());
  out->regex_ = reg;
  out->pattern_ = std::string(pattern);
  return std::shared_ptr<const Regex>(std::move(out));
}

std::string Regex::Quote(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::strchr("\\^$.|?*+()[]{}-#&~ ", c) != nullptr && c != '\0') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

Regex::~Regex() {
  if (regex_ != nullptr) onig_free(static_cast<OnigRegex>(regex_));
}

void Regex::Scan(std::string_view text, void (*cb)(size_t, size_t, void*), void* arg) const {
  struct Ctx {
    void (*cb)(size_t, size_t, void*);
    void* arg;
  } ctx{cb, arg};
  const auto* s = reinterpret_cast<const OnigUChar*>(text.data());
  onig_scan(
      static_cast<OnigRegex>(regex_), s, s + text.size(), ThreadRegion(), ONIG_OPTION_NONE,
      [](int, int, OnigRegion* region, void* p) {
        auto* c = static_cast<Ctx*>(p);
        c->cb(static_cast<size_t>(region->beg[0]), static_cast<size_t>(region->end[0]), c->arg);
        return 0;
      },
      &ctx);
}

// ---- Normalizers ----------------------------------------------------------------------------

namespace {

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(UnicodeForm form) : form_(form) {}
  absl::Status Normalize(std::string_view text, std::string* out) const override {
    out->clear();
    // Text below U+0300 (Latin, before the combining marks) is in every normal form but the
    // compatibility ones, which only fold a handful of Latin-1 characters.
    bool plain = true;
    for (unsigned char c : text) {
      if (c >= 0xCC || (c >= 0xC2 && (form_ == UnicodeForm::kNfkc || form_ == UnicodeForm::kNfkd ||
                                      form_ == UnicodeForm::kNfd))) {
        plain = false;
        break;
      }
    }
    if (plain) {
      out->assign(text);
      return absl::OkStatus();
    }
    int options = UTF8PROC_STABLE;
    switch (form_) {
      case UnicodeForm::kNfc:
        options |= UTF8PROC_COMPOSE;
        break;
      case UnicodeForm::kNfd:
        options |= UTF8PROC_DECOMPOSE;
        break;
      case UnicodeForm::kNfkc:
        options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
        break;
      case UnicodeForm::kNfkd:
        options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
        break;
    }
    utf8proc_uint8_t* result = nullptr;
    const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                static_cast<utf8proc_ssize_t>(text.size()), &result,
                                static_cast<utf8proc_option_t>(options));
    if (n < 0) {
      return absl::InvalidArgumentError(
          common::StrCat("unicode normalisation failed: ", utf8proc_errmsg(n)));
    }
    out->assign(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
    std::free(result);
    return absl::OkStatus();
  }

 private:
  UnicodeForm form_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(std::shared_ptr<const Regex> pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  absl::Status Normalize(std::string_view text, std::string* out) const override {
    out->clear();
    size_t last = 0;
    pattern_->ForEachMatch(text, [&](size_t b, size_t e) {
      out->append(text.substr(last, b - last));
      out->append(content_);
      last = e;
    });
    out->append(text.substr(last));
    return absl::OkStatus();
  }

 private:
  std::shared_ptr<const Regex> pattern_;
  std::string content_;
};

// Replace with a literal pattern (the common `{"String": " "}`): no regex engine needed.
class LiteralReplaceNormalizer final : public Normalizer {
 public:
  LiteralReplaceNormalizer(std::string pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  absl::Status Normalize(std::string_view text, std::string* out) const override {
    out->clear();
    if (pattern_.empty()) {
      out->assign(text);
      return absl::OkStatus();
    }
    size_t last = 0;
    for (size_t at = text.find(pattern_); at != std::string_view::npos;
         at = text.find(pattern_, last)) {
      out->append(text.substr(last, at - last));
      out->append(content_);
      last = at + pattern_.size();
    }
    out->append(text.substr(last));
    return absl::OkStatus();
  }

 private:
  std::string pattern_;
  std::string content_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  absl::Status Normalize(std::string_view text, std::string* out) const override {
    out->clear();
    if (!text.empty()) out->append(prefix_);
    out->append(text);
    return absl::OkStatus();
  }

 private:
  std::string prefix_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  absl::Status Normalize(std::string_view text, std::string* out) const override {
    out->clear();
    size_t i = 0;
    while (i < text.size()) {
      const int32_t cp = DecodeUtf8(text, &i);
      if (cp < 0) return absl::InvalidArgumentError("invalid UTF-8");
      AppendUtf8(static_cast<uint32_t>(utf8proc_tolower(cp)), out);
    }
    return absl::OkStatus();
  }
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  absl::Status Normalize(std::string_view text, std::string* out) const override {
    size_t b = 0, e = text.size();
    if (left_) {
      while (b < e) {
        size_t i = b;
        const int32_t cp = DecodeUtf8(text, &i);
        if (cp < 0 || !IsUnicodeWhitespace(static_cast<uint32_t>(cp))) break;
        b = i;
      }
    }
    if (right_) {
      while (e > b) {
        size_t s = e - 1;
        while (s > b && (static_cast<unsigned char>(text[s]) & 0xC0) == 0x80) --s;
        size_t i = s;
        const int32_t cp = DecodeUtf8(text, &i);
        if (cp < 0 || !IsUnicodeWhitespace(static_cast<uint32_t>(cp))) break;
        e = s;
      }
    }
    out->assign(text.substr(b, e - b));
    return absl::OkStatus();
  }

 private:
  bool left_, right_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> all)
      : all_(std::move(all)) {}
  absl::Status Normalize(std::string_view text, std::string* out) const override {
    out->assign(text);
    std::string tmp;
    for (const auto& n : all_) {
      if (absl::Status s = n->Normalize(*out, &tmp); !s.ok()) return s;
      out->swap(tmp);
    }
    return absl::OkStatus();
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> all_;
};

}  // namespace

std::unique_ptr<Normalizer> MakeUnicodeNormalizer(UnicodeForm form) {
  return std::make_unique<UnicodeNormalizer>(form);
}
std::unique_ptr<Normalizer> MakeReplaceNormalizer(std::shared_ptr<const Regex> pattern,
                                                  std::string content) {
  return std::make_unique<ReplaceNormalizer>(std::move(pattern), std::move(content));
}
std::unique_ptr<Normalizer> MakeLiteralReplaceNormalizer(std::string pattern, std::string content) {
  return std::make_unique<LiteralReplaceNormalizer>(std::move(pattern), std::move(content));
}
std::unique_ptr<Normalizer> MakePrependNormalizer(std::string prefix) {
  return std::make_unique<PrependNormalizer>(std::move(prefix));
}
std::unique_ptr<Normalizer> MakeLowercaseNormalizer() {
  return std::make_unique<LowercaseNormalizer>();
}
std::unique_ptr<Normalizer> MakeStripNormalizer(bool left, bool right) {
  return std::make_unique<StripNormalizer>(left, right);
}
std::unique_ptr<Normalizer> MakeSequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> all) {
  return std::make_unique<SequenceNormalizer>(std::move(all));
}

// ---- Pre-tokenizers -------------------------------------------------------------------------

namespace {

struct Cut {
  uint32_t begin, end;
  bool is_match;
};

// Applies Hugging Face's SplitDelimiterBehavior to the cuts of one piece (which cover it), and
// appends the non-empty results to `out`.
void EmitCuts(const Piece& piece, std::vector<Cut>& cuts, SplitBehavior behavior,
              std::vector<Piece>* out) {
  if (behavior == SplitBehavior::kIsolated) {  // the common case: every cut is a piece
    for (const Cut& c : cuts) {
      if (c.begin != c.end)
        out->push_back({c.begin, c.end, piece.origin0 && c.begin == piece.begin});
    }
    return;
  }
  thread_local std::vector<std::pair<uint32_t, uint32_t>> spans;
  spans.clear();
  switch (behavior) {
    case SplitBehavior::kIsolated:
      break;
    case SplitBehavior::kRemoved:
      for (const Cut& c : cuts) {
        if (!c.is_match) spans.emplace_back(c.begin, c.end);
      }
      break;
    case SplitBehavior::kContiguous: {
      bool previous = false;
      for (const Cut& c : cuts) {
        if (c.is_match == previous && !spans.empty()) {
          spans.back().second = c.end;
        } else {
          spans.emplace_back(c.begin, c.end);
        }
        previous = c.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous = false;
      for (const Cut& c : cuts) {
        if (c.is_match && !previous && !spans.empty()) {
          spans.back().second = c.end;
        } else {
          spans.emplace_back(c.begin, c.end);
        }
        previous = c.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous = false;
      for (size_t k = cuts.size(); k-- > 0;) {
        const Cut& c = cuts[k];
        if (c.is_match && !previous && !spans.empty()) {
          spans.back().first = c.begin;
        } else {
          spans.emplace_back(c.begin, c.end);
        }
        previous = c.is_match;
      }
      std::reverse(spans.begin(), spans.end());
      break;
    }
  }
  for (const auto& [b, e] : spans) {
    if (b == e) continue;
    out->push_back({b, e, piece.origin0 && b == piece.begin});
  }
}

// Cuts each piece where `find(view, emit)` reports matches; then applies the behavior.
template <typename Find>
void SplitPieces(Pieces* p, SplitBehavior behavior, bool invert, Find&& find) {
  // Scratch reused across calls: a 4 KB text makes ~1000 pieces.
  thread_local std::vector<Piece> out;
  thread_local std::vector<Cut> cuts;
  out.clear();
  for (const Piece& piece : p->pieces) {
    const std::string_view v = p->view(piece);
    cuts.clear();
    uint32_t prev = 0;
    find(v, [&](size_t b, size_t e) {
      if (b != prev) cuts.push_back({piece.begin + prev, piece.begin + uint32_t(b), invert});
      cuts.push_back({piece.begin + uint32_t(b), piece.begin + uint32_t(e), !invert});
      prev = static_cast<uint32_t>(e);
    });
    if (prev != v.size()) cuts.push_back({piece.begin + prev, piece.end, invert});
    EmitCuts(piece, cuts, behavior, &out);
  }
  p->pieces.swap(out);
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(std::shared_ptr<const Regex> re, SplitBehavior behavior, bool invert)
      : re_(std::move(re)),
        fast_(FastSplit::For(re_->pattern())),
        behavior_(behavior),
        invert_(invert) {}
  void Apply(Pieces* p, Pieces*) const override {
    if (fast_ != nullptr) {
      SplitPieces(p, behavior_, invert_,
                  [&](std::string_view v, auto&& emit) { fast_->ForEachMatch(v, emit); });
      return;
    }
    SplitPieces(p, behavior_, invert_,
                [&](std::string_view v, auto&& emit) { re_->ForEachMatch(v, emit); });
  }

 private:
  std::shared_ptr<const Regex> re_;
  const FastSplit* fast_;  // the hand-compiled form of re_, when there is one
  SplitBehavior behavior_;
  bool invert_;
};

// Rebuilds `p` with `prefix` before each piece that `want(piece)` selects.
template <typename Want>
void PrependToPieces(Pieces* p, Pieces* scratch, std::string_view prefix, Want&& want) {
  bool any = false;
  for (const Piece& piece : p->pieces) any |= want(piece);
  if (!any) return;
  scratch->buf.clear();
  scratch->pieces.clear();
  for (const Piece& piece : p->pieces) {
    const uint32_t b = static_cast<uint32_t>(scratch->buf.size());
    if (want(piece)) scratch->buf.append(prefix);
    scratch->buf.append(p->view(piece));
    scratch->pieces.push_back({b, static_cast<uint32_t>(scratch->buf.size()), piece.origin0});
  }
  std::swap(*p, *scratch);
}

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex, std::shared_ptr<const Regex> gpt2)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex), gpt2_(std::move(gpt2)) {}
  void Apply(Pieces* p, Pieces* scratch) const override {
    if (add_prefix_space_) {
      PrependToPieces(p, scratch, " ",
                      [&](const Piece& piece) { return p->view(piece).front() != ' '; });
    }
    if (use_regex_) {
      SplitPieces(p, SplitBehavior::kIsolated, false,
                  [&](std::string_view v, auto&& emit) { gpt2_->ForEachMatch(v, emit); });
    }
  }

 private:
  bool add_prefix_space_, use_regex_;
  std::shared_ptr<const Regex> gpt2_;
};

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : rep_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void Apply(Pieces* p, Pieces* scratch) const override {
    scratch->buf.clear();
    scratch->pieces.clear();
    for (const Piece& piece : p->pieces) {
      const std::string_view v = p->view(piece);
      const uint32_t b = static_cast<uint32_t>(scratch->buf.size());
      const bool starts = v.front() == ' ' || v.substr(0, rep_.size()) == rep_;
      if (!starts && (scheme_ == PrependScheme::kAlways ||
                      (scheme_ == PrependScheme::kFirst && piece.origin0))) {
        scratch->buf.append(rep_);
      }
      for (char c : v) {
        if (c == ' ') {
          scratch->buf.append(rep_);
        } else {
          scratch->buf.push_back(c);
        }
      }
      scratch->pieces.push_back({b, static_cast<uint32_t>(scratch->buf.size()), piece.origin0});
    }
    std::swap(*p, *scratch);
    if (split_) {
      SplitPieces(p, SplitBehavior::kMergedWithNext, false, [&](std::string_view v, auto&& emit) {
        for (size_t at = v.find(rep_); at != std::string_view::npos;
             at = v.find(rep_, at + rep_.size())) {
          emit(at, at + rep_.size());
        }
      });
    }
  }

 private:
  std::string rep_;
  PrependScheme scheme_;
  bool split_;
};

class DigitsPreTokenizer final : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  void Apply(Pieces* p, Pieces*) const override {
    SplitPieces(p, individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, false,
                [&](std::string_view v, auto&& emit) {
                  size_t i = 0;
                  while (i < v.size()) {
                    const size_t at = i;
                    const int32_t cp = DecodeUtf8(v, &i);
                    if (cp >= 0 && IsNumeric(static_cast<uint32_t>(cp))) emit(at, i);
                  }
                });
  }

 private:
  bool individual_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> all)
      : all_(std::move(all)) {}
  void Apply(Pieces* p, Pieces* scratch) const override {
    for (const auto& t : all_) t->Apply(p, scratch);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> all_;
};

}  // namespace

std::unique_ptr<PreTokenizer> MakeSplitPreTokenizer(std::shared_ptr<const Regex> pattern,
                                                    SplitBehavior behavior, bool invert) {
  return std::make_unique<SplitPreTokenizer>(std::move(pattern), behavior, invert);
}
std::unique_ptr<PreTokenizer> MakeByteLevelPreTokenizer(bool add_prefix_space, bool use_regex,
                                                        std::shared_ptr<const Regex> gpt2) {
  return std::make_unique<ByteLevelPreTokenizer>(add_prefix_space, use_regex, std::move(gpt2));
}
std::unique_ptr<PreTokenizer> MakeMetaspacePreTokenizer(std::string replacement,
                                                        PrependScheme scheme, bool split) {
  return std::make_unique<MetaspacePreTokenizer>(std::move(replacement), scheme, split);
}
std::unique_ptr<PreTokenizer> MakeDigitsPreTokenizer(bool individual_digits) {
  return std::make_unique<DigitsPreTokenizer>(individual_digits);
}
std::unique_ptr<PreTokenizer> MakeSequencePreTokenizer(
    std::vector<std::unique_ptr<PreTokenizer>> all) {
  return std::make_unique<SequencePreTokenizer>(std::move(all));
}

}  // namespace kvgate::tokenizer::hf
