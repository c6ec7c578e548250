// File: router/precise/speculative_blocks.h
// Precise mode's route-time guesses: when a request is sent to a worker, the blocks of its prompt
// will be cached there a moment later, but the engine's BlockStored event has not arrived yet. A
// burst of requests sharing a prefix must still see them, so they are recorded here with a short
// time to live; an event confirms them in the precise index, and unconfirmed ones simply expire.
// Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "common/mutex.h"
#include "kvindex/types.h"

namespace kvgate::router {

class SpeculativeBlocks {
 public:
  using Clock = std::chrono::steady_clock;

  /// Records that `holder` will hold `chain` until `expires`.
  void Insert(kvindex::Holder holder, absl::Span<const kvindex::BlockHash> chain,
              Clock::time_point expires);

  /// The number of leading blocks of `chain` that `holder` holds, counting `confirmed` blocks
  /// (already matched in the precise index) and then unexpired speculative ones.
  uint32_t Extend(kvindex::Holder holder, absl::Span<const kvindex::BlockHash> chain,
                  uint32_t confirmed, Clock::time_point now) const;

  /// Takes back the guesses that `holder` holds `chain` (the request was not served).
  void Remove(kvindex::Holder holder, absl::Span<const kvindex::BlockHash> chain);

  /// Forgets `holder`'s guesses (engine restart, worker removed).
  void Forget(kvindex::Holder holder);

  /// Entries held (expired ones included until the next sweep).
  size_t size() const;

 private:
  static constexpr size_t kSweepAt = 1 << 20;  // Entries before expired ones are swept out.

  struct Key {
    uint64_t holder;
    kvindex::BlockHash hash;
    friend bool operator==(const Key&, const Key&) = default;
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.holder, k.hash);
    }
  };

  mutable common::Mutex mu_;
  absl::flat_hash_map<Key, Clock::time_point> expiry_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvgate::router
