#include "sim/kv_groups.h"

#include <algorithm>

namespace kvgate::sim {

size_t MaxHitBlocks(size_t num_tokens, uint32_t block_size) {
  return num_tokens == 0 ? 0 : (num_tokens - 1) / block_size;
}

uint32_t WindowBlocks(uint32_t sliding_window, uint32_t block_size) {
  return sliding_window == 0 ? 0 : (sliding_window - 1 + block_size - 1) / block_size;
}

size_t HybridCacheHit(absl::Span<const KvGroupSpec> groups, uint32_t block_size, size_t full_hit,
                      absl::FunctionRef<bool(size_t)> other_cached) {
  if (groups.size() < 2) return full_hit;
  const KvGroupSpec& other = groups[1];
  switch (other.kind) {
    case KvGroupKind::kFullAttention: {
      size_t n = 0;
      while (n < full_hit && other_cached(n)) ++n;
      return n;
    }
    case KvGroupKind::kSlidingWindow: {
      // SlidingWindowManager.find_longest_cache_hit: scan right to left for c consecutive
      // cached blocks; the first such run ends the hit.
      const size_t c = WindowBlocks(other.sliding_window, block_size);
      size_t run = 0;
      for (size_t i = full_hit; i-- > 0;) {
        if (!other_cached(i)) {
          run = 0;
          continue;
        }
        if (++run >= c) return i + run;
      }
      return run;  // The run that reached block 0 (shorter than the window), or 0.
    }
    case KvGroupKind::kMamba:
      // MambaManager.find_longest_cache_hit: the last cached state at or before the hit.
      for (size_t i = full_hit; i-- > 0;) {
        if (other_cached(i)) return i + 1;
      }
      return 0;
  }
  return 0;
}

size_t HitBlocksKept(const KvGroupSpec& group, uint32_t block_size, size_t hit) {
  switch (group.kind) {
    case KvGroupKind::kFullAttention:
      return hit;
    case KvGroupKind::kSlidingWindow:
      return std::min<size_t>(WindowBlocks(group.sliding_window, block_size), hit);
    case KvGroupKind::kMamba:
      return hit > 0 ? 1 : 0;
  }
  return hit;
}

uint32_t SlidingWindowSkippedBlocks(uint32_t num_computed, uint32_t sliding_window,
                                    uint32_t block_size) {
  if (num_computed + 1 <= sliding_window) return 0;
  return (num_computed - sliding_window + 1) / block_size;
}

uint32_t MambaAlignedChunk(uint32_t num_computed, uint32_t num_new, uint32_t num_tokens,
                           uint32_t num_prompt_tokens, uint32_t block_size) {
  const uint32_t prefill_end = std::max(num_prompt_tokens, num_tokens > 0 ? num_tokens - 1 : 0);
  if (num_computed >= prefill_end) return num_new;  // Decoding: one token at a time.
  const uint32_t last_cache_position = num_tokens - num_tokens % block_size;
  const uint32_t end = num_computed + num_new;
  if (end < last_cache_position) return num_new / block_size * block_size;
  if (num_computed < last_cache_position && last_cache_position < end) {
    return last_cache_position - num_computed;  // Cache the state at the last full block.
  }
  return num_new;  // The last few tokens.
}

}  // namespace kvgate::sim
