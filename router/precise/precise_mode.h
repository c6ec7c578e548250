// File: router/precise/precise_mode.h
// Precise mode: the fleet's KV cache as the engines report it. Owns the precise prefix index
// (token-mode chains rebuilt from BlockStored events, holders = worker x DP rank), the events
// thread that keeps it in sync (kvevents::KvEventSubscriber), the route-time speculative blocks,
// and each worker's sync state and metrics. Routing reads it through RoutePlanner; the control
// thread's PreciseProber proves each worker in sync. See docs/precise-mode.md. Thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "config/config.h"
#include "kvevents/event_applier.h"
#include "kvevents/subscriber.h"
#include "kvindex/prefix_index.h"
#include "router/fleet/worker.h"
#include "router/precise/speculative_blocks.h"
#include "tokenizer/tokenizer.h"

namespace prometheus {
class Registry;
}

namespace kvgate::router {

class PreciseMode {
 public:
  PreciseMode(prometheus::Registry& registry, const config::RoutingConfig& routing);
  ~PreciseMode();
  PreciseMode(const PreciseMode&) = delete;
  PreciseMode& operator=(const PreciseMode&) = delete;

  /// Starts / stops the events thread.
  void Start();
  void Stop();

  /// Subscribes to the kv_events of `workers` (every DP rank) and of the `stores` (their blocks
  /// go to the store tier of holder StoreHolder(i)), drops removed ones. Start, reload.
  void Configure(const WorkerList& workers, const std::vector<config::StoreConfig>& stores);

  /// The index holder of the i-th configured store: above every worker id.
  static kvindex::Holder StoreHolder(size_t i) {
    return {kStoreHolderBase + static_cast<uint32_t>(i), 0};
  }
  static constexpr uint32_t kStoreHolderBase = 0xffff0000u;
  using StoreList = std::shared_ptr<const std::vector<config::StoreConfig>>;
  /// The stores last configured (never null; routing reads it per request, so it is shared).
  StoreList Stores() const;

  /// The most stores one gateway follows (config validation enforces it).
  static constexpr size_t kMaxStores = 16;
  /// Whether routing counts the i-th store's tier: a store with an `address` is up until
  /// `unhealthy_threshold` health checks in a row fail, and up again after `healthy_threshold`
  /// pass (a dead store's blocks cannot be loaded; workers recompute them). Lock-free.
  bool StoreUp(size_t i) const {
    return i < kMaxStores && !store_down_[i].load(std::memory_order_relaxed);
  }
  /// One health-check result of the i-th store (control thread). @return true when it changed.
  bool RecordStoreHealth(size_t i, bool ok, const config::HealthCheckConfig& cfg);

  /// True when some worker has kv_events configured (requests are then tokenised).
  bool enabled() const { return enabled_.load(std::memory_order_acquire); }

  /// The tokenizer configured for `model` (routing.precise.model_tokenizers, else .tokenizer).
  static const tokenizer::Tokenizer* TokenizerFor(const config::PreciseConfig& config,
                                                  std::string_view model);
  /// The token-mode chain of `tokens` for `model` in `block_size`-token blocks: what the
  /// precise index holds for the same prompt once an engine stored it.
  static void TokenChain(absl::Span<const uint32_t> tokens, std::string_view model,
                         uint32_t block_size, std::vector<kvindex::BlockHash>* out);

  static kvindex::Holder HolderOf(const Worker& worker, uint32_t dp_rank) {
    return {worker.id(), static_cast<uint16_t>(dp_rank)};
  }

  const kvindex::PrefixIndex& index() const { return index_; }
  /// Hybrid models' groups beside full attention (sliding window, Mamba state).
  const kvindex::HybridGroups& groups() const { return groups_; }
  /// Routing writes only the groups' LRU order (HybridGroups::Touch); events write the rest.
  kvindex::HybridGroups& groups() { return groups_; }
  SpeculativeBlocks& speculative() { return speculative_; }
  const kvevents::EventApplier& applier() const { return applier_; }
  std::vector<kvevents::SourceStatus> Sources() const { return subscriber_.Status(); }

  /// Sets `worker`'s state with the reason, logging loudly when it leaves kVerified or fails.
  void SetState(Worker& worker, PreciseState state, std::string reason);
  /// Why the worker is in its state ("" when never set).
  std::string Reason(const Worker& worker) const;

  /// Records whether `api`'s probe agreed on `worker` (loud when it did not: that API routes
  /// approximately there), with the reason; kvgate_precise_api_verified{worker, api}.
  void SetApiAgreement(Worker& worker, PreciseApi api, bool agrees, std::string reason);
  /// The last SetApiAgreement reason of (worker, api), "" when never probed.
  std::string ApiReason(const Worker& worker, PreciseApi api) const;
  /// Bumped each time one of the worker's engines restarted (the prober re-probes on a change).
  uint64_t Restarts(const Worker& worker) const;

  /// Updates the counters and gauges from the subscriber's status (control thread, ~1 Hz).
  void RefreshMetrics(const WorkerList& workers);

 private:
  class Observer;
  struct Metrics;

  std::atomic<bool> enabled_{false};
  kvindex::PrefixIndex index_;
  kvindex::HybridGroups groups_;
  kvevents::EventApplier applier_;
  std::unique_ptr<Observer> observer_;
  std::unique_ptr<Metrics> metrics_;
  kvevents::KvEventSubscriber subscriber_;
  SpeculativeBlocks speculative_;

  mutable common::Mutex mu_;  // Guards the maps below.
  absl::flat_hash_map<uint32_t, std::string> reasons_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, std::array<std::string, kNumPreciseApis>> api_reasons_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, uint64_t> restarts_ ABSL_GUARDED_BY(mu_);
  StoreList stores_ ABSL_GUARDED_BY(mu_) =
      std::make_shared<const std::vector<config::StoreConfig>>();
  std::array<std::atomic<bool>, kMaxStores> store_down_{};
  std::array<uint32_t, kMaxStores> store_failures_{};   // Control thread only.
  std::array<uint32_t, kMaxStores> store_successes_{};  // Control thread only.
};

}  // namespace kvgate::router
