// File: kvindex/block_memo.h
// The chained block hashes of one canonical prompt, kept with its prefix-reuse entry
// (kvindex/prefix_reuse.h) so that the session's next turn hashes only the blocks it appended
// (issue 31). Written once, by the request whose prompt it is, when the planner has hashed it;
// read by later turns on any thread. Thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "kvindex/types.h"

namespace kvgate::kvindex {

class BlockMemo {
 public:
  /// Keeps at most `max_hashes` hashes: what the cache counted for it.
  explicit BlockMemo(size_t max_hashes) : max_hashes_(max_hashes) {}

  /// Keeps `hashes`: the prompt's chain from `root_seed`, in `block_bytes`-byte blocks. Only
  /// the first call keeps anything, and nothing when there are more than `max_hashes`.
  void Set(uint64_t root_seed, uint32_t block_bytes, absl::Span<const BlockHash> hashes) {
    if (hashes.size() > max_hashes_) return;
    if (claimed_.exchange(true, std::memory_order_acq_rel)) return;
    root_seed_ = root_seed;
    block_bytes_ = block_bytes;
    hashes_.assign(hashes.begin(), hashes.end());
    ready_.store(true, std::memory_order_release);
  }

  /// The hashes, when they were kept under this root seed and block size; else none.
  absl::Span<const BlockHash> Get(uint64_t root_seed, uint32_t block_bytes) const {
    if (!ready_.load(std::memory_order_acquire) || root_seed != root_seed_ ||
        block_bytes != block_bytes_) {
      return {};
    }
    return hashes_;
  }

 private:
  const size_t max_hashes_;
  std::atomic<bool> claimed_{false};
  std::atomic<bool> ready_{false};
  uint64_t root_seed_ = 0;
  uint32_t block_bytes_ = 0;
  std::vector<BlockHash> hashes_;
};

}  // namespace kvgate::kvindex
