// File: router/worker.h
// Runtime state of one inference worker (a vLLM/SGLang server): health, circuit breaker, load
// and the models it serves. Thread-safe: gateway threads, the health checker and reloads all
// touch it through atomics and small locks. Owned by shared_ptr from WorkerSet snapshots, so a
// request that picked a worker keeps it alive across a reload that removes it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "config/config.h"

namespace prometheus {
class Gauge;
class Counter;
class Histogram;
}  // namespace prometheus

namespace kvgate::router {

using SteadyClock = std::chrono::steady_clock;

/// Per-worker metric handles, owned by RouterMetrics; null in unit tests without metrics.
struct WorkerMetrics {
  prometheus::Gauge* in_flight = nullptr;
  prometheus::Gauge* healthy = nullptr;
  prometheus::Counter* connect_errors = nullptr;
  prometheus::Counter* timeouts = nullptr;
  prometheus::Histogram* ttfb = nullptr;
};

class Worker {
 public:
  Worker(config::WorkerConfig config, WorkerMetrics metrics);

  const config::WorkerConfig& config() const { return config_; }
  /// The canonical URL ("http://host:port"): label, log field and X-Kvgate-Worker value.
  const std::string& name() const { return name_; }
  const std::string& authority() const { return authority_; }
  const WorkerMetrics& metrics() const { return metrics_; }

  /// True when the worker may receive traffic: actively healthy and its breaker is not open.
  bool IsAvailable(SteadyClock::time_point now) const;
  bool healthy() const { return healthy_.load(std::memory_order_relaxed); }

  /// Feeds one active health-check result; ejects after `unhealthy_threshold` failures in a row
  /// and readmits after `healthy_threshold` successes. @return true when health changed.
  bool RecordHealthCheck(bool ok, const config::HealthCheckConfig& cfg);

  /// Passive signal: a connection to the worker failed (refused, reset, timed out). Opens the
  /// breaker for `open_ms` after `consecutive_failures` in a row.
  void RecordConnectionFailure(SteadyClock::time_point now, const config::CircuitBreakerConfig& cb);
  /// Passive signal: the worker answered; closes the breaker.
  void RecordSuccess();
  bool BreakerOpen(SteadyClock::time_point now) const;

  /// Requests the gateway currently has outstanding on this worker.
  int64_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }
  void AddInFlight(int64_t delta);

  /// Models from config plus those the worker itself reports on /v1/models.
  void SetDiscoveredModels(std::vector<std::string> models);
  std::vector<std::string> Models() const;
  /// True when the worker serves `model`, or when it has no known models yet (it may).
  bool ServesModel(std::string_view model) const;

 private:
  const config::WorkerConfig config_;
  const std::string name_;
  const std::string authority_;
  const WorkerMetrics metrics_;

  std::atomic<bool> healthy_{true};  // optimistic until the first check says otherwise
  std::atomic<uint32_t> check_failures_{0};
  std::atomic<uint32_t> check_successes_{0};
  std::atomic<uint32_t> passive_failures_{0};
  std::atomic<int64_t> breaker_open_until_ns_{0};
  std::atomic<int64_t> in_flight_{0};

  mutable absl::Mutex models_mu_;
  std::vector<std::string> discovered_models_ ABSL_GUARDED_BY(models_mu_);
};

using WorkerSharedPtr = std::shared_ptr<Worker>;

/// An immutable snapshot of the worker list, published on start and on each reload.
struct WorkerSet {
  std::vector<WorkerSharedPtr> workers;
};
using WorkerSetConstSharedPtr = std::shared_ptr<const WorkerSet>;

}  // namespace kvgate::router
