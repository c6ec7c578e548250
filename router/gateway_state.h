// File: router/gateway_state.h
// State shared by every gateway thread: the current config, worker set and policy (immutable
// snapshots swapped atomically on reload), drain flags, metrics and the access log.
// Thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "config/config.h"
#include "prometheus/registry.h"
#include "router/access_log.h"
#include "router/metrics.h"
#include "router/precise_mode.h"
#include "router/route_planner.h"
#include "router/routing_policy.h"
#include "router/worker.h"

namespace kvgate::router {

/// A shared_ptr published by one thread and read by many. A mutex rather than
/// std::atomic<std::shared_ptr>: libstdc++ 12's version is invisible to ThreadSanitizer (its
/// lock bit hides the synchronisation), and readers on the request path use thread-local copies
/// refreshed by GatewayState::version() anyway. Thread-safe.
template <typename T>
class SharedSnapshot {
 public:
  explicit SharedSnapshot(std::shared_ptr<T> initial) : value_(std::move(initial)) {}
  std::shared_ptr<T> Load() const {
    std::lock_guard<std::mutex> lock(mu_);
    return value_;
  }
  void Store(std::shared_ptr<T> value) {
    std::lock_guard<std::mutex> lock(mu_);
    value_.swap(value);  // the old value is released outside the lock
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<T> value_;
};

struct GatewayState {
  explicit GatewayState(config::ConfigConstSharedPtr initial);

  config::ConfigConstSharedPtr config() const { return config_.Load(); }
  WorkerSetConstSharedPtr workers() const { return workers_.Load(); }
  PolicySetConstSharedPtr policies() const { return policies_.Load(); }
  std::shared_ptr<const std::string> models_json() const { return models_json_.Load(); }

  /// Bumped by every Publish(); threads compare it to refresh their cached snapshots.
  uint64_t version() const { return version_.load(std::memory_order_acquire); }

  /// Publishes a new config, worker set and policy together (reload).
  void Publish(config::ConfigConstSharedPtr config, WorkerSetConstSharedPtr workers,
               PolicySetConstSharedPtr policies);
  void SetModelsJson(std::string json);

  /// True when at least one worker can take traffic now.
  bool AnyWorkerAvailable() const;

  prometheus::Registry registry;
  RouterMetrics metrics{registry};
  AccessLog access_log;
  PreciseMode precise;  // before planner, which reads it
  RoutePlanner planner;

  std::atomic<bool> draining{false};
  std::atomic<int64_t> open_connections{0};

 private:
  SharedSnapshot<const config::Config> config_;
  SharedSnapshot<const WorkerSet> workers_;
  SharedSnapshot<const PolicySet> policies_;
  SharedSnapshot<const std::string> models_json_;
  std::atomic<uint64_t> version_{0};
};

}  // namespace kvgate::router
