#include "kvindex/prefix_index.h"

#include <algorithm>
#include <bit>
#include <thread>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"

namespace kvgate::kvindex {
namespace {

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

}  // namespace

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

PrefixIndex::PrefixIndex(PrefixIndexOptions options)
    : options_(options),
      shard_bits_(std::countr_zero(static_cast<unsigned>(
          std::bit_floor(static_cast<unsigned>(std::clamp(options.num_shards, 1, 64)))))),
      // Also capped at 2^23 residencies a shard: half of what the 24-bit overflow and 25-bit
      // record indices address, so hash skew between shards cannot overflow them.
      max_residencies_(std::clamp<uint64_t>(
          options.max_memory_bytes / kBudgetBytesPerResidency, 1,
          (uint64_t{1} << 23) << std::countr_zero(static_cast<unsigned>(
              std::bit_floor(static_cast<unsigned>(std::clamp(options.num_shards, 1, 64))))))),
      lists_(new List[kMaxHolders * kNumTiers]) {
  for (int i = 0; i < (1 << shard_bits_); ++i) {
    shards_.push_back(std::make_unique<Shard>());
  }
  for (int i = 0; i < kMaxHolders * kNumTiers; ++i) {
    lists_[i].capacity = options_.default_capacity_blocks;
  }
}

PrefixIndex::~PrefixIndex() = default;

namespace {
inline int ShardOf(BlockHash hash, int shard_bits) {
  return shard_bits == 0 ? 0 : static_cast<int>(hash >> (64 - shard_bits));
}
}  // namespace

// ---- Holder registry -------------------------------------------------------------------

int PrefixIndex::LookupSlot(Holder holder) const {
  const uint64_t key = holder.Key();
  int i = RegistryHome(key);
  for (int n = 0; n < kRegistrySize; ++n, i = (i + 1) & (kRegistrySize - 1)) {
    const uint64_t v = registry_[i].load(std::memory_order_acquire);
    if (v == 0) {
      return -1;
    }
    if ((v & kRegistryValid) != 0 && ((v >> 8) & kKeyMask) == key) {
      return static_cast<int>(v & 0xff);
    }
  }
  return -1;
}

int PrefixIndex::SlotFor(Holder holder, bool create) {
  auto it = slots_.find(holder);
  if (it != slots_.end()) {
    return it->second;
  }
  if (!create) {
    return -1;
  }
  int slot = -1;
  for (int s = 0; s < kMaxHolders; ++s) {
    if (slot_key_[s].load(std::memory_order_relaxed) == 0) {
      slot = s;
      break;
    }
  }
  if (slot < 0) {
    return -1;
  }
  const uint64_t key = holder.Key();
  slot_key_[slot].store(key | kRegistryValid, std::memory_order_release);
  int i = RegistryHome(key);
  while (true) {
    const uint64_t v = registry_[i].load(std::memory_order_relaxed);
    if (v == 0 || v == kRegistryTombstone) {
      registry_[i].store(kRegistryValid | (key << 8) | static_cast<uint64_t>(slot),
                         std::memory_order_release);
      break;
    }
    i = (i + 1) & (kRegistrySize - 1);
  }
  for (int t = 0; t < kNumTiers; ++t) {
    List& l = lists_[slot * kNumTiers + t];
    l = List{};
    l.capacity = options_.default_capacity_blocks;
  }
  slots_.emplace(holder, slot);
  return slot;
}

PrefixIndex::List& PrefixIndex::ListOf(int slot, Tier tier) {
  return lists_[slot * kNumTiers + static_cast<int>(tier)];
}

void PrefixIndex::SetDirty(int slot, Tier tier, bool dirty) {
  const uint64_t bit = uint64_t{1} << slot;
  auto& d = dirty_[static_cast<int>(tier)];
  if (dirty) {
    d.fetch_or(bit, std::memory_order_release);
    dirty_[kNumTiers].fetch_or(bit, std::memory_order_release);
    return;
  }
  d.fetch_and(~bit, std::memory_order_release);
  uint64_t any_tier = 0;
  for (int t = 0; t < kNumTiers; ++t) any_tier |= dirty_[t].load(std::memory_order_relaxed);
  if ((any_tier & bit) == 0) dirty_[kNumTiers].fetch_and(~bit, std::memory_order_release);
}

bool PrefixIndex::CallerTracks(const List& list, Closure closure) {
  return closure == Closure::kCallerTracks && !list.diverged;
}

void PrefixIndex::SetPrefixClosed(Holder holder, std::optional<Tier> tier, bool closed) {
  common::MutexLock lock(&writer_mu_);
  const int slot = SlotFor(holder, false);
  if (slot < 0) return;
  const uint64_t bit = uint64_t{1} << slot;
  if (tier.has_value()) {
    if (!closed) {
      dirty_[static_cast<int>(*tier)].fetch_or(bit, std::memory_order_release);
    } else if (!ListOf(slot, *tier).diverged) {
      SetDirty(slot, *tier, false);
    }
    return;
  }
  if (!closed) {
    dirty_[kNumTiers].fetch_or(bit, std::memory_order_release);
    return;
  }
  for (int t = 0; t < kNumTiers; ++t) {
    if (ListOf(slot, static_cast<Tier>(t)).diverged) return;
  }
  dirty_[kNumTiers].fetch_and(~bit, std::memory_order_release);
}

// ---- Residencies and LRU links ---------------------------------------------------------

uint32_t* PrefixIndex::PrevOf(uint32_t node) const {
  Shard& s = *shards_[NodeShard(node)];
  return IsOverflow(node) ? &s.ovf[NodeIndex(node)].prev : &s.Rec(NodeIndex(node)).prev;
}

uint32_t* PrefixIndex::NextOf(uint32_t node) const {
  Shard& s = *shards_[NodeShard(node)];
  return IsOverflow(node) ? &s.ovf[NodeIndex(node)].next : &s.Rec(NodeIndex(node)).next;
}

void PrefixIndex::Unlink(List& list, uint32_t node) {
  const uint32_t prev = *PrevOf(node);
  const uint32_t next = *NextOf(node);
  if (prev == kNil) {
    list.head = next;
  } else {
    *NextOf(prev) = next;
  }
  if (next == kNil) {
    list.tail = prev;
  } else {
    *PrevOf(next) = prev;
  }
}

void PrefixIndex::LinkAfter(List& list, uint32_t after, uint32_t node) {
  const uint32_t next = after == kNil ? list.head : *NextOf(after);
  *PrevOf(node) = after;
  *NextOf(node) = next;
  if (after == kNil) {
    list.head = node;
  } else {
    *NextOf(after) = node;
  }
  if (next == kNil) {
    list.tail = node;
  } else {
    *PrevOf(next) = node;
  }
}

void PrefixIndex::SpliceAfter(List& list, uint32_t after, uint32_t first, uint32_t last) {
  const uint32_t before = *PrevOf(first);
  const uint32_t beyond = *NextOf(last);
  if (before == kNil) {
    list.head = beyond;
  } else {
    *NextOf(before) = beyond;
  }
  if (beyond == kNil) {
    list.tail = before;
  } else {
    *PrevOf(beyond) = before;
  }
  const uint32_t next = after == kNil ? list.head : *NextOf(after);
  *PrevOf(first) = after;
  *NextOf(last) = next;
  if (after == kNil) {
    list.head = first;
  } else {
    *NextOf(after) = first;
  }
  if (next == kNil) {
    list.tail = last;
  } else {
    *PrevOf(next) = last;
  }
}

uint32_t PrefixIndex::FindNode(BlockHash hash, int slot, Tier tier) const {
  const int si = ShardOf(hash, shard_bits_);
  const Shard& s = *shards_[si];
  const uint32_t id = s.table.Find(hash, s);
  if (id == kNil) {
    return kNil;
  }
  return NodeOf(si, id, slot, tier);
}

uint32_t PrefixIndex::NodeOf(int si, uint32_t id, int slot, Tier tier) const {
  const Shard& s = *shards_[si];
  const Record& r = s.Rec(id);
  const uint8_t t = static_cast<uint8_t>(tier);
  if ((r.mask[t] & (uint64_t{1} << slot)) == 0) {
    return kNil;
  }
  if (InlineUsed(r) && InlineSlot(r) == slot && InlineTier(r) == t) {
    return MakeNode(false, si, id);
  }
  for (uint32_t o = OverflowHead(r); o != kNoOverflow; o = s.ovf[o].next_in_block) {
    if (s.ovf[o].slot == slot && s.ovf[o].tier == t) {
      return MakeNode(true, si, o);
    }
  }
  return kNil;  // Unreachable while the invariants hold.
}

uint32_t PrefixIndex::AddResidency(BlockHash hash, int slot, Tier tier, bool* added) {
  const int si = ShardOf(hash, shard_bits_);
  Shard& s = *shards_[si];
  const uint8_t t = static_cast<uint8_t>(tier);
  const uint64_t bit = uint64_t{1} << slot;
  uint32_t id = s.table.Find(hash, s);
  if (id != kNil && (s.Rec(id).mask[t] & bit) != 0) {
    *added = false;
    return NodeOf(si, id, slot, tier);
  }
  *added = true;
  if (id == kNil) {
    ExclusiveLockGuard lock(s.mu);
    if (!s.free_recs.empty()) {
      id = s.free_recs.back();
      s.free_recs.pop_back();
    } else {
      id = s.num_recs++;
      if ((id >> Shard::kChunkBits) >= s.chunks.size()) {
        s.chunks.push_back(std::make_unique<Record[]>(Shard::kChunkSize));
      }
    }
    Record& r = s.Rec(id);
    r = Record{static_cast<uint32_t>(hash), kNoOverflow << 8, {0, 0, 0}, kNil, kNil};
    SetInline(r, slot, t);
    r.mask[t] = bit;
    s.table.Insert(hash, id, s);
    return MakeNode(false, si, id);
  }
  uint32_t node;
  Record* r = &s.Rec(id);
  if (!InlineUsed(*r)) {
    SetInline(*r, slot, t);
    node = MakeNode(false, si, id);
  } else {
    uint32_t o = s.free_ovf;
    if (o != kNoOverflow) {
      s.free_ovf = s.ovf[o].next_in_block;
    } else {
      o = static_cast<uint32_t>(s.ovf.size());
      s.ovf.emplace_back();  // Readers never touch ovf, so no shard lock is needed.
    }
    s.ovf[o] = Overflow{kNil, kNil, OverflowHead(*r), id, static_cast<uint8_t>(slot), t};
    SetOverflowHead(*r, o);
    node = MakeNode(true, si, o);
  }
  ExclusiveLockGuard lock(s.mu);
  r->mask[t] |= bit;
  return node;
}

void PrefixIndex::DropResidency(uint32_t node, int slot, Tier tier) {
  List& list = ListOf(slot, tier);
  Unlink(list, node);
  --list.count;
  --residencies_;
  if (list.count == 0) {
    SetDirty(slot, tier, false);  // An empty list is trivially prefix-closed.
    list.diverged = false;
  }
  Shard& s = *shards_[NodeShard(node)];
  const uint8_t t = static_cast<uint8_t>(tier);
  uint32_t id;
  if (IsOverflow(node)) {
    const uint32_t o = NodeIndex(node);
    id = s.ovf[o].record;
    Record& r = s.Rec(id);
    if (OverflowHead(r) == o) {
      SetOverflowHead(r, s.ovf[o].next_in_block);
    } else {
      uint32_t p = OverflowHead(r);
      while (s.ovf[p].next_in_block != o) {
        p = s.ovf[p].next_in_block;
      }
      s.ovf[p].next_in_block = s.ovf[o].next_in_block;
    }
    s.ovf[o].next_in_block = s.free_ovf;
    s.free_ovf = o;
  } else {
    id = NodeIndex(node);
    SetInline(s.Rec(id), 0, kNoInlineTier);
  }
  Record& r = s.Rec(id);
  ExclusiveLockGuard lock(s.mu);
  r.mask[t] &= ~(uint64_t{1} << slot);
  if ((r.mask[0] | r.mask[1] | r.mask[2]) == 0) {
    s.table.Erase(id, r.lo, s);
    s.free_recs.push_back(id);
  }
}

void PrefixIndex::EvictTail(int slot, Tier tier) {
  List& list = ListOf(slot, tier);
  if (list.count <= list.front_nodes) list.front_node = kNil;  // eviction reached the run
  list.diverged = true;  // Cleared again if this empties the list.
  DropResidency(list.tail, slot, tier);
}

void PrefixIndex::EnforceCapacity(int slot, Tier tier) {
  List& list = ListOf(slot, tier);
  while (list.count > list.capacity) {
    // The tail never has held descendants in a prefix-closed list (ancestors are always at
    // least as recent), so capacity eviction keeps prefix-closure.
    EvictTail(slot, tier);
    ++list.evicted;
  }
}

void PrefixIndex::EnforceGlobalBound() {
  if (residencies_ <= max_residencies_) {
    return;
  }
  // Shrink every (holder, tier) in proportion to its size, to ~98.5% of the bound, so one
  // busy holder cannot flush a quiet holder's still-cached blocks.
  const uint64_t target = max_residencies_ - max_residencies_ / 64;
  const uint64_t excess = residencies_ - target;
  const uint64_t total = residencies_;
  for (int i = 0; i < kMaxHolders * kNumTiers; ++i) {
    List& list = lists_[i];
    if (list.count == 0) {
      continue;
    }
    const unsigned __int128 share =
        (static_cast<unsigned __int128>(excess) * list.count + total - 1) / total;
    uint64_t n = std::min<uint64_t>(static_cast<uint64_t>(share), list.count);
    const int slot = i / kNumTiers;
    const Tier tier = static_cast<Tier>(i % kNumTiers);
    list.global_evicted += n;
    global_evictions_ += n;
    while (n-- > 0) {
      EvictTail(slot, tier);
    }
  }
}

void PrefixIndex::ClearSlot(int slot) {
  for (int t = 0; t < kNumTiers; ++t) {
    List& list = ListOf(slot, static_cast<Tier>(t));
    list.front_node = kNil;
    list.removed += list.count;
    while (list.tail != kNil) {
      EvictTail(slot, static_cast<Tier>(t));
    }
    SetDirty(slot, static_cast<Tier>(t), false);
  }
}

// ---- Public writers --------------------------------------------------------------------

std::vector<BlockHash> PrefixIndex::Held(Holder holder, Tier tier, size_t max) const {
  std::vector<BlockHash> out;
  common::MutexLock lock(&writer_mu_);
  const int slot = LookupSlot(holder);
  if (slot < 0) return out;
  const List& list = lists_[slot * kNumTiers + static_cast<int>(tier)];
  out.reserve(std::min<uint64_t>(list.count, max));
  for (uint32_t node = list.head; node != kNil && out.size() < max; node = *NextOf(node)) {
    const Shard& s = *shards_[NodeShard(node)];
    const uint32_t id = IsOverflow(node) ? s.ovf[NodeIndex(node)].record : NodeIndex(node);
    const uint32_t lo = s.Rec(id).lo;
    out.push_back((static_cast<uint64_t>(s.table.TagOf(id, lo)) << 32) | lo);
  }
  return out;
}

absl::Status PrefixIndex::SetCapacity(Holder holder, Tier tier, uint64_t capacity_blocks) {
  common::MutexLock lock(&writer_mu_);
  const int slot = SlotFor(holder, true);
  if (slot < 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("prefix index holds at most ", kMaxHolders, " holders"));
  }
  ListOf(slot, tier).capacity = capacity_blocks;
  EnforceCapacity(slot, tier);
  return absl::OkStatus();
}

absl::Status PrefixIndex::Insert(Holder holder, absl::Span<const BlockHash> chain, Tier tier) {
  return InsertAfter(holder, std::nullopt, chain, tier);
}

absl::Status PrefixIndex::InsertAfter(Holder holder, std::optional<BlockHash> parent,
                                      absl::Span<const BlockHash> blocks, Tier tier,
                                      Closure closure) {
  common::MutexLock lock(&writer_mu_);
  const int slot = SlotFor(holder, true);
  if (slot < 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("prefix index holds at most ", kMaxHolders, " holders"));
  }
  List& list = ListOf(slot, tier);
  uint32_t prev = kNil;  // Link after this node; kNil = at the head.
  size_t first = 0;      // Blocks before it are in place already.
  uint64_t run_nodes = 0;
  if (parent.has_value()) {
    list.front_node = kNil;  // blocks may land inside the head run
    prev = FindNode(*parent, slot, tier);
    if (prev == kNil && !blocks.empty() && !CallerTracks(list, closure)) {
      SetDirty(slot, tier, true);  // Orphans: their parent is not held here.
    }
  } else if (list.front_node != kNil && list.front_blocks <= blocks.size() &&
             blocks[list.front_blocks - 1] == list.front_hash) {
    // The chain extends (or repeats) the run at the head: that prefix is in place, in order.
    prev = list.front_node;
    first = list.front_blocks;
    run_nodes = list.front_nodes;
  }
  // Blocks are added root first (a concurrent Match sees a prefix-closed set at every step) and
  // linked so that the chain is in LRU order with its first block the most recent.
  constexpr size_t kPrefetchDistance = 8;
  for (size_t i = first; i < blocks.size(); ++i) {
    if (i + kPrefetchDistance < blocks.size()) {
      const BlockHash ahead = blocks[i + kPrefetchDistance];
      shards_[ShardOf(ahead, shard_bits_)]->table.Prefetch(ahead);
    }
    const BlockHash h = blocks[i];
    bool added = false;
    const uint32_t node = AddResidency(h, slot, tier, &added);
    if (node == prev) {
      continue;  // The same hash twice in a row.
    }
    if (added) {
      ++list.count;
      ++list.inserted;
      ++residencies_;
      LinkAfter(list, prev, node);
      prev = node;
      ++run_nodes;
      continue;
    }
    // A held block already in its place (a prefix this holder used last, in order) needs no
    // relinking. One held elsewhere starts a run: the blocks that follow it in the list and in
    // the chain move together, in one splice.
    if ((prev == kNil ? list.head : *NextOf(prev)) == node) {
      prev = node;
      ++run_nodes;
      continue;
    }
    uint32_t last = node;
    ++run_nodes;
    while (i + 1 < blocks.size()) {
      const uint32_t next = FindNode(blocks[i + 1], slot, tier);
      if (next == kNil || next == prev || *NextOf(last) != next) break;
      last = next;
      ++run_nodes;
      ++i;
    }
    SpliceAfter(list, prev, node, last);
    prev = last;
  }
  if (!parent.has_value() && !blocks.empty()) {
    list.front_node = prev;
    list.front_hash = blocks.back();
    list.front_blocks = blocks.size();
    list.front_nodes = run_nodes;
  }
  EnforceCapacity(slot, tier);
  EnforceGlobalBound();
  return absl::OkStatus();
}

uint64_t PrefixIndex::Remove(Holder holder, absl::Span<const BlockHash> hashes, Tier tier,
                             Closure closure) {
  common::MutexLock lock(&writer_mu_);
  const int slot = SlotFor(holder, false);
  if (slot < 0) {
    return 0;
  }
  List& list = ListOf(slot, tier);
  list.front_node = kNil;
  uint64_t removed = 0;
  if (CallerTracks(list, closure)) {
    for (BlockHash h : hashes) {
      if (const uint32_t node = FindNode(h, slot, tier); node != kNil) {
        DropResidency(node, slot, tier);
        ++removed;
      }
    }
    list.removed += removed;
    return removed;
  }
  // Removing the LRU tail cannot break prefix-closure; engines evict tails first, so retry
  // non-tail blocks after the others (in reverse) before declaring the list not closed.
  std::vector<BlockHash> deferred;
  for (BlockHash h : hashes) {
    const uint32_t node = FindNode(h, slot, tier);
    if (node == kNil) {
      continue;
    }
    if (node == list.tail) {
      DropResidency(node, slot, tier);
      ++removed;
    } else {
      deferred.push_back(h);
    }
  }
  for (auto it = deferred.rbegin(); it != deferred.rend(); ++it) {
    const uint32_t node = FindNode(*it, slot, tier);  // Re-find: `hashes` may repeat.
    if (node == kNil) {
      continue;
    }
    if (node != list.tail) {
      SetDirty(slot, tier, true);
    }
    DropResidency(node, slot, tier);
    ++removed;
  }
  if (list.count == 0) {
    SetDirty(slot, tier, false);
  }
  list.removed += removed;
  return removed;
}

void PrefixIndex::ClearHolder(Holder holder) {
  common::MutexLock lock(&writer_mu_);
  const int slot = SlotFor(holder, false);
  if (slot >= 0) {
    ClearSlot(slot);
  }
}

void PrefixIndex::RemoveHolder(Holder holder) {
  common::MutexLock lock(&writer_mu_);
  const int slot = SlotFor(holder, false);
  if (slot < 0) {
    return;
  }
  ClearSlot(slot);
  slots_.erase(holder);
  slot_key_[slot].store(0, std::memory_order_release);
  const uint64_t key = holder.Key();
  int i = RegistryHome(key);
  for (int n = 0; n < kRegistrySize; ++n, i = (i + 1) & (kRegistrySize - 1)) {
    const uint64_t v = registry_[i].load(std::memory_order_relaxed);
    if (v == 0) {
      break;
    }
    if ((v & kRegistryValid) != 0 && ((v >> 8) & kKeyMask) == key) {
      registry_[i].store(kRegistryTombstone, std::memory_order_release);
      break;
    }
  }
}

uint64_t PrefixIndex::Touch(Holder holder, absl::Span<const BlockHash> chain, Tier tier) {
  common::MutexLock lock(&writer_mu_);
  const int slot = SlotFor(holder, false);
  if (slot < 0) {
    return 0;
  }
  List& list = ListOf(slot, tier);
  list.front_node = kNil;
  uint32_t prev = kNil;
  uint64_t touched = 0;
  for (BlockHash h : chain) {
    const uint32_t node = FindNode(h, slot, tier);
    if (node == kNil) {
      break;
    }
    if (node != prev) {
      Unlink(list, node);
      LinkAfter(list, prev, node);
      prev = node;
    }
    ++touched;
  }
  return touched;
}

// ---- Match -----------------------------------------------------------------------------

void PrefixIndex::ProbeAt(BlockHash hash, std::array<uint64_t, kNumTiers>* masks) const {
  const Shard& s = *shards_[ShardOf(hash, shard_bits_)];
  SharedLockGuard lock(s.mu);
  const uint32_t id = s.table.Find(hash, s);
  if (id == kNil) {
    *masks = {0, 0, 0};
    return;
  }
  const Record& r = s.Rec(id);
  *masks = {r.mask[0], r.mask[1], r.mask[2]};
}

namespace {

// Four holder sets: one per tier plus "any tier".
using Sets = std::array<uint64_t, kNumTiers + 1>;

inline bool Empty(const Sets& s) { return (s[0] | s[1] | s[2] | s[3]) == 0; }

struct MatchState {
  absl::Span<const BlockHash> chain;
  std::array<std::array<uint32_t, PrefixIndex::kMaxHolders>, kNumTiers + 1> answer{};
};

inline void Assign(MatchState& st, const Sets& s, uint32_t value) {
  for (int t = 0; t <= kNumTiers; ++t) {
    for (uint64_t b = s[t]; b != 0; b &= b - 1) {
      st.answer[t][std::countr_zero(b)] = value;
    }
  }
}

inline Sets Split(const Sets& s, const std::array<uint64_t, kNumTiers>& m, bool held) {
  const uint64_t any = m[0] | m[1] | m[2];
  if (held) {
    return {s[0] & m[0], s[1] & m[1], s[2] & m[2], s[3] & any};
  }
  return {s[0] & ~m[0], s[1] & ~m[1], s[2] & ~m[2], s[3] & ~any};
}

}  // namespace

void PrefixIndex::Match(absl::Span<const BlockHash> chain, absl::Span<const Holder> eligible,
                        std::vector<MatchResult>* out) const {
  out->clear();
  // Resolve holders to slots without locks.
  absl::InlinedVector<int, kMaxHolders> slot_of;
  if (eligible.empty()) {
    for (int s = 0; s < kMaxHolders; ++s) {
      const uint64_t v = slot_key_[s].load(std::memory_order_acquire);
      if (v != 0) {
        const uint64_t key = v & kKeyMask;
        out->push_back(MatchResult{
            Holder{static_cast<uint32_t>(key >> 16), static_cast<uint16_t>(key & 0xffff)}, {}, 0});
        slot_of.push_back(s);
      }
    }
  } else {
    out->reserve(eligible.size());
    slot_of.reserve(eligible.size());
    for (const Holder& h : eligible) {
      out->push_back(MatchResult{h, {}, 0});
      slot_of.push_back(LookupSlot(h));
    }
  }
  uint64_t selected = 0;
  for (int s : slot_of) {
    if (s >= 0) {
      selected |= uint64_t{1} << s;
    }
  }
  if (selected == 0 || chain.empty()) {
    return;
  }
  std::array<uint64_t, kNumTiers + 1> dirty;
  for (int t = 0; t <= kNumTiers; ++t) {
    dirty[t] = dirty_[t].load(std::memory_order_acquire);
  }
  const uint64_t dirty_any = dirty[kNumTiers];
  const Sets clean = {selected & ~dirty[0], selected & ~dirty[1], selected & ~dirty[2],
                      selected & ~dirty_any};
  Sets linear = {selected & dirty[0], selected & dirty[1], selected & dirty[2],
                 selected & dirty_any};

  MatchState st;
  st.chain = chain;
  // Prefix-closed holders: divide and conquer. Invariant of a frame (lo, hi, S): every member
  // of S holds blocks [0, lo) and none holds block hi (or hi == n). One probe splits S.
  struct Frame {
    uint32_t lo, hi;
    Sets s;
  };
  Frame stack[2 * 64 + 8];
  int top = 0;
  stack[top++] = Frame{0, static_cast<uint32_t>(chain.size()), clean};
  std::array<uint64_t, kNumTiers> masks;
  while (top > 0) {
    const Frame f = stack[--top];
    if (Empty(f.s)) {
      continue;
    }
    if (f.lo == f.hi) {
      Assign(st, f.s, f.lo);
      continue;
    }
    const uint32_t mid = f.lo + (f.hi - f.lo) / 2;
    ProbeAt(chain[mid], &masks);
    stack[top++] = Frame{f.lo, mid, Split(f.s, masks, false)};
    stack[top++] = Frame{mid + 1, f.hi, Split(f.s, masks, true)};
  }
  // Holders that may have holes: walk from the root until each has met its first miss.
  for (uint32_t i = 0; i < chain.size() && !Empty(linear); ++i) {
    ProbeAt(chain[i], &masks);
    const Sets missed = Split(linear, masks, false);
    Assign(st, missed, i);
    linear = Split(linear, masks, true);
  }
  Assign(st, linear, static_cast<uint32_t>(chain.size()));

  for (size_t k = 0; k < out->size(); ++k) {
    const int s = slot_of[k];
    if (s < 0) {
      continue;
    }
    MatchResult& r = (*out)[k];
    for (int t = 0; t < kNumTiers; ++t) {
      r.blocks[t] = st.answer[t][s];
    }
    r.any_tier_blocks = st.answer[kNumTiers][s];
  }
}

std::vector<MatchResult> PrefixIndex::Match(absl::Span<const BlockHash> chain,
                                            absl::Span<const Holder> eligible) const {
  std::vector<MatchResult> out;
  Match(chain, eligible, &out);
  return out;
}

// ---- Stats -----------------------------------------------------------------------------

uint64_t PrefixIndex::MemoryBytes() const {
  common::MutexLock lock(&writer_mu_);
  uint64_t bytes = sizeof(*this) + sizeof(List) * kMaxHolders * kNumTiers;
  for (const auto& s : shards_) {
    bytes += sizeof(Shard) + s->table.MemoryBytes() +
             s->chunks.size() * (Shard::kChunkSize * sizeof(Record) + sizeof(void*)) +
             s->free_recs.capacity() * sizeof(uint32_t) + s->ovf.capacity() * sizeof(Overflow);
  }
  return bytes;
}

IndexStats PrefixIndex::Stats() const {
  IndexStats stats;
  stats.memory_bytes = MemoryBytes();
  common::MutexLock lock(&writer_mu_);
  for (const auto& s : shards_) {
    stats.distinct_blocks += s->table.size();
  }
  stats.residencies = residencies_;
  stats.max_residencies = max_residencies_;
  stats.global_evictions = global_evictions_;
  std::vector<std::pair<Holder, int>> holders(slots_.begin(), slots_.end());
  std::sort(holders.begin(), holders.end(),
            [](const auto& a, const auto& b) { return a.first.Key() < b.first.Key(); });
  const uint64_t d[kNumTiers] = {dirty_[0].load(), dirty_[1].load(), dirty_[2].load()};
  for (const auto& [holder, slot] : holders) {
    HolderStats hs;
    hs.holder = holder;
    for (int t = 0; t < kNumTiers; ++t) {
      const List& l = lists_[slot * kNumTiers + t];
      TierStats& ts = hs.tiers[t];
      ts.blocks = l.count;
      ts.capacity_blocks = l.capacity;
      ts.inserted_blocks = l.inserted;
      ts.removed_blocks = l.removed;
      ts.evicted_blocks = l.evicted;
      ts.global_evicted_blocks = l.global_evicted;
      ts.prefix_closed = (d[t] & (uint64_t{1} << slot)) == 0;
    }
    stats.holders.push_back(hs);
  }
  return stats;
}

std::string StatsToJson(const IndexStats& stats) {
  std::string out = absl::StrCat(
      "{\"distinct_blocks\":", stats.distinct_blocks, ",\"residencies\":", stats.residencies,
      ",\"max_residencies\":", stats.max_residencies, ",\"memory_bytes\":", stats.memory_bytes,
      ",\"global_evictions\":", stats.global_evictions, ",\"holders\":[");
  for (size_t i = 0; i < stats.holders.size(); ++i) {
    const HolderStats& h = stats.holders[i];
    absl::StrAppend(&out, i == 0 ? "" : ",", "{\"worker\":", h.holder.worker,
                    ",\"dp_rank\":", h.holder.dp_rank, ",\"tiers\":{");
    for (int t = 0; t < kNumTiers; ++t) {
      const TierStats& ts = h.tiers[t];
      absl::StrAppend(&out, t == 0 ? "" : ",", "\"", std::string(TierName(static_cast<Tier>(t))),
                      "\":{\"blocks\":", ts.blocks, ",\"capacity_blocks\":", ts.capacity_blocks,
                      ",\"inserted_blocks\":", ts.inserted_blocks,
                      ",\"removed_blocks\":", ts.removed_blocks,
                      ",\"evicted_blocks\":", ts.evicted_blocks,
                      ",\"global_evicted_blocks\":", ts.global_evicted_blocks,
                      ",\"prefix_closed\":", ts.prefix_closed ? "true" : "false", "}");
    }
    absl::StrAppend(&out, "}}");
  }
  absl::StrAppend(&out, "]}");
  return out;
}

}  // namespace kvgate::kvindex
