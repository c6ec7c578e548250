// File: tokenizer/hf_word_cache.h
// A thread's cache of one BPE model's encoded words: bounded memory, two generations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace kvgate::tokenizer::hf {

/// Words and their ids in two generations. A lookup searches the young one, then the old one
/// (copying what it finds into the young one); when the young one is full the old one is
/// dropped and the young one becomes old. So memory stays under two generations, and a working
/// set up to one generation stays resident however often it is walked in order, where clearing
/// everything when full loses a working set just over the limit on every pass.
///
/// A generation is one arena of records (the word's length, its ids, its bytes) and a table
/// from the word's 64-bit hash to its record: by layout, 8 bytes of header, 4 per id and the
/// word's bytes (rounded to 4) in the arena plus a 16-byte slot, against a 64-byte slot and
/// the string's and vector's heap blocks for a map of strings to vectors (not measured). Two words
/// with one hash share a slot: the later one replaces the earlier, and a lookup compares the bytes,
/// so a collision costs a miss, never a wrong id. Not thread-safe: one per thread.
class WordCache {
 public:
  struct Limits {
    // 7/8 of 2^16: the table's load limit, so its slot array stays 2^16 (1 MiB).
    size_t words_per_generation = 57344;
    size_t arena_bytes_per_generation = size_t{2} << 20;
  };

  WordCache() : WordCache(Limits{}) {}
  explicit WordCache(Limits limits) : limits_(limits) {}

  /// Appends the ids of `word`. @return false when it is not cached.
  bool Find(std::string_view word, std::vector<uint32_t>* out);
  /// Caches `word`'s ids. A record larger than a whole generation's arena is not cached.
  void Insert(std::string_view word, absl::Span<const uint32_t> ids);
  void Clear();

  size_t words() const { return young_.index.size() + old_.index.size(); }
  /// The arenas' reserved bytes: at most twice `arena_bytes_per_generation`.
  size_t arena_bytes() const {
    return (young_.arena.capacity() + old_.arena.capacity()) * sizeof(uint32_t);
  }

 private:
  struct Generation {
    absl::flat_hash_map<uint64_t, uint32_t> index;  // word hash -> record offset in `arena`
    // A record: word bytes, id count, the ids, then the word's bytes in 4-byte units.
    std::vector<uint32_t> arena;
    void Clear() {
      index.clear();
      arena.clear();
    }
  };
  static bool FindIn(const Generation& g, uint64_t hash, std::string_view word,
                     std::vector<uint32_t>* out);
  void Add(uint64_t hash, std::string_view word, absl::Span<const uint32_t> ids);

  Limits limits_;
  Generation young_, old_;
};

}  // namespace kvgate::tokenizer::hf
