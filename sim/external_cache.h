// File: sim/external_cache.h
// The engine's KV connector seam (vLLM's KVConnector, shared/reference/protocols.md §7): an
// external block store the engine looks up after its local prefix hit, loads the following
// blocks from, and saves newly computed blocks to. The engine stays pure: it calls these
// synchronously and charges the simulated load time itself. Implementations: StoreKvCache
// (kvgate-store through transfer/), and fakes in tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/functional/any_invocable.h"
#include "absl/types/span.h"

namespace kvgate::sim {

class ExternalKvCache {
 public:
  virtual ~ExternalKvCache() = default;
  /// How many leading blocks of `hashes` the store holds (a batched exists that stops at the
  /// first miss). 0 when the store cannot be reached.
  virtual size_t Lookup(absl::Span<const uint64_t> hashes) = 0;
  /// Loads the blocks `hashes` (found by Lookup); @return how many leading ones arrived (a
  /// failure truncates the load, and the engine recomputes the rest).
  virtual size_t Load(absl::Span<const uint64_t> hashes) = 0;
  /// Load() off the caller's thread: `done(loaded)` runs on another thread once the blocks
  /// arrived or failed; `hashes` stays valid until then. One load at a time per cache. The
  /// default loads in the caller.
  virtual void LoadAsync(absl::Span<const uint64_t> hashes,
                         absl::AnyInvocable<void(size_t) &&> done) {
    std::move(done)(Load(hashes));
  }
  /// Saves newly computed full blocks, in chain order: `parent` is the block before the first
  /// (nullopt at the root), `tokens` holds block_size tokens per hash. Asynchronous; blocks the
  /// store already has are not written again.
  virtual void Save(absl::Span<const uint64_t> hashes, std::optional<uint64_t> parent,
                    absl::Span<const uint32_t> tokens) = 0;
};

}  // namespace kvgate::sim
