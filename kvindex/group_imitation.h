// File: kvindex/group_imitation.h
// Approximate mode for hybrid models (issue 32): without KV events, kvgate imitates each of a
// worker's non-full KV-cache groups (sliding window, Mamba state) with its own LRU of the
// approximate chain's blocks, as the PrefixIndex imitates full attention. What it imitates of
// vLLM (single_type_kv_cache_manager.py):
//   - a sliding window reads only the blocks covering the window before a hit, and frees the
//     blocks the context moved past: a prompt touches [hit - window, end), in order, so the
//     blocks of an old prefix that later turns skip age out while full attention keeps them
//     (with a load from a host tier or store past the hit, from the load's end - window);
//   - Mamba keeps one state per checkpoint: a prompt touches the checkpoint it started from and
//     leaves one at the end of each prefill chunk (when the chunk size is known) and at its last
//     full block.
//   - a decode caches a block of every group at each block boundary its output crosses (a
//     window's new block, Mamba's next checkpoint, the previous one freed): blocks no later
//     prompt names (the next turn re-sends the answer through the chat template), which push
//     older ones out. Counted from the response's usage when it reports the output's size.
// Where it must guess: where chunks end when prefills share a step. Thread-safe (one mutex;
// short critical sections on routing threads).
#pragma once

#include <cstdint>
#include <list>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "common/mutex.h"
#include "kvindex/hybrid_groups.h"
#include "kvindex/types.h"

namespace kvgate::kvindex {

/// One imitated group: its rule and how many blocks its pool holds.
struct ImitatedGroupSpec {
  GroupSpec spec;
  uint64_t capacity_blocks = 0;
  // Mamba: a prefill chunk of this many blocks ends on a checkpoint (0: only the prompt's end).
  uint32_t chunk_blocks = 0;
};

/// Calls `keep(i)`, in order, for each block i of an `n`-block prompt that group `spec` reads or
/// keeps when the prompt runs with a hit of `hit` blocks and the engine loads blocks [hit,
/// `start`) from its host tier or a store before computing the rest (the file comment's rules):
/// what Learn touches, and what precise mode expects a routed prompt's events to show in that
/// group. A loaded span is not a computed one: a sliding window allocates only its last window
/// of it (the positions it has moved past stay empty, as vLLM's skipped blocks), and Mamba starts
/// from the loaded state, not from a checkpoint of its pool.
void ForEachKeptBlock(const ImitatedGroupSpec& spec, uint32_t block_size, uint32_t n, uint32_t hit,
                      uint32_t start, absl::FunctionRef<void(uint32_t)> keep);

/// Blocks of one imitated group, for admin pages.
struct ImitatedGroupView {
  GroupSpec spec;
  uint64_t capacity_blocks = 0;
  uint64_t blocks = 0;
};

class GroupImitation {
 public:
  /// Most blocks one group may hold, whatever it is configured with (memory bound: ~64 B each).
  static constexpr uint64_t kMaxBlocksPerGroup = uint64_t{1} << 22;

  GroupImitation() = default;
  GroupImitation(const GroupImitation&) = delete;
  GroupImitation& operator=(const GroupImitation&) = delete;

  /// Sets `holder`'s groups beside full attention. Unchanged specs keep their blocks; a changed
  /// list starts empty. An empty list forgets the holder (full attention only).
  void Configure(Holder holder, absl::Span<const ImitatedGroupSpec> groups);
  void Forget(Holder holder);
  bool Hybrid(Holder holder) const;

  /// Caps `full_blocks` (leading blocks of `chain`, `block_size` tokens each, that the imitated
  /// full attention holds) by every group's rule, to the coordinator's fixed point.
  uint32_t Cap(Holder holder, absl::Span<const BlockHash> chain, uint32_t block_size,
               uint32_t full_blocks) const;

  /// `holder` was sent the prompt `chain` expecting a hit of `hit_blocks` and to load the blocks
  /// up to `start_blocks` (host tier, store; `start_blocks` <= `hit_blocks`: none): each group
  /// touches what the engine reads and keeps of it (see ForEachKeptBlock), evicting its least
  /// recently used blocks beyond capacity.
  void Learn(Holder holder, absl::Span<const BlockHash> chain, uint32_t block_size,
             uint32_t hit_blocks, uint32_t start_blocks = 0);
  /// `holder` generated `output_tokens` after a prompt of `prompt_tokens`: each group caches one
  /// block per block boundary the decode crossed, evicting its least recently used blocks as
  /// the engine's pool does. Without it a Mamba pool of a few hundred states, which a 300-token
  /// answer turns over by 19, looks ten times as long-lived as it is.
  void LearnOutput(Holder holder, uint64_t prompt_tokens, uint64_t output_tokens,
                   uint32_t block_size);
  /// The attempt did not run: drops `blocks` (what Learn added past the hit) from every group.
  void Unlearn(Holder holder, absl::Span<const BlockHash> blocks);

  std::vector<ImitatedGroupView> Groups(Holder holder) const;

 private:
  struct Group {
    ImitatedGroupSpec spec;
    std::list<BlockHash> lru;  // Front: least recently used.
    absl::flat_hash_map<BlockHash, std::list<BlockHash>::iterator> where;
  };
  static void Touch(Group& g, BlockHash hash);

  mutable common::Mutex mu_;
  absl::flat_hash_map<Holder, std::vector<Group>> holders_ ABSL_GUARDED_BY(mu_);
  uint64_t output_blocks_ ABSL_GUARDED_BY(mu_) = 0;  // names the decode's blocks apart
};

}  // namespace kvgate::kvindex
