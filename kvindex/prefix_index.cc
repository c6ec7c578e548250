#include "kvindex/prefix_index.h"

#include <algorithm>
#include <bit>
#include <thread>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "kvindex/prefix_index_storage.h"

namespace kvgate::kvindex {

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

}  // namespace kvgate::kvindex
