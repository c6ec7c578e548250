// File: sim/block_pool.h
// The simulated KV-cache memory of one engine: a GPU pool of fixed-size blocks with vLLM-style
// prefix caching (a block keeps its chained hash after its request ends and can be hit again
// until it is evicted, least recently freed first; as vLLM's, a block computed again while
// another copy is cached is cached too, so a hash may name several blocks), and an optional host
// tier (vLLM CPU offload) that receives blocks evicted from the GPU. Every change to the cached
// set is appended to an event list as vLLM's KV events. A hybrid model has one pool per KV-cache
// group (sim/kv_coordinator.h), each tagging its events with the group. Thread-compatible; owned
// by its Engine.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "kvevents/publisher.h"

namespace kvgate::sim {

// The event vocabulary is kvevents' (the publisher's).
using Medium = kvevents::Medium;
using KvEvent = kvevents::PublishedEvent;
using kvevents::MediumName;

/// The group fields a hybrid model's pool puts on its events (vLLM's group_idx,
/// kv_cache_spec_kind, kv_cache_spec_sliding_window).
struct GroupTag {
  int64_t group_idx = 0;
  std::string kind;                       // "full_attention", "sliding_window", "mamba".
  std::optional<int64_t> sliding_window;  // Tokens; sliding-window groups only.
};

class BlockPool {
 public:
  /// `events` receives every event; the caller keeps it alive and drains it. `tag`: the group
  /// fields of every event (BlockRemoved gets group_idx only); none: no group fields.
  BlockPool(uint32_t num_gpu_blocks, uint32_t num_cpu_blocks, uint32_t block_size,
            std::vector<KvEvent>* events, std::optional<GroupTag> tag = std::nullopt);

  uint32_t block_size() const { return block_size_; }
  uint32_t num_gpu_blocks() const { return num_blocks_; }
  uint32_t num_cpu_blocks() const { return num_cpu_blocks_; }
  /// Blocks with no reference (cached or not): what an allocation can take.
  uint32_t NumFreeBlocks() const { return num_free_; }
  /// Fraction of GPU blocks referenced by requests, as vllm:kv_cache_usage_perc.
  double Usage() const;

  /// Number of leading `hashes` cached on the GPU.
  size_t GpuPrefix(absl::Span<const uint64_t> hashes) const;
  /// Whether `hash` is cached on the GPU.
  bool IsCached(uint64_t hash) const { return cached_.contains(hash); }
  /// Number of `hashes` from `start` on that the host tier holds consecutively.
  size_t HostPrefix(absl::Span<const uint64_t> hashes, size_t start) const;
  /// How many of the GPU blocks cached under `hashes` (all must be cached) are free now, i.e.
  /// would stop being allocatable once acquired.
  uint32_t NumFreeAmong(absl::Span<const uint64_t> hashes) const;

  /// Takes a reference on the GPU blocks cached under `hashes` (all must be cached) and
  /// appends their ids to `*blocks`.
  void AcquireCached(absl::Span<const uint64_t> hashes, std::vector<int32_t>* blocks);
  /// Allocates `n` blocks (precondition: NumFreeBlocks() >= n), evicting the least recently
  /// freed cached blocks (BlockRemoved; they move to the host tier if there is one).
  void Allocate(uint32_t n, std::vector<int32_t>* blocks);
  /// Loads the host-tier blocks `hashes` (consecutive, all present, parent of the first =
  /// `parent`) into newly allocated GPU blocks appended to `*blocks` and caches them there.
  /// Precondition: NumFreeBlocks() >= hashes.size().
  void LoadFromHost(absl::Span<const uint64_t> hashes, std::optional<uint64_t> parent,
                    std::vector<int32_t>* blocks);
  /// Marks blocks[first, last) as full and cached under hashes[first, last); tokens are the
  /// request's tokens (block i covers tokens[i*B, (i+1)*B)). Emits one BlockStored per run of
  /// newly cached blocks, a hash already cached elsewhere included: vLLM does not deduplicate
  /// (a block table is append-only), announces each copy and removes each when it is evicted,
  /// and a hit takes the oldest copy. A null entry (-1), a position a sliding window no longer
  /// holds, ends a run.
  void CacheBlocks(absl::Span<const int32_t> blocks, absl::Span<const uint64_t> hashes,
                   absl::Span<const uint32_t> tokens, size_t first, size_t last);
  /// Same for the single block `id` at position `pos` (a Mamba checkpoint).
  void CacheBlock(int32_t id, absl::Span<const uint64_t> hashes, absl::Span<const uint32_t> tokens,
                  size_t pos);
  /// Drops one reference per block, last block first, so that a request's tail is evicted
  /// before its head (vLLM frees in reverse order). Null entries (-1) are skipped.
  void Free(absl::Span<const int32_t> blocks);
  /// Forgets every cached hash on both tiers (blocks in use keep their data but are no longer
  /// hit); emits AllBlocksCleared when `emit` (a hybrid model's groups clear with one event).
  void ResetPrefixCache(bool emit = true);

  /// The cached hash sets, for debugging and tests.
  std::vector<uint64_t> CachedHashes(Medium medium) const;

 private:
  struct Block {
    int32_t ref = 0;
    bool cached = false;
    bool free = true;
    bool has_parent = false;
    uint64_t hash = 0;
    uint64_t parent = 0;
    int32_t prev = -1;  // Free list links.
    int32_t next = -1;
  };
  struct HostEntry {
    uint64_t hash = 0;
    std::optional<uint64_t> parent;
    std::vector<uint32_t> tokens;
  };

  void CacheRange(absl::FunctionRef<int32_t(size_t)> block_at, absl::Span<const uint64_t> hashes,
                  absl::Span<const uint32_t> tokens, size_t first, size_t last);
  void PushFreeTail(int32_t id);
  void Unlink(int32_t id);
  void EvictCached(int32_t id);
  // Registers block `id` as a cached copy of `hash`.
  void AddCopy(int32_t id, uint64_t hash);
  void StoreInHost(uint64_t hash, std::optional<uint64_t> parent, const uint32_t* tokens);
  KvEvent Removed(uint64_t hash, Medium medium) const;
  void Emit(KvEvent event);

  const uint32_t num_blocks_;
  const uint32_t num_cpu_blocks_;
  const uint32_t block_size_;
  std::vector<KvEvent>* events_;
  const std::optional<GroupTag> tag_;
  std::vector<Block> blocks_;
  std::vector<uint32_t> tokens_;  // block_size_ per block.
  int32_t free_head_ = -1;        // Least recently freed.
  int32_t free_tail_ = -1;
  uint32_t num_free_ = 0;
  // Every cached copy of a hash, oldest first (the one a hit takes).
  absl::flat_hash_map<uint64_t, absl::InlinedVector<int32_t, 1>> cached_;
  std::list<HostEntry> host_lru_;  // Front = least recently used.
  absl::flat_hash_map<uint64_t, std::list<HostEntry>::iterator> host_;
};

}  // namespace kvgate::sim
