// File: tokenizer/two_generations.h
// A map bounded by bytes in two generations, for the caches that let a chat template's work be
// reused across an agent's turns (RenderMemo, the chat template's message cache). New entries go
// to the young generation; when it holds more than its bound it becomes the old one and the old
// one is dropped; a hit in the old generation moves to the young one. A working set up to one
// generation stays whatever the order it is used in, and at most two generations are held. Not
// thread-safe: its owner locks.
#pragma once

#include <cstddef>
#include <utility>

#include "absl/container/flat_hash_map.h"

namespace kvgate::tokenizer {

template <typename Key, typename V>
class TwoGenerations {
 public:
  explicit TwoGenerations(size_t generation_bytes) : generation_bytes_(generation_bytes) {}

  /// The value of `key`, or null. Valid until the next Put.
  const V* Find(const Key& key) {
    if (auto it = young_.map.find(key); it != young_.map.end()) return &it->second.value;
    auto it = old_.map.find(key);
    if (it == old_.map.end()) return nullptr;
    Entry e = std::move(it->second);
    old_.map.erase(it);
    old_.bytes -= e.bytes;
    return &Store(key, std::move(e)).value;
  }

  /// Sets `key` (replacing its value) to `value`, counted as `bytes`.
  void Put(const Key& key, V value, size_t bytes) {
    if (auto it = old_.map.find(key); it != old_.map.end()) {
      old_.bytes -= it->second.bytes;
      old_.map.erase(it);
    }
    Store(key, Entry{std::move(value), bytes});
  }

  size_t bytes() const { return young_.bytes + old_.bytes; }

 private:
  struct Entry {
    V value;
    size_t bytes;
  };
  struct Generation {
    absl::flat_hash_map<Key, Entry> map;
    size_t bytes = 0;
  };

  Entry& Store(const Key& key, Entry e) {
    if (young_.bytes + e.bytes > generation_bytes_ && !young_.map.empty()) {
      old_ = std::move(young_);
      young_ = Generation{};
    }
    young_.bytes += e.bytes;
    auto [it, inserted] = young_.map.try_emplace(key, std::move(e));
    if (!inserted) {
      young_.bytes -= it->second.bytes;
      it->second = std::move(e);
    }
    return it->second;
  }

  const size_t generation_bytes_;
  Generation young_, old_;
};

}  // namespace kvgate::tokenizer
