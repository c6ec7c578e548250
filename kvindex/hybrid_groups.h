// File: kvindex/hybrid_groups.h
// The KV-cache groups of hybrid models beside the prefix index. vLLM keeps one group per layer
// kind (full attention, sliding window, Mamba/linear state) and reuses a prefix only when every
// group can serve it (vllm/v1/core/kv_cache_coordinator.py, HybridKVCacheCoordinator). The
// PrefixIndex holds each holder's full-attention group; this holds the others, per (holder,
// group, tier), and caps a full-attention hit by their rules. Thread-safe: one writer (the events
// thread) and concurrent readers (routing threads) under a reader/writer lock.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "common/mutex.h"
#include "kvindex/types.h"

namespace kvgate::kvindex {

/// How a group's blocks serve a prefix.
enum class GroupKind : uint8_t {
  kFullAttention,  // Every block up to the hit.
  kSlidingWindow,  // The blocks covering the window before the hit.
  kMamba,          // A state checkpoint at the hit (also linear attention).
};

/// "full_attention" / "sliding_window" / "mamba".
std::string_view GroupKindName(GroupKind kind);
/// vLLM's kv_cache_spec_kind names (and SGLang's), case-insensitive: full/MLA/sink attention
/// are kFullAttention; sliding window, chunked local attention kSlidingWindow; mamba,
/// linear attention, gated delta net kMamba. False for a kind kvgate cannot reason about.
bool ParseGroupKind(std::string_view name, GroupKind* kind);

struct GroupSpec {
  GroupKind kind = GroupKind::kFullAttention;
  uint32_t sliding_window = 0;  // Tokens; kSlidingWindow only.
};

/// ceil((W-1)/block_size): the cached blocks a sliding window of W tokens needs just before a hit
/// (vLLM's sliding_window_contiguous_blocks).
uint32_t WindowBlocks(uint32_t sliding_window, uint32_t block_size);

/// The rule of one non-full group, given the leading `full_blocks` blocks of a chain of
/// `block_size`-token blocks that full attention serves and `cached(i)`: whether the group holds
/// block i. Returns the hit in blocks (<= full_blocks), as vLLM's single-type managers find it:
/// - full attention: the leading cached blocks;
/// - sliding window W: scanning down from the hit, the first run of ceil((W-1)/block_size)
///   cached blocks ends the hit; without one, the run that reaches block 0;
/// - Mamba: the last cached state at or before the hit.
uint32_t GroupHit(const GroupSpec& spec, uint32_t block_size, uint32_t full_blocks,
                  const std::function<bool(uint32_t)>& cached);

/// vLLM's coordinator over several groups: each group, given a hit, answers its own (<= the
/// hit); a lowered hit is checked by every group again until none lowers it. `group_hit(g, hit)`
/// is group g's rule at `hit`.
uint32_t CoordinatedHit(uint32_t hit, size_t num_groups,
                        const std::function<uint32_t(size_t, uint32_t)>& group_hit);

/// One group of one holder, for admin pages.
struct GroupView {
  uint32_t group = 0;
  GroupSpec spec;
  uint32_t block_size = 0;
  std::array<uint64_t, kNumTiers> blocks{};
};

class HybridGroups {
 public:
  HybridGroups() = default;
  HybridGroups(const HybridGroups&) = delete;
  HybridGroups& operator=(const HybridGroups&) = delete;

  /// Records that (holder, group) holds `blocks` in `tier`. The spec and block size are the
  /// group's latest (an engine restart may change them; its AllBlocksCleared empties it first).
  void Store(Holder holder, uint32_t group, const GroupSpec& spec, uint32_t block_size,
             absl::Span<const BlockHash> blocks, Tier tier);
  /// Drops `blocks` from (holder, group, tier). Unknown ones are ignored.
  void Remove(Holder holder, uint32_t group, absl::Span<const BlockHash> blocks, Tier tier);
  /// Empties every group of `holder` in `tier` (all tiers when `all`); the groups stay known, so
  /// the holder keeps being capped (an empty group serves nothing).
  void Clear(Holder holder, Tier tier, bool all);
  /// Forgets `holder` entirely (restart, removal).
  void Forget(Holder holder);

  /// True when `holder` has groups beside full attention (Cap then may lower a hit).
  bool Hybrid(Holder holder) const;

  /// Caps `full_blocks` (leading blocks of `chain` in `block_size`-token blocks that full
  /// attention serves) by every group of `holder`: the longest prefix all groups serve, as
  /// vLLM's coordinator computes it for one full group and others (one pass; each group may
  /// only lower it). `gpu_only`: count only GPU-tier blocks of the groups, else any tier. A
  /// group kept in another block size serves nothing (kvgate hashes one size per worker).
  /// `pending(group, block)`, when given, adds blocks a group is about to hold in GPU (precise
  /// mode's guesses for a request whose events have not arrived yet). `ahead_tokens`: the
  /// tokens the holder will prefill before this request is scheduled (the queue ahead of it);
  /// a sliding-window block whose turn in its pool's LRU comes before they are cached is not
  /// counted in GPU, since an engine does not pin a waiting request's hit (see SurvivesAhead).
  uint32_t Cap(Holder holder, absl::Span<const BlockHash> chain, uint32_t block_size,
               uint32_t full_blocks, bool gpu_only,
               const std::function<bool(uint32_t group, uint32_t block)>& pending = nullptr,
               uint64_t ahead_tokens = 0) const;

  /// A prompt routed to `holder` reads, of its hit, `blocks[i]` in each group whose bit is set
  /// in `groups[i]` (bit g: group g; the rule is kvindex::ForEachKeptBlock's: a window's blocks
  /// before where computing starts, Mamba's starting state): they become their pool's most
  /// recently used, as the engine's LRU sees them, in order. Unheld blocks are ignored.
  void Touch(Holder holder, absl::Span<const BlockHash> blocks, absl::Span<const uint32_t> groups);

  /// The groups of `holder`, by group index.
  std::vector<GroupView> Groups(Holder holder) const;

  /// Each group's own hit at `full_blocks` (any tier), by group index: what /admin/explain
  /// shows beside the full-attention match.
  std::vector<std::pair<GroupView, uint32_t>> Explain(Holder holder,
                                                      absl::Span<const BlockHash> chain,
                                                      uint32_t block_size,
                                                      uint32_t full_blocks) const;

 private:
  struct Block {
    uint8_t tiers = 0;   // Bit per Tier.
    uint64_t stamp = 0;  // The group's clock when the block was last stored or read in GPU.
  };
  struct Group {
    GroupSpec spec;
    uint32_t block_size = 0;
    absl::flat_hash_map<BlockHash, Block> blocks;
    std::array<uint64_t, kNumTiers> counts{};
    uint64_t clock = 0;     // Ticks once per GPU store or read: the LRU's order.
    uint64_t most_gpu = 0;  // The most GPU blocks it ever held: its pool's size, once full.
    // A GPU block was removed: the engine's LRU reached cached blocks, so the pool has been full
    // (vLLM hands out never-used blocks before it evicts one) and most_gpu is its size.
    bool evicted = false;
  };
  /// Whether GPU block `b` of `g` is still cached after `churn` more blocks are allocated in its
  /// pool: the LRU evicts the free slots' worth first, then blocks older than `b`. Before the
  /// pool's first eviction its size is unknown, and larger than what it held: nothing is
  /// evicted (a young worker would otherwise lose every hit to a queue it has room for). The blocks
  /// newer than `b` are at most the clock's ticks since its stamp (reads of newer blocks tick
  /// too, so it may count some twice: it errs toward eviction).
  static bool SurvivesAhead(const Group& g, const Block& b, uint64_t churn);
  using HolderGroups = absl::flat_hash_map<uint32_t, Group>;

  mutable common::SharedMutex mu_;
  absl::flat_hash_map<Holder, HolderGroups> holders_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvgate::kvindex
