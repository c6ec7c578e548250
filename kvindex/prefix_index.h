// File: kvindex/prefix_index.h
// The prefix index: block hash -> holders (worker, DP rank, tier). Answers, for a chain of
// block hashes, how many leading blocks each holder holds per tier, in O(k log n) hash probes
// for k distinct answers. Per-holder/tier LRU capacities imitate engine eviction and a global
// memory bound caps the whole index. Design, lock order and memory accounting:
// docs/kvindex.md.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/mutex.h"
#include "kvindex/types.h"

namespace kvgate::kvindex {

struct PrefixIndexOptions {
  /// Number of hash shards (power of two in [1, 64]). Match takes one shard reader lock per
  /// probe; more shards mean less reader contention.
  int num_shards = 64;
  /// Capacity of a (holder, tier) that was never given one with SetCapacity(), in blocks.
  uint64_t default_capacity_blocks = uint64_t{1} << 20;
  /// Bound on the whole index. Exceeding it evicts LRU entries from every (holder, tier) in
  /// proportion to its size. Converted to residencies at kBudgetBytesPerResidency each.
  uint64_t max_memory_bytes = uint64_t{4} << 30;
};

/// Leading blocks of a chain held by one holder.
struct MatchResult {
  Holder holder;
  std::array<uint32_t, kNumTiers> blocks{};  // Per tier, indexed by Tier.
  uint32_t any_tier_blocks = 0;              // Leading blocks each held in at least one tier.
};

/// Counters and gauges of one (holder, tier).
struct TierStats {
  uint64_t blocks = 0;
  uint64_t capacity_blocks = 0;
  uint64_t inserted_blocks = 0;
  uint64_t removed_blocks = 0;         // Remove() and ClearHolder().
  uint64_t evicted_blocks = 0;         // Capacity LRU.
  uint64_t global_evicted_blocks = 0;  // Memory bound.
  bool prefix_closed = true;           // False: Match walks this holder/tier linearly.
};

struct HolderStats {
  Holder holder;
  std::array<TierStats, kNumTiers> tiers;
};

struct IndexStats {
  uint64_t distinct_blocks = 0;  // Indexed block hashes.
  uint64_t residencies = 0;      // (block, holder, tier) triples.
  uint64_t max_residencies = 0;  // From max_memory_bytes.
  uint64_t memory_bytes = 0;     // Heap held by the index (tables, records, nodes).
  uint64_t global_evictions = 0;
  std::vector<HolderStats> holders;
};

/// Renders stats as a JSON object for the admin endpoint (no I/O).
std::string StatsToJson(const IndexStats& stats);

/// Who keeps a write's (holder, tier) flag "prefix-closed" (every held block's parent held in
/// the same tier), which lets Match() binary-search instead of walking.
enum class Closure : uint8_t {
  /// The index guesses: orphans and removals other than the LRU tail clear the flag, and only
  /// an emptied list sets it again. Right for writers that do not know blocks' parents.
  kGuess,
  /// The caller knows every block's parent and says what the write did with SetPrefixClosed()
  /// (kvevents' applier): the write itself leaves the flag alone. While the index has evicted
  /// from the list on its own (capacity, memory bound) the caller's view is not the index's,
  /// and writes fall back to kGuess until the list empties.
  kCallerTracks,
};

/// Thread-safe. Match() and Stats() may run concurrently with everything; writers (Insert,
/// Remove, ClearHolder, Touch, SetCapacity, RemoveHolder) serialise on one writer mutex and
/// never block Match for more than one block's update. Match never takes a global lock.
/// A Match concurrent with writes sees, per block, either the old or the new holder set.
class PrefixIndex {
 public:
  static constexpr int kMaxHolders = 64;
  static constexpr uint64_t kBudgetBytesPerResidency = 64;

  explicit PrefixIndex(PrefixIndexOptions options = {});
  ~PrefixIndex();
  PrefixIndex(const PrefixIndex&) = delete;
  PrefixIndex& operator=(const PrefixIndex&) = delete;

  /// Sets the capacity of (holder, tier) in blocks, registering the holder if needed, and
  /// evicts its LRU blocks down to it. @return kResourceExhausted if kMaxHolders are registered.
  absl::Status SetCapacity(Holder holder, Tier tier, uint64_t capacity_blocks);

  /// Records that `holder` holds `chain` (a full chain from the root block) in `tier`, and marks
  /// it most recently used with block 0 the most recent. Evicts over capacity. Blocks the holder
  /// already holds cost a lookup each but are relinked only when out of place, and then a run
  /// at a time: re-inserting a session's grown prompt adds the new blocks and moves its held
  /// history in a few splices.
  /// @return kResourceExhausted if the holder is new and kMaxHolders are registered.
  absl::Status Insert(Holder holder, absl::Span<const BlockHash> chain, Tier tier);

  /// Event-style insert: `blocks` follow `parent` (nullopt: they start at the root). If the
  /// holder does not hold `parent` in `tier` the blocks are orphans and the holder's Match falls
  /// back to a linear walk until it is cleared.
  absl::Status InsertAfter(Holder holder, std::optional<BlockHash> parent,
                           absl::Span<const BlockHash> blocks, Tier tier,
                           Closure closure = Closure::kGuess);

  /// Removes `hashes` from (holder, tier); unknown holders and hashes are ignored.
  /// @return the number of blocks removed.
  uint64_t Remove(Holder holder, absl::Span<const BlockHash> hashes, Tier tier,
                  Closure closure = Closure::kGuess);

  /// A kCallerTracks writer's word on whether (holder, tier) is prefix-closed; `tier` nullopt:
  /// the "any tier" set (every block held in some tier has its parent held in some tier). Say
  /// false before a write that leaves a block without its parent, true after the write that
  /// mends the last. True is ignored while the index's own evictions make its list differ from
  /// what the caller knows (any of the holder's lists, for the "any tier" set).
  void SetPrefixClosed(Holder holder, std::optional<Tier> tier, bool closed);

  /// Drops everything `holder` holds in every tier (worker restart, AllBlocksCleared). Keeps
  /// the holder registered with its capacities.
  void ClearHolder(Holder holder);

  /// ClearHolder() and frees its slot.
  void RemoveHolder(Holder holder);

  /// Marks the leading held blocks of `chain` most recently used. @return blocks touched.
  uint64_t Touch(Holder holder, absl::Span<const BlockHash> chain, Tier tier);

  /// For each eligible holder (all registered holders if `eligible` is empty), the number of
  /// leading blocks of `chain` it holds per tier. `*out` is cleared first and is in the order of
  /// `eligible`; unknown holders get zeros.
  void Match(absl::Span<const BlockHash> chain, absl::Span<const Holder> eligible,
             std::vector<MatchResult>* out) const;
  std::vector<MatchResult> Match(absl::Span<const BlockHash> chain,
                                 absl::Span<const Holder> eligible = {}) const;

  /// The blocks (holder, tier) holds, most recently used first, at most `max` of them: what a
  /// replica hands a joining one (router/cluster/). Insert()ing the list rebuilds the LRU
  /// order, and a prefix-closed list stays prefix-closed (ancestors are at least as recent).
  std::vector<BlockHash> Held(Holder holder, Tier tier, size_t max) const;

  IndexStats Stats() const;
  uint64_t MemoryBytes() const;

 private:
  struct Shard;
  struct List;
  struct Probe;
  class Table;

  // Writer-side helpers; all require writer_mu_.
  int SlotFor(Holder holder, bool create) ABSL_EXCLUSIVE_LOCKS_REQUIRED(writer_mu_);
  List& ListOf(int slot, Tier tier) ABSL_EXCLUSIVE_LOCKS_REQUIRED(writer_mu_);
  uint32_t FindNode(BlockHash hash, int slot, Tier tier) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(writer_mu_);
  // The residency node of (slot, tier) in record `id` of shard `si`, which must hold it.
  uint32_t NodeOf(int si, uint32_t id, int slot, Tier tier) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(writer_mu_);
  uint32_t AddResidency(BlockHash hash, int slot, Tier tier, bool* added)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(writer_mu_);
  void DropResidency(uint32_t node, int slot, Tier tier) ABSL_EXCLUSIVE_LOCKS_REQUIRED(writer_mu_);
  void Unlink(List& list, uint32_t node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(writer_mu_);
  void LinkAfter(List& list, uint32_t after, uint32_t node)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(writer_mu_);
  // Moves the linked run [first..last] to right after `after` (kNil: the head).
  void SpliceAfter(List& list, uint32_t after, uint32_t first, uint32_t last)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(writer_mu_);
  void EvictTail(int slot, Tier tier) ABSL_EXCLUSIVE_LOCKS_REQUIRED(writer_mu_);
  void EnforceCapacity(int slot, Tier tier) ABSL_EXCLUSIVE_LOCKS_REQUIRED(writer_mu_);
  void EnforceGlobalBound() ABSL_EXCLUSIVE_LOCKS_REQUIRED(writer_mu_);
  void ClearSlot(int slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(writer_mu_);
  // Sets or clears (slot, tier)'s bit; setting also sets the "any tier" bit, and clearing the
  // last tier's bit clears it (every tier closed implies closed in any tier).
  void SetDirty(int slot, Tier tier, bool dirty) ABSL_EXCLUSIVE_LOCKS_REQUIRED(writer_mu_);
  // Whether a write with `closure` on `list` leaves the flag to its caller.
  static bool CallerTracks(const List& list, Closure closure);
  uint32_t* PrevOf(uint32_t node) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(writer_mu_);
  uint32_t* NextOf(uint32_t node) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(writer_mu_);

  // Reader side (lock-free registry + one shard reader lock per probe).
  int LookupSlot(Holder holder) const;
  void ProbeAt(BlockHash hash, std::array<uint64_t, kNumTiers>* masks) const;

  const PrefixIndexOptions options_;
  const int shard_bits_;
  const uint64_t max_residencies_;
  std::vector<std::unique_ptr<Shard>> shards_;  // Fixed after construction.

  // Holder registry readable without locks: open-addressing table of (holder key, slot) and
  // per-slot holder keys; written only under writer_mu_.
  static constexpr int kRegistrySize = 256;
  std::array<std::atomic<uint64_t>, kRegistrySize> registry_{};
  std::array<std::atomic<uint64_t>, kMaxHolders> slot_key_{};  // 0 = free, else key | kValid.
  // Bit s of dirty_[t]: (slot s, tier t) may not be prefix-closed; dirty_[kNumTiers]: slot s's
  // blocks held in any tier may not be. Every tier closed implies closed in any tier, so the
  // last tier bit cleared clears it.
  std::array<std::atomic<uint64_t>, kNumTiers + 1> dirty_{};

  mutable common::Mutex writer_mu_;
  std::unique_ptr<List[]> lists_ ABSL_GUARDED_BY(writer_mu_);  // kMaxHolders * kNumTiers.
  absl::flat_hash_map<Holder, int> slots_ ABSL_GUARDED_BY(writer_mu_);
  uint64_t residencies_ ABSL_GUARDED_BY(writer_mu_) = 0;
  uint64_t global_evictions_ ABSL_GUARDED_BY(writer_mu_) = 0;
};

}  // namespace kvgate::kvindex
