// File: tokenizer/hf_bpe.h
// The BPE model of a Hugging Face tokenizer.json, run as the Rust `tokenizers` library runs it:
// merges applied lowest rank first (leftmost on ties), `ignore_merges` (a word already in the
// vocabulary is one token), byte fallback (`<0xNN>` tokens for characters outside the
// vocabulary), and the unknown token (fused when `fuse_unk`). A byte-level model is keyed by raw
// bytes: its vocabulary and merges are decoded from the GPT-2 byte alphabet at load, so words
// need no per-byte mapping at encode time. Built once, then immutable and thread-safe (the word
// cache is per thread).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"

namespace kvgate::tokenizer::hf {

class BpeModel {
 public:
  struct Options {
    bool byte_level = false;     // vocabulary in the GPT-2 byte alphabet (a ByteLevel tokenizer)
    bool byte_fallback = false;  // `<0xNN>` tokens for characters outside the vocabulary
    bool fuse_unk = false;       // consecutive unknown characters are one unknown token
    bool ignore_merges = false;  // a word found whole in the vocabulary is one token
    std::optional<std::string> unk_token;
  };

  explicit BpeModel(Options options);
  BpeModel(BpeModel&&) = default;

  /// Loading, in file order. A byte-level token outside the byte alphabet can never be produced
  /// by the model and is skipped. @return kInvalidArgument for a duplicate id or a merge whose
  /// parts (or their concatenation) are not in the vocabulary.
  absl::Status AddToken(std::string_view token, uint32_t id);
  absl::Status AddMerge(std::string_view left, std::string_view right);
  /// Resolves the byte tables and the unknown token. @return kInvalidArgument when the unknown
  /// token is missing from the vocabulary.
  absl::Status Finish();

  /// Appends the ids of one pre-tokenized word.
  void Encode(std::string_view word, std::vector<uint32_t>* out) const;
  /// The same ids by one pass of the library's heap algorithm over the whole word, never cut
  /// at word marks, never scanned, uncached: what Encode must equal (the tests' reference).
  void EncodeWhole(std::string_view word, std::vector<uint32_t>* out) const;

  /// The id of `token` (as the file spells it), if the vocabulary has it.
  std::optional<uint32_t> TokenToId(std::string_view token) const;
  size_t vocab_size() const { return vocab_.size(); }
  size_t merges() const { return merges_.size(); }

 private:
  struct Merge {
    uint32_t rank;
    uint32_t id;
  };
  struct Symbol {
    uint32_t id;
    int32_t prev;
    int32_t next;
    uint32_t len;  // bytes of the word it covers; 0 once merged into its left neighbour
  };

  void EncodeCached(std::string_view word, std::vector<uint32_t>* out) const;
  void EncodeUncached(std::string_view word, std::vector<uint32_t>* out) const;
  /// Merges by scan up to `max_scan_symbols` symbols, by heap beyond.
  void EncodeWith(std::string_view word, size_t max_scan_symbols, std::vector<uint32_t>* out) const;
  /// Where a long word can be cut before a word mark ('▁') without changing the result.
  size_t NextSafeCut(std::string_view word, size_t from) const;
  void InitialSymbols(std::string_view word, std::vector<Symbol>* symbols) const;
  /// The two ways to apply the merges, with the same result: a scan for the best pair over
  /// the pairs' remembered merges (short words), and the library's heap (long ones).
  void MergeByScan(std::vector<Symbol>& symbols) const;
  void MergeByHeap(std::vector<Symbol>& symbols) const;
  /// The id of the vocabulary entry that is exactly `ch` (one character of a non-byte-level
  /// model), by an integer key instead of a string hash.
  std::optional<uint32_t> CharId(std::string_view ch) const;
  const Merge* FindMerge(uint32_t a, uint32_t b) const {
    auto it = merges_.find(uint64_t{a} << 32 | b);
    return it == merges_.end() ? nullptr : &it->second;
  }

  Options options_;
  uint64_t instance_;                                 // keys the per-thread word cache
  absl::flat_hash_map<std::string, uint32_t> vocab_;  // raw bytes (byte-level) or UTF-8
  absl::flat_hash_map<uint64_t, Merge> merges_;       // (left id << 32 | right id)
  std::vector<int64_t> byte_ids_;                     // byte -> id (byte-level or fallback)
  std::optional<uint32_t> unk_id_;
  // Every one-character entry of a non-byte-level vocabulary, keyed by its bytes and length.
  absl::flat_hash_map<uint64_t, uint32_t> char_ids_;
  uint32_t next_rank_ = 0;
  // SentencePiece-style vocabularies (Gemma 3, Llama 2) turn spaces into '▁' before BPE, so a
  // line is one word: one heap pass over kilobytes, uncached. A cut before a '▁' is exact when
  // no token holds the character before it followed by '▁': no merge can then span the cut,
  // and BPE on each side alone makes the same merges. Empty when the model has no '▁' token.
  std::string word_mark_;
  absl::flat_hash_set<int32_t> joins_mark_;  // characters some token has right before '▁'
};

}  // namespace kvgate::tokenizer::hf
