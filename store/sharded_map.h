// File: store/sharded_map.h
// A hash map split into a fixed number of flat hash maps by the key's hash, so that growing
// rehashes one shard, not everything. The master keeps every object of the store in one map
// under its one mutex: a single absl::flat_hash_map rehashed all of them at each doubling
// (moving objects of ~190 bytes by their layout), and at 229K objects that held the mutex for 261
// ms, stalling every client of the store at once; an agentic replay with the store (issue 30's
// protocol, a qwen3-next-like fleet) hit three such stalls a minute. With kShards shards a doubling
// moves 1/kShards of the objects.
//
// The subset of the absl map interface the master uses: find, try_emplace, operator[],
// erase(iterator), begin/end and size. Iterators stay valid as absl's do (an insert may
// invalidate all of the shard's; an erase, only the erased one). Not thread-safe.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <iterator>
#include <type_traits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"

namespace kvgate::store {

/// `ShardHash` picks the shard (its bits 32-39 and up); a key that carries a well-mixed hash of
/// its own can hand that over and spare a second hash of the whole key.
template <typename K, typename V, size_t kShards = 256, typename ShardHash = absl::Hash<K>>
class ShardedMap {
  using Shard = absl::flat_hash_map<K, V>;

 public:
  using value_type = typename Shard::value_type;

  template <bool kConst>
  class Iterator {
    using MapPtr = std::conditional_t<kConst, const ShardedMap*, ShardedMap*>;
    using Inner =
        std::conditional_t<kConst, typename Shard::const_iterator, typename Shard::iterator>;

   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = ShardedMap::value_type;
    using difference_type = std::ptrdiff_t;
    using reference = std::conditional_t<kConst, const value_type&, value_type&>;
    using pointer = std::conditional_t<kConst, const value_type*, value_type*>;

    Iterator() = default;
    reference operator*() const { return *it_; }
    pointer operator->() const { return &*it_; }
    Iterator& operator++() {
      ++it_;
      SkipEmpty();
      return *this;
    }
    Iterator operator++(int) {
      Iterator before = *this;
      ++*this;
      return before;
    }
    // Iterators of different shards never compare their inner iterators (absl forbids
    // comparing iterators of different tables).
    friend bool operator==(const Iterator& a, const Iterator& b) {
      return a.shard_ == b.shard_ && (a.shard_ == kShards || a.it_ == b.it_);
    }

   private:
    friend class ShardedMap;
    Iterator(MapPtr map, size_t shard, Inner it) : map_(map), shard_(shard), it_(it) {}
    // Moves past the end of a shard to the next non-empty one (or to end()).
    void SkipEmpty() {
      while (shard_ < kShards && it_ == map_->shards_[shard_].end()) {
        if (++shard_ < kShards) it_ = map_->shards_[shard_].begin();
      }
    }

    MapPtr map_ = nullptr;
    size_t shard_ = kShards;
    Inner it_{};
  };
  using iterator = Iterator<false>;
  using const_iterator = Iterator<true>;

  iterator begin() {
    iterator it(this, 0, shards_[0].begin());
    it.SkipEmpty();
    return it;
  }
  iterator end() { return iterator(this, kShards, {}); }
  const_iterator begin() const {
    const_iterator it(this, 0, shards_[0].begin());
    it.SkipEmpty();
    return it;
  }
  const_iterator end() const { return const_iterator(this, kShards, {}); }

  iterator find(const K& key) {
    const size_t s = ShardOf(key);
    auto it = shards_[s].find(key);
    return it == shards_[s].end() ? end() : iterator(this, s, it);
  }
  const_iterator find(const K& key) const {
    const size_t s = ShardOf(key);
    auto it = shards_[s].find(key);
    return it == shards_[s].end() ? end() : const_iterator(this, s, it);
  }
  template <typename... Args>
  std::pair<iterator, bool> try_emplace(const K& key, Args&&... args) {
    const size_t s = ShardOf(key);
    auto [it, inserted] = shards_[s].try_emplace(key, std::forward<Args>(args)...);
    return {iterator(this, s, it), inserted};
  }
  V& operator[](const K& key) { return shards_[ShardOf(key)][key]; }
  void erase(iterator it) { shards_[it.shard_].erase(it.it_); }

  size_t size() const {
    size_t n = 0;
    for (const Shard& s : shards_) n += s.size();
    return n;
  }
  /// The largest shard's slot count: the most one insert can rehash.
  size_t max_shard_capacity() const {
    size_t m = 0;
    for (const Shard& s : shards_) m = std::max(m, s.capacity());
    return m;
  }

 private:
  // The hash's upper bits pick the shard; absl's tables index by the low bits of their own.
  static size_t ShardOf(const K& key) {
    return static_cast<size_t>(ShardHash{}(key) >> 32) % kShards;
  }

  std::array<Shard, kShards> shards_;
};

}  // namespace kvgate::store
