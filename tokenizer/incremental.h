// File: tokenizer/incremental.h
// Incremental tokenisation for agentic sessions. Each turn re-sends the whole history; its
// render shares a prefix with the previous turn's. The cache keeps, per rendered prefix that
// ends at a cut point (the start of a special token the tokenizer splits out, before which ids
// never depend on what follows), the token ids of that prefix, keyed by a 128-bit hash of the
// prefix bytes. A new render looks up its longest cached cut, tokenises only the rest, and
// stores its own last cut. Content-addressed, it needs no session id and is always equal to a
// full tokenisation (tests compare both). An entry's ids are a chain of immutable segments: the
// entry a turn reused, plus what the turn added, so storing a turn copies only its new ids. It is
// bounded by bytes of ids, each entry counted whole (a shared segment only makes the real
// figure smaller), least recently used first out. Thread-safe (one mutex; tokenising and copying
// happen outside it).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/mutex.h"

namespace kvgate::tokenizer {

class HfTokenizer;

class IncrementalCache {
 public:
  struct Options {
    size_t max_bytes = size_t{256} << 20;  // ids held, 4 bytes each
    size_t min_prefix_bytes = 4096;        // shorter renders are tokenised whole
  };
  struct Stats {
    uint64_t hits = 0, misses = 0, reused_bytes = 0, encoded_bytes = 0;
    uint64_t held_bytes = 0;  // ids' bytes as counted against max_bytes
  };

  explicit IncrementalCache(Options options);
  ~IncrementalCache();

  /// The ids of `text` (no special tokens added), reusing a cached prefix when one matches.
  absl::Status Encode(const HfTokenizer& tokenizer, std::string_view text,
                      std::vector<uint32_t>* out);

  Stats stats() const;

 private:
  struct Key {
    uint64_t lo, hi;
    bool operator==(const Key& o) const { return lo == o.lo && hi == o.hi; }
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.lo, k.hi);
    }
  };
  // A prefix's ids: `prev`'s, then `ids`. Never changed once built, so readers copy it
  // outside the lock.
  struct Segment {
    std::shared_ptr<const Segment> prev;
    std::vector<uint32_t> ids;
    size_t total = 0;    // ids in the whole chain
    uint32_t depth = 1;  // segments in the whole chain
  };
  struct Entry {
    Key key;
    size_t prefix_bytes;
    std::shared_ptr<const Segment> ids;
  };
  using Lru = std::list<Entry>;
  // Past this many segments a chain is copied into one, so a read stays a few copies.
  static constexpr uint32_t kMaxDepth = 32;

  std::shared_ptr<const Segment> Lookup(const std::vector<Key>& keys, size_t* index);
  void Store(Key key, size_t prefix_bytes, std::shared_ptr<const Segment> reused,
             absl::Span<const uint32_t> ids, const Key* replaces);
  // `chain`'s ids into the empty `out`, reserved to `capacity` first.
  static void AppendChain(const Segment& chain, size_t capacity, std::vector<uint32_t>* out);

  Options options_;
  mutable common::Mutex mu_;
  Lru lru_ ABSL_GUARDED_BY(mu_);  // front: most recent
  absl::flat_hash_map<Key, Lru::iterator> map_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvgate::tokenizer
