// File: sim/store_cache.h
// The simulated engine's store connector, modelled on vLLM's MooncakeStoreConnector
// (shared/reference/protocols.md §7): blocks are kvgate-store objects keyed by the engine's
// own block hash in the model's namespace; a lookup is one batched exists that stops at the
// first miss, a load one batched get (on the caller's thread or the client's), and saves run on
// a thread of their own, writing only the blocks the store lacks. Real bytes move through
// transfer/ at profile.store_bytes_per_token a token (the engine charges the real KV's time
// itself). A store that fails is skipped for a second, then tried again, so workers fall back
// to recompute and keep serving. Thread-safe (the runner calls it on its io thread; async loads
// finish on the client's threads, saves on the save thread).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "sim/external_cache.h"
#include "store/client.h"

namespace kvgate::sim {

struct StoreCacheOptions {
  std::string model;
  uint32_t block_size = 16;
  uint32_t bytes_per_token = 16;  // Real bytes stored per token.
  uint32_t max_blocks = 1 << 15;  // The longest load (max_model_len / block_size).
  std::chrono::milliseconds retry_after{1000};
};

struct StoreCacheStats {
  uint64_t lookups = 0;
  uint64_t hit_blocks = 0;
  uint64_t loaded_blocks = 0;
  uint64_t load_failures = 0;   // Blocks found by the lookup that did not load.
  uint64_t saved_blocks = 0;    // Written by this engine.
  uint64_t present_blocks = 0;  // Saves the store already had (or another writer had in flight).
  uint64_t errors = 0;          // Calls that failed (store unreachable, ...).
  bool available = true;
};

class StoreKvCache final : public ExternalKvCache {
 public:
  /// `client` is shared by the process's engines. @return the client's error when its buffers
  /// cannot be allocated.
  static absl::StatusOr<std::unique_ptr<StoreKvCache>> Create(
      std::shared_ptr<store::StoreClient> client, StoreCacheOptions options);
  /// Waits for a load in flight, finishes queued saves (bounded by the client's time-out) and
  /// stops the save thread.
  ~StoreKvCache() override;

  size_t Lookup(absl::Span<const uint64_t> hashes) override;
  size_t Load(absl::Span<const uint64_t> hashes) override;
  /// On the client's async threads (StoreClient::BatchGetIntoAsync).
  void LoadAsync(absl::Span<const uint64_t> hashes,
                 absl::AnyInvocable<void(size_t) &&> done) override;
  void Save(absl::Span<const uint64_t> hashes, std::optional<uint64_t> parent,
            absl::Span<const uint32_t> tokens) override;

  StoreCacheStats stats() const;
  /// Waits until every queued save was attempted (tests).
  void Flush();

 private:
  struct SaveJob {
    std::vector<uint64_t> hashes;
    std::optional<uint64_t> parent;
    std::vector<uint32_t> tokens;
  };
  StoreKvCache(std::shared_ptr<store::StoreClient> client, StoreCacheOptions options,
               uint8_t* load_buf, uint8_t* save_buf);
  store::ObjectKey Key(uint64_t hash) const { return {ns_, hash}; }
  uint64_t block_bytes() const { return uint64_t{options_.block_size} * options_.bytes_per_token; }
  bool Usable();
  std::vector<store::GetEntry> LoadEntries(absl::Span<const uint64_t> hashes) const;
  /// Counts a load's results; @return the leading blocks that arrived.
  size_t Loaded(const std::vector<absl::StatusOr<uint64_t>>& got, size_t asked);
  void Failed(const absl::Status& s);
  void SaveLoop();

  const StoreCacheOptions options_;
  const std::string ns_;
  std::shared_ptr<store::StoreClient> client_;
  uint8_t* const load_buf_;  // Registered, max_blocks blocks.
  uint8_t* const save_buf_;  // Registered, max_blocks blocks (save thread only).
  mutable common::Mutex mu_;
  common::CondVar cv_;
  std::deque<SaveJob> jobs_ ABSL_GUARDED_BY(mu_);
  bool saving_ ABSL_GUARDED_BY(mu_) = false;
  bool loading_ ABSL_GUARDED_BY(mu_) = false;  // An async load is out (it writes load_buf_).
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  StoreCacheStats stats_ ABSL_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point down_until_ ABSL_GUARDED_BY(mu_){};
  std::thread saver_;
};

/// The deterministic stand-in bytes of block `hash` (what is saved, and what a load returns).
void FillBlockBytes(uint64_t hash, uint8_t* out, uint64_t n);

}  // namespace kvgate::sim
