// File: router/precise/speculative_blocks.h
// Precise mode's route-time guesses: when a request is sent to a worker, the blocks of its prompt
// will be cached there a moment later, but the engine's BlockStored event has not arrived yet. A
// burst of requests sharing a prefix must still see them, so they are recorded here with a short
// time to live; an event confirms them in the precise index, and unconfirmed ones simply expire.
// For a hybrid model each guess also says which of the other KV-cache groups will keep the block
// (a sliding window keeps the blocks near the prompt's end, Mamba a few state checkpoints), so a
// request forking inside a prompt still in flight is predicted the hit every group will serve.
// Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "common/mutex.h"
#include "kvindex/hybrid_groups.h"
#include "kvindex/types.h"

namespace kvgate::router {

class SpeculativeBlocks {
 public:
  using Clock = std::chrono::steady_clock;

  /// Records that `holder` will hold `chain` until `expires`; `groups[i]`, when given, has bit g
  /// set when the holder's KV-cache group g will also keep chain[i] (PendingGroups).
  void Insert(kvindex::Holder holder, absl::Span<const kvindex::BlockHash> chain,
              Clock::time_point expires, absl::Span<const uint32_t> groups = {});

  /// True when an unexpired guess says `holder`'s group `group` will keep `hash`.
  bool InGroup(kvindex::Holder holder, kvindex::BlockHash hash, uint32_t group,
               Clock::time_point now) const;

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
  static constexpr size_t kMinSweepAt = 1 << 16;  // Entries before expired ones are swept out,
  static constexpr size_t kMaxEntries = 1 << 20;  // and past which all are.

  struct Key {
    uint64_t holder;
    kvindex::BlockHash hash;
    friend bool operator==(const Key&, const Key&) = default;
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.holder, k.hash);
    }
  };

  struct Guess {
    Clock::time_point expires;
    uint32_t groups = 0;  // Bit per KV-cache group beside full attention.
  };

  mutable common::Mutex mu_;
  absl::flat_hash_map<Key, Guess> expiry_ ABSL_GUARDED_BY(mu_);
  size_t sweep_at_ ABSL_GUARDED_BY(mu_) = kMinSweepAt;
};

/// Groups have at most this many indices in a guess (beyond it, only their events count).
inline constexpr uint32_t kMaxGuessedGroups = 32;

/// For a prompt of `n` blocks of `block_size` tokens sent to `holder` with a hit of `hit` blocks,
/// loaded from a host tier or store up to `start` (ForEachKeptBlock):
/// per block, the bit of each of the holder's groups (as `groups` knows them from events) that
/// will keep it, by the rules approximate mode imitates (kvindex::ForEachKeptBlock); Mamba
/// groups checkpoint every `mamba_chunk_blocks` (0: only at the prompt's end). Empty when the
/// holder has no groups beside full attention.
std::vector<uint32_t> PendingGroups(const kvindex::HybridGroups& groups, kvindex::Holder holder,
                                    uint32_t n, uint32_t block_size, uint32_t hit, uint32_t start,
                                    uint32_t mamba_chunk_blocks);

/// A hybrid holder's GPU hit on `chain` when full attention's events confirm `confirmed` blocks
/// and guesses extend it to `guessed`: every group's rule over its events' blocks and, past the
/// confirmed ones, the blocks guesses say it will keep; `ahead_tokens` as HybridGroups::Cap.
uint32_t GuessedHybridHit(const kvindex::HybridGroups& groups, const SpeculativeBlocks& guesses,
                          kvindex::Holder holder, absl::Span<const kvindex::BlockHash> chain,
                          uint32_t block_size, uint32_t confirmed, uint32_t guessed,
                          SpeculativeBlocks::Clock::time_point now, uint64_t ahead_tokens = 0);

}  // namespace kvgate::router
