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
#include "router/route_planner.h"
#include "router/routing_policy.h"
#include "router/worker.h"

namespace kvgate::router {

struct GatewayState {
  explicit GatewayState(config::ConfigConstSharedPtr initial);

  config::ConfigConstSharedPtr config() const { return config_.load(std::memory_order_acquire); }
  WorkerSetConstSharedPtr workers() const { return workers_.load(std::memory_order_acquire); }
  PolicySetConstSharedPtr policies() const { return policies_.load(std::memory_order_acquire); }
  std::shared_ptr<const std::string> models_json() const {
    return models_json_.load(std::memory_order_acquire);
  }

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
  RoutePlanner planner;

  std::atomic<bool> draining{false};
  std::atomic<int64_t> open_connections{0};

 private:
  std::atomic<config::ConfigConstSharedPtr> config_;
  std::atomic<WorkerSetConstSharedPtr> workers_;
  std::atomic<PolicySetConstSharedPtr> policies_;
  std::atomic<uint64_t> version_{0};
  std::atomic<std::shared_ptr<const std::string>> models_json_;
};

}  // namespace kvgate::router
