// File: sim/kv_coordinator.h
// One engine's KV cache across its KV-cache groups, as vLLM's KVCacheCoordinator: one BlockPool
// per group (each with its own LRU of freed cached blocks), each request's blocks per group, and
// the group rules of sim/kv_groups.h: the hybrid prefix hit, sliding windows freeing the blocks
// they moved past, Mamba's running state and block-boundary checkpoints. A profile without
// groups has one full-attention group and behaves, events included, as one BlockPool.
// Thread-compatible; owned by its Engine.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "sim/block_pool.h"
#include "sim/profile.h"

namespace kvgate::sim {

/// One request's blocks in one group.
struct GroupBlocks {
  // Full attention and sliding window: one block per position; -1 (null) where a sliding window
  // holds nothing (behind it, or before a hit's window).
  std::vector<int32_t> ids;
  uint32_t num_cached = 0;  // Leading positions registered in the cache (ids).
  int32_t state = -1;       // Mamba: the running state.
  int32_t checkpoint = -1;  // Mamba: the latest cached state; freed when the next is cached.
  int32_t pending = -1;     // Mamba: taken for the state at the end of this step's chunk.
};

/// One request's blocks in every group (empty until admitted).
struct RequestKv {
  std::vector<GroupBlocks> groups;
};

/// A request's local prefix-cache hit, found at admission.
struct CacheHit {
  size_t gpu = 0;     // Leading blocks taken from the full-attention group's GPU cache.
  size_t host = 0;    // Following blocks loaded from the host tier (full attention only).
  size_t blocks = 0;  // The hit: gpu + host; every group serves it.
};

class KvCoordinator {
 public:
  /// `events` receives every group's events (BlockPool).
  KvCoordinator(const Profile& profile, std::vector<KvEvent>* events);

  size_t num_groups() const { return specs_.size(); }
  const KvGroupSpec& spec(size_t group) const { return specs_[group]; }
  const BlockPool& pool(size_t group = 0) const { return *pools_[group]; }
  /// True when the model has a Mamba group (prefill chunks are then block-aligned).
  bool has_mamba() const { return mamba_; }
  /// Fraction of all groups' blocks referenced by requests (vllm:kv_cache_usage_perc).
  double Usage() const;

  /// The hit of a prompt whose block hashes, capped at MaxHitBlocks, are `hashes`: the leading
  /// blocks full attention holds (GPU, then host tier), capped by the other group's rule.
  CacheHit FindHit(absl::Span<const uint64_t> hashes) const;
  /// Whether every group has room to admit a request with `hit` that has `computed` tokens
  /// (hit, store and P/D tokens) and runs a first chunk of `n`: its new blocks, counting the
  /// free cached blocks the hit would take off the free lists.
  bool CanAdmit(const CacheHit& hit, absl::Span<const uint64_t> hashes, uint32_t computed,
                uint32_t n) const;
  /// Admits it: takes the blocks each group keeps of the hit (all of full attention's, a sliding
  /// window's last ones, Mamba's checkpoint at hit-1 when the request starts there), loads the
  /// host blocks and allocates the rest. Precondition: CanAdmit.
  void Admit(RequestKv* kv, const CacheHit& hit, absl::Span<const uint64_t> hashes,
             uint32_t computed, uint32_t n);

  /// A running request at `computed` tokens is scheduled again: frees the blocks its sliding
  /// windows moved past (vLLM's remove_skipped_blocks; they stay cached until evicted).
  void RemoveSkipped(RequestKv* kv, uint32_t computed);
  /// Whether every group has room for the request's next `n` tokens; Grow takes the blocks.
  bool CanGrow(const RequestKv& kv, uint32_t computed, uint32_t n) const;
  void Grow(RequestKv* kv, uint32_t computed, uint32_t n);

  /// After a step that left the request at `computed` tokens: caches (and announces) newly full
  /// blocks in the attention groups and, at a block boundary, Mamba's new checkpoint (the
  /// previous one is freed).
  void Cache(RequestKv* kv, absl::Span<const uint64_t> hashes, absl::Span<const uint32_t> tokens,
             uint32_t computed);
  /// Frees every block of the request (tail first) and empties `kv`.
  void Free(RequestKv* kv);
  /// Blocks the request holds in all groups.
  size_t NumBlocks(const RequestKv& kv) const;
  /// Forgets every cached hash in every group; one AllBlocksCleared.
  void ResetPrefixCache();

 private:
  struct Need {
    size_t acquire_from = 0;  // Hit positions [acquire_from, hit) taken from the cache.
    size_t acquire_to = 0;
    uint32_t new_blocks = 0;  // Fresh blocks (host-loaded ones included).
  };
  Need AdmitNeed(size_t group, const CacheHit& hit, uint32_t computed, uint32_t n) const;
  uint32_t GrowNeed(size_t group, const GroupBlocks& g, uint32_t computed, uint32_t n) const;
  uint32_t BlocksFor(uint32_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }
  bool Checkpoints(uint32_t computed, uint32_t n) const {
    return n > 0 && (computed + n) % block_size_ == 0;
  }
  int32_t AllocateOne(size_t group);

  const uint32_t block_size_;
  const std::vector<KvGroupSpec> specs_;
  std::vector<std::unique_ptr<BlockPool>> pools_;
  bool mamba_ = false;
};

}  // namespace kvgate::sim
