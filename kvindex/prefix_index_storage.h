// File: kvindex/prefix_index_storage.h
// The prefix index's storage, shared by its translation units (not part of the interface):
// node ids, records and overflow residencies, the per-shard hash table and reader/writer spin
// lock, shards and LRU lists. Layout and lock order: docs/kvindex.md.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "kvindex/prefix_index.h"

namespace kvgate::kvindex {

constexpr uint32_t kNil = 0xFFFFFFFFu;
// Node ids: bit 31 = overflow node, bits 30..25 = shard, bits 24..0 = index in the shard.
constexpr uint32_t kOverflowBit = 1u << 31;
constexpr int kIndexBits = 25;
constexpr uint32_t kIndexMask = (1u << kIndexBits) - 1;
constexpr uint64_t kRegistryValid = uint64_t{1} << 63;
constexpr uint64_t kRegistryTombstone = 1;
constexpr uint64_t kKeyMask = (uint64_t{1} << 48) - 1;

inline uint32_t MakeNode(bool overflow, int shard, uint32_t index) {
  return (overflow ? kOverflowBit : 0) | (static_cast<uint32_t>(shard) << kIndexBits) | index;
}
inline bool IsOverflow(uint32_t node) { return (node & kOverflowBit) != 0; }
inline int NodeShard(uint32_t node) { return static_cast<int>((node >> kIndexBits) & 63); }
inline uint32_t NodeIndex(uint32_t node) { return node & kIndexMask; }

inline int RegistryHome(uint64_t key) {
  return static_cast<int>(((key + 1) * 0x9E3779B97F4A7C15ULL) >> 56);  // 8 bits.
}

inline int ShardOf(BlockHash hash, int shard_bits) {
  return shard_bits == 0 ? 0 : static_cast<int>(hash >> (64 - shard_bits));
}

// One indexed block: 40 bytes. The block hash is split: its high 32 bits are the tag in the
// hash table slot, its low 32 bits (`lo`, which also picks the table home slot) live here.
// `lo` and `mask` are read by Match under the shard reader lock; every other field is touched
// only by writers (under writer_mu_).
struct Record {
  uint32_t lo;
  uint32_t packed;  // Overflow list head (24 bits) | inline slot (6 bits) | inline tier (2 bits).
  uint64_t mask[kNumTiers];  // Bit s of mask[t]: slot s holds the block in tier t.
  uint32_t prev;             // LRU links of the inline residency.
  uint32_t next;
};
static_assert(sizeof(Record) == 40);

constexpr uint32_t kNoOverflow = 0xFFFFFF;
constexpr uint32_t kNoInlineTier = 3;  // Inline residency unused.

inline uint32_t OverflowHead(const Record& r) { return r.packed >> 8; }
inline int InlineSlot(const Record& r) { return static_cast<int>((r.packed >> 2) & 63); }
inline uint32_t InlineTier(const Record& r) { return r.packed & 3; }
inline bool InlineUsed(const Record& r) { return InlineTier(r) != kNoInlineTier; }
inline void SetOverflowHead(Record& r, uint32_t o) { r.packed = (o << 8) | (r.packed & 0xff); }
inline void SetInline(Record& r, int slot, uint32_t tier) {
  r.packed = (r.packed & ~0xffu) | (static_cast<uint32_t>(slot) << 2) | tier;
}

// A second or later residency of a block. 20 bytes; writer-only.
struct Overflow {
  uint32_t prev;
  uint32_t next;
  uint32_t next_in_block;  // Next overflow residency of the same record; free-list link.
  uint32_t record;
  uint8_t slot;
  uint8_t tier;
};

// Open-addressing hash table (linear probing, backward-shift deletion) from block hash to
// record index: 8 bytes a slot (tag = high 32 bits of the hash, record index), load factor in
// (0.4, 0.8]. The home slot comes from the low 32 bits, kept in the record, so a record can be
// erased by index. Thread-compatible; see Shard.
class PrefixIndex::Table {
 public:
  Table() : slots_(16, Slot{0, kNil}), bits_(4) {}

  template <typename Recs>
  uint32_t Find(uint64_t hash, const Recs& recs) const {
    const uint32_t lo = static_cast<uint32_t>(hash);
    const uint32_t tag = static_cast<uint32_t>(hash >> 32);
    const size_t mask = slots_.size() - 1;
    for (size_t i = Home(lo);; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.id == kNil) {
        return kNil;
      }
      if (s.tag == tag && recs.Rec(s.id).lo == lo) {
        return s.id;
      }
    }
  }

  // `hash` must be absent and recs.Rec(id).lo already set.
  template <typename Recs>
  void Insert(uint64_t hash, uint32_t id, const Recs& recs) {
    if ((size_ + 1) * 5 > slots_.size() * 4) {
      Grow(recs);
    }
    Place(static_cast<uint32_t>(hash), static_cast<uint32_t>(hash >> 32), id);
    ++size_;
  }

  // Erases record `id`, whose low hash bits are `lo`.
  template <typename Recs>
  void Erase(uint32_t id, uint32_t lo, const Recs& recs) {
    const size_t mask = slots_.size() - 1;
    size_t i = Home(lo);
    while (slots_[i].id != id) {
      if (slots_[i].id == kNil) {
        return;
      }
      i = (i + 1) & mask;
    }
    // Backward-shift deletion keeps probe sequences intact without tombstones.
    size_t j = i;
    while (true) {
      j = (j + 1) & mask;
      if (slots_[j].id == kNil) {
        break;
      }
      const size_t k = Home(recs.Rec(slots_[j].id).lo);
      const bool movable = (j > i) ? (k <= i || k > j) : (k <= i && k > j);
      if (movable) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = Slot{0, kNil};
    --size_;
  }

  void Prefetch(uint64_t hash) const {
    __builtin_prefetch(&slots_[Home(static_cast<uint32_t>(hash))]);
  }

  // The high hash bits of record `id`, whose low bits are `lo` (it must be in the table).
  uint32_t TagOf(uint32_t id, uint32_t lo) const {
    const size_t mask = slots_.size() - 1;
    size_t i = Home(lo);
    while (slots_[i].id != id && slots_[i].id != kNil) i = (i + 1) & mask;
    return slots_[i].tag;
  }

  size_t size() const { return size_; }
  size_t MemoryBytes() const { return slots_.capacity() * sizeof(Slot); }

 private:
  struct Slot {
    uint32_t tag;  // High 32 bits of the hash.
    uint32_t id;   // Record index, or kNil when empty.
  };

  size_t Home(uint32_t lo) const { return static_cast<uint32_t>(lo * 2654435769u) >> (32 - bits_); }

  void Place(uint32_t lo, uint32_t tag, uint32_t id) {
    const size_t mask = slots_.size() - 1;
    size_t i = Home(lo);
    while (slots_[i].id != kNil) {
      i = (i + 1) & mask;
    }
    slots_[i] = Slot{tag, id};
  }

  template <typename Recs>
  void Grow(const Recs& recs) {
    std::vector<Slot> old;
    old.swap(slots_);
    ++bits_;
    slots_.assign(size_t{1} << bits_, Slot{0, kNil});
    for (const Slot& s : old) {
      if (s.id != kNil) {
        Place(recs.Rec(s.id).lo, s.tag, s.id);
      }
    }
  }

  std::vector<Slot> slots_;
  int bits_;
  size_t size_ = 0;
};

// A reader/writer spin lock: a shared acquire/release is one atomic RMW each. The match path
// takes one per probe, and absl::Mutex (with the deadlock detection of Debian's build) cost
// three times as much. Writer-preferring; critical sections are a few hundred nanoseconds
// (a table rehash is the longest). The one lock of the tree that is not common/mutex.h's: a
// spin is only right for sections this short, so it stays here, annotated like the others.
// Thread-safe.
class ABSL_LOCKABLE SharedSpinLock {
 public:
  void LockShared() ABSL_SHARED_LOCK_FUNCTION() {
    while (true) {
      if ((state_.fetch_add(1, std::memory_order_acquire) & kWriter) == 0) {
        return;
      }
      state_.fetch_sub(1, std::memory_order_relaxed);
      for (int spins = 0; (state_.load(std::memory_order_relaxed) & kWriter) != 0; ++spins) {
        Backoff(spins);
      }
    }
  }
  void UnlockShared() ABSL_UNLOCK_FUNCTION() { state_.fetch_sub(1, std::memory_order_release); }
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    for (int spins = 0; (state_.fetch_or(kWriter, std::memory_order_acquire) & kWriter) != 0;
         ++spins) {
      Backoff(spins);
    }
    for (int spins = 0; (state_.load(std::memory_order_acquire) & ~kWriter) != 0; ++spins) {
      Backoff(spins);
    }
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() { state_.fetch_and(~kWriter, std::memory_order_release); }

 private:
  static constexpr uint32_t kWriter = 1u << 31;
  static void Backoff(int spins) {
    if (spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else {
      std::this_thread::yield();
    }
  }
  std::atomic<uint32_t> state_{0};
};

class ABSL_SCOPED_LOCKABLE SharedLockGuard {
 public:
  explicit SharedLockGuard(SharedSpinLock& l) ABSL_SHARED_LOCK_FUNCTION(l) : l_(l) {
    l_.LockShared();
  }
  ~SharedLockGuard() ABSL_UNLOCK_FUNCTION() { l_.UnlockShared(); }

 private:
  SharedSpinLock& l_;
};

class ABSL_SCOPED_LOCKABLE ExclusiveLockGuard {
 public:
  explicit ExclusiveLockGuard(SharedSpinLock& l) ABSL_EXCLUSIVE_LOCK_FUNCTION(l) : l_(l) {
    l_.Lock();
  }
  ~ExclusiveLockGuard() ABSL_UNLOCK_FUNCTION() { l_.Unlock(); }

 private:
  SharedSpinLock& l_;
};

// One hash shard. Writers hold writer_mu_ for everything and additionally `mu` (exclusive)
// while changing what readers see: `table`, `chunks` (growth) and `Record::mask`. Readers hold
// `mu` shared and read only `table`, `Record::hash` and `Record::mask`. Records live in fixed
// chunks so growth neither copies them nor over-allocates by more than one chunk. (No
// ABSL_GUARDED_BY: "either lock to read, both to write" is not expressible as a capability.)
struct PrefixIndex::Shard {
  static constexpr int kChunkBits = 8;
  static constexpr uint32_t kChunkSize = 1u << kChunkBits;

  Record& Rec(uint32_t id) { return chunks[id >> kChunkBits][id & (kChunkSize - 1)]; }
  const Record& Rec(uint32_t id) const { return chunks[id >> kChunkBits][id & (kChunkSize - 1)]; }

  mutable SharedSpinLock mu;
  Table table;
  std::vector<std::unique_ptr<Record[]>> chunks;
  uint32_t num_recs = 0;  // Records ever allocated (live + free).
  std::vector<uint32_t> free_recs;
  std::vector<Overflow> ovf;
  uint32_t free_ovf = kNoOverflow;
};

// The LRU list and counters of one (slot, tier). head = most recently used.
struct PrefixIndex::List {
  uint32_t head = kNil;
  uint32_t tail = kNil;
  // The chain the last Insert() placed at the head, while nothing else changed the head:
  // its last block (hash and node), its length in blocks, and the nodes it occupies.
  // A hash identifies its whole prefix, so a new chain through `front_hash` at the same depth
  // starts with this run, already in LRU order at the head.
  uint32_t front_node = kNil;  // kNil: no such run known
  BlockHash front_hash = 0;
  uint64_t front_blocks = 0;
  uint64_t front_nodes = 0;
  uint64_t count = 0;
  uint64_t capacity = 0;
  uint64_t inserted = 0;
  uint64_t removed = 0;
  uint64_t evicted = 0;
  uint64_t global_evicted = 0;
  // The index evicted from this list on its own since it was last empty: a kCallerTracks
  // writer's knowledge of its blocks no longer holds.
  bool diverged = false;
};

}  // namespace kvgate::kvindex
