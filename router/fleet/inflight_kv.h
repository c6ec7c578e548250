// File: router/fleet/inflight_kv.h
// The KV blocks a worker's outstanding requests hold, a block shared by several of them counted
// once, as the engine holds it once (vLLM's prefix cache shares a prefix's blocks between running
// requests; Dynamo's router counts a worker's active blocks the same way). Sub-agents of one
// agent share its system prompt and tools: counted per request, ten of them beside a long
// session made a worker look full that was not, and kvaware predicted a KV wait there.
//
// A chain's hashes are chained (each covers the whole prefix before it), so two requests hold
// the same block at position p exactly when their hashes at p are equal. Counting every block
// would cost a hash-map update per block (18,000 for a 287K-token prompt); instead a request
// adds one key per kGroup blocks (the hash at positions kGroup-1, 2*kGroup-1, ..., each standing
// for the kGroup blocks it ends) and one for its last block (standing for the blocks after its
// last full group). A key counts while any request holds it. The count is exact for prefixes
// that part at group boundaries, never below the true figure, and above it by less than kGroup
// blocks per request whose last key lies inside another request's group.
// Not thread-safe: the Worker holds it under its own lock.
#pragma once

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "kvindex/types.h"

namespace kvgate::router {

class InFlightKv {
 public:
  static constexpr uint32_t kGroup = 64;

  /// What one request added; Remove takes it back.
  struct Held {
    absl::InlinedVector<kvindex::BlockHash, 4> keys;
    int64_t unchained = 0;  // blocks beyond its chain (not hashed), counted as its own
  };

  /// Adds a request of `blocks` KV blocks whose leading blocks have the hashes `chain` (empty
  /// when the policy hashes no prompts: then all of them count as its own).
  Held Add(absl::Span<const kvindex::BlockHash> chain, int64_t blocks);
  void Remove(const Held& held);

  /// Blocks held, each shared one once.
  int64_t blocks() const { return keyed_blocks_ + unchained_blocks_; }
  /// Keys held (for tests: none once every request is removed).
  size_t keys() const { return keys_.size(); }

 private:
  struct Key {
    uint32_t refs = 0;
    uint32_t weight = 0;  // blocks this key stands for
  };
  absl::flat_hash_map<kvindex::BlockHash, Key> keys_;
  int64_t keyed_blocks_ = 0;
  int64_t unchained_blocks_ = 0;
};

}  // namespace kvgate::router
