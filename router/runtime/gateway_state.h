// File: router/runtime/gateway_state.h
// State shared by every gateway thread: the published snapshot (config, workers and policies
// together behind one pointer, swapped atomically on reload), drain flags, metrics, the
// access log, the planner and precise mode. Thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "common/mutex.h"
#include "config/config.h"
#include "prometheus/registry.h"
#include "router/fleet/metrics.h"
#include "router/fleet/worker.h"
#include "router/policies/policy_registry.h"
#include "router/precise/precise_mode.h"
#include "router/routing/route_planner.h"
#include "router/runtime/access_log.h"
#include "router/runtime/admission.h"
#include "router/runtime/auth_throttle.h"

namespace kvgate::router {

struct TlsContexts;  // internal/tls_socket.h

/// Everything a request reads that a reload changes, published as one immutable value: a
/// thread that sees the new config also sees the workers and policies built with it.
struct Snapshot {
  config::ConfigConstSharedPtr config;
  WorkerList workers;
  PolicySetConstSharedPtr policies;
  std::shared_ptr<const TlsContexts> tls;  // made from the config's certificate files
};
using SnapshotConstSharedPtr = std::shared_ptr<const Snapshot>;

/// A shared_ptr published by one thread and read by many. A mutex rather than
/// std::atomic<std::shared_ptr>: libstdc++ 12's version is invisible to ThreadSanitizer (its
/// lock bit hides the synchronisation), and readers on the request path use thread-local copies
/// refreshed by GatewayState::version() anyway. Thread-safe.
template <typename T>
class SharedSnapshot {
 public:
  explicit SharedSnapshot(std::shared_ptr<T> initial) : value_(std::move(initial)) {}
  std::shared_ptr<T> Load() const {
    common::MutexLock lock(&mu_);
    return value_;
  }
  void Store(std::shared_ptr<T> value) {
    common::MutexLock lock(&mu_);
    value_.swap(value);  // the old value is released outside the lock
  }

 private:
  mutable common::Mutex mu_;
  std::shared_ptr<T> value_ ABSL_GUARDED_BY(mu_);
};

struct GatewayState {
  /// `threads`: how many gateway threads will run (metric shards).
  GatewayState(config::ConfigConstSharedPtr initial, size_t threads);

  SnapshotConstSharedPtr snapshot() const { return snapshot_.Load(); }
  std::shared_ptr<const std::string> models_json() const { return models_json_.Load(); }

  /// Bumped by every Publish(); threads compare it to refresh their cached snapshot.
  uint64_t version() const { return version_.load(std::memory_order_acquire); }

  /// Publishes a new snapshot (start, reload).
  void Publish(SnapshotConstSharedPtr snapshot);
  void SetModelsJson(std::string json);

  /// True when at least one worker can take traffic now.
  bool AnyWorkerAvailable() const;

  /// The /metrics text.
  std::string MetricsText();

  const size_t threads;
  prometheus::Registry registry;
  RouterMetrics metrics;
  AccessLog access_log;
  PreciseMode precise;  // before planner, which reads it
  RoutePlanner planner;
  ResponsePins response_pins;  // stored OpenAI Responses: id -> the worker that holds it

  RateLimiter rate_limiter;
  AuthFailureThrottle auth_failures;  // failed API keys per address
  LogLimiter auth_failure_log;        // their warnings, about one a second
  ClientConnectionCounts client_connections;
  AdmissionGate admission;
  std::atomic<bool> draining{false};       // listeners closed, in-flight requests finishing
  std::atomic<bool> shutting_down{false};  // /ready answers 503; serving goes on until draining
  std::atomic<int64_t> open_connections{0};

 private:
  SharedSnapshot<const Snapshot> snapshot_;
  SharedSnapshot<const std::string> models_json_;
  std::atomic<uint64_t> version_{0};
};

}  // namespace kvgate::router
