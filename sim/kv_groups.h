// File: sim/kv_groups.h
// The rules of hybrid models' KV-cache groups, as vLLM V1 applies them, as pure functions:
// the prefix-cache hit of one full-attention group beside one sliding-window or Mamba group
// (vllm/v1/core/kv_cache_coordinator.py, HybridKVCacheCoordinator.find_longest_cache_hit, no
// EAGLE), the blocks a sliding window no longer needs
// (single_type_kv_cache_manager.py, SlidingWindowManager.remove_skipped_blocks), and Mamba's
// block-aligned prefill chunks (the scheduler in mamba_cache_mode "align"). kvgate's router
// predicts the simulator's cached_tokens with the same rule (kvindex/hybrid_groups.h).
// Stateless; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "sim/profile.h"

namespace kvgate::sim {

/// The most blocks a prompt of `num_tokens` tokens can hit: (T-1)/B, since its last token is
/// always computed.
size_t MaxHitBlocks(size_t num_tokens, uint32_t block_size);

/// ceil((W-1)/B): the cached blocks a sliding window of W tokens needs just before a hit
/// (vLLM's sliding_window_contiguous_blocks).
uint32_t WindowBlocks(uint32_t sliding_window, uint32_t block_size);

/// The hit, in blocks, of a hybrid model with groups[0] full attention and at most one other
/// group, as vLLM's HybridKVCacheCoordinator finds it:
/// - `full_hit` = f, the leading blocks (of at most MaxHitBlocks) the full-attention group holds;
/// - sliding window W, c = WindowBlocks(W): scanning i from f-1 down to 0 and counting
///   consecutive blocks the group holds (`other_cached(i)`), the first time the run reaches c at
///   index i the hit is i + c; if it never does, the hit is the length of the run that reached
///   index 0 (0 when block 0 is not held);
/// - Mamba: (the largest i < f whose checkpoint the group holds) + 1, or 0.
/// With one group the hit is f. cached_tokens = hit * block_size.
size_t HybridCacheHit(absl::Span<const KvGroupSpec> groups, uint32_t block_size, size_t full_hit,
                      absl::FunctionRef<bool(size_t)> other_cached);

/// What the other group keeps of a hit of `hit` blocks (the rest of its positions are null):
/// the last min(c, hit) blocks for a sliding window, the checkpoint at hit-1 for Mamba (1 block,
/// 0 when hit is 0), all `hit` blocks for full attention.
size_t HitBlocksKept(const KvGroupSpec& group, uint32_t block_size, size_t hit);

/// The blocks a sliding window of `sliding_window` tokens no longer needs once `num_computed`
/// tokens are computed: those with index < max(0, num_computed - W + 1) / block_size.
uint32_t SlidingWindowSkippedBlocks(uint32_t num_computed, uint32_t sliding_window,
                                    uint32_t block_size);

/// The scheduler's block-aligned split for Mamba prefix caching (mamba_cache_mode "align",
/// vLLM's Scheduler._mamba_block_aligned_split, no EAGLE): while prefilling (num_computed <
/// max(num_prompt_tokens, num_tokens - 1)) a chunk of `num_new` tokens ends on a block
/// boundary, or at the last block boundary of the tokens (so that state is cached) when it
/// would cross it, or runs to the end past it. May return 0 (nothing schedulable this step).
uint32_t MambaAlignedChunk(uint32_t num_computed, uint32_t num_new, uint32_t num_tokens,
                           uint32_t num_prompt_tokens, uint32_t block_size);

}  // namespace kvgate::sim
