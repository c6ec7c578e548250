// File: tokenizer/hf_added.h
// A tokenizer.json's added tokens (special and not) and the byte tries they are matched with:
// filled by the loader (hf_load.cc), read by encoding (hf_tokenizer.cc). Immutable after load.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

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
      const uint64_t key = uint64_t(node) << 8 | c;
      auto it = edges_.find(key);
      if (it == edges_.end()) {
        it = edges_.emplace(key, static_cast<int32_t>(terminal_.size())).first;
        terminal_.push_back(-1);
      }
      node = it->second;
    }
    // The first token with this content keeps it (special tokens come first, as in the library).
    if (terminal_[node] < 0) terminal_[node] = token;
    first_.set(static_cast<unsigned char>(s[0]));
  }
  bool empty() const { return terminal_.size() == 1; }
  /// The longest token starting at `pos`: its length (0 when none) and index.
  size_t LongestAt(std::string_view text, size_t pos, int32_t* token) const {
    if (!first_.test(static_cast<unsigned char>(text[pos]))) return 0;
    int32_t node = 0;
    size_t best = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      auto it = edges_.find(uint64_t(node) << 8 | static_cast<unsigned char>(text[i]));
      if (it == edges_.end()) break;
      node = it->second;
      if (terminal_[node] >= 0) {
        best = i + 1 - pos;
        *token = terminal_[node];
      }
    }
    return best;
  }

 private:
  absl::flat_hash_map<uint64_t, int32_t> edges_;
  std::vector<int32_t> terminal_{-1};
  std::bitset<256> first_;
};

struct AddedVocab {
  std::vector<AddedToken> tokens;
  Trie raw;              // tokens with normalized = false, matched on the input text
  Trie normalized;       // tokens with normalized = true, matched on normalised segments
  bool cut_safe = true;  // no single_word / lstrip / rstrip token: incremental cuts are exact
};

}  // namespace kvgate::tokenizer::hf
