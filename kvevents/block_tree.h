// File: kvevents/block_tree.h
// One holder's full-attention blocks as its engine's events name them: each engine id's kvgate
// hash, tiers and parent, and how many of its children each tier holds. From those it knows
// exactly how many held blocks lack their parent (holes) per tier and in "any tier", so the
// applier can tell the prefix index when its lists are prefix-closed. Engines evict out of the
// index's LRU order (vLLM: least recently freed first), so the index's own guess marks nearly
// every GPU list not closed and every match of such a holder walks block by block.
// vLLM does not deduplicate its GPU cache: a block computed again while another copy is cached
// (a hybrid model recomputing past a window's hit, two prompts racing) is announced again and
// each copy removed when evicted, so the GPU tier counts copies and a block leaves it with its
// last one (GpuCopies). Other tiers are sets: an offloading connector stores a hash once.
// Thread-compatible; owned by the applier, under its mutex.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "kvevents/event_decoder.h"
#include "kvindex/types.h"

namespace kvgate::kvevents {

/// One block's GPU copies beyond the first: a store of a block the GPU tier already holds is one
/// more copy, and a GPU removal takes a copy before the block. The applier's other groups keep
/// their blocks with the same rule.
class GpuCopies {
 public:
  /// A store in `tier` of the block, which `tier` already held when `held`.
  void Stored(kvindex::Tier tier, bool held) {
    if (held && tier == kvindex::Tier::kGpu && extra_ < UINT16_MAX) ++extra_;
  }
  /// A removal from `tier`: true when it took a copy and the block stays.
  bool TakeCopy(kvindex::Tier tier) {
    if (tier != kvindex::Tier::kGpu || extra_ == 0) return false;
    --extra_;
    return true;
  }
  /// `tier` was cleared: every copy went.
  void Cleared(kvindex::Tier tier) {
    if (tier == kvindex::Tier::kGpu) extra_ = 0;
  }

 private:
  uint16_t extra_ = 0;  // Saturates.
};

class BlockTree {
 public:
  /// Tiers 0..kNumTiers-1, then "any tier" (a block held in at least one).
  static constexpr int kViews = kvindex::kNumTiers + 1;
  static constexpr int kAnyTier = kvindex::kNumTiers;

  /// Records that `id` (whose parent is `parent`, nullopt: a root block) is held in `tier` under
  /// kvgate's `hash`. A block already held on the GPU gains a copy; one held in another tier is
  /// left as it is. An id whose recorded parent or hash differs makes the tree inexact (a
  /// publisher that reuses ids) until Clear().
  void Add(EngineBlockId id, std::optional<EngineBlockId> parent, kvindex::BlockHash hash,
           kvindex::Tier tier) {
    AddRun({&id, 1}, parent, {&hash, 1}, tier);
  }
  /// Add() for a BlockStored's run: ids[0] follows `parent`, each later id the one before it.
  void AddRun(absl::Span<const EngineBlockId> ids, std::optional<EngineBlockId> parent,
              absl::Span<const kvindex::BlockHash> hashes, kvindex::Tier tier);
  enum class Dropped { kNotHeld, kCopy, kBlock };
  /// Drops one copy of `id` from `tier`: kCopy when the GPU still holds another (nothing
  /// changes for the index), kBlock when the block left the tier (`*hash`: its kvgate hash),
  /// kNotHeld when `tier` did not hold it.
  Dropped Drop(EngineBlockId id, kvindex::Tier tier, kvindex::BlockHash* hash);
  /// Drops every block from `tier`, appending their kvgate hashes to `*hashes`.
  void DropTier(kvindex::Tier tier, std::vector<kvindex::BlockHash>* hashes);
  /// Forgets everything; the tree is exact again.
  void Clear();

  /// kvgate's hash of `id` if some tier holds it.
  std::optional<kvindex::BlockHash> HashOf(EngineBlockId id) const;
  /// Held blocks of `view` whose parent `view` does not hold.
  uint64_t holes(int view) const { return holes_[view]; }
  /// False once ids were reused inconsistently: the hole counts are then not to be trusted.
  bool exact() const { return exact_; }
  /// Held blocks per tier.
  const std::array<uint64_t, kvindex::kNumTiers>& counts() const { return counts_; }
  /// Engine ids kept: those held in some tier and the parents that held children still need.
  size_t size() const { return blocks_.size(); }
  /// Engine ids held in `tier`, in no particular order.
  std::vector<EngineBlockId> Held(kvindex::Tier tier) const;

 private:
  struct Block {
    kvindex::BlockHash hash = 0;
    EngineBlockId parent = 0;
    // Children held, per view. 16 bits keep an entry at 32 bytes; a block with 65,535 held
    // children (a prompt prefix that many sessions fork from) makes the tree inexact.
    std::array<uint16_t, kViews> children{};
    uint8_t tiers = 0;  // Bit per kvindex::Tier.
    bool has_parent = false;
    GpuCopies copies;
  };
  static_assert(sizeof(Block) == 32);

  static bool Holds(const Block& b, int view) {
    return view == kAnyTier ? b.tiers != 0 : (b.tiers & (1u << view)) != 0;
  }
  // `b` starts or stops being held in `view`; `p` is its parent's entry (nullptr: a root, or a
  // missing parent).
  void Enter(Block& b, Block* p, int view);
  void Leave(Block& b, Block* p, int view);
  // The entry of `b`'s parent, nullptr for a root; a missing one makes the tree inexact.
  Block* ParentOf(const Block& b);
  static bool Unused(const Block& b);

  absl::flat_hash_map<EngineBlockId, Block> blocks_;
  std::array<uint64_t, kViews> holes_{};
  std::array<uint64_t, kvindex::kNumTiers> counts_{};
  bool exact_ = true;
};

}  // namespace kvgate::kvevents
