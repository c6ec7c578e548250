// File: router/metrics.h
// The gateway's Prometheus metrics (kvgate_* names with units), registered on an injected
// registry; there is no global registry. Thread-safe: prometheus-cpp metrics are atomic and
// family lookups are guarded by prometheus-cpp's own locks.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "router/worker.h"

namespace kvgate::router {

class RouterMetrics {
 public:
  explicit RouterMetrics(prometheus::Registry& registry);

  /// Creates the per-worker series for `worker` (idempotent for one name).
  WorkerMetrics ForWorker(const std::string& worker);
  /// Drops the per-worker series of a worker removed by a reload.
  void RemoveWorker(const std::string& worker);

  /// kvgate_http_requests_total{endpoint,code,worker}; `worker` is "" when none was used.
  prometheus::Counter& Requests(std::string_view endpoint, int code, std::string_view worker);

  prometheus::Histogram& RequestDuration(std::string_view endpoint);
  prometheus::Histogram& router_overhead() { return *router_overhead_; }
  prometheus::Counter& Retries(std::string_view reason);
  prometheus::Counter& ConfigReloads(bool ok);
  prometheus::Gauge& open_connections() { return *open_connections_; }

  /// Text exposition format of the whole registry.
  static std::string Serialize(prometheus::Registry& registry);

 private:
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& request_duration_;
  prometheus::Family<prometheus::Histogram>& ttfb_;
  prometheus::Family<prometheus::Histogram>& overhead_family_;
  prometheus::Family<prometheus::Gauge>& in_flight_;
  prometheus::Family<prometheus::Gauge>& healthy_;
  prometheus::Family<prometheus::Counter>& connect_errors_;
  prometheus::Family<prometheus::Counter>& timeouts_;
  prometheus::Family<prometheus::Counter>& retries_;
  prometheus::Family<prometheus::Counter>& reloads_;
  prometheus::Family<prometheus::Gauge>& connections_family_;
  prometheus::Family<prometheus::Counter>& predicted_;
  prometheus::Family<prometheus::Counter>& actual_;
  prometheus::Family<prometheus::Counter>& over_;
  prometheus::Family<prometheus::Counter>& under_;
  prometheus::Family<prometheus::Gauge>& accuracy_;
  prometheus::Family<prometheus::Gauge>& engine_waiting_;
  prometheus::Family<prometheus::Gauge>& engine_kv_usage_;
  prometheus::Histogram* router_overhead_;
  prometheus::Gauge* open_connections_;
};

}  // namespace kvgate::router
