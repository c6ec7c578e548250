// File: tokenizer/hf_added.h
// A tokenizer.json's added tokens (special and not) and the byte tries they are matched with:
// filled by the loader (hf_load.cc), read by encoding (hf_tokenizer.cc). Immutable after load.
#pragma once

#include <array>
#include <bitset>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace kvgate::tokenizer::hf {

struct AddedToken {
  std::string content;
  uint32_t id = 0;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

// A byte trie over added-token contents, matched leftmost-longest (the Aho-Corasick match kind
// the library uses): at each position the longest token starting there wins.
class Trie {
 public:
  void Add(std::string_view s, int32_t token) {
    if (s.empty()) return;
    int32_t node = 0;
    for (unsigned char c : s) {
      int32_t next = Child(node, c);
      if (next < 0) {
        next = static_cast<int32_t>(terminal_.size());
        terminal_.push_back(-1);
        children_.emplace_back();
        wide_.push_back(-1);
        AddChild(node, c, next);
      }
      node = next;
    }
    // The first token with this content keeps it (special tokens come first, as in the library).
    if (terminal_[node] < 0) terminal_[node] = token;
    const unsigned char c0 = static_cast<unsigned char>(s[0]);
    if (!first_.test(c0)) first_bytes_.push_back(static_cast<char>(c0));
    first_.set(c0);
  }
  bool empty() const { return terminal_.size() == 1; }
  /// The first position at or after `pos` where a token could start (the byte begins one), or
  /// text.size(). Most vocabularies start every added token with '<', so this is a memchr:
  /// a byte-at-a-time test spent a fifth of a precise-mode turn in CutPoints.
  size_t NextCandidate(std::string_view text, size_t pos) const {
    if (pos >= text.size()) return text.size();
    if (first_bytes_.size() == 1) {
      const void* hit = std::memchr(text.data() + pos, first_bytes_[0], text.size() - pos);
      return hit == nullptr ? text.size() : static_cast<const char*>(hit) - text.data();
    }
    if (first_bytes_.empty()) return text.size();
#if defined(__SSE2__)
    if (first_bytes_.size() <= 8) {  // Gemma 3: '<', '\n', '\t', '[' and the first byte of '▁'
      for (; pos + 16 <= text.size(); pos += 16) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(text.data() + pos));
        __m128i any = _mm_setzero_si128();
        for (char c : first_bytes_) any = _mm_or_si128(any, _mm_cmpeq_epi8(v, _mm_set1_epi8(c)));
        if (const int mask = _mm_movemask_epi8(any)) return pos + __builtin_ctz(mask);
      }
    }
#endif
    while (pos < text.size() && !first_.test(static_cast<unsigned char>(text[pos]))) ++pos;
    return pos;
  }
  /// The longest token starting at `pos`: its length (0 when none) and index.
  size_t LongestAt(std::string_view text, size_t pos, int32_t* token) const {
    if (!first_.test(static_cast<unsigned char>(text[pos]))) return 0;
    int32_t node = 0;
    size_t best = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      node = Child(node, static_cast<unsigned char>(text[i]));
      if (node < 0) break;
      if (terminal_[node] >= 0) {
        best = i + 1 - pos;
        *token = terminal_[node];
      }
    }
    return best;
  }

 private:
  // A node has few children (most one): a scan of its short list. A hash lookup per byte made
  // the walk over a 1 MB render's thousands of tags a tenth of a precise-mode turn.
  // A node with many children (Gemma 3's '<' begins hundreds of tokens) gets a table by byte.
  static constexpr size_t kScanned = 8;
  int32_t Child(int32_t node, unsigned char c) const {
    if (wide_[node] >= 0) return tables_[wide_[node]][c];
    for (const auto& [b, child] : children_[node]) {
      if (b == c) return child;
    }
    return -1;
  }
  void AddChild(int32_t node, unsigned char c, int32_t child) {
    children_[node].emplace_back(c, child);
    if (wide_[node] < 0 && children_[node].size() > kScanned) {
      wide_[node] = static_cast<int32_t>(tables_.size());
      tables_.emplace_back();
      tables_.back().fill(-1);
      for (const auto& [b, x] : children_[node]) tables_.back()[b] = x;
    } else if (wide_[node] >= 0) {
      tables_[wide_[node]][c] = child;
    }
  }
  std::vector<std::vector<std::pair<unsigned char, int32_t>>> children_{1};
  std::vector<int32_t> wide_{-1};  // the node's index in tables_, or -1
  std::vector<std::array<int32_t, 256>> tables_;
  std::vector<int32_t> terminal_{-1};
  std::bitset<256> first_;
  std::string first_bytes_;  // the distinct bytes of first_
};

struct AddedVocab {
  std::vector<AddedToken> tokens;
  Trie raw;              // tokens with normalized = false, matched on the input text
  Trie normalized;       // tokens with normalized = true, matched on normalised segments
  bool cut_safe = true;  // no single_word / lstrip / rstrip token: incremental cuts are exact
};

}  // namespace kvgate::tokenizer::hf
