// File: kvevents/event_applier.h
// Applies decoded KV events to a PrefixIndex. A BlockStored is re-hashed from its token ids with
// kvgate's token-mode chain (the engine's hash algorithm, seed and hash width do not matter), and
// the engine's id of each block is kept only to translate later BlockRemoved events. Media map to
// tiers (GPU -> gpu; CPU, CPU_PINNED -> host; DISK, EXTERNAL -> store; others as configured); a
// LoRA name selects the namespace. Hybrid models: the full-attention KV-cache group goes to the
// index, sliding-window and Mamba groups to HybridGroups, each group with its own engine-id map
// (vLLM sends the same id in every group).
// Thread-safe: one writer (the events thread) and concurrent readers of the statistics.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/mutex.h"
#include "kvevents/block_tree.h"
#include "kvevents/event_decoder.h"
#include "kvindex/hybrid_groups.h"
#include "kvindex/prefix_index.h"
#include "kvindex/types.h"

namespace kvgate::kvevents {

struct ApplierOptions {
  /// Media beyond the built-in GPU (-> gpu) and CPU (-> host), matched case-insensitively, e.g.
  /// {"disk", kStore}. Events on an unknown medium are counted and ignored.
  std::vector<std::pair<std::string, kvindex::Tier>> media;
};

/// What one Apply() did.
struct ApplyResult {
  uint64_t stored_blocks = 0;
  uint64_t removed_blocks = 0;
  uint64_t cleared = 0;         // AllBlocksCleared events.
  uint64_t orphan_blocks = 0;   // Stored after a parent kvgate never saw: not indexed.
  uint64_t ignored_events = 0;  // Unknown tag, medium or group kind; a group without HybridGroups.
  uint64_t unknown_removals = 0;  // BlockRemoved of an id kvgate never saw stored.
};

/// The namespace root of token-mode chains for `model` (a LoRA adapter's name for its blocks):
/// what the router must seed request chains with to match event-built chains.
uint64_t TokenRootSeed(std::string_view model);

class EventApplier {
 public:
  /// `groups`: where the groups of hybrid models beside full attention go (not owned; nullptr:
  /// their events are ignored and hybrid workers look as if full attention were all).
  explicit EventApplier(kvindex::PrefixIndex& index, ApplierOptions options = {},
                        kvindex::HybridGroups* groups = nullptr);
  EventApplier(const EventApplier&) = delete;
  EventApplier& operator=(const EventApplier&) = delete;

  /// Applies `batch`, published by the engine behind `holder` serving `model`, in order.
  ApplyResult Apply(kvindex::Holder holder, std::string_view model, const EventBatch& batch);

  /// Forgets everything about `holder` (engine restart, or the worker left): its index entries
  /// and its engine-id map.
  void Forget(kvindex::Holder holder);

  /// The engine ids `holder` holds in `tier`, in no particular order (admin, tests).
  std::vector<EngineBlockId> EngineBlocks(kvindex::Holder holder, kvindex::Tier tier) const;
  /// Blocks of `holder` per tier, by engine id.
  std::array<uint64_t, kvindex::kNumTiers> BlockCounts(kvindex::Holder holder) const;
  /// The block size of the last BlockStored seen from `holder` (0: none yet).
  uint32_t LastBlockSize(kvindex::Holder holder) const;

 private:
  struct Block {
    kvindex::BlockHash hash = 0;
    uint8_t tiers = 0;  // Bit per kvindex::Tier.
    GpuCopies copies;
  };
  // A group beside full attention: its own engine ids (the same id names a block in every group).
  struct OtherGroup {
    kvindex::GroupSpec spec;
    absl::flat_hash_map<EngineBlockId, Block> blocks;
  };
  struct HolderState {
    BlockTree tree;  // The index's (full-attention) group.
    // What the index was last told of each BlockTree view: prefix-closed or not.
    std::array<bool, BlockTree::kViews> told_closed = {true, true, true, true};
    uint32_t last_block_size = 0;
    int64_t full_group = -1;  // The group index the index holds; -1: not seen yet.
    absl::flat_hash_map<int64_t, OtherGroup> others;
  };
  // Where an event's blocks go.
  enum class Route { kIndex, kOther, kIgnore };
  // A BlockStored names its group's kind; the first full-attention group seen is the index's.
  static Route RouteStored(HolderState& state, const BlockStored& event, kvindex::GroupSpec* spec);
  // A BlockRemoved names only the group index.
  static Route RouteRemoved(const HolderState& state, const std::optional<int64_t>& group_idx);

  bool TierOf(const std::optional<std::string>& medium, kvindex::Tier* tier) const;
  // Around an index write: before it, the views the write leaves with holes are marked not
  // prefix-closed (a concurrent match walks them); after it, the views it mended are marked
  // closed again. Returns how the write treats closure.
  kvindex::Closure MarkOpen(kvindex::Holder holder, HolderState& state);
  void MarkClosed(kvindex::Holder holder, HolderState& state);
  // The event's block size (inferred from its tokens when absent); 0 when its tokens cannot be
  // re-hashed into its blocks.
  static uint32_t UsableBlockSize(const BlockStored& event);
  // kvgate's chain of the event's blocks into scratch_, after `parent` (nullptr: from the root
  // of the model's, or the LoRA adapter's, namespace).
  void HashBlocks(const BlockStored& event, std::string_view model,
                  const kvindex::BlockHash* parent, uint32_t block_size);
  void StoreOther(kvindex::Holder holder, HolderState& state, int64_t group,
                  const kvindex::GroupSpec& spec, std::string_view model, const BlockStored& event,
                  kvindex::Tier tier, ApplyResult& result);
  void ApplyStored(kvindex::Holder holder, HolderState& state, std::string_view model,
                   const BlockStored& event, ApplyResult& result);
  void ApplyRemoved(kvindex::Holder holder, HolderState& state, const BlockRemoved& event,
                    ApplyResult& result);
  void ApplyCleared(kvindex::Holder holder, HolderState& state, const AllBlocksCleared& event,
                    ApplyResult& result);

  // Engine ids one group of one holder may have: far above any GPU pool (a 1M-block pool is
  // 16M tokens), far below what would exhaust the gateway.
  static constexpr size_t kMaxGroupBlocks = size_t{1} << 22;

  kvindex::PrefixIndex& index_;
  const ApplierOptions options_;
  kvindex::HybridGroups* const groups_;
  mutable common::Mutex mu_;  // Guards holders_ (the events thread writes, admin reads).
  absl::flat_hash_map<kvindex::Holder, HolderState> holders_ ABSL_GUARDED_BY(mu_);
  std::vector<kvindex::BlockHash> scratch_;
};

}  // namespace kvgate::kvevents
